// Internals of the local backend, shared by its source files: the jobs this
// process runs (job_rec), the phases they run, and the state of the backend
// (engine_state): the store, the group commit, the venv cache, the device leases.
#pragma once

#include "adapters/local/fs_watch.hpp"
#include "adapters/local/job_fsm.hpp"
#include "adapters/local/log_clock.hpp"
#include "adapters/local/log_files.hpp"
#include "adapters/local/store.hpp"
#include "adapters/local/venv_cache.hpp"
#include "adapters/process/process_adapter.hpp"
#include "adapters/progress/progress_server.hpp"
#include "core/driver.hpp"
#include "core/fail.hpp"
#include "core/job_state.hpp"
#include "core/names.hpp"
#include "core/progress.hpp"
#include "core/strings.hpp"
#include "core/trainer_checks.hpp"
#include "core/wake.hpp"

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <array>
#include <functional>
#include <map>
#include <set>

namespace tjob::local {

namespace asio = boost::asio;
using boost::system::error_code;
using steady = std::chrono::steady_clock;
using detail::event_kind;
using detail::job_event;
using detail::log_event;
using detail::printable;
using detail::quote;

/// Set in every job process's environment: it lets a later engine find the
/// processes of a job whose owner died before their pids were committed.
inline constexpr const char* token_variable = "TJOB_JOB_TOKEN";

/// In a torch node's argv until the job starts: the rendezvous port, chosen
/// free then (concurrent jobs do not collide on 29500).
inline constexpr std::string_view master_port_placeholder = "{master_port}";

struct step_rec {
  detail::step_row row;
  std::string log_path;  // a string, not a path: a path also keeps its components
  process::child proc;
  // cancels the wait for its process's exit on shutdown (a pointer: signals do not move)
  std::unique_ptr<boost::asio::cancellation_signal> stop =
      std::make_unique<boost::asio::cancellation_signal>();
  std::vector<std::string> cgroups;  // its cgroups (tree, cpu, memory), removed when the step ends
  /// Of `cgroups`, by index (on cgroup v2 they are often one directory: no
  /// copies): the one that holds its whole process tree, none where none
  /// could be made; the one that limits its memory (its OOM kills are read at
  /// the end). -1: none.
  std::int8_t tree_at = -1, memory_at = -1;
  const std::string* tree_cgroup() const { return tree_at < 0 ? nullptr : &cgroups[tree_at]; }
  const std::string* memory_cgroup() const { return memory_at < 0 ? nullptr : &cgroups[memory_at]; }
  std::string ended_how;             // how its code's process ended ("exit code 1"), once it has
  bool code_runs = false;            // its process is the job's code (not a setup phase): a warning is for it
  detail::log_clock::tracked times;  // its log's line times, while it runs
};

/// One process a step runs: a setup phase (venv, pip) or the job's own code.
struct phase {
  std::string name;   ///< "venv", "pip install", "torchrun", "python", "command"
  std::string title;  ///< progress line before it starts; empty: none
  std::string executable;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  ///< over the engine's environment
  std::string cwd;
  bool final = false;              ///< the job's own code: its exit decides the step
  std::uint64_t memory_limit = 0;  ///< bytes for its process tree (memory cgroup; else RLIMIT_AS per process)
  int cpu_limit = 0;               ///< CPUs of CPU time for its process tree (cgroup quota); 0: none
  bool torch_port = false;         ///< master_port_placeholder in argv becomes the job's port at start

