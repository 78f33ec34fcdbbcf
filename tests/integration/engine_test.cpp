// The engine with real child processes, through the blocking facade.
#include "tests/support/fold_check.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <sys/stat.h>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

using namespace tjob;
using namespace std::chrono_literals;
using tjob::test::code_of;
using tjob::test::helper_bin;
using tjob::test::helper_job;
using tjob::test::message_of;

namespace {

using fixture = tjob::test::folded_home;  // each case ends with the columns checked against the log

}  // namespace

TEST_CASE_FIXTURE(fixture, "a job runs to Complete and its log is captured byte for byte") {
  trainer_client c(config());
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(b));
  std::string payload = "text\nsecond line\nno newline at the end";
  auto name =
      c.train(helper_job({"allbytes", "print", payload, "stderr", "to stderr\n", "exit", "0"}, "exact"));
  CHECK(name == "exact");
  auto job = c.wait_for_job_status(name, {job_status::complete}, 30s);
  CHECK(job.status == job_status::complete);
  REQUIRE(job.steps.size() == 1);
  CHECK(job.steps[0].name == "node-0");
  CHECK(job.steps[0].exit_code == 0);
  CHECK(job.runtime.empty());  // a command job given no runtime is listed under none
  REQUIRE(job.start_time);
  REQUIRE(job.end_time);
  CHECK(job.creation_timestamp <= *job.start_time);
  CHECK(*job.start_time <= *job.end_time);
  std::string expected = bytes + payload + "to stderr\n";
  CHECK(c.get_job_logs(name).read_all() == expected);
  CHECK(tjob::test::read_file(c.home() / "jobs" / name / "node-0.log") == expected);
  // Lines keep their '\n'; joined, they are the log.
  auto reader = c.get_job_logs(name);
  std::vector<std::string> lines;
  while (auto l = reader.next()) lines.push_back(*l);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == bytes.substr(0, 11));  // 0..10, where 10 is '\n'
  CHECK(lines[1] == bytes.substr(11) + "text\n");
  CHECK(lines[3] == "no newline at the endto stderr\n");
}

