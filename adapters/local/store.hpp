// The durable store of the embedded default: SQLite in WAL mode under
// $TJOB_HOME. Jobs, steps and the append-only event log; the status columns
// are a cache of the fold of the event log (fold_log), written in the same
// transaction as the event that changed them.
//
// Threading: one store per engine, used on the reactor thread only. Any number
// of processes may open the same file; SQLite's locks order their writes.
// Errors: throws tjob::error (store_unavailable, store_corrupt, store_locked).
#pragma once

#include <tjob/status.hpp>

#include "core/admission.hpp"
#include "core/job_state.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
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
  int attempt = 1;  ///< 1 + the step's Restarting events (train_request::retry)
};

struct job_row {
  std::string name;
  std::string runtime;
  int num_nodes = 1;
  std::int64_t created_ms = 0;
  std::string spec;   ///< the request as JSON
  std::string array;  ///< the job array it belongs to; empty: none
  job_status status = job_status::created;
  std::string reason;
  std::int64_t owner_pid = 0;
  std::uint64_t owner_start = 0;
  std::vector<step_row> steps;
  std::int64_t started_ms = 0;   ///< its first Started event; 0: none
  std::int64_t ended_ms = 0;     ///< its last step-ending event, once the job has ended; 0: none
  std::string progress;          ///< its latest reported progress (detail::progress_json); empty: none
  std::int64_t progress_ms = 0;  ///< when it was reported
};

struct event_row {
  std::int64_t seq = 0;
  std::string job;
  std::string step;
  std::int64_t time_ms = 0;
  std::string reason;
  std::string message;
  std::optional<int> exit_code;  ///< the step's, when its process ended
  std::string detail;            ///< the step's reason, on the event that failed it
};

/// A row of the admission queue with its job's owner (whose death frees it).
struct queued_job {
  queue_row row;
  std::int64_t owner_pid = 0;
  std::uint64_t owner_start = 0;
};

class store {
 public:
  /// Opens (and if new, makes) the store. `read_only`: an existing store on a
  /// read-only filesystem (or one this user may only read) is opened for
  /// reading; nothing is created, migrated or written, and a write fails.
  /// `before_create` runs inside the transaction that would make a new
  /// store's schema (an empty or absent file): what it throws refuses the
  /// store, and the file is left as it was.
  store(const std::filesystem::path& db_path, std::chrono::milliseconds busy_timeout, bool read_only = false,
        const std::function<void()>& before_create = {});
  store(const store&) = delete;
  store& operator=(const store&) = delete;
  ~store();

  const std::filesystem::path& path() const noexcept { return path_; }
  bool read_only() const noexcept { return read_only_; }

  /// Checkpointing the WAL (copying its pages into the database file, with
  /// an fdatasync of each) takes milliseconds; SQLite would do it inside the
  /// commit that fills the WAL to 1,000 pages, on the reactor thread. Instead,
  /// when set, this runs after a commit that leaves `checkpoint_pages` or
  /// more in the WAL (then each time it has grown by as much again), and its
  /// owner checkpoints on another thread (wal_checkpointer). Unset, or past 8x
  /// that (a checkpointer that cannot keep up), the commit checkpoints
  /// itself, as SQLite would.
  std::function<void()> on_wal_full;
  static constexpr int checkpoint_pages = 1000;

  void begin();  ///< BEGIN IMMEDIATE (waits up to the busy timeout)
  /// COMMIT, then a write to wake_path(): readers watching the directory are
  /// woken once the commit is visible to them.
  void commit();
  static std::filesystem::path wake_path(const std::filesystem::path& db_path);

  /// SQLite's integrity_check of the store at `db_path` (every page, and
  /// every index against its table), at most 100 problems, on a connection
  /// of its own: any thread may run it beside the store's users. `repair`:
  /// when there are problems, the indexes are rebuilt from the tables
  /// (REINDEX, one transaction) and the file is checked again.
  struct integrity {
    std::vector<std::string> problems;  ///< empty: sound; after a failed repair, what is left
    bool repaired = false;              ///< `problems` were all mended by the rebuild
  };
  static integrity check_file(const std::filesystem::path& db_path, bool repair,
                              std::chrono::milliseconds busy_timeout);
  void rollback() noexcept;

  bool insert_job(const job_row& job);  ///< false when the name is taken
  void update_step(const std::string& job, const step_row& step);
  void update_job_status(const std::string& job, job_status status, const std::string& reason);
  /// Appends to the job's event log; `exit_code` and `detail` (the step's
  /// reason) go with a transition, so the log alone gives the job's state.
  void append_event(const std::string& job, const std::string& step, std::int64_t time_ms, log_event what,
                    const std::string& message, std::optional<int> exit_code = std::nullopt,
                    std::string_view detail = {});
  void delete_job(const std::string& job);
  /// What the job's training code reported (`data`, detail::progress_json)
  /// becomes its latest progress and, when `event`, a Progress event (the
  /// data as its detail). False, and nothing written, when the job has
  /// ended or is not in the store.
  bool record_progress(const std::string& job, std::int64_t time_ms, const std::string& data,
                       const std::string& message, bool event);

