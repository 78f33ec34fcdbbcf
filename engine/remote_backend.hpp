// A backend that keeps its jobs somewhere else (a container daemon, a
// Kubernetes cluster): the engine hands every job operation to it.
//
// Threading: the engine's executor.
#pragma once

#include <tjob/engine.hpp>

#include "engine/runtimes.hpp"

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tjob::detail {

/// What a remote backend borrows from the engine.
struct remote_context {
  boost::asio::any_io_executor ex;
  std::filesystem::path home;
  std::shared_ptr<spdlog::logger> log;
  std::function<runtime_catalog()> runtimes;  ///< the engine's own runtimes
  std::chrono::milliseconds grace_period{10'000};
  std::size_t failure_log_lines = 10;
};

class remote_backend {
 public:
  virtual ~remote_backend() = default;
  virtual boost::asio::awaitable<std::string> train(train_request request) = 0;
  virtual boost::asio::awaitable<train_job> get_job(std::string name) = 0;
  virtual boost::asio::awaitable<std::vector<train_job>> list_jobs(std::optional<std::string> runtime) = 0;
  virtual boost::asio::awaitable<log_stream> get_job_logs(std::string name, log_options options) = 0;
  virtual boost::asio::awaitable<train_job> wait_for_job_status(std::string name,
                                                                std::set<job_status> statuses,
                                                                std::chrono::milliseconds timeout) = 0;
  virtual boost::asio::awaitable<void> cancel_job(std::string name) = 0;
  virtual boost::asio::awaitable<void> delete_job(std::string name) = 0;
  virtual boost::asio::awaitable<std::vector<event>> get_job_events(std::string name) = 0;
  virtual boost::asio::awaitable<void> shutdown() = 0;
  /// The runtimes jobs can use; nullopt: the engine's own catalog.
  virtual boost::asio::awaitable<std::optional<std::vector<runtime>>> list_runtimes() {
    co_return std::nullopt;
  }
  /// The runtimes that could not be used, one line each; nullopt: the engine's own.
  virtual boost::asio::awaitable<std::optional<std::vector<std::string>>> runtime_problems() {
    co_return std::nullopt;
  }
};

}  // namespace tjob::detail
