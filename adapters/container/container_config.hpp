// The container backend's configuration: its options (the members of its JSON
// config, engine_config::backend_config), read and checked here, as
// Kubeflow's ContainerBackendConfig has them.
#pragma once

#include <boost/json/object.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::container {

/// When an image is pulled (Kubeflow's pull_policy strings, any case).
enum class pull_policy { if_not_present, always, never };
std::string_view to_string(pull_policy p) noexcept;
std::optional<pull_policy> parse_pull_policy(std::string_view s) noexcept;

/// How node containers are networked: Kubeflow's per-job bridge network
/// `<job>-net` (nodes find node-0 by name), the host's network (node-0 at
/// 127.0.0.1), or none (a loopback only; one node).
enum class container_network { job, host, none };
std::string_view to_string(container_network n) noexcept;
std::optional<container_network> parse_container_network(std::string_view s) noexcept;

/// Docker or Podman through the Docker Engine API.
struct container_backend_config {
  /// "docker", "podman", or empty: whichever answers first (Docker first).
  std::string container_runtime;
  /// unix:///path/to/socket or tcp://host:port. Empty: $DOCKER_HOST, then
  /// $CONTAINER_HOST, then the usual sockets.
  std::string container_host;
  pull_policy pull = pull_policy::if_not_present;
  /// delete_job also removes the job's work dir on the host (Kubeflow's
  /// auto_remove; containers and the network are always removed).
  bool auto_remove = true;
  container_network network = container_network::job;
  /// The image of every job; empty: the trainer's, else the runtime's.
  std::string image;
  /// Extra bind mounts of every node container, as `docker run -v`:
  /// HOST:CONTAINER[:ro|rw].
  std::vector<std::string> volumes;
  /// Environment of every node container, under the job's own (Kubeflow's
  /// ContainerBackendConfig.env, kubeflow/sdk #636): NAME=VALUE.
  std::map<std::string, std::string> env;
  /// Timeout of each call to the daemon (streams are not bounded).
  std::chrono::milliseconds request_timeout{30'000};
};

/// The configuration in `config` (members: container_runtime,
/// container_host, pull_policy, auto_remove, network, image, volumes, env,
/// request_timeout_ms); throws tjob::error naming a member (by `name_of`)
/// that is unknown or bad.
container_backend_config config_of(const boost::json::object& config,
                                   const std::function<std::string(std::string_view)>& name_of);

}  // namespace tjob::container
