// tjob/backends.hpp — where jobs run: the backends this program has (each a
// registered task driver with an id, what it does itself, and the options of
// its configuration), and the admission budgets the engine applies to the
// backends whose jobs tjob itself admits.
//
// A backend is named by its id ("local", "container", "kubernetes",
// "remote", or one registered by the program) and configured by a JSON
// object of its own options (engine_config::backend_config), which the
// backend checks: an unknown or bad member is refused, naming it. Callers ask
// a backend's capabilities, never its name.
//
// Threading: plain values; registered_backends() may be called from any thread.
#pragma once

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob {

/// What a backend does itself. The engine and every caller (the CLI, the
/// Python package, tjob serve) decide by these, never by the backend's id.
struct backend_capabilities {
  /// Its registered id ("local", "container", "kubernetes", "remote", ...).
  std::string id;
  /// Its jobs run on this machine as this user: a Python file is read where
  /// it is, a working directory is one of this machine's, and $TJOB_PYTHON
  /// and $TJOB_SYSTEM_SITE_PACKAGES apply.
  bool runs_here = false;
  /// It hands jobs to another tjob (a server), whose settings rule: this
  /// engine's runtimes, budgets and venv cache do not apply.
  bool forwards = false;
  /// A process of tjob's owns each job (a `tjob train` leaves a supervisor):
  /// until the job ends, or, when `owner_until_started`, until it has started
  /// (then its peer keeps it), unless it has a deadline tjob enforces.
  bool needs_owner = false;
  bool owner_until_started = false;
  /// Its jobs wait in tjob's admission queue under the budgets
  /// (admission_config, `tjob queue`); else its peer schedules them.
  bool admission = false;
  /// How its peer queues jobs when tjob does not, for messages ("the
  /// cluster, where Kueue queues them"); empty: it starts them at once.
  std::string queued_by;
  /// tjob restarts a failed job (retries), each attempt with a log of its own.
  bool restarts = false;
  /// Job arrays (train_request::array).
  bool arrays = false;
  /// Labels and annotations are kept with the job.
  bool keeps_labels = false;
  /// A trainer's image is used (else the runtime's, or none).
  bool takes_image = false;
  /// A working directory is a path inside the job's image (else, unless
  /// runs_here, a job has none).
  bool workdir_in_image = false;
  /// A trainer's image is run as it is, its command included (Kubeflow's
  /// CustomTrainerContainer).
  bool runs_images_as_is = false;
  /// A trainer's code_dir (a directory of this machine, snapshotted at
  /// submit) becomes the job's working directory, a copy of its own.
  bool takes_code_dir = false;
  /// Local Python jobs' venv cache (`tjob cache`).
  bool venv_cache = false;
  /// A warning signal before the active deadline (train_request::warning).
  bool stop_warning = false;
  /// A start no earlier than a given time (train_request::begin).
  bool begin_time = false;
  /// Where under $TJOB_HOME a job's own files are ("jobs/<name>",
  /// "containers/<name>"): the directory name; empty: none here.
  std::string job_files;
};

/// One option of a backend's configuration: a member of its JSON config
/// object, and the CLI option that gives it.
struct backend_option {
  enum class value_kind {
    text,   ///< a string
    path,   ///< a string, a file (the CLI makes it absolute)
    texts,  ///< an array of strings (the CLI option repeats)
    flag,   ///< a boolean (the CLI flag sets it to `flag_value`)
    seconds ///< a whole number of seconds (0 and more)
  };
  std::string name;  ///< the config member: "container_host"
  std::string flags; ///< the CLI option, as CLI11 names it: "--container-host", "-v,--volume"
  std::string help;
  value_kind kind = value_kind::text;
  bool flag_value = true;  ///< what a `flag` sets (--keep-workdir sets auto_remove false)
  /// Giving it chooses its backend (--server chooses remote); `env` too.
  bool selects_backend = false;
  /// An environment variable that gives it when the CLI does not.
  std::string env;
  /// What its value is, for the help and messages ("URL").
  std::string value_name;
};

/// A registered backend.
struct backend_description {
  std::string id;
  std::string summary;  ///< what it runs jobs on, for `--backend`'s help
  backend_capabilities capabilities;
  std::vector<backend_option> options;
};

/// The backends this program can use, in the order they were registered
/// (the built-in ones first: local, container, kubernetes, remote).
std::vector<backend_description> registered_backends();
/// The backend of `id`; nullopt when none is registered by that id.
std::optional<backend_description> find_backend(std::string_view id);

/// Checks a backend's configuration as the backend will take it: throws
/// tjob::error (invalid_argument) for an unknown backend, an unknown member
/// or a bad value, naming it by `name_of(member)` (default: the member's own
/// name; the CLI names its options).
void check_backend_config(std::string_view id, const boost::json::object& config,
                          const std::function<std::string(std::string_view member)>& name_of = {});

/// The budgets of admission (docs/scheduling.md): a job waits, Created with
/// reason Queued, until what it needs fits beside the jobs that run. Every
/// engine on one $TJOB_HOME shares the queue and checks it against these.
/// Unset: $TJOB_HOME/config.yaml's `admission:` entry, else the machine's
/// (its CPUs, its MemTotal, no limit on jobs at once). 0: no limit. GPUs are
/// limited by the device list (engine_config::gpu_devices). The local backend
/// admits; on Kubernetes admission is Kueue's.
struct admission_config {
  std::optional<int> max_running;       ///< jobs running at once
  std::optional<int> cpus;              ///< CPUs the running jobs hold together
  std::optional<std::uint64_t> memory;  ///< bytes the running jobs hold together
};

}  // namespace tjob
