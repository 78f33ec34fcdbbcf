#include "adapters/local/store.hpp"

#include "adapters/local/store_schema.hpp"
#include "adapters/local/store_sql.hpp"
#include "core/messages.hpp"

#include <tjob/error.hpp>

#include <fmt/format.h>
#include <sqlite3.h>

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <system_error>
#include <vector>

namespace tjob::detail {

errc classify(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return errc::store_locked;
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
    case SQLITE_SCHEMA:
      return errc::store_corrupt;
    default:
      return errc::store_unavailable;
  }
}

std::string fix_for(errc e, const std::filesystem::path& p) {
  switch (e) {
    case errc::store_locked:
      return "another process holds the lock on " + p.string() + "; wait for it or stop it, then try again";
    case errc::store_corrupt:
      return "move " + p.string() + " aside (nothing in it was changed) or point TJOB_HOME elsewhere";
    default:
      return fix_for_errno(0, p.parent_path().string());
  }
}

store::store(const std::filesystem::path& db_path, std::chrono::milliseconds busy_timeout, bool read_only,
             const std::function<void()>& before_create)
    : read_only_(read_only), path_(db_path) {
  try {
    open(busy_timeout, before_create);
  } catch (...) {
    close();  // no destructor runs for a constructor that throws
    throw;
  }
}

namespace {

// The SQLite name of a store opened read-only with no -wal beside it: a WAL
// database needs its -shm file, which a read-only directory cannot get. With
// no -wal either, the last writer checkpointed everything into the file, and
// it is read as immutable (no locks, no -shm): nothing can write through a
// read-only mount. (With a -wal, its -shm is there too, and SQLite reads them
// both read-only.)
std::string immutable_uri(const std::string& path) {
  std::string name = "file:";
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#')
      name += fmt::format("%{:02X}", static_cast<unsigned char>(c));
    else
      name += c;
  }
  return name + "?immutable=1";
}

// The schema's changes, each from the version before it to its own (1 to 2
// is the first): a store of any older version is brought up to date in order.
struct migration {
  int to;
  std::string sql;
};
std::vector<migration> migrations() {
  return {
      {2, migrate_v1_to_v2_sql()}, {3, admissions_sql()},          {4, attempts_sql()},
      {5, progress_sql()},         {6, steps_without_rowid_sql()}, {7, events_without_autoincrement_sql()}};
}

}  // namespace

void store::open(std::chrono::milliseconds busy_timeout, const std::function<void()>& before_create) {
  int flags = read_only_ ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  std::string name = path_.string();
  std::error_code ec;
  if (read_only_ && !std::filesystem::exists(path_.string() + "-wal", ec)) {
    name = immutable_uri(path_.string());
    flags |= SQLITE_OPEN_URI;
  }
  int rc = sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) fail(rc, "cannot open the store");
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, static_cast<int>(busy_timeout.count()));

  // Read the header first: a file that is not ours is reported, never touched.
  const bool ours = header_int("PRAGMA application_id") == application_id;
  if (read_only_ && (!ours || header_int("PRAGMA user_version") != schema_version))
    throw error(errc::store_unavailable,
                "store " + path_.string() + " is read-only and " +
                    (ours ? "of an older schema, which only a writable store can be migrated from"
                          : "not (yet) a tjob store") +
                    "; set TJOB_HOME to a writable directory");
  if (!ours) create_schema(before_create);
  int version = header_int("PRAGMA user_version");
  if (version >= 1 && version < schema_version) version = migrate();
  if (version != schema_version)
    throw error(errc::store_corrupt, "store " + path_.string() + " has schema version " +
                                         std::to_string(version) + ", this tjob reads version " +
                                         std::to_string(schema_version) + "; " +
                                         fix_for(errc::store_corrupt, path_));
  if (!read_only_) open_for_writing(busy_timeout);  // (the wake file is the writers')
}

int store::header_int(const char* sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql, -1, &s, nullptr);
  if (rc != SQLITE_OK) fail(rc, "cannot read the store");
  rc = sqlite3_step(s);
  int v = rc == SQLITE_ROW ? sqlite3_column_int(s, 0) : 0;
  sqlite3_finalize(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) fail(rc, "cannot read the store");
  return v;
}

// Several processes may find the file new at once: the check and the schema
// are one write transaction, so exactly one of them creates it.
void store::create_schema(const std::function<void()>& before_create) {
  begin();
  try {
    int app = header_int("PRAGMA application_id");
    if (app != application_id) {
      if (app != 0 || header_int("SELECT count(*) FROM sqlite_master") != 0)
        throw error(errc::store_corrupt, "store " + path_.string() +
                                             " is not a tjob store (it holds other data); " +
                                             fix_for(errc::store_corrupt, path_));
      if (before_create) before_create();
      exec(schema_sql());
      for (const auto& m : migrations())
        if (m.to > 2) exec(m.sql.c_str());  // (schema_sql has version 2's columns already)
      exec(("PRAGMA application_id=" + std::to_string(application_id)).c_str());
      exec(("PRAGMA user_version=" + std::to_string(schema_version)).c_str());
    }
    commit();
  } catch (...) {
    rollback();
    throw;
  }
}

