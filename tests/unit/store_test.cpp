#include "adapters/local/store.hpp"
#include "adapters/local/store_schema.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/error.hpp>

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <sys/inotify.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

using namespace tjob;
using namespace tjob::detail;

namespace {

job_row sample(const std::string& name) {
  job_row j;
  j.name = name;
  j.runtime = "torch-distributed";
  j.created_ms = 1700000000000;
  j.spec = "{}";
  j.owner_pid = 1;
  j.owner_start = 2;
  step_row s;
  s.name = "node-0";
  j.steps.push_back(s);
  return j;
}

}  // namespace

TEST_CASE("a new store holds what was written after it is reopened") {
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  {
    store db(path, std::chrono::milliseconds(1000));
    db.begin();
    CHECK(db.insert_job(sample("a")));
    CHECK_FALSE(db.insert_job(sample("a")));  // the name is taken
    db.append_event("a", "", 1, log_event::created, "made");
    step_row s;
    s.name = "node-0";
    s.status = job_status::failed;
    s.exit_code = 3;
    s.reason = "exit code 3";
    db.update_step("a", s);
    db.update_job_status("a", job_status::failed, "exit code 3");
    db.append_event("a", "node-0", 2, log_event::exited, "ended");
    db.commit();
  }
  store db(path, std::chrono::milliseconds(1000));
  auto j = db.load_job("a");
  REQUIRE(j);
  CHECK(j->status == job_status::failed);
  CHECK(j->reason == "exit code 3");
  REQUIRE(j->steps.size() == 1);
  CHECK(j->steps[0].exit_code == 3);
  auto ev = db.load_events("a");
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].reason == "Created");
  CHECK(ev[1].reason == "Exited");
  CHECK(ev[0].seq < ev[1].seq);
  CHECK(db.has_event("a", log_event::exited));
  CHECK_FALSE(db.has_event("a", log_event::cancel_requested));
  CHECK(db.load_unfinished().empty());
  db.begin();
  db.delete_job("a");
  db.commit();
  CHECK_FALSE(db.load_job("a"));
  CHECK(db.load_events("a").empty());
}

TEST_CASE("a file that is not a database is reported corrupt and left untouched") {
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  std::string junk(8192, 'j');
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
  }
  try {
    store db(path, std::chrono::milliseconds(100));
    FAIL("opened a corrupt store");
  } catch (const error& e) {
    CHECK(e.code() == make_error_code(errc::store_corrupt));
    CHECK(std::string(e.what()).find(path.string()) != std::string::npos);
  }
  CHECK(tjob::test::read_file(path) == junk);
}

TEST_CASE("somebody else's SQLite database is refused and not converted") {
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
  REQUIRE(sqlite3_exec(raw, "CREATE TABLE precious(x); INSERT INTO precious VALUES(42);", nullptr, nullptr,
                       nullptr) == SQLITE_OK);
  sqlite3_close(raw);
  auto before = tjob::test::read_file(path);
  CHECK_THROWS_AS(store(path, std::chrono::milliseconds(100)), error);
  CHECK(tjob::test::read_file(path) == before);
}

