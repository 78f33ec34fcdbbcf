// tjob/backends.hpp — where jobs run: the backend kinds and their configs
// (Kubeflow's LocalProcessBackendConfig / ContainerBackendConfig /
// KubernetesBackendConfig), and `remote`: a running `tjob serve`, whichever
// backend it runs.
//
// Threading: plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob {

enum class backend_kind { local, container, kubernetes, remote };
std::string_view to_string(backend_kind k) noexcept;
/// "local", "container", "kubernetes", "remote"; nullopt for anything else.
std::optional<backend_kind> parse_backend_kind(std::string_view s) noexcept;

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
  /// Timeout of each call to the daemon (streams are not bounded).
  std::chrono::milliseconds request_timeout{30'000};
};

/// A Kubernetes cluster running Kubeflow Trainer (Kubeflow's
/// KubernetesBackendConfig). Jobs are TrainJob objects; the cluster keeps them.
struct kubernetes_backend_config {
  /// Where jobs go; empty: the kubeconfig context's namespace, else "default".
  std::string namespace_name;
  /// A kubeconfig file; empty: $KUBECONFIG (a ':'-separated list, merged as
  /// kubectl merges it), else ~/.kube/config; inside a pod, the in-cluster
  /// service account.
  std::string config_file;
  /// The kubeconfig context; empty: its current-context.
  std::string context;
  /// Timeout of each request to the API server (watches and log streams are not bounded).
  std::chrono::milliseconds request_timeout{30'000};
  /// The service-account directory that means "running in a pod".
  std::filesystem::path in_cluster_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
};

/// A running `tjob serve` (docs/serve.md): every operation is a request to
/// its API v1, and the server's own backend runs the jobs. The server owns
/// them: this process may end at any time.
struct remote_backend_config {
  /// unix:///path/to/tjob.sock, https://host:port, or tcp://host:port (plain
  /// HTTP: refused for a host that is not this machine's loopback unless
  /// `insecure`). Empty: $TJOB_SERVER.
  std::string server;
  /// Send the token over plain HTTP (tcp://) to a host off loopback, where
  /// anyone on the path reads it.
  bool insecure = false;
  /// The bearer token a TCP listener asks for. Empty: $TJOB_TOKEN, else the
  /// first line of `token_file` (refused when others may read it, as ssh
  /// refuses such a key).
  std::string token;
  std::filesystem::path token_file;
  /// PEM certificates of the CAs that sign the server's certificate (https).
  /// Empty: $TJOB_SERVER_CA, else the system's trust store.
  std::filesystem::path ca_file;
  /// Timeout of each request (log streams, watches and waits are not bounded).
  std::chrono::milliseconds request_timeout{30'000};
};

}  // namespace tjob