// Migrated in one write transaction; another process may have done it
// meanwhile, so the version is read again inside it. Returns the version now.
int store::migrate() {
  begin();
  try {
    int version = header_int("PRAGMA user_version");
    for (const auto& m : migrations())
      if (version == m.to - 1) {
        exec(m.sql.c_str());
        version = m.to;
      }
    exec(("PRAGMA user_version=" + std::to_string(version)).c_str());
    commit();
    return version;
  } catch (...) {
    rollback();
    throw;
  }
}

void store::open_for_writing(std::chrono::milliseconds busy_timeout) {
  switch_to_wal(busy_timeout);
  exec("PRAGMA synchronous=NORMAL");
  exec("PRAGMA foreign_keys=ON");
  // Replaces SQLite's own checkpoint-on-commit (see on_wal_full).
  sqlite3_wal_hook(
      db_,
      [](void* self, sqlite3*, const char*, int pages) {
        static_cast<store*>(self)->wal_pages_ = pages;
        return SQLITE_OK;
      },
      this);
  auto wake = wake_path(path_);
  wake_fd_ = ::open(wake.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (wake_fd_ < 0)
    throw error(errc::store_unavailable, "cannot open " + wake.string() + ": " + std::strerror(errno) + "; " +
                                             fix_for(errc::store_unavailable, path_));
}

void store::switch_to_wal(std::chrono::milliseconds busy_timeout) {
  // The switch of a new file out of its rollback journal needs the exclusive
  // lock. When two openers make it at once, each holding the read lock the
  // other must see go, SQLite refuses one of them at once rather than call its
  // busy handler (which could only deadlock). The refused one lets go of its
  // lock by failing, so trying again, until the busy timeout, is safe; once the
  // file is in WAL mode the switch is a no-op that cannot be refused this way.
  const auto deadline = std::chrono::steady_clock::now() + busy_timeout;
  for (int attempt = 0;; ++attempt) {
    int rc = sqlite3_exec(db_, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    if ((rc & 0xff) != SQLITE_BUSY || std::chrono::steady_clock::now() >= deadline)
      fail(rc, "cannot switch the store to WAL mode");
    sqlite3_sleep(1 + attempt % 8);
  }
}

store::~store() { close(); }

void store::close() noexcept {
  for (auto& [sql, s] : cache_) sqlite3_finalize(s);
  cache_.clear();
  if (db_) sqlite3_close_v2(db_);  // also a handle whose open failed
  db_ = nullptr;
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
}

std::filesystem::path store::wake_path(const std::filesystem::path& db_path) {
  return std::filesystem::path(db_path.string() + "-wake");
}

void store::fail(int rc, std::string_view what) {
  errc e = classify(rc);
  std::string peer = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  // The cause first: SQLite's code, else the system's errno behind an I/O error.
  int cause = (rc & 0xff) == SQLITE_FULL    ? ENOSPC
              : (rc & 0xff) == SQLITE_NOMEM ? ENOMEM
              : db_                         ? sqlite3_system_errno(db_)
                                            : 0;
  std::string fix =
      e == errc::store_unavailable ? fix_for_errno(cause, path_.parent_path().string()) : fix_for(e, path_);
  throw error(e, "store " + path_.string() + ": " + std::string(what) + " (" + peer + "); " + fix, peer);
}

void store::exec(const char* sql) {
  char* msg = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &msg);
  if (msg) sqlite3_free(msg);
  if (rc != SQLITE_OK) fail(rc, "write failed");
}

sqlite3_stmt* store::prepare(std::string_view sql) {
  for (auto& [text, s] : cache_)
    if (text == sql) return s;
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &s,
                              nullptr);
  if (rc != SQLITE_OK) fail(rc, "cannot prepare a statement");
  cache_.emplace_back(std::string(sql), s);
  return s;
}

// BEGIN and COMMIT as cached statements: sqlite3_exec compiled each one
// again, 4 % of the reactor's time with jobs one at a time (perf).
void store::step_cached(const char* sql) {
  auto* s = prepare(sql);
  reset_guard g{s};
  if (int rc = sqlite3_step(s); rc != SQLITE_DONE) fail(rc, "write failed");
}

void store::begin() { step_cached("BEGIN IMMEDIATE"); }

