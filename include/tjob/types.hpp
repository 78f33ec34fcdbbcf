// tjob/types.hpp — what a job is made of: trainers, requests, jobs, steps,
// runtimes and events. Plain values, copyable, no I/O.
//
// Threading: values only; share freely once built.
#pragma once

#include <tjob/status.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tjob {

using clock = std::chrono::system_clock;

/// Runs a program with arguments, as given: argv[0] is looked up on PATH (the
/// child's PATH, i.e. `env["PATH"]` when set, else the engine's) unless it
/// contains a '/'. No shell is involved; every string is passed as data.
struct command_trainer {
  std::vector<std::string> command;        ///< argv; must not be empty
  std::map<std::string, std::string> env;  ///< laid over the engine's environment
  std::string working_dir;  ///< empty: the job's own `jobs/<name>/work/` (in a container: /workspace)
  /// A directory of this machine sent with the job (`--working-dir`; Ray's
  /// working_dir): a snapshot taken at submit (.gitignore/.tjobignore
  /// excludes, at most 256 MiB) becomes the job's own working directory, a
  /// copy per job. Not with working_dir. Local, container and Slurm backends.
  std::string code_dir;
  std::string image;        ///< container backend: the image; empty: the config's, else the runtime's
  /// What the job is admitted for (engine_config::admission): CPUs and bytes
  /// of memory it holds while it runs. `cpus` is a reservation; `memory`
  /// (0: none) is also the limit of the node's processes together, as a
  /// container's: past it the kernel's OOM killer ends one and the step fails
  /// OOMKilled (a memory cgroup; where none can be made, an address-space
  /// limit per process, which the job's events say).
  int cpus = 1;
  std::uint64_t memory = 0;
};

/// Runs Python training code in a virtual environment of its own, as
/// Kubeflow's CustomTrainer: a function (its source and name, called with
/// keyword arguments) or a script (run as it is). The packages are installed
/// with pip after the runtime's, merged by Kubeflow's rules; the code runs
/// under torchrun when the runtime's framework is torch, else under python.
struct python_trainer {
  std::string source;             ///< Python source text (API); or
  std::string source_file;        ///< a .py file: its text is the source
  std::string function;           ///< empty: run the source as a script
  std::string function_args;      ///< a JSON object of keyword arguments; empty: none
  std::vector<std::string> args;  ///< command-line arguments of a script
  std::vector<std::string> packages_to_install;
  std::vector<std::string> pip_index_urls;  ///< empty: $DEFAULT_PIP_INDEX_URLS or PyPI
  std::map<std::string, std::string> env;   ///< laid over the engine's environment
  std::string working_dir;                  ///< empty: the job's own work dir
  /// As command_trainer::code_dir; the copy is also first on PYTHONPATH, so
  /// the function imports the directory's modules (Python's working_dir).
  std::string code_dir;
  std::string python;                       ///< interpreter; empty: the first python3 on PATH
  bool system_site_packages = false;        ///< the venv sees the interpreter's packages (a system torch)
  bool keep_venv = false;                   ///< keep the venv after the job, whatever the config says
  bool refresh_venv =
      false;  ///< rebuild the cached venv this job would copy (new releases of unpinned packages)
  int procs_per_node = 1;  ///< torchrun --nproc_per_node (resources_per_node cpu)
  bool cpu_limit =
      false;  ///< also limit each node's CPU time to procs_per_node CPUs (cgroup), where the machine allows
  /// Bytes of memory for each node's code, its processes together, as
  /// Kubernetes and Docker mean it (a memory cgroup; past it the OOM killer
  /// ends a process and the step fails `OOMKilled`). Where no cgroup can be
  /// made: an address-space limit (RLIMIT_AS) per process, with a warning in
  /// the log. 0: none.
  std::uint64_t memory_limit = 0;
  int gpus = 0;  ///< GPUs per node, leased from the engine's device list (container: a GPU DeviceRequest)
  std::string image;  ///< container backend: the image; empty: the config's, else the runtime's
};

/// Kubeflow's resources_per_node for each node of a Python job: `cpu` (a
/// whole number of processes: torchrun's --nproc_per_node, and a CPU-time
/// limit), `memory` (bytes with an optional unit: 512Mi, 4Gi, 10G) and `gpu`
/// (or `nvidia.com/gpu`; 0 to 64), set on `t`. Throws tjob::error
/// (invalid_argument) naming `what` (the option or field it came from), the
/// key, the value and the fix.
void set_resources_per_node(python_trainer& t, const std::map<std::string, std::string>& resources,
                            const std::string& what = "resources_per_node");