TEST_CASE("connections that find a new store at the same time all open it, none refused as locked") {
  // Regression (seen in CI): the creator switched the new file to WAL while
  // another opener held a read lock it needed to upgrade for the same switch;
  // SQLite refuses one of such a pair at once, without its busy handler.
  for (int round = 0; round < 40; ++round) {
    tjob::test::temp_dir d;
    auto path = d.path() / "tjob.db";
    constexpr int openers = 12;
    std::vector<std::string> errors(openers);
    std::vector<std::thread> threads;
    for (int i = 0; i < openers; ++i)
      threads.emplace_back([&, i] {
        try {
          store db(path, std::chrono::seconds(30));
          db.begin();
          if (!db.insert_job(sample("job-" + std::to_string(i)))) errors[i] = "the name was taken";
          db.commit();
        } catch (const error& e) {
          errors[i] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int i = 0; i < openers; ++i)
      CHECK_MESSAGE(errors[i].empty(), ("round " + std::to_string(round) + ": " + errors[i]));
    store db(path, std::chrono::seconds(30));
    CHECK(db.load_jobs().size() == openers);
    if (std::any_of(errors.begin(), errors.end(), [](const std::string& e) { return !e.empty(); })) break;
  }
}

TEST_CASE("a concurrent reader sees a job and its steps from one commit, never half of another") {
  // A job and its steps are read in two statements; a commit between them
  // showed a job Running whose every step had ended (`tjob list -w`'s
  // "Running 1/1", issue 43). Here a writer keeps changing a job and its
  // steps together while the reader reads them.
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  store reader(path, std::chrono::seconds(30));
  auto two_steps = sample("torn");
  two_steps.steps.push_back(two_steps.steps[0]);
  two_steps.steps[1].name = "node-1";
  reader.begin();
  REQUIRE(reader.insert_job(two_steps));
  reader.commit();
  std::atomic<bool> stop{false};
  std::atomic<int> commits{0};
  std::string writer_error;
  std::thread writer([&] {
    try {
      store db(path, std::chrono::seconds(30));
      for (int i = 0; !stop; ++i) {
        auto status = i % 2 ? job_status::complete : job_status::running;
        db.begin();
        for (auto s : two_steps.steps) {
          s.status = status;
          db.update_step("torn", s);
        }
        db.update_job_status("torn", status, "");
        db.commit();
        ++commits;
      }
    } catch (const error& e) {
      writer_error = e.what();
    }
  });
  int torn = 0, reads = 0;
  std::string example;
  while (reads < 4000 || commits < 200) {
    if (!writer_error.empty()) break;
    for (const auto& j : {reader.load_jobs().at(0), *reader.load_job("torn")}) {
      ++reads;
      for (const auto& s : j.steps)
        if (s.status != j.status && j.status != job_status::created) {
          ++torn;
          example =
              std::string(to_string(j.status)) + " with " + s.name + " " + std::string(to_string(s.status));
        }
    }
    if (reads > 200000) break;
  }
  stop = true;
  writer.join();
  CHECK(writer_error.empty());
  CHECK_MESSAGE(commits >= 200, "the writer made too few commits for the reads to race them");
  CHECK_MESSAGE(torn == 0, torn << " torn reads of " << reads << ", e.g. the job " << example);
}

TEST_CASE("a write lock held elsewhere times out as store_locked and loses nothing") {
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  store db(path, std::chrono::milliseconds(100));
  db.begin();
  REQUIRE(db.insert_job(sample("kept")));
  db.commit();
  sqlite3* other = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &other) == SQLITE_OK);
  REQUIRE(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  try {
    db.begin();
    FAIL("took the lock");
  } catch (const error& e) {
    CHECK(e.code() == make_error_code(errc::store_locked));
  }
  sqlite3_exec(other, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(other);
  CHECK(db.load_job("kept"));
}

TEST_CASE("the last change a commit makes in the store's directory is to the wake file") {
  // A reader in another process is woken by inotify on the directory. SQLite
  // writes the WAL before the commit is visible (the index lives in shared
  // memory, which inotify does not see), so a reader woken by the WAL alone can
  // read the old state and then wait forever. The wake file changes last.
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  store writer(path, std::chrono::milliseconds(1000));
  store reader(path, std::chrono::milliseconds(1000));
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::inotify_add_watch(fd, d.path().c_str(), IN_MODIFY | IN_CREATE | IN_MOVED_TO) >= 0);
  auto drain = [&] {
    std::vector<std::string> names;
    alignas(inotify_event) char buf[8192];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      for (char* p = buf; p < buf + n;) {
        inotify_event ev;
        std::memcpy(&ev, p, sizeof ev);
        names.emplace_back(ev.len ? p + sizeof(inotify_event) : "");
        p += sizeof(inotify_event) + ev.len;
      }
    }
    return names;
  };
  for (int round = 0; round < 3; ++round) {
    drain();
    writer.begin();
    if (round == 0) CHECK(writer.insert_job(sample("a")));
    writer.update_job_status("a", round == 2 ? job_status::complete : job_status::running, "");
    writer.commit();
    auto names = drain();
    REQUIRE_FALSE(names.empty());
    CHECK(names.back() == "tjob.db-wake");
    auto j = reader.load_job("a");
    REQUIRE(j);
    CHECK(j->status == (round == 2 ? job_status::complete : job_status::running));
  }
  ::close(fd);
  CHECK(std::filesystem::exists(store::wake_path(path)));
}