void store::commit() {
  wal_pages_ = 0;
  step_cached("COMMIT");
  // A checkpoint that runs while this connection writes cannot copy what it
  // writes meanwhile, so the WAL starts over only when one has caught up:
  // ask again each time it has grown by checkpoint_pages, not on every commit.
  if (wal_pages_ < next_checkpoint_ - checkpoint_pages) next_checkpoint_ = checkpoint_pages;  // started over
  if (wal_pages_ >= next_checkpoint_) {
    if (on_wal_full && wal_pages_ < 8 * checkpoint_pages) {
      next_checkpoint_ = wal_pages_ + checkpoint_pages;
      on_wal_full();
    } else {
      sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    }
  }
  // A commit reaches the WAL file first and becomes visible only when the
  // shared-memory index is updated, which no inotify watch sees. A process woken
  // by the WAL write may read before that and then wait with nothing more to
  // come. One byte written after COMMIT returns is a change it cannot miss.
  if (wake_fd_ >= 0) {
    while (::pwrite(wake_fd_, "w", 1, 0) < 0 && errno == EINTR) {
    }
  }
}
wal_checkpointer::~wal_checkpointer() {
  if (db_) sqlite3_close_v2(db_);
}

std::string wal_checkpointer::run() noexcept {
  if (!db_) {
    // No SQLITE_OPEN_CREATE: the store made the file; a missing one is not ours to make.
    int rc = sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      std::string why = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
      sqlite3_close_v2(db_);
      db_ = nullptr;
      return "cannot open " + path_.string() + " to checkpoint it: " + why;
    }
    // This connection never writes: its own checkpoint-on-commit stays off.
    sqlite3_wal_autocheckpoint(db_, 0);
  }
  // A connection sees the WAL only once it has read the database: until
  // then a checkpoint through it does nothing and says it succeeded.
  if (int rc = sqlite3_exec(db_, "PRAGMA schema_version", nullptr, nullptr, nullptr); rc != SQLITE_OK)
    return "cannot read " + path_.string() + " to checkpoint it: " + sqlite3_errmsg(db_);
  int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
  if (rc != SQLITE_OK && rc != SQLITE_BUSY)
    return "checkpoint of " + path_.string() + ": " + sqlite3_errmsg(db_);
  return {};
}

void store::rollback() noexcept { sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr); }

bool store::insert_job(const job_row& job) {
  auto* s = prepare(
      "INSERT INTO jobs(name, runtime, num_nodes, created_ms, spec, status, reason, owner_pid, "
      "owner_start, array) VALUES(?,?,?,?,?,?,?,?,?,?)");
  {
    reset_guard g{s};
    bind_text(s, 1, job.name);
    bind_text(s, 2, job.runtime);
    sqlite3_bind_int(s, 3, job.num_nodes);
    sqlite3_bind_int64(s, 4, job.created_ms);
    bind_text(s, 5, job.spec);
    bind_text(s, 6, to_string(job.status));
    bind_text(s, 7, job.reason);
    sqlite3_bind_int64(s, 8, job.owner_pid);
    sqlite3_bind_int64(s, 9, static_cast<std::int64_t>(job.owner_start));
    bind_text(s, 10, job.array);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_CONSTRAINT_PRIMARYKEY) return false;
    if (rc != SQLITE_DONE) fail(rc, "cannot record the job");
  }
  auto* st = prepare(
      "INSERT INTO steps(job, name, status, exit_code, reason, pid, pid_start, attempt) "
      "VALUES(?,?,?,?,?,?,?,?)");
  for (const auto& step : job.steps) {
    reset_guard g{st};
    bind_text(st, 1, job.name);
    bind_text(st, 2, step.name);
    bind_text(st, 3, to_string(step.status));
    if (step.exit_code) sqlite3_bind_int(st, 4, *step.exit_code);
    bind_text(st, 5, step.reason);
    sqlite3_bind_int64(st, 6, step.pid);
    sqlite3_bind_int64(st, 7, static_cast<std::int64_t>(step.pid_start));
    sqlite3_bind_int(st, 8, step.attempt);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) fail(rc, "cannot record the job's steps");
  }
  return true;
}

void store::update_step(const std::string& job, const step_row& step) {
  auto* s = prepare(
      "UPDATE steps SET status=?, exit_code=?, reason=?, pid=?, pid_start=?, attempt=? WHERE job=? AND "
      "name=?");
  reset_guard g{s};
  bind_text(s, 1, to_string(step.status));
  if (step.exit_code) sqlite3_bind_int(s, 2, *step.exit_code);
  bind_text(s, 3, step.reason);
  sqlite3_bind_int64(s, 4, step.pid);
  sqlite3_bind_int64(s, 5, static_cast<std::int64_t>(step.pid_start));
  sqlite3_bind_int(s, 6, step.attempt);
  bind_text(s, 7, job);
  bind_text(s, 8, step.name);
  int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) fail(rc, "cannot update a step");
}

