// How a TrainJob is laid out on a container daemon, as Kubeflow's
// ContainerBackend does it: label keys, names, the create body of a node
// container, and how container states map to statuses. Pure functions.
#pragma once

#include "adapters/container/container_config.hpp"

#include <tjob/backends.hpp>
#include <tjob/status.hpp>
#include <tjob/types.hpp>

#include "core/job_state.hpp"

#include <boost/json/object.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::container {

inline constexpr const char* label_job = "trainer.kubeflow.org/trainjob-name";
inline constexpr const char* label_step = "trainer.kubeflow.org/step";
inline constexpr const char* label_network = "trainer.kubeflow.org/network-id";
inline constexpr const char* label_runtime = "trainer.kubeflow.org/runtime-name";
inline constexpr const char* label_workdir = "trainer.kubeflow.org/workdir";
/// tjob's: the restarts a node may have (its restart policy's count), so a
/// reader knows an exited node the daemon will start again.
inline constexpr const char* label_max_restarts = "tjob/max-restarts";
/// tjob's: what the job was admitted for, all its nodes together (CPUs,
/// memory in bytes, GPUs), and its array; the admission of the next jobs of
/// the same $TJOB_HOME counts them (container_queue.cpp).
inline constexpr const char* label_cpus = "tjob/cpus";
inline constexpr const char* label_memory = "tjob/memory";
inline constexpr const char* label_gpus = "tjob/gpus";
inline constexpr const char* label_array = "tjob/array";
inline constexpr const char* workspace = "/workspace";
/// Where a node reads what tjob gives it (inputs_dir, read-only).
inline constexpr const char* inputs_mount = "/workspace/.tjob";
/// The job's checkpoint directory in a node ($TJOB_CHECKPOINT_DIR): the same
/// host directory for every node and every restart of a node.
inline constexpr const char* checkpoints_mount = "/tjob/checkpoints";

inline std::string network_name(const std::string& job) { return job + "-net"; }
inline std::string node_name(const std::string& job, int rank) {
  return job + "-node-" + std::to_string(rank);
}

/// One node container to create.
struct node_spec {
  std::string job, step, container_name, image, network_id, runtime;
  std::string workdir;        ///< the job's directory (the workdir label, as Kubeflow's)
  std::string workspace_dir;  ///< bound read-write at /workspace; empty: workdir
  std::string inputs_dir;     ///< bound read-only at /workspace/.tjob; empty: none
  std::string checkpoints_dir;  ///< bound read-write at checkpoints_mount; empty: none
  std::vector<std::string> cmd;
  std::map<std::string, std::string> env;
  std::string working_dir = workspace;
  container_network network = container_network::job;
  std::string network_name;                   ///< for the job network: `<job>-net`
  std::string hostname;                       ///< Config.Hostname; empty: the daemon's (the id)
  std::vector<std::string> extra_hosts;       ///< HostConfig.ExtraHosts, NAME:IP lines for /etc/hosts
  std::vector<std::string> volumes;           ///< HOST:CONTAINER[:ro|rw], after the workdir's
  std::int64_t memory = 0;                    ///< HostConfig.Memory, bytes; 0: none
  std::int64_t nano_cpus = 0;                 ///< HostConfig.NanoCpus; 0: none
  int gpus = 0;                               ///< a GPU DeviceRequest for this many; 0: none
  int max_restarts = 0;                       ///< RestartPolicy on-failure with this count; 0: none
  std::map<std::string, std::string> labels;  ///< more labels (tjob's admission labels)
};

/// The body of POST /containers/create for a node.
boost::json::object create_body(const node_spec& n);

/// Checks a `-v` volume (SOURCE:CONTAINER[:ro|rw]: SOURCE an absolute host
/// path or a named volume's name, which the daemon makes when it is missing;
/// CONTAINER absolute); throws tjob::error(invalid_argument) naming it and the fix.
void check_volume(const std::string& volume);

/// A container's status as Kubeflow maps it: running → Running, created →
/// Created, exited → Complete (0) or Failed. Kubeflow's "Unknown" for the
/// rest becomes: paused → Running, restarting → Created (tjob's Restarting,
/// as a local job between attempts), removing/dead → Failed.
job_status status_of(const std::string& state, std::optional<int> exit_code);

/// The job a line of the daemon's /events stream is about (its trainjob-name
/// label); empty for anything else, malformed lines included.
std::string job_of_event(std::string_view line);

/// A line of /events about a job's container: the job, the container's ID
/// and the action ("die", "start", ...); empty fields for anything else.
struct container_event {
  std::string job, id, action;
};
container_event container_event_of(std::string_view line);

/// The event log's name for a daemon's container action: create → Created,
/// start → Started, die and oom → Exited, kill and stop → CancelRequested,
/// anything else (pull, attach, connect, exec, destroy, ...) → Setup.
detail::log_event log_event_of_action(std::string_view action);

/// A line of the daemon's /events stream as a job event (`seq` its place),
/// its reason in the event log's vocabulary and the daemon's action kept in
/// the message; nullopt when it is not a JSON object.
std::optional<event> event_of_line(std::string_view line, std::int64_t seq);

}  // namespace tjob::container