TEST_CASE(
    "a full WAL goes to on_wal_full, a wal_checkpointer on another thread copies it, and past 8x the commit "
    "does") {
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  auto wal = std::filesystem::path(path.string() + "-wal");
  store db(path, std::chrono::milliseconds(1000));
  int calls = 0;
  db.on_wal_full = [&] { ++calls; };
  int n = 0;
  auto write_one = [&] {
    auto j = sample("j" + std::to_string(n++));
    j.spec = std::string(3000, 'x');  // about a page a job
    db.begin();
    db.insert_job(j);
    db.commit();
  };
  while (calls == 0 && n < 20000) write_one();
  REQUIRE(calls == 1);
  auto db_size = std::filesystem::file_size(path);
  write_one();
  CHECK(calls == 1);  // asked once, then again when the WAL has grown as much again
  CHECK(std::filesystem::file_size(path) == db_size);  // nothing was copied by the commit

  wal_checkpointer cp(path);
  std::string why = "not run";
  std::thread t([&] { why = cp.run(); });
  t.join();
  CHECK(why.empty());
  CHECK(std::filesystem::file_size(path) >
        static_cast<std::uintmax_t>(n) * 3000);  // every job is in the file
  write_one();                                   // the next writer starts the WAL over, and it fills again
  auto restarted = n;
  while (calls == 1 && n < 20000) write_one();
  CHECK(calls == 2);
  CHECK(n - restarted >= 100);

  // A checkpointer that never comes: the commit at 8x does it itself, so
  // the WAL stops growing there.
  while (n < 20000 && std::filesystem::file_size(wal) < 9 * store::checkpoint_pages * 4096ull) {
    auto before = std::filesystem::file_size(path);
    write_one();
    if (std::filesystem::file_size(path) > before) break;
  }
  CHECK(std::filesystem::file_size(wal) < 9 * store::checkpoint_pages * 4096ull);
  CHECK(calls >= 8);  // at 2x, 3x ... 7x
  auto j = db.load_job("j" + std::to_string(n - 1));
  REQUIRE(j);
  CHECK(j->spec.size() == 3000);
}

TEST_CASE("a wal_checkpointer of a store that is not there says so and makes nothing") {
  tjob::test::temp_dir d;
  wal_checkpointer cp(d.path() / "none.db");
  auto why = cp.run();
  CHECK(why.find("cannot open") != std::string::npos);
  CHECK(why.find("none.db") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(d.path() / "none.db"));
}