/// Bytes with an optional unit, as resources_per_node's memory takes them
/// (512Mi, 4Gi, 10G). Throws tjob::error (invalid_argument) naming `what`,
/// the value and the fix, as set_resources_per_node words it.
std::uint64_t parse_memory(const std::string& value, const std::string& what);

/// The kinds of trainer a job can have; the engine dispatches on it.
using trainer = std::variant<command_trainer, python_trainer>;

/// Restarts of a job whose code fails (docs/scheduling.md): Nomad's restart
/// block, Slurm's --requeue. An attempt whose node's process exits non-zero
/// (or is killed by a signal: 128 + its number) is retried, up to
/// `max_restarts` times, after a backoff of `backoff`, then `backoff_factor`
/// times the last, at most `max_backoff`. A job that cannot start or set up,
/// is cancelled, is lost or passes its deadline is not retried. Local
/// backend; on Slurm, every node again in the job's allocation (and Slurm's
/// own requeues count); on the container backend the daemon's restart
/// policy (on-failure:max_restarts, its own backoff; one node, every exit code).
struct retry_policy {
  int max_restarts = 0;  ///< 0: none (the default); at most 1000
  std::chrono::milliseconds backoff{1000};
  double backoff_factor = 2;  ///< 1 to 100
  std::chrono::milliseconds max_backoff{60000};
  std::vector<int> retry_on;     ///< only these exit codes are retried; empty: every failure
  std::vector<int> never_retry;  ///< these exit codes never are (they win over retry_on)
  bool operator==(const retry_policy&) const = default;
};

/// A warning before a stop the job can foresee (train_request::warning).
/// The job's code must handle the signal (a Python job's processes do:
/// tjob.stop_requested() reads it), or its default action applies.
struct stop_warning {
  int signal = 10;  ///< SIGUSR1 on Linux; stop_warning_text names it
  std::chrono::seconds before{60};
};

/// Everything `train` needs. The runtime defaults to Kubeflow's
/// `torch-distributed` when empty.
struct train_request {
  std::string name;  ///< empty: generated (a letter + 11 hex characters)
  /// Runtime name; empty: "torch-distributed". On the local backend a
  /// command job given none uses nothing of a runtime and is listed under
  /// none (its train_job's runtime is empty); the container and kubernetes
  /// backends take its image or runtimeRef from the default and list it.
  std::string runtime;
  trainer job_trainer;
  int num_nodes = 1;
  /// Kubernetes backend: the TrainJob's labels and annotations (Kubeflow's
  /// Labels and Annotations options); the other backends refuse them.
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  /// Admission order (docs/scheduling.md): higher first, first submitted
  /// first within a priority. On Kubernetes, Kueue's priority class
  /// `tjob-priority-<n>` (the cluster must have it).
  int priority = 0;
  /// Seconds the job may run, counted from Running; past it, it is stopped
  /// (gracefully, then forced) and ends Failed, reason DeadlineExceeded. On
  /// Kubernetes: the TrainJob's activeDeadlineSeconds. 0: none.
  std::chrono::seconds active_deadline{0};
  /// Dependencies, as Slurm's --dependency (docs/scheduling.md): the job
  /// waits, Created with reason Waiting, until each named job has ended
  /// Complete (after_ok), ended at all (after_any) or ended Failed
  /// (after_not_ok); then it joins the admission queue. When one ends in a
  /// way that can never satisfy it, or is deleted first, the job ends Failed,
  /// reason DependencyNeverSatisfied. Each must name an existing job. Local
  /// and container backends.
  std::vector<std::string> after_ok, after_any, after_not_ok;
  /// A member of a job array (Slurm's --array; docs/scheduling.md): the
  /// array's name, shown with the job, and the most of its members that run
  /// at once (0: no limit of its own). Local and container backends.
  std::string array;
  int array_limit = 0;
  /// Restarts when its code fails (retry_policy). Local backend only; on
  /// Kubernetes a restart policy is the runtime's (JobSet failurePolicy).
  retry_policy retry;
  /// A signal sent to the job's processes `before` its active deadline, so
  /// that it can save a checkpoint (Slurm's --signal=SIG@TIME); the deadline's
  /// stop (SIGTERM, the grace period, SIGKILL) follows as usual. Needs an
  /// active deadline longer than `before`. Backends with the stop_warning
  /// capability. Unset: none.
  std::optional<stop_warning> warning;
  /// Not before this time (Slurm's --begin; docs/scheduling.md): the job
  /// waits, Created with reason Waiting, until then (and for its
  /// dependencies), then joins the admission queue; its active deadline
  /// counts from its start as always. A time already past: at once. Backends
  /// with the begin_time capability. Unset: at once.
  std::optional<clock::time_point> begin;
};

