// Internals of the container backend, shared by its source files:
// container_backend.cpp (the daemon, reading jobs, events, cancel, delete),
// container_logs.cpp (a node's log, a job's event log), container_train.cpp
// (creating a job's containers) and container_queue.cpp (admission).
#pragma once

#include "adapters/container/container_backend.hpp"
#include "adapters/container/docker_api.hpp"
#include "adapters/container/job_dir.hpp"
#include "adapters/container/layout.hpp"
#include "adapters/process/proc_info.hpp"
#include "adapters/progress/progress_server.hpp"
#include "core/admission.hpp"
#include "core/fail.hpp"
#include "core/task_group.hpp"
#include "core/wake.hpp"

#include <tjob/error.hpp>

#include <boost/json/object.hpp>

#include <unistd.h>
#include <deque>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tjob::container {

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using steady = std::chrono::steady_clock;

using detail::fail;
using detail::prefixed;
using detail::raise;

/// Labels as the list and inspect answers hold them ("Labels"; libpod "labels").
std::map<std::string, std::string> labels_of(const json::object& o);

/// The job's latest reported progress, from its state (container_progress.cpp).
void read_progress(const job_dir& state, train_job& j);
/// The job's Progress events, from its state, added to `out`.
void read_progress_events(const job_dir& state, std::vector<event>& out);

/// Now, as milliseconds since the epoch (queue files, progress reports).
std::int64_t wall_ms();

/// Writes (replaces) a file of tjob's own (a queue file, a file of the job's
/// inputs): never one of a directory the job can write (job_dir is for those).
void write_file(const fs::path& p, std::string_view text);

/// One container of a job, as the daemon reports it.
struct seen {
  std::string id, name, step, state;
  std::map<std::string, std::string> labels;
  std::int64_t created = 0;
  std::optional<int> exit_code;
  bool oom = false;
  bool tty = false;  // its log is a raw stream, not frames
  std::string error;
  std::int64_t pid = 0;
  std::optional<clock::time_point> started, finished;  // State.StartedAt, FinishedAt (when set)
  int restarts = 0;  // RestartCount: the daemon's restarts of it (restart policy)
};

/// A container as the daemon lists it (nullopt: not one of a job's), and
/// what only its inspect says (its TTY, its state's details), read into it
/// (container_seen.cpp).
std::optional<seen> seen_of(const json::object& o);
void read_inspected(const json::object& ins, seen& c);

/// An exited node that its restart policy will start again: it exited
/// non-zero with restarts left, and was not stopped (Podman shows it exited
/// until it restarts it; Docker says restarting). Not final.
bool restart_pending(const seen& c, bool stopped);

/// What a node container runs: its command, environment, image and limits.
struct node_program {
  std::vector<std::string> cmd;
  std::map<std::string, std::string> env;
  std::string image, working_dir = workspace;
  std::vector<std::pair<std::string, std::string>> files;  // written into its inputs (/workspace/.tjob)
  json::object plan;                                       // a Python node's entry plan; empty for a command
  std::string image_pythonpath;                            // the image's own PYTHONPATH
  std::vector<std::string> volumes;                        // binds of tjob's own (the progress helper)
  std::int64_t memory = 0, nano_cpus = 0;
  int gpus = 0, procs = 1;
};

/// What a train has made so far, for undo_train when it fails part way.
/// (Not a destructor: the removal awaits the daemon, and a failed train must
/// have undone everything before it reports the failure.)
struct train_rollback_state {
  std::vector<std::string> made;  // container ids
  std::string network_id;
  bool made_network = false;
};

/// A container job's place in the admission queue of its home
/// (container_queue.cpp): $TJOB_HOME/containers/.queue/<job>.json.
struct queue_file {
  std::string job;
  /// waiting (for its dependencies), queued, admitted (its containers are
  /// being made), started, failed (ended before it had containers)
  std::string state;
  std::string runtime, array;
  int num_nodes = 1, priority = 0, array_limit = 0;
  detail::admission_need need;
  std::int64_t created_ms = 0, since_ms = 0, admitted_ms = 0, ended_ms = 0;
  std::int64_t seq = 0;  ///< queue order within a priority: when it joined (ns); 0 before
  std::int64_t owner_pid = 0;
  std::uint64_t owner_start = 0;
  std::vector<std::string> after_ok, after_any, after_not_ok;
  std::int64_t begin_ms = 0;    ///< its begin time (train_request::begin), while it waits; 0: none
  std::string reason, message;  ///< failed: why
};