  std::optional<job_row> load_job(const std::string& name);
  /// Every job (oldest first) with its steps, in two statements; `spec` is
  /// left empty (load_job reads it).
  std::vector<job_row> load_jobs();
  /// Those not ended, as load_jobs.
  std::vector<job_row> load_unfinished();
  std::vector<event_row> load_events(const std::string& job);
  bool has_event(const std::string& job, log_event what);
  /// The job's state as its event log says (the steps named in `job`).
  folded_job fold_log(const job_row& job);

  /// Leases `n` of `devices` to `job` (leases of ended or vanished jobs are
  /// dropped first); nullopt when fewer than `n` are free. In a transaction.
  std::optional<std::vector<std::string>> lease_devices(const std::string& job,
                                                        const std::vector<std::string>& devices,
                                                        std::size_t n);
  void release_devices(const std::string& job);

  /// Puts the job in the admission queue (admitted, or waiting) with its
  /// `seq` (next_queue_seq). It leaves the queue when its status ends
  /// (update_job_status) or it is deleted.
  void enqueue(const queue_row& row);
  /// A submission number for a job joining the queue now, after every job
  /// already in it: the seq the event log's next event will get (one read of
  /// a one-row table, where max(seq) would scan the queue). Two jobs that
  /// join in one transaction must have an event appended between them (each
  /// job's Created, Queued or Admitted event is).
  std::int64_t next_queue_seq();
  /// Every job in the queue, waiting or admitted.
  std::vector<queued_job> load_queue();
  /// The admitted jobs and the first `waiting` waiting ones, in queue order
  /// (the index admissions_order), with their owners: what the admitter's
  /// look reads.
  std::vector<queued_job> load_queue_head(std::size_t waiting);
  /// What the admitted jobs hold together (sums over the covering index).
  admitted_usage admitted_totals();
  /// The first `n` waiting jobs in queue order (owner fields 0).
  std::vector<queue_row> load_waiting(std::size_t n);
  /// The first waiting job in queue order whose priority is `priority` or
  /// higher (one index seek); nullopt when none waits there.
  std::optional<std::string> first_waiting_from(int priority);
  void admit(const std::string& job);
  /// The jobs with a CancelRequested event after `seq`, and the last seq
  /// read (`seq` itself when there is nothing new): what the admitter checks
  /// for cancels of its waiting jobs, reading only the log's new rows.
  std::vector<std::string> cancels_after(std::int64_t& seq);
  /// The log's last seq (0 when empty).
  std::int64_t last_event_seq();
  /// SQLite's data_version: it changes when another connection commits, not
  /// when this one does.
  std::int64_t data_version();

 private:
  struct stmt;
  class read_snapshot;
  void open(std::chrono::milliseconds busy_timeout, const std::function<void()>& before_create);
  /// A number the header or the catalogue answers (0 when no row), read
  /// before the store is known to be ours (no prepared-statement cache).
  int header_int(const char* sql);
  void create_schema(const std::function<void()>& before_create);
  int migrate();
  void open_for_writing(std::chrono::milliseconds busy_timeout);
  void switch_to_wal(std::chrono::milliseconds busy_timeout);
  void close() noexcept;
  sqlite3_stmt* prepare(std::string_view sql);
  void exec(const char* sql);
  /// One statement without rows, prepared once (not compiled again per call as exec is).
  void step_cached(const char* sql);
  [[noreturn]] void fail(int rc, std::string_view what);
  std::vector<job_row> load_where(const char* where_sql, const std::string* arg);
  void load_steps(job_row& job);
  std::int64_t read_int64(const char* sql);
  /// Runs `sql`, whose one parameter is a job's name, to its end; `what`
  /// words a failure ("cannot admit the job").
  void run_for_job(const char* sql, const std::string& job, std::string_view what);
  void read_queue(sqlite3_stmt* s, std::vector<queued_job>& out);

  bool read_only_ = false;
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
  int wake_fd_ = -1;
  int wal_pages_ = 0;                       ///< in the WAL after this connection's last commit
  int next_checkpoint_ = checkpoint_pages;  ///< WAL pages at which on_wal_full is next called
  std::vector<std::pair<std::string, sqlite3_stmt*>> cache_;
};

/// A connection of its own that checkpoints a store's WAL, for a thread
/// other than the store's: PASSIVE, so it never waits for or blocks the
/// store's readers and writers (what it cannot copy yet, the next one does).
/// Opened on first use; used by one thread at a time.
class wal_checkpointer {
 public:
  explicit wal_checkpointer(std::filesystem::path db_path) : path_(std::move(db_path)) {}
  wal_checkpointer(const wal_checkpointer&) = delete;
  wal_checkpointer& operator=(const wal_checkpointer&) = delete;
  ~wal_checkpointer();

  /// Empty when done; else why not (the next call tries again).
  std::string run() noexcept;

 private:
  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
};

}  // namespace tjob::detail