  /// Frees what the process was started from (argv, environment, paths) once
  /// it runs; `name` and `final` stay for what follows its exit.
  void release_plan() {
    title = {};
    executable = {};
    argv = {};
    env = {};
    cwd = {};
  }
};

/// A job this engine runs. Jobs of other processes are read from the store.
struct job_rec {
  detail::job_row row;                // row.steps is unused: `steps` holds them
  std::chrono::milliseconds grace{};  // SIGTERM to SIGKILL: the engine's, or what a cancel gave
  std::vector<step_rec> steps;
  std::vector<phase> phases;       // the setup phases, then node-0's code
  std::vector<phase> node_phases;  // each node's code (node-0's is also phases.back())
  /// What the job is made from, until its directory is made (make_job_files):
  /// the files written into it, a trainer's code_dir snapshot copied into its
  /// work dir, the request's JSON for its record, its progress token. A
  /// pointer, freed then: a running job does not carry them.
  struct making {
    std::vector<std::pair<std::string, std::string>> files;
    std::string code_snapshot;
    std::string spec;
    std::string progress_token;  // written to jobs/<name>/progress-token (0600)
  };
  std::unique_ptr<making> make;
  /// Its code gets TJOB_CHECKPOINT_DIR (`<dir>/checkpoints`): a Python job,
  /// or one that may restart. A command that runs once gets none: the
  /// directory would cost a mkdir on every `tjob run -- CMD` (~40 us here).
  bool checkpoints() const { return !venv.empty() || retry != nullptr; }
  std::string dir;
  std::filesystem::path venv;  // empty for command jobs
  bool remove_venv = false;
  bool torch_port = false;     // the nodes rendezvous on one free port, chosen at start
  bool failure_watch = false;  // its nodes' worker failures are watched (several torch nodes)
  bool line_hook = false;      // its venv makes its processes print whole lines (install_line_hook)
  /// Its code reports progress to this engine's endpoint: its environment
  /// (KUBEFLOW_TRAINER_SERVER_*) is made at each spawn, not kept per job.
  bool reports_progress = false;
  int master_port = 0;
  int gpus_per_node = 0;
  std::vector<std::string> node_devices;  // CUDA_VISIBLE_DEVICES of each node, once leased
  /// Where its code reports progress (KUBEFLOW_TRAINER_SERVER_*); empty when
  /// this engine has no progress endpoint.
  /// Its row of the admission queue (need, priority), until it joins the queue.
  std::unique_ptr<detail::queue_row> admission;
  /// What it waits for before it may join the queue: its dependencies
  /// (train_request::after_*) and its begin time (train_request::begin).
  struct dependency {
    std::string job;
    const char* kind;  // "after_ok", "after_any", "after_not_ok"
  };
  struct wait_rec {
    std::vector<dependency> deps;
    std::int64_t begin_ms = 0;  // epoch ms; 0: none
  };
  /// Null once it waits for neither (a pointer: most jobs never do).
  std::unique_ptr<wait_rec> waits;
  bool waits_to_queue() const { return waits != nullptr; }
  bool queued = false;               // it waits for admission (Created, reason Queued)
  bool in_admission_list = false;    // it is in its engine's admission_waiting (the admitter may let it in)
  std::int64_t queued_ms = 0;        // when it joined the queue (its Admitted event says how long it waited)
  std::string queue_note;            // what it waits for, for its log when it joins the queue
  std::chrono::seconds deadline{0};  // its active deadline, from Running; 0: none
  std::unique_ptr<boost::asio::steady_timer> deadline_timer;  // armed when it starts running
  /// Its warning before the deadline (train_request::warning), and its timer
  /// once armed; null without one (a pointer: most jobs have none).
  struct warning_rec {
    stop_warning warning;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  std::unique_ptr<warning_rec> warning;
  /// Its retry policy (train_request::retry) when it has restarts; and the
  /// wait before its next attempt, while it waits.
  std::unique_ptr<retry_policy> retry;
  std::unique_ptr<boost::asio::steady_timer> backoff_timer;
  /// The waits of steps whose fork the OS refused (job_action::respawn), a
  /// timer per step, made at the first (a pointer: most jobs never need one).
  struct respawn_timers {
    std::vector<std::unique_ptr<boost::asio::steady_timer>> by_step;
  };
  std::unique_ptr<respawn_timers> respawns;
  /// Set when the venv comes from the cache (engine_config::venv_cache):
  /// what it is built from; `python` is the interpreter as given until
  /// resolve_venv finds the real one.
  std::unique_ptr<detail::venv_cache::inputs> venv_inputs;  // a pointer: command jobs pay 8 bytes
  struct cache_entry {
    std::string key;                 // its cache entry, once known
    std::filesystem::path build;     // where this job builds that entry
    int lock = -1;                   // the entry's lock while it builds it
    std::int64_t not_before_ms = 0;  // an entry built earlier is stale (refresh, unpinned expiry)
    std::string stale_why;           // says why, for the log
  };
  std::unique_ptr<cache_entry> venv_entry;   // made by resolve_venv
  detail::wake_list watchers;                // woken by transitions (after commit) and new log bytes
  boost::asio::cancellation_signal stop;     // ends the job's coroutine on shutdown
  boost::asio::cancellation_signal op_stop;  // abandons its child operation (a lease or venv wait)
  /// What happened to the job, for its state machine: run_job takes these
  /// in order. `inbox_waiter` is run_job's wait for them (a completion
  /// handler, not a timer: a running job holds no timer).
  std::vector<job_input> inbox;
  struct waiter {
    virtual ~waiter() = default;
    /// Resumes run_job, posted to its executor (not called: whoever posts
    /// an input is not re-entered by the job); consumes the waiter.
    virtual void resume(std::unique_ptr<waiter> self, boost::system::error_code ec) = 0;
  };
  // (Boost 1.81's any_completion_handler recursed without end when moved and
  // posted here: a type-erasure of its own instead; docs/architecture.md.)
  std::unique_ptr<waiter> inbox_waiter;
  std::exception_ptr op_failure;  // a child operation failed: the job fails with it
  void post(job_input in);
  /// Resumes run_job's wait, if it waits (`ec`: operation_aborted at shutdown).
  void wake_inbox(boost::system::error_code ec = {});
};

/// The limit a start refused for want of processes or descriptors ran
/// into, to say with it: " (this user may have N processes and threads:
/// ulimit -u)", or empty.
std::string refused_limit(const boost::system::error_code& code);

struct engine_state : std::enable_shared_from_this<engine_state> {
  explicit engine_state(const detail::backend_context& ctx);

