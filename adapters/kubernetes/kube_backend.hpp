// The kubernetes backend: TrainJobs on a cluster running Kubeflow Trainer,
// created with the body Kubeflow's SDK sends, read back as Kubeflow reads
// them (status from conditions and pods, steps from the JobSet's pods), and
// waited for through watches (one per kind, shared by every waiter) instead
// of Kubeflow's 2-second polling.
//
// Threading: the engine's executor; one thread.
// Errors: tjob::error naming the job, the namespace and the server, quoting
//   the server's Status message. Tokens never appear.
#pragma once

#include "engine/remote_backend.hpp"

#include <memory>

namespace tjob::kube {

using context = detail::remote_context;

class backend final : public detail::remote_backend {
 public:
  /// Loads the kubeconfig (or in-cluster config) now: a bad one fails here.
  backend(context ctx, kubernetes_backend_config cfg);
  ~backend() override;

  boost::asio::awaitable<std::string> train(train_request request) override;
  boost::asio::awaitable<train_job> get_job(std::string name) override;
  boost::asio::awaitable<std::vector<train_job>> list_jobs(std::optional<std::string> runtime) override;
  boost::asio::awaitable<log_stream> get_job_logs(std::string name, log_options options) override;
  boost::asio::awaitable<train_job> wait_for_job_status(std::string name,
                                                        std::set<job_status> statuses,
                                                        std::chrono::milliseconds timeout) override;
  boost::asio::awaitable<void> cancel_job(std::string name) override;
  boost::asio::awaitable<void> delete_job(std::string name) override;
  boost::asio::awaitable<std::vector<event>> get_job_events(std::string name) override;
  boost::asio::awaitable<void> shutdown() override;
  boost::asio::awaitable<std::optional<std::vector<runtime>>> list_runtimes() override;
  boost::asio::awaitable<std::optional<std::vector<std::string>>> runtime_problems() override;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tjob::kube
