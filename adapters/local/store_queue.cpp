// The admission queue's part of the store (docs/scheduling.md): joining it,
// reading its head by the index admissions_order, the admitted jobs' sums,
// and the log's new cancels. The rest of the store is store.cpp.
#include "adapters/local/store.hpp"
#include "adapters/local/store_schema.hpp"
#include "adapters/local/store_sql.hpp"

#include <sqlite3.h>

#include <algorithm>

namespace tjob::detail {

void store::enqueue(const queue_row& row) {
  auto* s = prepare(
      "INSERT INTO admissions(job, priority, seq, cpus, memory, gpus, grp, grp_limit, admitted, since_ms) "
      "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  reset_guard g{s};
  bind_text(s, 1, row.job);
  sqlite3_bind_int(s, 2, row.priority);
  sqlite3_bind_int64(s, 3, row.seq);
  sqlite3_bind_int(s, 4, row.need.cpus);
  sqlite3_bind_int64(s, 5, static_cast<std::int64_t>(row.need.memory));
  sqlite3_bind_int(s, 6, row.need.gpus);
  bind_text(s, 7, row.group);
  sqlite3_bind_int(s, 8, row.group_limit);
  sqlite3_bind_int(s, 9, row.admitted ? 1 : 0);
  sqlite3_bind_int64(s, 10, row.since_ms);
  int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) fail(rc, "cannot queue the job");
}

std::int64_t store::next_queue_seq() {
  static const std::string sql = std::string("SELECT ") + next_event_seq_sql;
  return read_int64(sql.c_str());
}

namespace {

constexpr const char* queue_columns =
    "SELECT a.job, a.priority, a.seq, a.cpus, a.memory, a.gpus, a.grp, a.grp_limit, a.admitted, "
    "a.since_ms, j.owner_pid, j.owner_start FROM admissions a JOIN jobs j ON j.name = a.job ";
constexpr const char* queue_columns_alone =
    "SELECT a.job, a.priority, a.seq, a.cpus, a.memory, a.gpus, a.grp, a.grp_limit, a.admitted, "
    "a.since_ms, 0, 0 FROM admissions a ";

}  // namespace

std::vector<queued_job> store::load_queue() {
  std::vector<queued_job> out;
  read_queue(prepare(queue_columns), out);
  return out;
}

std::vector<queued_job> store::load_queue_head(std::size_t waiting) {
  std::vector<queued_job> out;
  static const std::string admitted = std::string(queue_columns) + "WHERE a.admitted = 1";
  static const std::string first =
      std::string(queue_columns) + "WHERE a.admitted = 0 ORDER BY a.priority DESC, a.seq LIMIT ?";
  read_queue(prepare(admitted), out);
  auto* s = prepare(first);
  sqlite3_bind_int64(s, 1, static_cast<std::int64_t>(waiting));
  read_queue(s, out);
  return out;
}

admitted_usage store::admitted_totals() {
  // One pass over the admitted part of the covering index: a row per array
  // (and one for the jobs of none), summed here.
  admitted_usage u;
  auto* s = prepare(
      "SELECT grp, count(*), total(cpus), total(memory), total(gpus) FROM admissions WHERE admitted = 1 "
      "GROUP BY grp");
  reset_guard g{s};
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const int n = sqlite3_column_int(s, 1);
    u.running += n;
    u.cpus += static_cast<int>(sqlite3_column_double(s, 2));
    u.memory += static_cast<std::uint64_t>(sqlite3_column_double(s, 3));
    u.gpus += static_cast<int>(sqlite3_column_double(s, 4));
    auto group = text_of(s, 0);
    if (!group.empty()) u.groups[std::move(group)] = n;
  }
  if (rc != SQLITE_DONE) fail(rc, "cannot read the admission queue");
  return u;
}

std::vector<queue_row> store::load_waiting(std::size_t n) {
  std::vector<queued_job> rows;
  static const std::string sql =
      std::string(queue_columns_alone) + "WHERE a.admitted = 0 ORDER BY a.priority DESC, a.seq LIMIT ?";
  auto* s = prepare(sql);
  sqlite3_bind_int64(s, 1, static_cast<std::int64_t>(n));
  read_queue(s, rows);
  std::vector<queue_row> out;
  out.reserve(rows.size());
  for (auto& q : rows) out.push_back(std::move(q.row));
  return out;
}

std::optional<std::string> store::first_waiting_from(int priority) {
  auto* s = prepare(
      "SELECT job FROM admissions WHERE admitted = 0 AND priority >= ? ORDER BY priority DESC, seq LIMIT 1");
  reset_guard g{s};
  sqlite3_bind_int(s, 1, priority);
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) return text_of(s, 0);
  if (rc != SQLITE_DONE) fail(rc, "cannot read the admission queue");
  return std::nullopt;
}

std::vector<std::string> store::cancels_after(std::int64_t& seq) {
  // Up to the log's end as it is now, so that the next read starts there
  // whether or not a cancel was found (each row is read once).
  const std::int64_t last = last_event_seq();
  auto* s = prepare("SELECT job FROM events WHERE seq > ? AND seq <= ? AND reason = ?");
  reset_guard g{s};
  sqlite3_bind_int64(s, 1, seq);
  sqlite3_bind_int64(s, 2, last);
  const std::string_view cancel = to_string(log_event::cancel_requested);
  bind_text(s, 3, cancel);
  std::vector<std::string> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) out.push_back(text_of(s, 0));
  if (rc != SQLITE_DONE) fail(rc, "cannot read events");
  seq = std::max(seq, last);
  return out;
}

std::int64_t store::data_version() { return read_int64("PRAGMA data_version"); }

std::int64_t store::last_event_seq() { return read_int64("SELECT coalesce(max(seq), 0) FROM events"); }

void store::read_queue(sqlite3_stmt* s, std::vector<queued_job>& out) {
  reset_guard g{s};
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    queued_job q;
    q.row.job = text_of(s, 0);
    q.row.priority = sqlite3_column_int(s, 1);
    q.row.seq = sqlite3_column_int64(s, 2);
    q.row.need.cpus = sqlite3_column_int(s, 3);
    q.row.need.memory = static_cast<std::uint64_t>(sqlite3_column_int64(s, 4));
    q.row.need.gpus = sqlite3_column_int(s, 5);
    q.row.group = text_of(s, 6);
    q.row.group_limit = sqlite3_column_int(s, 7);
    q.row.admitted = sqlite3_column_int(s, 8) != 0;
    q.row.since_ms = sqlite3_column_int64(s, 9);
    q.owner_pid = sqlite3_column_int64(s, 10);
    q.owner_start = static_cast<std::uint64_t>(sqlite3_column_int64(s, 11));
    out.push_back(std::move(q));
  }
  if (rc != SQLITE_DONE) fail(rc, "cannot read the admission queue");
}

void store::admit(const std::string& job) {
  run_for_job("UPDATE admissions SET admitted=1 WHERE job=?", job, "cannot admit the job");
}

}  // namespace tjob::detail