  boost::asio::any_io_executor ex;
  engine_config cfg;
  /// What a child inherits: environ, or (clean_job_environment) copies of
  /// its allowed entries, null-terminated.
  std::vector<std::string> clean_env;
  std::vector<char*> clean_envp;
  char* const* inherited_env() const;
  /// The inherited value of `key` (nullptr when it is not inherited).
  const char* inherited(const char* key) const;
  std::shared_ptr<spdlog::logger> log;
  std::filesystem::path home, jobs_dir;
  /// The file of `home` a store commit writes (detail::store::wake_path): what
  /// the watches of the store wait on, not every file in `home`.
  std::string store_wake_file;
  std::unique_ptr<detail::store> db;
  /// Every coroutine of this backend (jobs, their lease and venv-cache
  /// operations, the inotify reader); shutdown() joins it.
  detail::task_group tasks;
  detail::fs_watch watch;
  detail::log_clock log_times;
  std::map<std::string, std::shared_ptr<job_rec>, std::less<>> jobs;
  /// A write for the next group commit: `apply` runs in the transaction,
  /// `after` once it has committed; `failed` (when set) hears why it did not,
  /// and such a write is not retried.
  struct pending_write {
    std::function<void(detail::store&)> apply;
    std::function<void()> after;
    std::function<void(std::exception_ptr)> failed;
  };
  std::vector<pending_write> pending;
  bool flush_posted = false;
  /// Commits that failed in a row (a full disk), since when, and the last
  /// error: reported once, then retried with back-off (flush).
  int commit_failures = 0;
  steady::time_point failing_since{};
  std::string commit_error;
  /// Throws store_unavailable when commits have failed for longer than
  /// cfg.store_failing_limit and `j` has no process left (its end waits to
  /// be recorded): a wait on it says so, instead of waiting for the disk.
  void check_recordable(const job_rec& j) const;
  /// What to say when the file system holding `path` has no space left for
  /// this user; nullopt while it has.
  std::optional<std::string> full_file_system(const std::string& path) const;
  bool stopping = false;
  bool said_fork_refused = false;  // the first refused fork is a warning; the next ones, events
  /// Processes of this engine's steps that run (each holds a pidfd): a
  /// process is started only while they, the descriptors the engine held
  /// at its start and a reserve for its own work fit the open-file limit;
  /// else its step waits as for a refused fork (issue 43: `ulimit -n`).
  std::size_t live_children = 0;
  std::size_t base_descriptors = 0;
  static constexpr std::size_t descriptor_reserve = 64;
  /// Why a new process would take a descriptor the engine cannot spare; empty when it can.
  std::string descriptors_short() const;
  /// The jobs with a step waiting to try its process again: an exit wakes
  /// them at once (what it frees may be what they wait for).
  std::vector<std::weak_ptr<job_rec>> respawn_waiters;
  /// Why the store is read-only (see the constructor); empty when it is not.
  std::string read_only;
  /// Throws store_unavailable, saying why and what still works, when the store is read-only.
  void check_writable(const char* what) const;
  boost::asio::thread_pool pool{1};
  // The store's WAL checkpoints run on a thread of their own (made at the
  // first): on `pool` they would hold up the next job's directories.
  std::unique_ptr<detail::wal_checkpointer> checkpointer;
  std::unique_ptr<boost::asio::thread_pool> checkpoint_thread;  // after checkpointer: joined first
  bool checkpoint_running = false;
  std::vector<std::string> gpu_devices;
  detail::wake_list device_waiters;  // woken when this engine releases devices
  /// The budgets of admission (engine_config::admission, config.yaml, the machine).
  detail::admission_budget budget;
  /// Reads config.yaml again when it changed (an admitter round, a submit).
  std::optional<detail::budget_reader> budget_file;
  /// Reads the budgets again when config.yaml has changed (admitter rounds).
  void refresh_budget();
  /// This engine's jobs that wait for admission, in the order they came.
  std::vector<std::shared_ptr<job_rec>> admission_waiting;
  /// This engine's jobs that wait for their dependencies (then they join the queue).
  std::vector<std::shared_ptr<job_rec>> dependency_waiting;
  /// This engine's jobs between a failed attempt and the next (restart_attempt):
  /// the admitter hears another process's cancel of them, as of the others.
  std::vector<std::shared_ptr<job_rec>> backoff_waiting;
  /// The admitter's wake-up while it runs (it runs while jobs wait).
  detail::wake_signal* admitter_wake = nullptr;
  /// The last event the admitter has read for cancels of its waiting jobs
  /// (store::cancels_after); -1 while it is not running.
  std::int64_t cancels_read = -1;
  bool admission_scheduled = false;     // a decision is queued for the next group commit
  std::int64_t seen_data_version = -1;  // the store's data_version at the admitter's last full round
  // Woken after each commit of this engine's writes: watch_all's waiters see
  // its own jobs' changes at once (other processes' commits reach them by inotify).
  detail::wake_list committed;
  pid_t self_pid = 0;
  detail::venv_cache::cache venv_store{""};
  // Keys this engine builds now, with their waiters (shared: a waiter still
  // holds the list when the builder has finished and dropped its entry).
  std::map<std::string, std::shared_ptr<detail::wake_list>> venv_building;
  std::map<std::string, std::pair<std::string, std::string>> python_identities;  // asked of scripts
  std::uint64_t self_start = 0;
  /// The progress endpoint of this engine's jobs, listening from the first
  /// job on; `progress_ca` is the home's CA that jobs verify it with, and
  /// `progress_off` says why there is none (the job runs without).
  progress::server progress;
  std::string progress_ca, progress_off;
  std::string progress_pythonpath;  ///< the helper package's directory (progress::python_helper)
  /// The job's token (written to its progress-token file by make_job_files) and its place on the
  /// endpoint; reports_progress set.
  boost::asio::awaitable<void> open_progress(std::shared_ptr<job_rec> j);
  /// What the job's code reported: its latest progress, and an event when `record`.
  std::string take_progress(const std::string& name, const detail::progress_report& r, bool record);

