// The durable store of the embedded default: SQLite in WAL mode under
// $TJOB_HOME. Jobs, steps and the append-only event log; the status columns
// are the fold of the event log, written in the same transaction as the event
// that changed them.
//
// Threading: one store per engine, used on the reactor thread only. Any number
// of processes may open the same file; SQLite's locks order their writes.
// Errors: throws tjob::error (store_unavailable, store_corrupt, store_locked).
#pragma once

#include <tjob/status.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace tjob::detail {

struct step_row {
  std::string name;
  job_status status = job_status::created;
  std::optional<int> exit_code;
  std::string reason;
  std::int64_t pid = 0;
  std::uint64_t pid_start = 0;
};

struct job_row {
  std::string name;
  std::string runtime;
  int num_nodes = 1;
  std::int64_t created_ms = 0;
  std::string spec;  ///< the request as JSON
  job_status status = job_status::created;
  std::string reason;
  std::int64_t owner_pid = 0;
  std::uint64_t owner_start = 0;
  std::vector<step_row> steps;
};

struct event_row {
  std::int64_t seq = 0;
  std::string job;
  std::string step;
  std::int64_t time_ms = 0;
  std::string reason;
  std::string message;
};

class store {
 public:
  store(const std::filesystem::path& db_path, std::chrono::milliseconds busy_timeout);
  store(const store&) = delete;
  store& operator=(const store&) = delete;
  ~store();

  const std::filesystem::path& path() const noexcept { return path_; }

  void begin();             ///< BEGIN IMMEDIATE (waits up to the busy timeout)
  /// COMMIT, then a write to wake_path(): readers watching the directory are
  /// woken once the commit is visible to them.
  void commit();
  static std::filesystem::path wake_path(const std::filesystem::path& db_path);
  void rollback() noexcept;

  bool insert_job(const job_row& job);  ///< false when the name is taken
  void update_step(const std::string& job, const step_row& step);
  void update_job_status(const std::string& job, job_status status, const std::string& reason);
  void append_event(const std::string& job, const std::string& step, std::int64_t time_ms,
                    std::string_view reason, const std::string& message);
  void delete_job(const std::string& job);

  std::optional<job_row> load_job(const std::string& name);
  std::vector<job_row> load_jobs();
  std::vector<job_row> load_unfinished();
  std::vector<event_row> load_events(const std::string& job);
  bool has_event(const std::string& job, std::string_view reason);

  /// Leases `n` of `devices` to `job` (leases of ended or vanished jobs are
  /// dropped first); nullopt when fewer than `n` are free. In a transaction.
  std::optional<std::vector<std::string>> lease_devices(const std::string& job,
                                                        const std::vector<std::string>& devices,
                                                        std::size_t n);
  void release_devices(const std::string& job);

 private:
  struct stmt;
  void open(std::chrono::milliseconds busy_timeout);
  void close() noexcept;
  sqlite3_stmt* prepare(std::string_view sql);
  void exec(const char* sql);
  [[noreturn]] void fail(int rc, std::string_view what);
  std::vector<job_row> load_where(const char* where_sql, const std::string* arg);
  void load_steps(job_row& job);

  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
  int wake_fd_ = -1;
  std::vector<std::pair<std::string, sqlite3_stmt*>> cache_;
};

}  // namespace tjob::detail
