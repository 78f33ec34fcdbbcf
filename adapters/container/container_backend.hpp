// The container backend: TrainJobs as Docker/Podman containers, laid out as
// Kubeflow's ContainerBackend lays them out (adapters/container/layout.hpp).
// The daemon is the truth: status, steps and logs are read from it (labels,
// inspect, logs), waiters are woken by its /events stream, so another process
// or a restarted engine sees the same jobs. The one header of the container
// backend that the registry sees.
//
// Threading: the engine's executor; one thread.
// Errors: tjob::error; daemon refusals are backend_error with the daemon's
//   message, naming the job and the container.
// Lifetime: shutdown() closes the events stream and awaits its loop.
#pragma once

#include "core/driver.hpp"

#include <memory>

namespace tjob::container {

/// The container backend's registration: id "container", its options
/// (container_config.hpp) and capabilities.
detail::backend_registration registration();

class backend final : public detail::backend {
 public:
  /// Connects to nothing yet: the daemon is found at the first operation.
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
  boost::asio::awaitable<std::vector<queue_entry>> queue() override;
  boost::asio::awaitable<void> shutdown() override;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tjob::container
