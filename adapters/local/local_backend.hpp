// The local backend: jobs as child processes of this engine, in venvs for
// Python code, recorded in the SQLite store under $TJOB_HOME so that every
// process on the machine sees them (a job another process runs is followed
// through inotify and that process's pidfd). The one header of the local
// backend that the registry sees.
//
// Threading: the engine's executor; blocking file work goes to a pool of one
//   thread and comes back.
// Cancellation: SIGTERM to each step's process group, SIGKILL after the grace period.
// Errors: tjob::error; the constructor throws store_unavailable when
//   $TJOB_HOME or its store cannot be used.
// Lifetime: shutdown() stops supervising (a running job is later found lost
//   by any engine on the same $TJOB_HOME) and awaits every coroutine.
#pragma once

#include "core/driver.hpp"

#include <memory>

namespace tjob::local {

struct engine_state;

/// The local backend's registration: id "local". Its settings are the
/// engine's own (venv cache, GPUs, admission budgets): it has no options of
/// its own, and refuses any.
detail::backend_registration registration();

class backend final : public detail::backend {
 public:
  /// Opens (or creates) the store under ctx.home and reconciles it.
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
  boost::asio::awaitable<std::vector<venv_cache_entry>> list_venv_cache() override;
  boost::asio::awaitable<std::vector<venv_cache_entry>> prune_venv_cache(
      std::chrono::seconds unused_for) override;
  boost::asio::awaitable<std::vector<queue_entry>> queue() override;
  boost::asio::awaitable<store_check> check_store(bool repair) override;
  boost::asio::awaitable<void> shutdown() override;

 private:
  std::shared_ptr<engine_state> impl_;
};

}  // namespace tjob::local