json::object to_json(const queue_file& q);
/// nullopt for an object that is not a queue file.
std::optional<queue_file> queue_file_of(const json::object& o);

struct backend::impl : std::enable_shared_from_this<backend::impl> {
  impl(detail::backend_context c)
      : ctx(std::move(c)),
        cfg(config_of(ctx.cfg.backend_config, [](std::string_view m) { return std::string(m); })),
        backoff_wake(ctx.ex),
        tasks(ctx.ex, ctx.log),
        self_pid(::getpid()),
        self_start(process::start_time(self_pid).value_or(0)) {}

  detail::backend_context ctx;
  container_backend_config cfg;
  std::unique_ptr<docker_api> api;
  // the /events stream: one per backend, waking every waiter
  std::optional<http::body_stream> events;
  bool events_running = false, events_connected = false;
  std::map<std::string, std::uint64_t, std::less<>> generation;  // per job, bumped by its events
  std::uint64_t epoch = 0;                                       // bumped when the stream connects or breaks
  detail::wake_list waiters;
  detail::wake_signal backoff_wake;
  detail::task_group tasks;  // the events loop
  bool stopping = false;
  std::map<std::string, json::object> exited;  // inspect answers of exited containers (final)
  // The containers the event stream said died (the last max_died): a log
  // follower on Podman ends on it (container_logs.cpp).
  std::set<std::string, std::less<>> died;
  std::deque<std::string> died_order;
  // The runtime-name label of each job network seen (Kubeflow keeps a job's
  // runtime there, not on its containers); a network's labels never change.
  std::map<std::string, std::string> network_runtime;
  pid_t self_pid = 0;
  std::uint64_t self_start = 0;
  /// The progress endpoint of the jobs this process made (host networking
  /// only: nothing else reaches its loopback), from the first on; its CA,
  /// the helper package's directory, and why there is none when it failed.
  progress::server progress{ctx.ex, ctx.log, tasks};
  std::string progress_ca, progress_helper, progress_off;
  /// The job reports progress: its token and the CA into its inputs, the
  /// variables and the helper's bind into `p`.
  void open_progress(const std::string& job, node_program& p);
  /// What the job's code reported, in its state: progress.json (the latest)
  /// and, when `record`, a line of progress.jsonl (its Progress events).
  std::string take_progress(const std::string& job, const detail::progress_report& r, bool record);
  static asio::awaitable<std::string> take_report(std::weak_ptr<impl> w, std::string job,
                                                  detail::progress_report r, bool record);

  // the daemon
  /// The connected daemon; the failure lists every socket tried.
  asio::awaitable<outcome<docker_api*>> daemon();

  // reading jobs
  /// The containers of one job (or of every job), oldest first.
  asio::awaitable<outcome<std::vector<seen>>> containers(const std::string& job);
  bool cancelled(const std::string& job) const;
  /// The job's state directory (job_dir.hpp); nullopt when it has none.
  std::optional<job_dir> state(const std::string& job) const;
  /// Creates a marker in the job's state (cancelled, deadline-exceeded),
  /// making its directory if it has none.
  void set_marker(const std::string& job, const char* marker, std::string_view text = {}) const;
  /// The container has ended and will not be started again (no restart
  /// pending): its log is whole.
  bool for_good(const seen& c) const;
  /// The job's directory (job_dir.hpp), its workspace and its inputs.
  fs::path workdir(const std::string& job) const;
  fs::path workspace_of(const std::string& job) const { return workdir(job) / workspace_dir_name; }
  fs::path inputs_of(const std::string& job) const { return workdir(job) / inputs_dir_name; }
  fs::path checkpoints_of(const std::string& job) const { return workdir(job) / checkpoints_dir_name; }
  train_job to_job(const std::string& name, std::vector<seen> cs);
  failure not_found(const std::string& name) const;
  /// The job, or job_not_found (a failure, for the waiter to decide on).
  asio::awaitable<outcome<train_job>> find(const std::string& name);
  asio::awaitable<train_job> get(const std::string& name);
  static std::string container_of(const std::string& job, const std::string& step);

  // events
  void ensure_events();
  /// Connects the daemon's event stream and waits (until `deadline`, at most
  /// 5 s) for it to be connected, on `sig` (registered on `waiters`): a read
  /// after it cannot miss a change.
  boost::asio::awaitable<void> connect_events(detail::wake_signal& sig, steady::time_point deadline);
  static asio::awaitable<void> events_loop(std::shared_ptr<impl> self);
  /// Connects the event stream and reads it until it ends or fails.
  asio::awaitable<outcome<void>> follow_events();
  void on_event(const std::string& line);
  std::uint64_t mark(const std::string& job);