TEST_CASE("a version-1 store is migrated: its log then folds to exactly the status columns it had") {
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  {
    // What tjob wrote before events carried exit codes and reasons.
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
    const char* v1 = R"sql(
CREATE TABLE jobs(name TEXT PRIMARY KEY, runtime TEXT NOT NULL, num_nodes INTEGER NOT NULL,
  created_ms INTEGER NOT NULL, spec TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  owner_pid INTEGER NOT NULL, owner_start INTEGER NOT NULL);
CREATE TABLE steps(job TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE, name TEXT NOT NULL,
  status TEXT NOT NULL, exit_code INTEGER, reason TEXT NOT NULL DEFAULT '', pid INTEGER NOT NULL DEFAULT 0,
  pid_start INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(job, name));
CREATE TABLE events(seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE, step TEXT NOT NULL, time_ms INTEGER NOT NULL,
  reason TEXT NOT NULL, message TEXT NOT NULL);
CREATE INDEX events_by_job ON events(job, seq);
CREATE TABLE device_leases(device TEXT PRIMARY KEY, job TEXT NOT NULL);
CREATE INDEX jobs_by_status ON jobs(status);
PRAGMA application_id=1953132386;
PRAGMA user_version=1;
INSERT INTO jobs VALUES('ok','r',1,1,'{}','Complete','',1,2);
INSERT INTO steps VALUES('ok','node-0','Complete',0,'',10,11);
INSERT INTO events(job,step,time_ms,reason,message) VALUES('ok','',1,'Created','m'),
  ('ok','node-0',2,'Started','m'),('ok','node-0',3,'Setup','pip done'),('ok','node-0',4,'Exited','m');
INSERT INTO jobs VALUES('two','r',2,1,'{}','Failed','exit code 3',1,2);
INSERT INTO steps VALUES('two','node-0','Failed',143,'stopped: node-1 failed (signal 15)',0,0),
  ('two','node-1','Failed',3,'exit code 3',0,0);
INSERT INTO events(job,step,time_ms,reason,message) VALUES('two','',1,'Created','m'),
  ('two','node-0',2,'Started','m'),('two','node-1',2,'Started','m'),('two','node-1',3,'Exited','m'),
  ('two','node-0',4,'Exited','m');
INSERT INTO jobs VALUES('cancelled','r',1,1,'{}','Failed','cancelled',1,2);
INSERT INTO steps VALUES('cancelled','node-0','Failed',-1,'cancelled',0,0);
INSERT INTO events(job,step,time_ms,reason,message) VALUES('cancelled','',1,'Created','m'),
  ('cancelled','node-0',2,'Started','m'),('cancelled','',3,'CancelRequested','m'),
  ('cancelled','node-0',4,'Cancelled','m');
INSERT INTO jobs VALUES('never','r',1,1,'{}','Failed','start failed: No such file or directory',1,2);
INSERT INTO steps VALUES('never','node-0','Failed',NULL,'start failed: No such file or directory',0,0);
INSERT INTO events(job,step,time_ms,reason,message) VALUES('never','',1,'Created','m'),
  ('never','node-0',2,'StartFailed','m');
INSERT INTO jobs VALUES('running','r',1,1,'{}','Running','',1,2);
INSERT INTO steps VALUES('running','node-0','Running',NULL,'',99,98);
INSERT INTO events(job,step,time_ms,reason,message) VALUES('running','',1,'Created','m'),
  ('running','node-0',2,'Started','m');
)sql";
    char* err = nullptr;
    int rc = sqlite3_exec(raw, v1, nullptr, nullptr, &err);
    INFO((err ? err : ""));
    REQUIRE(rc == SQLITE_OK);
    sqlite3_close(raw);
  }
  store db(path, std::chrono::milliseconds(1000));
  for (const auto& job : db.load_jobs()) {
    CAPTURE(job.name);
    auto f = db.fold_log(job);
    CHECK(f.status == job.status);
    CHECK(f.reason == job.reason);
    REQUIRE(f.steps.size() == job.steps.size());
    for (std::size_t i = 0; i < f.steps.size(); ++i) {
      CAPTURE(f.steps[i].name);
      CHECK(f.steps[i].status == job.steps[i].status);
      CHECK(f.steps[i].exit_code == job.steps[i].exit_code);
      CHECK(f.steps[i].reason == job.steps[i].reason);
    }
  }
  CHECK(db.load_jobs().size() == 5);
  CHECK(db.load_events("two").size() == 5);  // nothing added, nothing lost
  // reopened: already version 2, nothing to do
  store again(path, std::chrono::milliseconds(1000));
  CHECK(again.fold_log(*again.load_job("cancelled")).steps[0].exit_code == -1);
}

