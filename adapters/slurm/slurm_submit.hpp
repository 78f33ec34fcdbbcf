// How a TrainJob becomes one Slurm job: the backend's configuration, sbatch's
// argument vector, and the fixed scripts every job runs (the batch script,
// the node wrapper, the Python setup helper). The scripts are the same text
// for every job: what is the job's own (its command, its code, its
// packages) travels as arguments, environment and files, never as script
// text, so no user string is ever parsed by a shell.
//
// Threading: pure functions.
// Errors: config_of throws tjob::error(invalid_argument) naming the member.
#pragma once

#include <tjob/types.hpp>

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::slurm {

/// A Slurm cluster reached with its own commands (sbatch, squeue, scancel,
/// scontrol) from this machine.
struct slurm_config {
  /// The slurm.conf the commands use (SLURM_CONF); empty: Slurm's own lookup.
  std::string slurm_conf;
  std::string partition, account, qos;  ///< empty: the cluster's defaults
  /// More sbatch options, each one argument ("--constraint=a100").
  std::vector<std::string> sbatch_options;
  /// Where each job's directory is (its scripts, code, logs and end records):
  /// a file system every node of the cluster mounts at the same path.
  /// Empty: $TJOB_HOME/slurm.
  std::string shared_dir;
  /// A job's nodes are tasks packed onto as few machines as Slurm gives
  /// (--ntasks=N), not one machine each (--nodes=N --ntasks-per-node=1): one
  /// big machine, or a test cluster of one node.
  bool pack_nodes = false;
  /// The longest interval between two reads of the queue while someone waits.
  std::chrono::milliseconds poll_interval{2000};
  /// How long one of Slurm's commands may take.
  std::chrono::milliseconds command_timeout{60000};
};

/// Members: slurm_conf, partition, account, qos, sbatch_options,
/// shared_dir, pack_nodes, poll_interval_ms, command_timeout_ms.
slurm_config config_of(const boost::json::object& config,
                       const std::function<std::string(std::string_view)>& name_of);

/// What sbatch is given for one job.
struct submission {
  std::string job_dir;   ///< absolute, on the shared file system
  std::string job_name;  ///< Slurm's --job-name
  std::string comment;   ///< tjob's mark (comment_of)
  std::string chdir;     ///< the nodes' working directory
  int num_nodes = 1;
  int cpus_per_task = 1;
  std::uint64_t memory_per_node = 0;  ///< bytes; 0: the partition's default
  int gpus_per_node = 0;
  std::chrono::seconds time_limit{0};  ///< 0: the partition's
  int nice = 0;
  std::string dependency;  ///< Slurm's --dependency text; empty: none
  bool requeue = false;    ///< it may restart: --requeue, else --no-requeue
  /// A signal to every node's processes this long before the time limit
  /// (train_request::warning): --signal=NUM@SECONDS.
  std::optional<stop_warning> warning;
  /// Not before this many seconds from the submission (train_request::begin):
  /// --begin=now+N, which sbatch counts on its own clock (the login host's
  /// time zone does not matter); 0: at once.
  std::chrono::seconds begin_after{0};
  /// What every node runs (the batch script's arguments).
  std::vector<std::string> command;
};

/// sbatch's argv: the configured options, the job's geometry and policy,
/// then the batch script and the command as its arguments.
std::vector<std::string> sbatch_argv(const slurm_config& cfg, const submission& s);

/// Slurm's --time for a deadline: minutes, rounded up (Slurm keeps time
/// limits in whole minutes).
std::string time_limit_text(std::chrono::seconds s);

/// The retry policy as the batch script reads it (restart_plan_file): line
/// 1 the exit codes that are retried (decide_retry's answer for each of 1 to
/// 255), line K+1 the seconds to wait before restart K; as many such lines as
/// restarts.
std::string restart_plan(const retry_policy& p);
inline constexpr const char* restart_plan_file = "restart-plan";

/// The fixed files of a job's directory.
inline constexpr const char* batch_script_file = "job.sh";
inline constexpr const char* node_script_file = "node.sh";
inline constexpr const char* helper_file = "tjob_slurm.py";
std::string_view batch_script();
std::string_view node_script();
/// The Python helper: `setup SETUP.json` builds the job's venv and installs
/// its packages; `port` prints a free TCP port for torch's rendezvous.
std::string_view helper_script();

}  // namespace tjob::slurm