/// The trainer part of a runtime, as Kubeflow's `RuntimeTrainer`.
struct runtime_trainer {
  std::string trainer_type = "CustomTrainer";
  std::string framework;
  std::string image;
  int num_nodes = 1;
  std::string device = "Unknown";
  std::string device_count = "Unknown";
  std::vector<std::string> packages;
};

/// A training runtime, as Kubeflow's `Runtime`.
struct runtime {
  std::string name;
  runtime_trainer trainer;
  std::string kind = "ClusterTrainingRuntime";
};

/// One unit of a job that runs a process (`node-0`, `node-1`, …).
struct step {
  std::string name;
  job_status status = job_status::created;
  std::optional<int> exit_code;
  std::string reason;    ///< why it failed: "exit code 3", "cancelled", "lost", …
  std::int64_t pid = 0;  ///< the process while it runs; 0 before it starts
  /// Which attempt of the job this is (retry_policy): 1, then one more for
  /// each restart. Its earlier attempts' logs: log_options::attempt.
  int attempt = 1;
};

/// A job as the engine knows it. `status` is derived from the event log.
struct train_job {
  std::string name;
  std::string runtime;
  std::vector<step> steps;
  int num_nodes = 1;
  clock::time_point creation_timestamp;
  std::optional<clock::time_point> start_time;  ///< when its first step started running
  /// Once the job has ended (Complete or Failed): when its last step ended
  /// (the latest end so far while a failed job's other steps are stopping).
  std::optional<clock::time_point> end_time;
  job_status status = job_status::created;
  std::string reason;  ///< for Failed: the failing step's reason; Queued while it waits for admission
  /// While it waits for admission (Created, reason Queued): its place, 1 = next.
  std::optional<int> queue_position;
  /// The job array it belongs to (train_request::array); empty: none.
  std::string array;
  /// The latest progress its training code reported (Kubeflow's
  /// update_trainjob_status; on Kubernetes the TrainJob's
  /// status.trainerStatus): a percentage (0 to 100), the estimated seconds
  /// left, its metrics (name and value, as reported, at most 256) and when.
  /// Unset (empty) until a first report.
  std::optional<int> progress_percent;
  std::optional<std::int64_t> estimated_remaining_seconds;
  std::vector<std::pair<std::string, std::string>> metrics;
  std::optional<clock::time_point> progress_updated;
};

/// A job that waits for admission (engine::get_queue, `tjob queue`).
struct queue_entry {
  std::string name;
  int position = 0;  ///< 1: the next to start
  int priority = 0;
  std::string waits_for;  ///< what it waits for: "2 CPUs (2 of 2 in use)", "job x ahead of it"
  clock::time_point since;
  int cpus = 0;  ///< what it needs, all its nodes together
  std::uint64_t memory = 0;
  int gpus = 0;
};

/// Whether `a` and `b` are one job in one state as a watcher sees it: name,
/// status, reason, start and end, each step's name, status, exit code, reason
/// and attempt, and the reported progress (pids and the creation time aside). wait_for_jobs_change
/// returns once this no longer holds for some job.
bool same_state(const train_job& a, const train_job& b);

/// One entry of a job's append-only event log.
struct event {
  std::int64_t seq = 0;  ///< order within the store
  clock::time_point time;
  std::string step;  ///< empty for job-level events
  /// One vocabulary on every backend: Created, Started, Exited, StartFailed,
  /// Cancelled, Lost, Setup, Queued, Admitted, Waiting, DevicesLeased,
  /// CancelRequested, Restarting, DeleteRequested, Progress. The
  /// container and kubernetes backends map their peer's events to these and
  /// keep the peer's own word (a daemon's action, a cluster's reason) in `message`.
  std::string reason;
  std::string message;  ///< for a person
  /// A Progress event (what the training code reported then): the fields as
  /// train_job has them. Unset and empty on every other event.
  std::optional<int> progress_percent;
  std::optional<std::int64_t> estimated_remaining_seconds;
  std::vector<std::pair<std::string, std::string>> metrics;
};

/// A setup phase of a local Python job as its Setup event reports it:
/// "venv done in 0.04 s", "pip install done in 0.63 s", "venv from the cache
/// (KEY) in 0.002 s" (a hit), "venv cached as KEY; copied in 0.003 s" (a miss,
/// built into the cache). For metrics (tjob serve's tjob_setup_seconds).
struct setup_phase {
  std::string phase;  ///< "check", "venv", "pip install", "cache copy", ...
  double seconds = 0;
  /// For "cache copy": the venv came from the cache (true) or was built into it (false).
  std::optional<bool> cache_hit;
};
/// The phase a Setup event reports; nullopt for any other event.
std::optional<setup_phase> setup_phase_of(const event& e);