TEST_CASE("a version-2 store gets the admission queue, and its jobs are kept as they were") {
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  {
    // What tjob wrote before admission: version 2, no admissions table.
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
    const char* v2 = R"sql(
CREATE TABLE jobs(name TEXT PRIMARY KEY, runtime TEXT NOT NULL, num_nodes INTEGER NOT NULL,
  created_ms INTEGER NOT NULL, spec TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '',
  owner_pid INTEGER NOT NULL, owner_start INTEGER NOT NULL);
CREATE TABLE steps(job TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE, name TEXT NOT NULL,
  status TEXT NOT NULL, exit_code INTEGER, reason TEXT NOT NULL DEFAULT '', pid INTEGER NOT NULL DEFAULT 0,
  pid_start INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(job, name));
CREATE TABLE events(seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job TEXT NOT NULL REFERENCES jobs(name) ON DELETE CASCADE, step TEXT NOT NULL, time_ms INTEGER NOT NULL,
  reason TEXT NOT NULL, message TEXT NOT NULL, exit_code INTEGER, detail TEXT NOT NULL DEFAULT '');
CREATE INDEX events_by_job ON events(job, seq);
CREATE TABLE device_leases(device TEXT PRIMARY KEY, job TEXT NOT NULL);
CREATE INDEX jobs_by_status ON jobs(status);
PRAGMA application_id=1953132386;
PRAGMA user_version=2;
INSERT INTO jobs VALUES('old','r',1,1,'{}','Complete','',1,2);
INSERT INTO steps VALUES('old','node-0','Complete',0,'',10,11);
INSERT INTO events(job,step,time_ms,reason,message,exit_code) VALUES('old','',1,'Created','m',NULL),
  ('old','node-0',2,'Started','m',NULL),('old','node-0',4,'Exited','m',0);
)sql";
    char* err = nullptr;
    int rc = sqlite3_exec(raw, v2, nullptr, nullptr, &err);
    INFO((err ? err : ""));
    REQUIRE(rc == SQLITE_OK);
    sqlite3_close(raw);
  }
  store db(path, std::chrono::milliseconds(1000));
  auto old = db.load_job("old");
  REQUIRE(old);
  CHECK(old->status == job_status::complete);
  CHECK(db.load_events("old").size() == 3);
  CHECK(db.load_queue().empty());
  CHECK(old->progress.empty());  // version 5's column, empty for a job that never reported
  CHECK(old->progress_ms == 0);
  // The queue works: a job joins it, is admitted, and leaves it when it ends.
  job_row j;
  j.name = "new";
  j.runtime = "r";
  j.created_ms = 5;
  j.spec = "{}";
  j.steps.push_back({"node-0"});
  db.begin();
  REQUIRE(db.insert_job(j));
  queue_row q;
  q.job = "new";
  q.priority = 3;
  q.need = {2, 1024, 0};
  db.enqueue(q);
  db.commit();
  auto rows = db.load_queue();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].row.priority == 3);
  CHECK(rows[0].row.need.cpus == 2);
  CHECK(rows[0].row.need.memory == 1024);
  CHECK_FALSE(rows[0].row.admitted);
  db.begin();
  db.admit("new");
  db.commit();
  CHECK(db.load_queue()[0].row.admitted);
  db.begin();
  db.update_job_status("new", job_status::failed, "cancelled");
  db.commit();
  CHECK(db.load_queue().empty());
}

