// tjob/engine.hpp — the asynchronous engine: TrainJobs as awaitable operations.
//
// Threading: the engine lives on one executor and owns all of its state there.
//   Run that executor's io_context on one thread (the engine is a reactor, not
//   a thread pool) and co_await the operations from coroutines on it.
// Cancellation: `cancel_job` is graded: SIGTERM to the job's whole process
//   group, SIGKILL after `grace_period`. Shutting the engine down is not
//   cancelling its jobs: `shutdown()` stops supervising; a job still running
//   is later found by any engine on the same $TJOB_HOME and marked Failed with
//   reason `lost` (its process group is then killed).
// Errors: operations throw tjob::error (see error.hpp). The constructor throws
//   when $TJOB_HOME cannot be created or the store cannot be opened.
// Lifetime: co_await `shutdown()` before destroying the engine, and destroy it
//   before its io_context; every operation started must have completed.
#pragma once

#include <tjob/backends.hpp>
#include <tjob/error.hpp>
#include <tjob/types.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace tjob {

struct engine_config {
  /// Where the store, logs and work dirs live. Empty: $TJOB_HOME, else
  /// ${XDG_STATE_HOME:-$HOME/.local/state}/tjob.
  std::filesystem::path home;
  /// Time between SIGTERM and SIGKILL when a job is cancelled or deleted.
  std::chrono::milliseconds grace_period{10'000};
  /// How long a store write waits for another process's lock.
  std::chrono::milliseconds store_busy_timeout{5'000};
  /// How long a wait on one of this engine's own jobs goes on while the store
  /// cannot be written (a full disk): past it, the wait fails with
  /// store_unavailable saying why and what becomes of the job's record. The
  /// writes are kept and retried, with back-off, for as long as the engine
  /// runs (a detached supervisor records the job's end once space returns).
  std::chrono::milliseconds store_failing_limit{30'000};
  /// Directories of runtime manifests (ClusterTrainingRuntime YAML) that
  /// override the built-in runtimes by name, later ones winning. Empty:
  /// $TJOB_HOME/runtimes.
  std::vector<std::filesystem::path> runtime_dirs;
  /// Remove a Python job's venv when the job ends, whatever its outcome
  /// (Kubeflow's LocalProcessBackendConfig.cleanup_venv; a trainer's
  /// keep_venv overrides it for one job).
  bool cleanup_venv = true;
  /// Build each distinct venv of Python jobs once (per interpreter, merged
  /// package list, index URLs and system-site-packages flag) under
  /// $TJOB_HOME/cache/venvs and give every job a copy of it, so a second job
  /// with the same packages starts without venv or pip. An entry with a
  /// requirement that is not pinned to one version (`numpy`, `numpy>=2`) is
  /// rebuilt once it is older than venv_cache_unpinned_ttl, and a trainer's
  /// refresh_venv rebuilds it at once. False: Kubeflow's way, a fresh venv
  /// and pip install in every job.
  bool venv_cache = true;
  /// How long a cached venv with an unpinned requirement is used before it
  /// is rebuilt (so a newer release reaches new jobs); zero: forever. An
  /// entry of pinned requirements only (`numpy==2.1.0`) never expires.
  std::chrono::seconds venv_cache_unpinned_ttl{std::chrono::hours(24)};
  /// The GPUs jobs lease (each node gets its own, as CUDA_VISIBLE_DEVICES).
  /// Empty: $TJOB_GPU_DEVICES (comma-separated ids), else one id per
  /// /dev/nvidiaN. Leases are kept in the store, so every engine on the same
  /// $TJOB_HOME shares the one list.
  std::vector<std::string> gpu_devices;
  /// What jobs wait for before they start (see admission_config).
  admission_config admission;
  /// Local jobs start from a clean environment: their trainer's `env` over
  /// only the variables of this process that detail::job_environment_allowed
  /// names (PATH, HOME, the locale, proxies, pip's settings, CUDA's, ...),
  /// not all of it (a server's secrets and settings are not every
  /// submitter's). `tjob serve` sets it; the CLI and an embedder's engine
  /// leave it off: a job then gets this process's whole environment.
  bool clean_job_environment = false;
  /// Log lines per failed step quoted in a wait_for_job_status failure.
  std::size_t failure_log_lines = 10;
  /// The program train_detached starts to own a detached job: a tjob binary
  /// (or any program that calls tjob::supervisor_main() when its only
  /// argument is `__supervise`). Empty: $TJOB_SUPERVISOR, else the tjob built
  /// with this library (its build tree, then its install prefix), else tjob
  /// on PATH.
  std::filesystem::path supervisor;
  /// Logger for the engine's own messages; null: a quiet default.
  std::shared_ptr<spdlog::logger> logger;
  /// Where jobs run: a registered backend's id (registered_backends():
  /// "local", "container", "kubernetes", "remote"). The local backend keeps
  /// its jobs in the store; the container backend keeps them in the daemon
  /// (labels), so any process talking to the same daemon sees the same jobs;
  /// the kubernetes backend keeps them in the cluster (TrainJob objects), and
  /// the constructor throws when the kubeconfig cannot be used; the remote
  /// backend asks a running `tjob serve`, which keeps them by its own backend
  /// (the constructor throws when no server URL is given or the URL cannot
  /// be used).
  std::string backend = "local";
  /// The backend's own options (backend_description::options), which it
  /// checks when the engine is made: an unknown member or a bad value is
  /// refused, naming it. Empty: its defaults.
  boost::json::object backend_config;
};

/// $TJOB_HOME, else ${XDG_STATE_HOME:-$HOME/.local/state}/tjob.
std::filesystem::path default_home();

/// Reads a step's log line by line. Each line keeps its '\n' (a last line
/// without one comes as it is), so the lines joined are the log byte for byte.
/// With `follow`, it replays what is stored, then streams live, and ends when
/// the step has ended and everything it wrote has been read.
class log_stream {
 public:
  struct impl;
  log_stream();  ///< an empty stream: next() ends at once
  explicit log_stream(std::unique_ptr<impl> p);
  log_stream(log_stream&&) noexcept;
  log_stream& operator=(log_stream&&) noexcept;
  ~log_stream();
  /// The next line, or nullopt at the end.
  boost::asio::awaitable<std::optional<std::string>> next();
  /// Everything available now, up to about 64 KiB, ending at a line boundary
  /// where it can (for copying a log through quickly); nullopt at the end.
  boost::asio::awaitable<std::optional<std::string>> read_some();

 private:
  std::unique_ptr<impl> impl_;
};

class engine {
 public:
  /// An engine on `ex` (its io_context must be run by one thread).
  engine(boost::asio::any_io_executor ex, engine_config config = {});
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine();

  boost::asio::any_io_executor get_executor() const;
  const std::filesystem::path& home() const;

  /// Validates the request, records the job (Created) and starts it; returns
  /// its name. Bad input is rejected before anything is created.
  boost::asio::awaitable<std::string> train(train_request request);
  boost::asio::awaitable<train_job> get_job(std::string name);
  /// All jobs of this $TJOB_HOME (any process's), oldest first; only those of
  /// `runtime` when given.
  boost::asio::awaitable<std::vector<train_job>> list_jobs(std::optional<std::string> runtime = {});
  /// Waits, without polling, until list_jobs(runtime) differs from `known`
  /// (a job appeared or went, or its status, reason, a step or its start or
  /// end changed), then returns it; returns it as it is when `timeout` passes
  /// first. `tjob list -w` is this in a loop.
  boost::asio::awaitable<std::vector<train_job>> wait_for_jobs_change(std::vector<train_job> known,
                                                                      std::optional<std::string> runtime,
                                                                      std::chrono::milliseconds timeout);
  /// Waits, without polling, until the job is no longer in the state of
  /// `known` (same_state), then returns it; returns it as it is when
  /// `timeout` passes first. Woken by the job's own watch, not by other jobs'
  /// changes. Throws job_not_found once the job is gone.
  boost::asio::awaitable<train_job> wait_for_job_change(std::string name, train_job known,
                                                        std::chrono::milliseconds timeout);
  boost::asio::awaitable<log_stream> get_job_logs(std::string name, log_options options = {});
  /// Waits, without polling, until the job's status is one of `statuses`.
  /// Throws job_failed (with each failed step's exit code and last log lines)
  /// when it fails and Failed was not asked for, unreachable_status when it
  /// ends otherwise, timeout when `timeout` passes first.
  /// With g++ 12, pass `statuses` as a named local: a braced set inside the
  /// co_await's argument is refused ("array used as initializer"), and
  /// temporaries there are miscompiled (docs/architecture.md).
  boost::asio::awaitable<train_job> wait_for_job_status(
      std::string name, std::set<job_status> statuses = {job_status::complete},
      std::chrono::milliseconds timeout = std::chrono::seconds(600));
  /// Cancels (graded) a job that has not ended; it ends Failed, reason
  /// `cancelled`. A no-op for an ended job. `force`: SIGKILL at once, also
  /// to a job whose graceful cancel is under way.
  boost::asio::awaitable<void> cancel_job(std::string name, cancel_options options);
  /// cancel_job(name, {}). (An overload, not a default argument: a default
  /// is a temporary in the caller's co_await, which g++ 12 miscompiles.)
  boost::asio::awaitable<void> cancel_job(std::string name);
  /// Cancels the job if it runs, then removes it: its record, events, logs
  /// and work dir.
  boost::asio::awaitable<void> delete_job(std::string name);
  boost::asio::awaitable<std::vector<event>> get_job_events(std::string name);
  /// The runtimes, by name. Manifests that cannot be used are skipped and
  /// reported (file, document, field) through the logger and runtime_problems().
  boost::asio::awaitable<std::vector<runtime>> list_runtimes();
  boost::asio::awaitable<std::vector<std::string>> runtime_problems();
  boost::asio::awaitable<runtime> get_runtime(std::string name);

  /// The local backend's venv cache (see engine_config::venv_cache).
  boost::asio::awaitable<std::vector<venv_cache_entry>> list_venv_cache();
  /// Removes the cache entries no job has used for `unused_for` (every entry
  /// when zero), broken ones and abandoned builds; an entry being built or
  /// copied is left alone. Returns what was removed.
  boost::asio::awaitable<std::vector<venv_cache_entry>> prune_venv_cache(std::chrono::seconds unused_for);

  /// Checks the local store for damage (SQLite's integrity_check: every page,
  /// and every index against its table), as `tjob doctor` does. `repair`
  /// rebuilds the indexes from the tables, which mends an index's damage
  /// without losing anything; damage in a table is reported, not mended.
  boost::asio::awaitable<store_check> check_store(bool repair);

  /// The jobs waiting for admission (engine_config::admission), next first.
  boost::asio::awaitable<std::vector<queue_entry>> get_queue();

  /// What the backend that runs the jobs does: the configured one's, or for
  /// `remote` the server's (asked once).
  boost::asio::awaitable<backend_capabilities> job_backend();
  /// Flushes the store and stops supervising (see Cancellation above).
  boost::asio::awaitable<void> shutdown();

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tjob