/// One entry of the local backend's venv cache (`tjob cache list`): a venv
/// built once for this interpreter, package list, index URLs and
/// system-site-packages flag, copied into every job that needs the same.
struct venv_cache_entry {
  std::string key;
  std::string python;  ///< the interpreter's real executable
  std::string python_version;
  std::vector<std::string> packages;
  std::vector<std::string> index_urls;
  bool system_site_packages = false;
  std::uint64_t bytes = 0;
  clock::time_point created;
  clock::time_point last_used;  ///< when a job last took a copy
  std::string problem;          ///< empty when usable; a broken entry is rebuilt, never used
};

/// What `engine::check_store` found (`tjob doctor`).
struct store_check {
  std::string store;                  ///< the file checked
  std::vector<std::string> problems;  ///< as SQLite's integrity_check words them; empty: sound
  bool indexes_only = false;          ///< every problem is in an index: the tables are whole
  bool repaired = false;              ///< `problems` were mended (the indexes rebuilt): now sound
  std::string meaning;                ///< what the damage means for the jobs, and what to do
  /// Job directories the store has no record of (a lost store, a removal
  /// that failed): each holds its name, which no new job can take. Listed,
  /// never removed: what is in them is the user's to keep or delete.
  std::vector<std::string> unrecorded_dirs;
};

/// Options of `cancel_job`.
struct cancel_options {
  /// SIGKILL now, without the grace period (local and container backends; on
  /// Kubernetes the cluster's own grace period applies either way).
  bool force = false;
  /// The time between SIGTERM and SIGKILL (local backend). Unset: the job's
  /// own, the grace period of the engine that made it (`tjob train --grace`),
  /// whichever process cancels it.
  std::optional<std::chrono::milliseconds> grace;
  /// (tjob's; `tjob cancel --checkpoint`) Warn the job first, as before its
  /// deadline: its warning signal (`train_request::warning`, which it must
  /// have been submitted with) goes to its processes now, then the cancel
  /// waits up to the warning's lead time for the job to save and end by
  /// itself, and only then stops it as usual (SIGTERM, the grace, SIGKILL).
  /// It ends Failed, reason cancelled, either way. Backends with the
  /// `stop_warning` capability (local, slurm); not with `force`.
  bool checkpoint = false;
};

/// Options of `get_job_logs`.
struct log_options {
  std::string step = "node-0";
  bool follow = false;
  std::optional<std::size_t> tail;  ///< only the last N lines (then follow, if asked)
  /// Each line begins with the time it was written and a space, as Docker's
  /// and kubectl's `--timestamps` print it: RFC 3339 in UTC with nine digits
  /// of fraction ("2026-12-03T19:31:20.672427912Z "; format_time). Local
  /// jobs: the time the engine saw the line in the log, to about 50 ms;
  /// Podman gives whole seconds.
  bool timestamps = false;
  /// Only lines written at or after this time (then `tail` of those).
  std::optional<clock::time_point> since;
  /// Only what this attempt of the job wrote (step::attempt; 1 = the first).
  /// Empty: every attempt's output, one after another.
  std::optional<int> attempt;
};

/// Why `name` cannot be a job's name (an RFC 1035 label of at most 63
/// characters: lowercase letters, digits and '-', beginning with a letter and
/// ending with a letter or digit), or nullopt when it can.
std::optional<std::string> job_name_problem(std::string_view name);

/// Why a file that holds a secret (a bearer token, a TLS private key) must
/// not be used: others may read or write it, as ssh refuses such a key
/// ("is readable by others (mode 0644); ... chmod 600 FILE"). Empty when it
/// is private, or when it cannot be examined (the read that follows says why).
std::string secret_file_problem(const std::filesystem::path& file);

/// "2026-12-03T19:31:20Z", with a fraction of up to nine digits and a zone
/// of 'Z' or +hh:mm / -hh:mm, as a time; nullopt for anything else (and for
/// years outside 1970..2261).
std::optional<clock::time_point> parse_time(std::string_view rfc3339);
/// RFC 3339 in UTC with nine digits of fraction: how log_options::timestamps
/// writes a line's time.
std::string format_time(clock::time_point t);

/// A start time in one of Slurm's --begin forms, `now` being the time to
/// count from: `now+N` with an optional unit (s, m, h, d; seconds,
/// minutes, hours, days; none: seconds), `HH:MM[:SS]` (the next time the
/// local clock shows it: today, or tomorrow when it has passed),
/// `YYYY-MM-DD[THH:MM[:SS]]` in local time, or RFC 3339 with a zone
/// (parse_time). nullopt for anything else; begin_time_forms says which
/// forms there are, for an error.
std::optional<clock::time_point> parse_begin_time(std::string_view text, clock::time_point now);
extern const char* const begin_time_forms;

}  // namespace tjob
