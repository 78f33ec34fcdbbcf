// The kubernetes backend: TrainJobs on a cluster running Kubeflow Trainer,
// created with the body Kubeflow's SDK sends, read back as Kubeflow reads
// them (status from conditions and pods, steps from the JobSet's pods), and
// waited for through watches (one per kind, shared by every waiter) instead
// of Kubeflow's 2-second polling.
//
// Threading: the engine's executor; one thread.
// Lifetime: shutdown() stops both watches and awaits their coroutines.
// Errors: tjob::error naming the job, the namespace and the server, quoting
//   the server's Status message. Tokens never appear.
#pragma once

#include "core/driver.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

namespace tjob::kube {

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

/// Its configuration from its JSON config (members: namespace, config_file,
/// context, request_timeout_ms, in_cluster_dir); throws tjob::error naming a
/// member (by `name_of`) that is unknown or bad.
kubernetes_backend_config config_of(const boost::json::object& config,
                                    const std::function<std::string(std::string_view)>& name_of);

/// The kubernetes backend's registration: id "kubernetes".
detail::backend_registration registration();

class backend final : public detail::backend {
 public:
  /// Loads the kubeconfig (or in-cluster config) now: a bad one fails here.
  explicit backend(detail::backend_context ctx);
  ~backend() override;

  backend_capabilities capabilities() const override;
  boost::asio::awaitable<std::string> train(detail::checked_request request) override;
  boost::asio::awaitable<train_job> get_job(std::string name) override;
  boost::asio::awaitable<std::vector<train_job>> list_jobs(std::optional<std::string> runtime) override;
  boost::asio::awaitable<log_stream> get_job_logs(std::string name, log_options options) override;
  boost::asio::awaitable<std::unique_ptr<detail::job_watch>> watch_job(std::string name) override;
  boost::asio::awaitable<std::unique_ptr<detail::change_watch>> watch_all() override;
  boost::asio::awaitable<void> cancel_job(std::string name, cancel_options options) override;
  boost::asio::awaitable<void> delete_job(std::string name) override;
  boost::asio::awaitable<std::vector<event>> get_job_events(std::string name) override;
  boost::asio::awaitable<void> shutdown() override;
  /// The cluster's TrainingRuntimes and ClusterTrainingRuntimes.
  boost::asio::awaitable<std::shared_ptr<const detail::runtime_catalog>> runtimes(bool report) override;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tjob::kube