TEST_CASE(
    "the queue's head is read by its index: order, sums, the first waiting, new cancels, the next seq") {
  tjob::test::temp_dir d;
  store db(d.path() / "tjob.db", std::chrono::milliseconds(1000));
  // Ten jobs: 0..3 admitted, the rest waiting, priorities 0 and 5.
  db.begin();
  std::vector<std::int64_t> seqs;
  for (int i = 0; i < 10; ++i) {
    auto name = "j" + std::to_string(i);
    REQUIRE(db.insert_job(sample(name)));
    db.append_event(name, "", 1, log_event::created, "made");
    queue_row q;
    q.job = name;
    q.seq = db.next_queue_seq();
    seqs.push_back(q.seq);
    q.priority = (i == 7 || i == 9) ? 5 : 0;
    q.need = {2, 1000, i == 1 ? 1 : 0};
    q.group = i == 2 ? "sweep" : "";
    q.admitted = i < 4;
    db.enqueue(q);
  }
  db.commit();
  CHECK(std::is_sorted(seqs.begin(), seqs.end()));
  CHECK(std::adjacent_find(seqs.begin(), seqs.end()) == seqs.end());  // one each: an event lies between
  auto used = db.admitted_totals();
  CHECK(used.running == 4);
  CHECK(used.cpus == 8);
  CHECK(used.memory == 4000);
  CHECK(used.gpus == 1);
  CHECK(used.groups == std::map<std::string, int, std::less<>>{{"sweep", 1}});
  std::vector<std::string> order;
  for (const auto& r : db.load_waiting(4)) order.push_back(r.job);
  CHECK(order == std::vector<std::string>{"j7", "j9", "j4", "j5"});  // priority first, then submission
  CHECK(db.first_waiting_from(5) == std::optional<std::string>("j7"));
  CHECK(db.first_waiting_from(0) == std::optional<std::string>("j7"));
  CHECK_FALSE(db.first_waiting_from(6).has_value());
  // the head with owners: every admitted job and the first waiting ones
  auto head = db.load_queue_head(2);
  CHECK(head.size() == 6);
  CHECK(head.back().owner_pid == 1);
  // the planner from the sums decides as it does from every row
  admission_budget budget;
  budget.cpus = 12;
  std::vector<queue_row> all;
  for (const auto& q : db.load_queue()) all.push_back(q.row);
  auto from_rows = plan_admission(all, budget);
  auto from_sums = plan_admission(db.load_waiting(100), budget, db.admitted_totals());
  CHECK(from_rows.admit == from_sums.admit);
  CHECK(from_rows.admit == std::vector<std::string>{"j7", "j9"});
  CHECK(from_rows.blocker == "j4");
  // cancels: only the log's new rows are read, and the cursor moves to its end
  std::int64_t seen = db.last_event_seq();
  CHECK(db.cancels_after(seen).empty());
  db.begin();
  db.append_event("j5", "", 2, log_event::cancel_requested, "cancel requested");
  db.append_event("j6", "", 2, log_event::setup, "not a cancel");
  db.commit();
  auto before = seen;
  CHECK(db.cancels_after(seen) == std::vector<std::string>{"j5"});
  CHECK(seen == before + 2);
  CHECK(db.cancels_after(seen).empty());
}

TEST_CASE(
    "a report is the job's latest progress, an event when recorded, and refused once the job has ended") {
  tjob::test::temp_dir d;
  store db(d.path() / "tjob.db", std::chrono::milliseconds(1000));
  db.begin();
  REQUIRE(db.insert_job(sample("p")));
  db.append_event("p", "", 1, log_event::created, "made");
  CHECK(db.record_progress("p", 10, R"({"progress_percent":5})", "5%", true));
  CHECK(db.record_progress("p", 20, R"({"progress_percent":6})", "", false));  // the latest only
  db.commit();
  auto row = db.load_job("p");
  REQUIRE(row);
  CHECK(row->progress == R"({"progress_percent":6})");
  CHECK(row->progress_ms == 20);
  auto events = db.load_events("p");
  REQUIRE(events.size() == 2);
  CHECK(events[1].reason == "Progress");
  CHECK(events[1].message == "5%");
  CHECK(events[1].detail == R"({"progress_percent":5})");
  // The fold ignores Progress events: the status columns still match the log.
  CHECK(db.fold_log(*row).status == row->status);
  db.begin();
  db.update_job_status("p", job_status::complete, "");
  CHECK_FALSE(db.record_progress("p", 30, R"({"progress_percent":7})", "7%", true));
  CHECK_FALSE(db.record_progress("gone", 30, "{}", "", true));
  db.commit();
  CHECK(db.load_job("p")->progress_ms == 20);
  CHECK(db.load_events("p").size() == 2);
}