TEST_CASE_FIXTURE(fixture, "exit codes decide the status and the event log records it") {
  trainer_client c(config());
  auto name = c.train(helper_job({"lines", "2", "exit", "3"}));
  CHECK(name.size() == 12);
  auto job = c.wait_for_job_status(name, {job_status::failed}, 30s);
  CHECK(job.steps[0].exit_code == 3);
  CHECK(job.steps[0].reason == "exit code 3");
  CHECK(job.reason == "exit code 3");
  auto events = c.get_job_events(name);
  std::vector<std::string> reasons;
  for (const auto& e : events) reasons.push_back(e.reason);
  CHECK(reasons == std::vector<std::string>{"Created", "Started", "Exited"});
  CHECK(events.back().step == "node-0");
  CHECK(events.back().message.find("exit code 3") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture,
                  "waiting for Complete on a failing job raises with step and exit code and last lines") {
  trainer_client c(config());
  auto name = c.train(helper_job({"lines", "30", "stderr", "boom: out of memory\n", "exit", "5"}));
  std::string msg;
  try {
    c.wait_for_job_status(name, {job_status::complete}, 30s);
    FAIL("no error");
  } catch (const error& e) {
    CHECK(e.code() == make_error_code(errc::job_failed));
    msg = e.what();
  }
  CHECK(msg.find("TrainJob " + name + " is Failed") != std::string::npos);
  CHECK(msg.find("node-0: status=Failed, exit_code=5") != std::string::npos);
  CHECK(msg.find("Last logs:") != std::string::npos);
  CHECK(msg.find("boom: out of memory") != std::string::npos);
  CHECK(msg.find("line 22\n") != std::string::npos);  // the last 10 lines ...
  CHECK(msg.find("line 21\n") == std::string::npos);  // ... and no more
}

TEST_CASE_FIXTURE(fixture, "waits time out and reject bad arguments and refuse unreachable statuses") {
  trainer_client c(config());
  auto name = c.train(helper_job({"sleep", "60000"}));
  c.wait_for_job_status(name, {job_status::running}, 30s);
  CHECK(code_of([&] { c.wait_for_job_status(name, {job_status::complete}, 50ms); }) == errc::timeout);
  CHECK(message_of([&] {
          c.wait_for_job_status(name, {job_status::complete}, 50ms);
        }).find("Timeout waiting for TrainJob " + name + " to reach status: Complete") != std::string::npos);
  CHECK(code_of([&] { c.wait_for_job_status(name, {job_status::complete}, 0ms); }) == errc::invalid_argument);
  CHECK(code_of([&] { c.wait_for_job_status(name, {}, 1s); }) == errc::invalid_argument);
  CHECK(code_of([&] { c.wait_for_job_status("nope", {job_status::complete}, 1s); }) == errc::job_not_found);
  c.delete_job(name);
  auto done = c.train(helper_job({"exit", "0"}));
  c.wait_for_job_status(done, {job_status::complete}, 30s);
  CHECK(code_of([&] { c.wait_for_job_status(done, {job_status::running}, 1s); }) == errc::unreachable_status);
}

TEST_CASE_FIXTURE(fixture, "the child sees the engine's environment with the trainer's env on top") {
  ::setenv("TJOB_TEST_PARENT_VAR", "from-parent", 1);
  ::setenv("TJOB_TEST_OVERRIDDEN", "parent", 1);
  trainer_client c(config());
  auto name = c.train(
      helper_job({"env", "TJOB_TEST_PARENT_VAR", "env", "TJOB_TEST_OVERRIDDEN", "env", "TJOB_TEST_DATA"}, {},
                 {{"TJOB_TEST_OVERRIDDEN", "job"}, {"TJOB_TEST_DATA", "a'b\"c;$(touch /tmp/x)\nz"}}));
  c.wait_for_job_status(name, {job_status::complete}, 30s);
  CHECK(c.get_job_logs(name).read_all() == "from-parent\njob\na'b\"c;$(touch /tmp/x)\nz\n");
}

TEST_CASE_FIXTURE(fixture, "each job gets its own working dir unless it names one") {
  trainer_client c(config());
  auto a = c.train(helper_job({"pwd"}));
  c.wait_for_job_status(a, {job_status::complete}, 30s);
  CHECK(c.get_job_logs(a).read_all() == (c.home() / "jobs" / a / "work").string() + "\n");
  auto req = helper_job({"pwd"});
  std::get<command_trainer>(req.job_trainer).working_dir = dir.str();
  auto b = c.train(req);
  c.wait_for_job_status(b, {job_status::complete}, 30s);
  CHECK(c.get_job_logs(b).read_all() == dir.str() + "\n");
  struct stat st {};
  REQUIRE(::stat((c.home() / "jobs" / a).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::stat(c.home().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::stat((c.home() / "tjob.db").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  REQUIRE(::stat((c.home() / "jobs" / a / "node-0.log").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE_FIXTURE(fixture, "bad requests are rejected before anything is created") {
  trainer_client c(config());
  auto kept = c.train(helper_job({"exit", "0"}, "kept"));
  c.wait_for_job_status(kept, {job_status::complete}, 30s);
  auto before = c.get_job_events(kept).size();

  CHECK(code_of([&] { c.train(helper_job({}, "kept")); }) == errc::duplicate_name);
  CHECK(code_of([&] { c.train(helper_job({}, "../escape")); }) == errc::invalid_name);
  CHECK(code_of([&] { c.train(helper_job({}, "a/b")); }) == errc::invalid_name);
  CHECK(code_of([&] { c.train(helper_job({}, std::string(64, 'a'))); }) == errc::invalid_name);
  CHECK(code_of([&] { c.train(helper_job({}, std::string("a\0b", 3))); }) == errc::invalid_name);
  CHECK(message_of([&] { c.train(helper_job({}, "Bad_Name")); }).find("Invalid job name 'Bad_Name'") !=
        std::string::npos);
  {
    train_request r;
    r.name = "noexe";
    r.job_trainer = command_trainer{{"definitely-not-a-program-tjob"}, {}, {}};
    CHECK(code_of([&] { c.train(r); }) == errc::executable_not_found);
    CHECK(message_of([&] { c.train(r); }).find("definitely-not-a-program-tjob") != std::string::npos);
    r.job_trainer = command_trainer{{}, {}, {}};
    CHECK(code_of([&] { c.train(r); }) == errc::invalid_argument);
    r.job_trainer = command_trainer{{helper_bin()}, {{"A=B", "x"}}, {}};
    CHECK(code_of([&] { c.train(r); }) == errc::invalid_argument);
    r.job_trainer = command_trainer{{helper_bin()}, {}, (dir.path() / "missing").string()};
    CHECK(code_of([&] { c.train(r); }) == errc::invalid_argument);
    r.job_trainer = command_trainer{{helper_bin()}, {}, {}};
    r.runtime = "no-such-runtime";
    CHECK(message_of([&] { c.train(r); }).find("Runtime 'no-such-runtime' not found") != std::string::npos);
    r.runtime = {};
    r.num_nodes = 2;
    CHECK(message_of([&] { c.train(r); }).find("a command job runs one node") != std::string::npos);
  }
  auto jobs = c.list_jobs();
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].name == "kept");
  CHECK(c.get_job_events(kept).size() == before);
  CHECK_FALSE(std::filesystem::exists(c.home() / "jobs" / "noexe"));
  CHECK_FALSE(std::filesystem::exists(dir.path() / "escape"));
}

TEST_CASE_FIXTURE(fixture, "unknown jobs and steps get errors that name them") {
  trainer_client c(config());
  CHECK(message_of([&] { c.get_job("ghost"); }).find("No TrainJob with name 'ghost'") != std::string::npos);
  CHECK(code_of([&] { c.get_job_logs("ghost"); }) == errc::job_not_found);
  CHECK(code_of([&] { c.delete_job("ghost"); }) == errc::job_not_found);
  CHECK(code_of([&] { c.get_job_events("ghost"); }) == errc::job_not_found);
  auto name = c.train(helper_job({"exit", "0"}));
  c.wait_for_job_status(name, {job_status::complete}, 30s);
  CHECK(message_of([&] { c.get_job_logs(name, {.step = "node-7"}); }).find("has no step 'node-7'") !=
        std::string::npos);
  CHECK(c.list_runtimes().size() >= 1);
  CHECK(c.get_runtime("torch-distributed").trainer.framework == "torch");
  CHECK(code_of([&] { c.get_runtime("nope"); }) == errc::runtime_not_found);
}

TEST_CASE_FIXTURE(fixture, "tail gives the last lines and follow goes on from there") {
  trainer_client c(config());
  auto name = c.train(helper_job({"lines", "100"}));
  c.wait_for_job_status(name, {job_status::complete}, 30s);
  CHECK(c.get_job_logs(name, {.tail = 2}).read_all() == "line 99\nline 100\n");
  CHECK(c.get_job_logs(name, {.tail = 0}).read_all() == "");
  CHECK(c.get_job_logs(name, {.follow = true, .tail = 1}).read_all() == "line 100\n");
}

TEST_CASE_FIXTURE(fixture, "follow replays what is stored and streams the rest live and ends with the step") {
  trainer_client c(config());
  // The job writes its second half only once this reader has read the first
  // (it waits on a FIFO): a reader that only replays what is stored ends at
  // "half" and fails this test.
  tjob::test::gate gate;
  auto name = c.train(
      helper_job({"lines", "500", "print", "half\n", "read-fifo", gate.path(), "prefixed", "500", "more "}));
  auto reader = c.get_job_logs(name, {.follow = true});
  std::string got;
  while (auto line = reader.next()) {
    got += *line;
    if (*line == "half\n") break;
  }
  CHECK(c.get_job(name).status == job_status::running);
  gate.release();
  while (auto chunk = reader.read_some()) got += *chunk;
  std::string expected;
  for (int i = 1; i <= 500; ++i) expected += "line " + std::to_string(i) + "\n";
  expected += "half\n";
  for (int i = 1; i <= 500; ++i) expected += "more " + std::to_string(i) + "\n";
  CHECK(got == expected);
  CHECK(c.get_job(name).status == job_status::complete);
}

TEST_CASE_FIXTURE(
    fixture,
    "timestamps are the times lines were written, the same live and later, and since filters by them") {
  trainer_client c(config());
  tjob::test::gate gate;
  const auto submitted = clock::now();
  auto name =
      c.train(helper_job({"print", "first\nsecond\n", "read-fifo", gate.path(), "print", "third\nlast"}));
  // Live: what the follower is given is stamped as it is read.
  auto reader = c.get_job_logs(name, {.follow = true, .timestamps = true});
  std::vector<std::string> live;
  while (live.size() < 2) {
    auto line = reader.next();
    REQUIRE(line);
    live.push_back(*line);
  }
  // The rest is written later: after the clock (file times come from the
  // kernel's coarse clock, a tick of a few ms) has passed the first lines'.
  auto first_time = parse_time(live[0].substr(0, live[0].find(' ')));
  REQUIRE(first_time);
  std::this_thread::sleep_until(*first_time + 50ms);
  gate.release();
  while (auto line = reader.next()) live.push_back(*line);
  auto job = c.wait_for_job_status(name, {job_status::complete}, 30s);
  const auto done = clock::now();
  REQUIRE(live.size() == 4);
  std::vector<clock::time_point> at;
  std::string text;
  for (const auto& l : live) {
    // "2026-12-03T19:31:20.672427912Z " then the line
    REQUIRE(l.size() > 31);
    CHECK(l[4] == '-');
    CHECK(l[29] == 'Z');
    CHECK(l[30] == ' ');
    auto t = parse_time(l.substr(0, 30));
    REQUIRE(t);
    at.push_back(*t);
    text += l.substr(31);
  }
  CHECK(text == "first\nsecond\nthird\nlast");
  CHECK(at[0] <= at[1]);
  CHECK(at[1] < at[2]);
  CHECK(at[2] <= at[3]);
  // wall-clock times of this run (within a second: the kernel's file clock
  // and ours are read at different moments)
  CHECK(at[0] > submitted - 1s);
  CHECK(at[3] < done + 1s);
  // Read again when the job is over: the same stamps
  std::string joined;
  for (const auto& l : live) joined += l;
  CHECK(c.get_job_logs(name, {.timestamps = true}).read_all() == joined);
  // since: lines at or after the time, by those stamps
  CHECK(c.get_job_logs(name, {.since = at[0]}).read_all() == "first\nsecond\nthird\nlast");
  CHECK(c.get_job_logs(name, {.since = at[2]}).read_all() == "third\nlast");
  CHECK(c.get_job_logs(name, {.since = at[1] + 1ns}).read_all() == "third\nlast");
  CHECK(c.get_job_logs(name, {.since = at[3] + 1ns}).read_all() == "");
  CHECK(c.get_job_logs(name, {.timestamps = true, .since = at[2]}).read_all() == live[2] + live[3]);
  // with tail: the last lines, of those since
  CHECK(c.get_job_logs(name, {.tail = 3, .since = at[0]}).read_all() == "second\nthird\nlast");
  CHECK(c.get_job_logs(name, {.tail = 3, .since = at[2]}).read_all() == "third\nlast");
  CHECK(c.get_job_logs(name, {.follow = true, .tail = 1, .timestamps = true}).read_all() == live[3]);
  // a reader in another engine (as `tjob logs` beside `tjob run`) reads the same times
  trainer_client other(config());
  CHECK(other.get_job_logs(name, {.timestamps = true}).read_all() == joined);
  CHECK(job.status == job_status::complete);
}

TEST_CASE_FIXTURE(fixture, "wait_for_job_change returns when this job changes and not when another does") {
  trainer_client c(config());
  tjob::test::gate gate;
  auto name = c.train(helper_job({"print", "up\n", "read-fifo", gate.path()}));
  auto running = c.wait_for_job_status(name, {job_status::running}, 30s);
  // another job runs to its end: this one is as it was when the short wait ends
  auto other = c.train(helper_job({"exit", "0"}));
  c.wait_for_job_status(other, {job_status::complete}, 30s);
  auto asked = std::chrono::steady_clock::now();
  auto same = c.wait_for_job_change(name, running, 200ms);
  CHECK(same_state(same, running));
  // it ran to its timeout: a wait woken by the other job's change would have returned before
  CHECK(std::chrono::steady_clock::now() - asked >= 200ms);
  std::thread release([&] { gate.release(); });
  auto changed = c.wait_for_job_change(name, running, 30s);
  release.join();
  CHECK_FALSE(same_state(changed, running));
  CHECK(changed.name == name);
  auto done = c.wait_for_job_status(name, {job_status::complete}, 30s);
  c.delete_job(name);
  CHECK(code_of([&] { c.wait_for_job_change(name, done, 1s); }) == errc::job_not_found);
}

TEST_CASE_FIXTURE(fixture, "a stalled follower neither holds the job back nor loses anything") {
  trainer_client c(config());
  auto name = c.train(helper_job({"flood", "20000000"}));
  auto stalled = c.get_job_logs(name, {.follow = true});
  REQUIRE(stalled.next().has_value());  // reads one line, then stops reading
  auto job = c.wait_for_job_status(name, {job_status::complete}, 120s);
  CHECK(job.status == job_status::complete);
  auto path = c.home() / "jobs" / name / "node-0.log";
  CHECK(std::filesystem::file_size(path) == 20000000u);
  // The stalled reader resumes where it was and gets the rest.
  std::size_t total = 100;
  while (auto chunk = stalled.read_some()) total += chunk->size();
  CHECK(total == 20000000u);
}

TEST_CASE_FIXTURE(fixture, "a child that closes its output early still ends with its exit code") {
  trainer_client c(config());
  auto name = c.train(helper_job({"print", "before\n", "close-stdout", "300"}));
  auto job = c.wait_for_job_status(name, {job_status::failed}, 30s);
  CHECK(job.steps[0].exit_code == 7);
  CHECK(c.get_job_logs(name).read_all() == "before\n");
}

TEST_CASE_FIXTURE(fixture,
                  "deleting a job that ignores SIGTERM kills it after the grace period and grandchild too") {
  trainer_client c(config(300ms));
  auto pidfile = dir.path() / "pids";
  auto name = c.train(helper_job({"ignore-term", pidfile.string()}));
  auto reader = c.get_job_logs(name, {.follow = true});
  REQUIRE(reader.next() == std::optional<std::string>("ready\n"));
  pid_t child = 0, grandchild = 0;
  std::ifstream(pidfile) >> child >> grandchild;
  REQUIRE(child > 0);
  REQUIRE(grandchild > 0);
  auto t0 = std::chrono::steady_clock::now();
  c.delete_job(name);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 300ms);  // SIGTERM was ignored, so only SIGKILL after the grace period ended it
  CHECK(tjob::test::wait_gone(child, 10s));
  CHECK(tjob::test::wait_gone(grandchild, 10s));
  CHECK(code_of([&] { c.get_job(name); }) == errc::job_not_found);
  CHECK_FALSE(std::filesystem::exists(c.home() / "jobs" / name));
}

TEST_CASE_FIXTURE(fixture, "cancel ends a job Failed with reason cancelled and keeps it") {
  trainer_client c(config(5s));
  auto name = c.train(helper_job({"print", "started\n", "sleep", "60000"}));
  auto reader = c.get_job_logs(name, {.follow = true});
  REQUIRE(reader.next().has_value());
  c.cancel_job(name);
  auto job = c.get_job(name);
  CHECK(job.status == job_status::failed);
  CHECK(job.steps[0].reason == "cancelled");
  auto events = c.get_job_events(name);
  CHECK(events.back().reason == "Cancelled");
  c.cancel_job(name);  // no-op once ended
  CHECK(reader.read_all() == "");
}

TEST_CASE_FIXTURE(fixture, "a running job holds one descriptor of the engine (its pidfd)") {
  auto cfg = config(1s);
  cfg.admission.cpus = 0;  // the 100 jobs run at once
  trainer_client c(cfg);
  auto before = tjob::test::open_fds();
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) names.push_back(c.train(helper_job({"sleep", "60000"})));
  for (auto& n : names) c.wait_for_job_status(n, {job_status::running}, 30s);
  auto during = tjob::test::open_fds();
  CHECK(during - before <= names.size() + 8);
  for (auto& n : names) c.cancel_job(n);
  CHECK(tjob::test::open_fds() <= before + 8);
}

TEST_CASE_FIXTURE(fixture, "a store that is somebody else's file is refused and not changed") {
  std::filesystem::create_directories(dir.path() / "home");
  auto db = dir.path() / "home" / "tjob.db";
  std::ofstream(db) << "not a database, but precious";
  try {
    trainer_client c(config());
    FAIL("opened");
  } catch (const error& e) {
    CHECK(e.code() == make_error_code(errc::store_corrupt));
  }
  CHECK(tjob::test::read_file(db) == "not a database, but precious");
}

TEST_CASE_FIXTURE(fixture, "an unusable TJOB_HOME is reported with the path and the fix") {
  std::ofstream(dir.path() / "file") << "x";
  engine_config cfg;
  cfg.home = dir.path() / "file" / "home";
  try {
    trainer_client c(cfg);
    FAIL("opened");
  } catch (const error& e) {
    CHECK(e.code() == make_error_code(errc::store_unavailable));
    CHECK(std::string(e.what()).find("TJOB_HOME") != std::string::npos);
  }
}

TEST_CASE_FIXTURE(fixture,
                  "the engine checkpoints its store's WAL on its own thread long before the commit would") {
  // Without the engine's checkpointer nothing copies the WAL into tjob.db
  // until 8,000 WAL pages (the commit's own fallback): a few hundred jobs
  // fill about 1,000-4,000, so a tjob.db holding their rows shows it ran.
  trainer_client c(config());
  auto db = std::filesystem::path(home()) / "tjob.db";
  auto wal = std::filesystem::path(home()) / "tjob.db-wal";
  c.wait_for_job_status(c.train(helper_job({"print", "x"})), {job_status::complete}, 60s);
  auto first = std::filesystem::file_size(db);
  for (int i = 0; i < 300; ++i)
    c.wait_for_job_status(c.train(helper_job({"print", "x"})), {job_status::complete}, 60s);
  CHECK(std::filesystem::file_size(wal) < 8000u * 4096u);  // the fallback never had to run
  // the checkpoint writes tjob.db: inotify wakes the check
  CHECK(tjob::test::wait_for_file_change(
      home(), [&] { return std::filesystem::file_size(db) > first; }, 30s));
}

TEST_CASE_FIXTURE(fixture,
                  "the venv cache is the local backend's: another backend says so and where to look") {
  auto cfg = config();
  cfg.backend = "container";
  cfg.backend_config = {{"container_host", "unix:///nonexistent/docker.sock"}};  // never reached: no daemon is asked
  trainer_client c(cfg);
  CHECK(code_of([&] { c.list_venv_cache(); }) == errc::invalid_argument);
  CHECK(message_of([&] { c.prune_venv_cache(0s); }).find("--backend local") != std::string::npos);
}

TEST_CASE_FIXTURE(
    fixture, "a job's log is its directory's <step>.log, and an older tjob's logs/<step>.log is still read") {
  namespace fs = std::filesystem;
  const fs::path h = home();
  fs::create_directories(h / "jobs" / "done-job" / "logs");
  {
    // The store and a log as the last version-5 tjob left them (tests/data/store-v5.sql).
    std::ifstream in(tjob::test::source_dir() + "/tests/data/store-v5.sql");
    REQUIRE(in);
    std::string sql((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open((h / "tjob.db").c_str(), &raw) == SQLITE_OK);
    REQUIRE(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(raw);
    std::ofstream(h / "jobs" / "done-job" / "logs" / "node-0.log") << "first line\nsecond line\n";
  }
  trainer_client c(config());
  CHECK(c.get_job_logs("done-job").read_all() == "first line\nsecond line\n");
  log_options last;
  last.tail = 1;
  CHECK(c.get_job_logs("done-job", last).read_all() == "second line\n");
  log_options follow;
  follow.follow = true;  // the job has ended: the follower reads it all and ends
  CHECK(c.get_job_logs("done-job", follow).read_all() == "first line\nsecond line\n");
  auto cli = tjob::test::run({tjob::test::tjob_bin(), "logs", "done-job"}, env());
  CHECK(cli.exit_code == 0);
  CHECK(cli.out == "first line\nsecond line\n");
  c.delete_job("done-job");
  CHECK_FALSE(fs::exists(h / "jobs" / "done-job"));
  // A new job's log is in its own directory, with no logs/ made for it.
  auto name = c.train(helper_job({"print", "new\n"}));
  c.wait_for_job_status(name, {job_status::complete}, 30s);
  CHECK(tjob::test::read_file(h / "jobs" / name / "node-0.log") == "new\n");
  CHECK_FALSE(fs::exists(h / "jobs" / name / "logs"));
  CHECK(c.get_job_logs(name).read_all() == "new\n");
}
