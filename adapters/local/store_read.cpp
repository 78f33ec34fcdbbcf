// The store's reads: jobs with their steps and times, a job's event log and
// its fold (store.hpp).
#include "adapters/local/store.hpp"

#include "adapters/local/store_schema.hpp"
#include "adapters/local/store_sql.hpp"

#include <sqlite3.h>

namespace tjob::detail {

namespace {

job_status status_of(const unsigned char* text) {
  if (!text) return job_status::failed;
  return parse_job_status(reinterpret_cast<const char*>(text)).value_or(job_status::failed);
}

}  // namespace

// The statements of one read see one commit: outside a transaction each
// statement is its own, and a commit between two of them (a job's row, then
// its steps) gave a job Running whose steps had all ended. Inside the
// caller's transaction, that one holds.
class store::read_snapshot {
 public:
  explicit read_snapshot(store& s) : s_(s), mine_(sqlite3_get_autocommit(s.db_) != 0) {
    if (mine_) s_.step_cached("BEGIN");
  }
  read_snapshot(const read_snapshot&) = delete;
  read_snapshot& operator=(const read_snapshot&) = delete;
  ~read_snapshot() {
    if (!mine_) return;
    try {
      s_.step_cached("COMMIT");  // of a read: gives up the snapshot, cannot fail for want of a lock
    } catch (const error&) {
      s_.rollback();
    }
  }

 private:
  store& s_;
  bool mine_;
};

namespace {

// A step from the columns name, status, exit_code, reason, pid, pid_start, attempt at `first`.
step_row step_of(sqlite3_stmt* s, int first) {
  step_row st;
  st.name = text_of(s, first);
  st.status = status_of(sqlite3_column_text(s, first + 1));
  if (sqlite3_column_type(s, first + 2) != SQLITE_NULL) st.exit_code = sqlite3_column_int(s, first + 2);
  st.reason = text_of(s, first + 3);
  st.pid = sqlite3_column_int64(s, first + 4);
  st.pid_start = static_cast<std::uint64_t>(sqlite3_column_int64(s, first + 5));
  st.attempt = sqlite3_column_int(s, first + 6);
  return st;
}

}  // namespace

void store::load_steps(job_row& job) {
  auto* s = prepare(
      "SELECT name, status, exit_code, reason, pid, pid_start, attempt FROM steps WHERE job=? ORDER BY "
      "length(name), name");
  reset_guard g{s};
  bind_text(s, 1, job.name);
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) job.steps.push_back(step_of(s, 0));
  if (rc != SQLITE_DONE) fail(rc, "cannot read steps");
}

namespace {

// A job's start and end times, from its log: its first Started event, and,
// once it has ended, its last event that ends a step (each an index lookup
// on events_by_job).
std::string times_sql() {
  return ", (SELECT min(e.time_ms) FROM events e WHERE e.job = jobs.name AND e.reason = '" +
         std::string(to_string(log_event::started)) +
         "'), CASE WHEN status IN ('Complete', 'Failed') THEN (SELECT max(e.time_ms) FROM events e "
         "WHERE e.job = jobs.name AND e.step <> '' AND e.reason IN (" +
         transitions_sql(true) + ")) END ";
}

}  // namespace