  // store
  void queue_write(std::function<void(detail::store&)> w, std::function<void()> after = {},
                   std::function<void(std::exception_ptr)> failed = {});
  /// Records a new job (and its Created event) in the next group commit;
  /// false when the name is taken. With `admission`, the job also joins the
  /// queue in that transaction: admitted at once when it fits, else it is
  /// Queued (reason and event), and `waiting` says for what and its place.
  boost::asio::awaitable<bool> insert_job(detail::job_row row, std::string created_message,
                                          const detail::queue_row* admission = nullptr,
                                          std::string* waiting = nullptr, std::string dependencies = {});
  void flush();
  /// A passive checkpoint of the store on checkpoint_thread, unless one runs.
  void start_checkpoint();
  template <class F>
  auto transact(F&& f) {
    flush();
    db->begin();
    try {
      if constexpr (std::is_void_v<decltype(f(*db))>) {
        f(*db);
        db->commit();
      } else {
        auto r = f(*db);
        db->commit();
        return r;
      }
    } catch (...) {
      db->rollback();
      throw;
    }
  }

  // jobs
  std::shared_ptr<job_rec> owned(std::string_view name) const;
  std::optional<detail::job_row> load_fresh(const std::string& name);
  train_job snapshot(const job_rec& j) const;
  bool apply(job_rec& j, step_rec& s, detail::job_event ev, std::string message, std::string reason);
  void start_job(std::shared_ptr<job_rec> j);
  void spawn_internal(boost::asio::awaitable<void> op, const char* what);
  boost::asio::awaitable<void> run_job(std::shared_ptr<job_rec> j);
  bool take_turn(const std::shared_ptr<job_rec>& j, job_fsm& fsm,
                 std::unique_ptr<boost::asio::steady_timer>& grace, std::vector<step_outcome>& outcomes,
                 std::size_t& blamed);
  void perform(const std::shared_ptr<job_rec>& j, job_action& a, std::vector<job_input>& now,
               std::unique_ptr<boost::asio::steady_timer>& grace);
  void request_lease(const std::shared_ptr<job_rec>& j);
  void signal_steps(job_rec& j, const job_action& a);
  void record_cancel(job_rec& j, bool deadline);
  void start_op(const std::shared_ptr<job_rec>& j, boost::asio::awaitable<void> op, const char* what,
                bool answer_when_abandoned = false);
  boost::asio::awaitable<void> finish_job(std::shared_ptr<job_rec> j, std::vector<step_outcome> outcomes,
                                          std::size_t blamed);
  job_input spawn_phase(const std::shared_ptr<job_rec>& j, std::size_t index, std::size_t phase_index,
                        bool first);
  std::map<std::string, std::string> phase_environment(const std::shared_ptr<job_rec>& j, const step_rec& s,
                                                       const phase& ph, std::size_t index);
  void await_exit(const std::shared_ptr<job_rec>& j, std::size_t index, std::string what);
  /// Waits (Created, without polling) until the job's GPUs are free and leases them.
  boost::asio::awaitable<void> lease_gpus(std::shared_ptr<job_rec> j);
  void release_gpus(job_rec& j);
  /// Admission (local_admission.cpp): a queued job waits in
  /// admission_waiting until the admitter lets it start.
  void join_queue(const std::shared_ptr<job_rec>& j);
  void wait_dependencies(const std::shared_ptr<job_rec>& j);
  /// The dependencies of the waiting jobs, looked at again: a job whose
  /// dependencies are met joins the queue; one that can never be met ends.
  void dependency_round();
  /// Why `dep` of a job can never be satisfied (empty: it may yet be, or is);
  /// `met` is set when it is.
  std::string dependency_state(const job_rec::dependency& dep, bool& met);
  void leave_queue(job_rec& j);
  boost::asio::awaitable<void> run_admitter();
  /// One look of the admitter: another process's cancels of jobs waiting
  /// here, and whether a job waiting here may start. Only after another
  /// process has committed, or when `timed_out` (a second without news: an
  /// owner that died writes nothing); this engine's own changes schedule
  /// their decision themselves (schedule_admission).
  void admit_round(bool timed_out);
  /// The job may start: its GPUs next, if it needs any, else lease_granted.
  void after_admission(const std::shared_ptr<job_rec>& j);
  /// The jobs waiting for admission, in queue order (the store's, all processes').
  std::vector<queue_entry> queue_view();
  /// Arms the active deadline of a job that has started running.
  void arm_deadline(const std::shared_ptr<job_rec>& j);
  /// Sends the job's warning signal to every process of its steps that run.
  /// The job's warning signal to the processes of its code that run; how
  /// many steps got it. `when` ends the Warned event's text.
  int send_warning(job_rec& j, const std::string& when);
  /// A failed attempt is tried again (job_action::restart): its steps are
  /// Restarting, their logs mark where the next attempt begins, and the
  /// backoff timer posts backoff_elapsed.
  void restart_attempt(const std::shared_ptr<job_rec>& j, job_action& a);
  /// A refused start's step waits (job_action::respawn), and what it waits for (local_tree.cpp).
  void respawn_later(const std::shared_ptr<job_rec>& j, const job_action& a);
  void wake_respawns();
  std::filesystem::path site_packages(const job_rec& j) const;  ///< its venv's; empty: none
  void install_line_hook(job_rec& j);
  /// The job waits between attempts: backoff_waiting, until end_backoff.
  void wait_backoff(const std::shared_ptr<job_rec>& j);
  void end_backoff(const job_rec& j);
  /// Queues the admission decision into the next group commit (once).
  void schedule_admission();
  /// Every job on the admitter's three lists (a copy: posting to them may
  /// change the lists).
  std::vector<std::shared_ptr<job_rec>> waiting_jobs() const;
  /// Whether `name` is this engine's job waiting in admission_waiting.
  bool waiting_here(const std::string& name) const;
  /// Posts a cancel to `j` when its log has a CancelRequested event (another
  /// process asked while nothing of the job ran).
  void check_cancelled(job_rec& j);
  boost::asio::awaitable<std::string> train(detail::checked_request c);
  void plan_job(job_rec& j, const std::string& name, train_request& req, const runtime& rt);
  void plan_command(job_rec& j, const std::string& who, command_trainer& ct);
  void plan_python(job_rec& j, const std::string& who, python_trainer& pt, const runtime& rt, int num_nodes);
  void plan_setup(job_rec& j, const python_trainer& pt, const std::string& python,
                  const std::vector<std::string>& packages, const std::map<std::string, std::string>& env,
                  const std::string& cwd);
  void plan_gpus(job_rec& j, const std::string& who, const python_trainer& pt, int num_nodes);
  void plan_nodes(job_rec& j, const python_trainer& pt, const runtime& rt,
                  const std::map<std::string, std::string>& env, const std::string& cwd,
                  const std::string& file, int num_nodes);
  void plan_venv_cache(job_rec& j, const python_trainer& pt, const std::string& python,
                       const std::vector<std::string>& packages);
  boost::asio::awaitable<void> record_job(std::shared_ptr<job_rec> j, detail::checked_request& c);
  boost::asio::awaitable<void> make_job_files(std::shared_ptr<job_rec> j);
  void remove_job_tree(const job_rec& j, const std::string& work) const;
  void log_progress(job_rec& j, step_rec& s, const std::string& line);
  /// The step's process has exited (await_exit): ends its tree, reads why, posts `exited`.
  void step_exited(const std::shared_ptr<job_rec>& j, std::size_t index, process::exit_status st,
                   const std::string& what, steady::duration ran);
  /// A note on a node's limits: in a Python job's log, else a Setup event.
  void say_limit(job_rec& j, step_rec& s, const std::string& text);
  boost::asio::awaitable<void> remove_tree(std::filesystem::path dir, std::string job);
  /// Runs `f` on the thread pool (blocking file work) and comes back to the
  /// reactor; rethrows what it threw.
  boost::asio::awaitable<void> blocking(std::function<void()> f);
  /// Runs `spec` with its stdout+stderr captured (at most 64 KiB, at most
  /// `timeout`); nullopt when it could not start, failed or took too long.
  boost::asio::awaitable<std::optional<std::string>> capture_output(process::spawn_spec spec,
                                                                    std::chrono::milliseconds timeout);
  /// The venv of a job whose venv_inputs are set comes from the cache,
  /// built there first when it is not (by the job's venv and pip phases):
  /// these are the job's child operations for that (local_venv.cpp).
  boost::asio::awaitable<void> resolve_venv(std::shared_ptr<job_rec> j);
  boost::asio::awaitable<void> wait_venv(std::shared_ptr<job_rec> j);
  /// Several torch nodes: the hook that records a worker's uncaught exception
  /// goes into the venv, and the records are watched (worker_failed).
  void start_failure_watch(const std::shared_ptr<job_rec>& j);
  /// Where the hook writes a job's worker failures ($TJOB_FAILURE_DIR).
  std::filesystem::path failures_dir(const job_rec& j) const { return jobs_dir / j.row.name / "failures"; }
  /// A step's log, `jobs/<name>/<step>.log`; a job made by a tjob of store
  /// version 5 or older has it in `jobs/<name>/logs/` (log_dir).
  std::filesystem::path step_log(const std::string& job, const std::string& step) const;
  /// The directory a follower of the job's logs watches: the job's own, or
  /// its `logs/` for a job made by an older tjob.
  std::filesystem::path log_dir(const std::string& job) const;
  /// `jobs/<name>/log-attempts/<step>`: where each attempt after the first
  /// begins in the step's log (log_attempts).
  std::filesystem::path attempts_path(const std::string& job, const std::string& step) const {
    return jobs_dir / job / "log-attempts" / step;
  }
  boost::asio::awaitable<void> watch_worker_failures(std::shared_ptr<job_rec> j);
  boost::asio::awaitable<void> finalize_venv(std::shared_ptr<job_rec> j);
  void end_venv_build(const std::shared_ptr<job_rec>& j, bool ok);
  boost::asio::awaitable<bool> copy_from_cache(std::shared_ptr<job_rec> j, const std::string& key, int& fd);
  boost::asio::awaitable<std::optional<std::pair<std::string, std::string>>> python_identity(job_rec& j);
  boost::asio::awaitable<void> wait_for_venv(const std::string& key, detail::wake_signal& w);
  /// `force`: SIGKILL now (also when a graceful cancel is under way).
  /// `grace`: between SIGTERM and SIGKILL; unset: the job's own (grace_of).
  boost::asio::awaitable<void> cancel_owned(std::shared_ptr<job_rec> j, bool force,
                                            std::optional<std::chrono::milliseconds> grace);
  boost::asio::awaitable<void> cancel_foreign(const std::string& name, bool force,
                                              std::optional<std::chrono::milliseconds> grace,
                                              bool checkpoint = false);
  /// A cancel with checkpoint (local_checkpoint.cpp): the CancelRequested
  /// event, the job's warning signal, then up to its lead time for the job
  /// to end; the cancel itself follows.
  boost::asio::awaitable<void> warn_owned(std::shared_ptr<job_rec> j,
                                          std::optional<std::chrono::milliseconds> grace);
  boost::asio::awaitable<void> warn_foreign(const detail::job_row& row, std::chrono::milliseconds grace);
  /// Signals the process group and the tree of each step of another
  /// process's job that runs (each pid once when `once` is given); how many
  /// groups got it.
  int signal_running_steps(const detail::job_row& r, int sig, std::set<std::int64_t>* once = nullptr) const;
  /// The warning a job was made with (its spec's "warning").
  std::optional<stop_warning> warning_of(const detail::job_row& row) const;
  /// The grace period a job was made with (its spec's "grace_ms"), else this engine's.
  std::chrono::milliseconds grace_of(const detail::job_row& row) const;
  void fail_unfinished(job_rec& j, const std::string& why);

