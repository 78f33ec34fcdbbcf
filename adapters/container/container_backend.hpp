// The container backend: TrainJobs as Docker/Podman containers, laid out as
// Kubeflow's ContainerBackend lays them out (adapters/container/layout.hpp).
// The daemon is the truth: status, steps and logs are read from it (labels,
// inspect, logs), waiters are woken by its /events stream, so another process
// or a restarted engine sees the same jobs.
//
// Threading: the engine's executor; one thread.
// Errors: tjob::error; daemon refusals are backend_error with the daemon's
//   message, naming the job and the container.
#pragma once

#include <tjob/engine.hpp>

#include "engine/remote_backend.hpp"

#include <memory>

namespace tjob::container {

using context = detail::remote_context;

class backend final : public detail::remote_backend {
 public:
  backend(context ctx, container_backend_config cfg);
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

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tjob::container