namespace {

// Every row of `sql`'s answer as text, columns joined by '|'.
std::vector<std::string> rows_of(const std::filesystem::path& path, const char* sql) {
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  REQUIRE(sqlite3_prepare_v2(raw, sql, -1, &s, nullptr) == SQLITE_OK);
  std::vector<std::string> out;
  while (sqlite3_step(s) == SQLITE_ROW) {
    std::string row;
    for (int c = 0; c < sqlite3_column_count(s); ++c) {
      auto* t = sqlite3_column_text(s, c);
      row += (c ? "|" : "") + (t ? std::string(reinterpret_cast<const char*>(t)) : std::string("NULL"));
    }
    out.push_back(std::move(row));
  }
  sqlite3_finalize(s);
  sqlite3_close(raw);
  return out;
}

}  // namespace

namespace {

// The store the last version-5 tjob made (tests/data/store-v5.sql), at
// `path`, then `more` run on it.
void make_v5_store(const std::filesystem::path& path, const std::string& more = "") {
  std::ifstream in(tjob::test::source_dir() + "/tests/data/store-v5.sql");
  REQUIRE(in);
  std::string sql((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  sql += more;
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &err);
  INFO((err ? err : ""));
  REQUIRE(rc == SQLITE_OK);
  sqlite3_close(raw);
}

}  // namespace

TEST_CASE(
    "a version-5 store made by the last version-5 tjob is migrated: steps without rowid, events without "
    "AUTOINCREMENT, nothing lost") {
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  make_v5_store(path);
  const char* steps_sql =
      "SELECT job, name, status, exit_code, reason, pid, pid_start, attempt FROM steps ORDER BY job, name";
  const char* events_sql =
      "SELECT seq, job, step, time_ms, reason, message, exit_code, detail FROM events ORDER BY seq";
  const char* jobs_sql = "SELECT * FROM jobs ORDER BY name";
  auto steps_before = rows_of(path, steps_sql);
  auto events_before = rows_of(path, events_sql);
  auto jobs_before = rows_of(path, jobs_sql);
  REQUIRE(rows_of(path, "PRAGMA user_version") == std::vector<std::string>{"5"});
  REQUIRE(steps_before.size() == 4);
  {
    store db(path, std::chrono::milliseconds(1000));
    // What tjob shows of the old jobs.
    auto done = db.load_job("done-job");
    REQUIRE(done);
    CHECK(done->status == job_status::complete);
    auto failed = db.load_job("failed-job");
    REQUIRE(failed);
    CHECK(failed->status == job_status::failed);
    REQUIRE(failed->steps.size() == 1);
    CHECK(failed->steps[0].exit_code == 3);
    auto retried = db.load_job("retried");
    REQUIRE(retried);
    REQUIRE(retried->steps.size() == 1);
    CHECK(retried->steps[0].attempt == 2);
    auto reported = db.load_job("reported");
    REQUIRE(reported);
    CHECK(reported->progress.find("\"progress_percent\":40") != std::string::npos);
    for (const auto* j : {&*done, &*failed, &*retried, &*reported}) {
      auto folded = db.fold_log(*j);  // the log still folds to the status columns
      CHECK(folded.status == j->status);
    }
    CHECK(db.load_jobs().size() == 4);
  }
  CHECK(rows_of(path, "PRAGMA user_version") == std::vector<std::string>{"7"});
  auto made = rows_of(path, "SELECT sql FROM sqlite_master WHERE name='steps'");
  REQUIRE(made.size() == 1);
  CHECK(made[0].find("WITHOUT ROWID") != std::string::npos);
  CHECK(rows_of(path, "SELECT name FROM sqlite_master WHERE name LIKE 'sqlite_autoindex_steps%'").empty());
  auto events_made = rows_of(path, "SELECT sql FROM sqlite_master WHERE name='events'");
  REQUIRE(events_made.size() == 1);
  CHECK(events_made[0].find("AUTOINCREMENT") == std::string::npos);
  CHECK(rows_of(path, "SELECT count(*) FROM sqlite_master WHERE name='events_by_job'") ==
        std::vector<std::string>{"1"});
  CHECK(rows_of(path, "SELECT hwm FROM event_seq") == std::vector<std::string>{"15"});
  // Every row as it was.
  CHECK(rows_of(path, steps_sql) == steps_before);
  CHECK(rows_of(path, events_sql) == events_before);
  CHECK(rows_of(path, jobs_sql) == jobs_before);
  // The migrated store works: a new job's steps and events, and a deleted
  // job's steps go with it (the foreign key holds on the new table).
  store db(path, std::chrono::milliseconds(1000));
  auto seq_before = db.last_event_seq();
  db.begin();
  REQUIRE(db.insert_job(sample("after")));
  db.append_event("after", "", 10, log_event::created, "made");
  db.delete_job("done-job");
  db.commit();
  CHECK(db.last_event_seq() > seq_before);
  REQUIRE(db.load_job("after"));
  CHECK(db.load_job("after")->steps.size() == 1);
  CHECK_FALSE(db.load_job("done-job"));
  CHECK(rows_of(path, "SELECT count(*) FROM steps WHERE job='done-job'") == std::vector<std::string>{"0"});
  CHECK(rows_of(path, "SELECT count(*) FROM events WHERE job='done-job'") == std::vector<std::string>{"0"});
}

TEST_CASE("a version-5 store whose newest events went with their job keeps their seqs used after migration") {
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  // As a deletion left it: sqlite_sequence says 15, the newest event is 13.
  make_v5_store(path, "DELETE FROM events WHERE seq > 13;");
  REQUIRE(rows_of(path, "SELECT max(seq) FROM events") == std::vector<std::string>{"13"});
  store db(path, std::chrono::milliseconds(1000));
  std::int64_t cursor = 15;  // a process that had read up to 15
  db.begin();
  db.append_event("done-job", "", 10, log_event::cancel_requested, "cancel requested");
  db.commit();
  CHECK(db.last_event_seq() == 16);
  CHECK(db.cancels_after(cursor) == std::vector<std::string>{"done-job"});
  CHECK(db.next_queue_seq() == 17);
}

TEST_CASE("a new store is made at the current version, steps without rowid, events' seq never reused") {
  tjob::test::temp_dir d;
  auto path = d.path() / "tjob.db";
  {
    store db(path, std::chrono::milliseconds(1000));
    db.begin();
    REQUIRE(db.insert_job(sample("a")));
    db.append_event("a", "", 1, log_event::created, "made");
    REQUIRE(db.insert_job(sample("b")));
    db.append_event("b", "", 2, log_event::created, "made");
    db.commit();
    auto last = db.last_event_seq();
    // The newest events go with their job; the next event's seq is still new
    // (a cursor at `last` sees it: cancels_after).
    db.begin();
    db.delete_job("b");
    db.append_event("a", "", 3, log_event::cancel_requested, "cancel requested");
    db.commit();
    auto cursor = last;
    CHECK(db.cancels_after(cursor) == std::vector<std::string>{"a"});
  }
  CHECK(rows_of(path, "PRAGMA user_version") == std::vector<std::string>{std::to_string(schema_version)});
  auto made = rows_of(path, "SELECT sql FROM sqlite_master WHERE name='steps'");
  REQUIRE(made.size() == 1);
  CHECK(made[0].find("WITHOUT ROWID") != std::string::npos);
}