  // a step's whole process tree (local_tree.cpp)
  /// The cgroup.procs of the cgroup that holds the step's tree, open for
  /// its next process to join before exec; -1 where none can be made.
  int open_tree(job_rec& j, step_rec& s, const std::string& cgroup_name);
  /// Puts the step's code under the phase's memory and CPU limits (cgroups).
  void limit_step(job_rec& j, step_rec& s, const phase& ph, const std::string& cgroup_name);
  /// Adds `dir` to the step's cgroups, once.
  /// Its place in s.cgroups, added there unless it is there already.
  static std::int8_t keep_cgroup(step_rec& s, const std::string& dir);
  /// Kills what the step's ended main process left behind, in its group or out of it.
  void end_tree(job_rec& j, step_rec& s);
  /// Removes the step's cgroups once the kernel has emptied them.
  void remove_cgroups(step_rec& s);
  void remove_cgroups_later(std::vector<std::string> dirs, int round);
  /// At shutdown: the cgroups still busy, removed once empty (a bounded wait on the pool).
  boost::asio::awaitable<void> remove_busy_cgroups();
  std::set<std::string> busy_cgroups;
  bool tree_fallback_said = false;  // the engine log said once why no cgroup holds the trees

  /// Whether the store can be written (else read_only says why), the jobs
  /// directory and the store file made when they are not there.
  void open_access(const std::filesystem::path& db_path);
  /// Throws store_corrupt when jobs/ holds job directories (the store was lost).
  void refuse_new_store_over_jobs(const std::filesystem::path& db_path) const;