void store::update_job_status(const std::string& job, job_status status, const std::string& reason) {
  auto* s = prepare("UPDATE jobs SET status=?, reason=? WHERE name=?");
  reset_guard g{s};
  bind_text(s, 1, to_string(status));
  bind_text(s, 2, reason);
  bind_text(s, 3, job);
  int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) fail(rc, "cannot update a job");
  if (is_terminal(status)) {
    // An ended job holds nothing: its place in the queue goes with its end.
    auto* d = prepare("DELETE FROM admissions WHERE job=?");
    reset_guard dg{d};
    bind_text(d, 1, job);
    rc = sqlite3_step(d);
    if (rc != SQLITE_DONE) fail(rc, "cannot release the job's admission");
  }
}

void store::append_event(const std::string& job, const std::string& step, std::int64_t time_ms,
                         log_event what, const std::string& message, std::optional<int> exit_code,
                         std::string_view detail) {
  const std::string_view reason = to_string(what);
  static const std::string sql =
      std::string("INSERT INTO events(seq, job, step, time_ms, reason, message, exit_code, detail) VALUES(") +
      next_event_seq_sql + ",?,?,?,?,?,?,?)";
  auto* s = prepare(sql);
  reset_guard g{s};
  bind_text(s, 1, job);
  bind_text(s, 2, step);
  sqlite3_bind_int64(s, 3, time_ms);
  bind_text(s, 4, reason);
  bind_text(s, 5, message);
  if (exit_code)
    sqlite3_bind_int(s, 6, *exit_code);
  else
    sqlite3_bind_null(s, 6);
  bind_text(s, 7, detail);
  int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) fail(rc, "cannot append an event");
}

bool store::record_progress(const std::string& job, std::int64_t time_ms, const std::string& data,
                            const std::string& message, bool event) {
  auto* s =
      prepare("UPDATE jobs SET progress=?, progress_ms=? WHERE name=? AND status IN ('Created','Running')");
  {
    reset_guard g{s};
    bind_text(s, 1, data);
    sqlite3_bind_int64(s, 2, time_ms);
    bind_text(s, 3, job);
    int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) fail(rc, "cannot record the job's progress");
  }
  if (sqlite3_changes(db_) != 1) return false;
  if (event) append_event(job, "", time_ms, log_event::progress, message, std::nullopt, data);
  return true;
}

void store::delete_job(const std::string& job) {
  // Its events go with it (the foreign key): the highest seq given so far is
  // kept first, so that no seq is given twice (event_seq).
  step_cached("UPDATE event_seq SET hwm = max(hwm, coalesce((SELECT max(seq) FROM events), 0))");
  run_for_job("DELETE FROM jobs WHERE name=?", job, "cannot delete the job");
}

std::optional<std::vector<std::string>> store::lease_devices(const std::string& job,
                                                             const std::vector<std::string>& devices,
                                                             std::size_t n) {
  step_cached(
      "DELETE FROM device_leases WHERE job NOT IN "
      "(SELECT name FROM jobs WHERE status IN ('Created','Running'))");
  std::vector<std::string> leased;
  {
    auto* s = prepare("SELECT device FROM device_leases");
    reset_guard g{s};
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) leased.push_back(text_of(s, 0));
    if (rc != SQLITE_DONE) fail(rc, "cannot read device leases");
  }
  std::vector<std::string> got;
  for (const auto& d : devices) {
    if (got.size() == n) break;
    if (std::find(leased.begin(), leased.end(), d) == leased.end()) got.push_back(d);
  }
  if (got.size() < n) return std::nullopt;
  auto* ins = prepare("INSERT INTO device_leases(device, job) VALUES(?,?)");
  for (const auto& d : got) {
    reset_guard g{ins};
    bind_text(ins, 1, d);
    bind_text(ins, 2, job);
    int rc = sqlite3_step(ins);
    if (rc != SQLITE_DONE) fail(rc, "cannot lease a device");
  }
  return got;
}

void store::release_devices(const std::string& job) {
  run_for_job("DELETE FROM device_leases WHERE job=?", job, "cannot release devices");
}

void store::run_for_job(const char* sql, const std::string& job, std::string_view what) {
  auto* s = prepare(sql);
  reset_guard g{s};
  bind_text(s, 1, job);
  int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) fail(rc, what);
}

std::int64_t store::read_int64(const char* sql) {
  auto* s = prepare(sql);
  reset_guard g{s};
  int rc = sqlite3_step(s);
  if (rc != SQLITE_ROW) fail(rc, "cannot read the store");
  return sqlite3_column_int64(s, 0);
}

}  // namespace tjob::detail