  // train (container_train.cpp)
  asio::awaitable<std::string> train(detail::checked_request c);
  void make_job_dirs(const std::string& who, const train_request& r);
  node_program program_of(const std::string& who, train_request& r, const runtime& rt);
  /// Inspects (or pulls) the image; its own PYTHONPATH.
  asio::awaitable<std::string> ensure_image(docker_api& d, const std::string& who, const std::string& image);
  asio::awaitable<void> create_nodes(docker_api& d, const std::string& who, const train_request& r,
                                     const runtime& rt, node_program& p, train_rollback_state& undo);
  asio::awaitable<void> make_network(docker_api& d, const std::string& name, const std::string& net,
                                     const std::map<std::string, std::string>& net_labels,
                                     train_rollback_state& undo);
  node_spec node_spec_of(const train_request& r, const runtime& rt, const node_program& p, int rank,
                         const std::string& network_id, const std::string& node0_address) const;
  /// Removes what `undo` made, and `dir` unless it is empty.
  asio::awaitable<void> undo_train(docker_api& d, const std::string& who, const train_rollback_state& undo,
                                   const fs::path& dir);

  /// A job admitted: its containers, its queue file moved to its work dir,
  /// its deadline armed. On a failure the containers made are removed (and
  /// the work dir too unless `keep_dir`), and it is raised.
  struct pending_job;
  asio::awaitable<void> create_job(pending_job& job, bool keep_dir);

  // admission (container_queue.cpp)
  /// What a job that waits for admission needs to be started by this process.
  struct pending_job {
    detail::checked_request c;
    node_program program;
    detail::admission_need need;
  };
  std::map<std::string, pending_job, std::less<>> pending;  // this process's jobs that wait
  bool admitter_running = false;
  std::optional<detail::budget_reader> budget_file;
  fs::path queue_path(const std::string& job) const;
  std::optional<queue_file> read_queue(const std::string& job) const;
  void write_queue(const queue_file& q) const;
  std::vector<queue_file> read_queues() const;
  bool owner_alive(const queue_file& q) const;
  /// It has no containers yet, and may still get them.
  bool waits(const queue_file& q) const;
  const detail::admission_budget& admission_budget();
  static detail::queue_row row_of(const queue_file& q);
  /// The job as its queue file shows it (it has no container).
  train_job queued_job(const queue_file& q, std::optional<int> position) const;
  asio::awaitable<outcome<detail::admitted_usage>> held(docker_api& d, const std::vector<queue_file>& files);
  asio::awaitable<detail::admission_plan> queue_plan(const std::vector<queue_file>& files);
  asio::awaitable<std::optional<int>> position_of(const std::string& job);
  asio::awaitable<std::vector<queue_entry>> queue_view();
  asio::awaitable<std::string> dependency_state(const std::string& dep, std::string_view kind, bool& met);
  /// Writes the job's queue file and decides at once: a job that fits has
  /// its containers when this returns; one that does not waits in `pending`.
  asio::awaitable<void> enqueue(pending_job job);
  asio::awaitable<std::vector<pending_job>> admission_round();
  asio::awaitable<bool> settle_pending(std::int64_t t);
  static asio::awaitable<void> run_admitter(std::shared_ptr<impl> self);
  void ensure_admitter();
  asio::awaitable<void> start_admitted(pending_job job);

  // logs, cancel, delete, events
  asio::awaitable<log_stream> logs(const std::string& name, const log_options& o);
  /// The container of `step` of a job that waited for admission, once it is
  /// made (`follow`), or nullopt when the job ended without one (or at once,
  /// without `follow`).
  asio::awaitable<std::optional<seen>> await_container(const std::string& job, const std::string& step,
                                                       bool follow);
  /// SIGTERM, then docker stop with the grace period; `force`: SIGKILL only.
  asio::awaitable<void> stop_all(const std::vector<seen>& cs, bool force);
  asio::awaitable<void> cancel(const std::string& name, bool force);
  /// The engine's active deadline of a job this process started: once it has
  /// run `limit`, it is stopped as a cancel is, and reads DeadlineExceeded.
  asio::awaitable<void> enforce_deadline(std::string name, std::chrono::seconds limit);
  /// The job was stopped by its deadline (the marker enforce_deadline writes).
  bool deadline_passed(const std::string& job) const;
  asio::awaitable<void> remove(const std::string& name);
  asio::awaitable<std::vector<event>> job_events(const std::string& name);
  asio::awaitable<void> shutdown();
};

}  // namespace tjob::container