  // reconciliation with what really runs
  void reconcile_all();
  bool reconcile_row(const detail::job_row& row);
  std::size_t reconcile_rows(const std::vector<detail::job_row>& rows);
  std::string job_token(const detail::job_row& row) const;
  bool owner_alive(const detail::job_row& row) const;

  // messages
  [[noreturn]] void throw_not_found(const std::string& name) const;
  void check_running() const;
};

/// Waits on another process's job: store commits and log appends (inotify) and
/// the owner's death (pidfd), each a wake-up; never a poll.
class foreign_watch {
 public:
  foreign_watch(engine_state& e, const detail::job_row& row, bool logs);
  foreign_watch(const foreign_watch&) = delete;
  foreign_watch& operator=(const foreign_watch&) = delete;
  ~foreign_watch();
  /// False when `deadline` passed with nothing new.
  boost::asio::awaitable<bool> wait_until(std::chrono::steady_clock::time_point deadline);

 private:
  engine_state& e_;
  std::string name_;
  bool logs_;
  detail::wake_signal wake_;
  int store_wd_ = -1, log_wd_ = -1;
  std::optional<boost::asio::posix::stream_descriptor> owner_;
};

train_job to_job(const detail::job_row& row);
std::int64_t now_ms();
clock::time_point from_ms(std::int64_t ms);
/// The argv as one line for a message (each argument printable, cut at 200).
std::string join_argv(const std::vector<std::string>& argv);
/// mkdir -p with mode 0700 for every directory it creates.
void make_private_dirs(const std::filesystem::path& p);
using detail::fail;
/// The job joins the admission queue in the caller's transaction; empty when
/// admitted at once, else what it waits for and its place (Queued).
std::string join_admission_queue(detail::store& db, detail::queue_row adm,
                                 const detail::admission_budget& budget, std::int64_t t);
/// A trace line for the bench (bench/run's queue case): how long an
/// admission decision took (from `since` to `decided`: reading the queue's
/// head and planning), for how many jobs, with how many of this engine's jobs
/// waiting, and until now with the writes that record it.
void log_decision(spdlog::logger& log, steady::time_point since, std::size_t jobs, std::size_t waiting,
                  std::optional<steady::time_point> decided = std::nullopt);
/// The plan of the queue's head: the admitted jobs and as many waiting ones,
/// in order, as it takes to meet one that does not fit (past it nobody
/// starts) or the end. With `rows`, every row read goes there, with its
/// owner; without, the admitted jobs are read as sums (the decision's way).
detail::admission_plan plan_queue_head(detail::store& db, const detail::admission_budget& budget,
                                       std::vector<detail::queued_job>* rows = nullptr);

}  // namespace tjob::local