std::vector<job_row> store::load_where(const char* where_sql, const std::string* arg) {
  static const std::string times = times_sql();
  // (a list leaves each job's spec, its whole request, unread: nothing listed needs it)
  std::string sql = std::string("SELECT name, runtime, num_nodes, created_ms, ") + (arg ? "spec" : "''") +
                    ", status, reason, owner_pid, owner_start, array, progress, progress_ms" + times +
                    "FROM jobs ";
  sql += where_sql;
  sql += " ORDER BY created_ms, name";
  auto* s = prepare(sql);
  read_snapshot one_commit(*this);
  std::vector<job_row> out;
  {
    reset_guard g{s};
    if (arg) bind_text(s, 1, *arg);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      job_row j;
      j.name = text_of(s, 0);
      j.runtime = text_of(s, 1);
      j.num_nodes = sqlite3_column_int(s, 2);
      j.created_ms = sqlite3_column_int64(s, 3);
      j.spec = text_of(s, 4);
      j.status = status_of(sqlite3_column_text(s, 5));
      j.reason = text_of(s, 6);
      j.owner_pid = sqlite3_column_int64(s, 7);
      j.owner_start = static_cast<std::uint64_t>(sqlite3_column_int64(s, 8));
      j.array = text_of(s, 9);
      j.progress = text_of(s, 10);
      j.progress_ms = sqlite3_column_int64(s, 11);
      j.started_ms = sqlite3_column_int64(s, 12);  // NULL reads as 0
      j.ended_ms = sqlite3_column_int64(s, 13);
      out.push_back(std::move(j));
    }
    if (rc != SQLITE_DONE) fail(rc, "cannot read jobs");
  }
  if (arg) {
    for (auto& j : out) load_steps(j);
    return out;
  }
  // Many jobs: their steps in one statement, not one per job (a list of
  // thousands of jobs was thousands of statements, each taking the lock).
  std::map<std::string_view, job_row*> by_name;
  for (auto& j : out) by_name.emplace(j.name, &j);
  auto* st = prepare(std::string("SELECT job, name, status, exit_code, reason, pid, pid_start, attempt FROM "
                                 "steps WHERE job IN (SELECT "
                                 "name FROM jobs ") +
                     where_sql + ") ORDER BY job, length(name), name");
  reset_guard g{st};
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    auto it = by_name.find(text_of(st, 0));
    if (it == by_name.end()) continue;  // a job written after the first statement read the jobs
    it->second->steps.push_back(step_of(st, 1));
  }
  if (rc != SQLITE_DONE) fail(rc, "cannot read steps");
  return out;
}

std::optional<job_row> store::load_job(const std::string& name) {
  auto rows = load_where("WHERE name=?", &name);
  if (rows.empty()) return std::nullopt;
  return std::move(rows.front());
}

std::vector<job_row> store::load_jobs() { return load_where("", nullptr); }

std::vector<job_row> store::load_unfinished() {
  return load_where("WHERE status IN ('Created','Running')", nullptr);
}

std::vector<event_row> store::load_events(const std::string& job) {
  auto* s = prepare(
      "SELECT seq, step, time_ms, reason, message, exit_code, detail FROM events WHERE job=? ORDER BY seq");
  reset_guard g{s};
  bind_text(s, 1, job);
  std::vector<event_row> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    event_row e;
    e.seq = sqlite3_column_int64(s, 0);
    e.job = job;
    e.step = text_of(s, 1);
    e.time_ms = sqlite3_column_int64(s, 2);
    e.reason = text_of(s, 3);
    e.message = text_of(s, 4);
    if (sqlite3_column_type(s, 5) != SQLITE_NULL) e.exit_code = sqlite3_column_int(s, 5);
    e.detail = text_of(s, 6);
    out.push_back(std::move(e));
  }
  if (rc != SQLITE_DONE) fail(rc, "cannot read events");
  return out;
}

folded_job store::fold_log(const job_row& job) {
  std::vector<std::string> names;
  for (const auto& st : job.steps) names.push_back(st.name);
  folded_job state = initial_state(names);
  for (const auto& e : load_events(job.name)) {
    // A name this tjob does not know (a newer one wrote it) changes nothing.
    auto what = parse_log_event(e.reason);
    if (!what) continue;
    fold_event(state, logged_event{e.step, *what, e.exit_code, e.detail});
  }
  return state;
}

bool store::has_event(const std::string& job, log_event what) {
  const std::string_view reason = to_string(what);
  auto* s = prepare("SELECT 1 FROM events WHERE job=? AND reason=? LIMIT 1");
  reset_guard g{s};
  bind_text(s, 1, job);
  bind_text(s, 2, reason);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) return true;
  if (rc != SQLITE_DONE) fail(rc, "cannot read events");
  return false;
}

}  // namespace tjob::detail
