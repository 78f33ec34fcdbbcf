// The one interface every backend implements, and what a backend borrows from
// the engine. The engine (engine/engine.cpp) is the layer above it: it
// validates a request, finds its runtime, dispatches, and holds the policy
// that is the same on every backend (the wait/settle rule, the failure message
// with the last log lines, the not-found wording). A backend does only what
// differs: where jobs run and how their state is read back.
//
// Threading: every operation runs on the engine's executor, one thread.
// Cancellation: cancel_job is graded in the backend's own terms (SIGTERM then
//   SIGKILL, docker stop, suspend then delete); shutdown() is not cancelling.
// Errors: tjob::error, naming the job; job_not_found is worded by
//   detail::not_found_message (engine/messages.hpp).
// Lifetime: made by make_backend (registry/registry.cpp), the only place that
//   knows the backends' types; shutdown() is awaited before it is destroyed
//   and awaits every coroutine the backend started.
#pragma once

#include <tjob/engine.hpp>

#include "core/runtimes.hpp"

#include <boost/json/object.hpp>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tjob::detail {

/// What a backend borrows from the engine.
struct backend_context {
  boost::asio::any_io_executor ex;
  engine_config cfg;  ///< home made absolute, logger set
  std::filesystem::path home;
  std::shared_ptr<spdlog::logger> log;
  /// The engine's runtime catalog (built in, $TJOB_HOME/runtimes, runtime_dirs),
  /// read afresh on each call (shared while nothing changed: a `train` copies
  /// one runtime, not the catalog); `report` logs each manifest that cannot be
  /// used.
  std::function<std::shared_ptr<const runtime_catalog>(bool report)> runtimes;
};

/// A request the engine has checked (detail::check_request): its name and
/// runtime are filled in.
struct checked_request {
  train_request request;
  runtime rt;
  /// The name was generated: on a collision the backend may pick another
  /// (detail::generate_job_name) instead of failing.
  bool generated_name = false;
};

/// Follows one job for a waiter. The engine reads the job, decides, and waits
/// for the next change; the backend says how changes reach it (a transition,
/// inotify and a pidfd, the daemon's events, a watch).
class job_watch {
 public:
  virtual ~job_watch() = default;
  /// The job as it is now; nullopt when it cannot be read for a moment (the
  /// peer restarting) and the wait should go on. Throws job_not_found when
  /// the job is gone.
  virtual boost::asio::awaitable<std::optional<train_job>> current() = 0;
  /// Returns when the job may have changed since the last current() (true),
  /// or when `deadline` passed with nothing new (false).
  virtual boost::asio::awaitable<bool> changed(std::chrono::steady_clock::time_point deadline) = 0;
  /// Why changes may be missed, for a timeout message (" (the watch is
  /// failing: ...)"); empty when nothing is wrong.
  virtual std::string trouble() const { return {}; }
};

/// Wakes when any job may have changed: a store commit, a daemon's event, a
/// watch event. Registered when made, so nothing after that is missed.
class change_watch {
 public:
  virtual ~change_watch() = default;
  /// True when something may have changed since it was made or last returned;
  /// false when `deadline` passed first.
  virtual boost::asio::awaitable<bool> changed(std::chrono::steady_clock::time_point deadline) = 0;
};

class backend {
 public:
  virtual ~backend() = default;
  /// What it does itself (its registration's, for this configuration).
  virtual backend_capabilities capabilities() const = 0;

  /// Creates and starts the job; returns its name.
  virtual boost::asio::awaitable<std::string> train(checked_request request) = 0;
  virtual boost::asio::awaitable<train_job> get_job(std::string name) = 0;
  /// Oldest first; only those of `runtime` when given.
  virtual boost::asio::awaitable<std::vector<train_job>> list_jobs(std::optional<std::string> runtime) = 0;
  virtual boost::asio::awaitable<log_stream> get_job_logs(std::string name, log_options options) = 0;
  /// Throws job_not_found when there is no such job.
  virtual boost::asio::awaitable<std::unique_ptr<job_watch>> watch_job(std::string name) = 0;
  /// Follows every job (for wait_for_jobs_change).
  virtual boost::asio::awaitable<std::unique_ptr<change_watch>> watch_all() = 0;
  /// `options.force`: kill now, without the grace period, where the backend can.
  virtual boost::asio::awaitable<void> cancel_job(std::string name, cancel_options options) = 0;
  virtual boost::asio::awaitable<void> delete_job(std::string name) = 0;
  virtual boost::asio::awaitable<std::vector<event>> get_job_events(std::string name) = 0;
  /// The runtimes jobs can use. Default: the engine's own catalog.
  virtual boost::asio::awaitable<std::shared_ptr<const runtime_catalog>> runtimes(bool report);
  /// The venv cache of local Python jobs; other backends have none (an error
  /// that says so).
  virtual boost::asio::awaitable<std::vector<venv_cache_entry>> list_venv_cache();
  virtual boost::asio::awaitable<std::vector<venv_cache_entry>> prune_venv_cache(
      std::chrono::seconds unused_for);
  /// Checks (and with `repair`, mends the indexes of) the backend's store.
  /// Default: an error that says the backend keeps no store of tjob's.
  virtual boost::asio::awaitable<store_check> check_store(bool repair);
  /// The jobs waiting for admission, in queue order. Default: an error that
  /// says the backend's jobs start at once (its peer schedules them).
  virtual boost::asio::awaitable<std::vector<queue_entry>> queue();
  /// What the backend that runs the jobs does (engine::job_backend).
  /// Default: capabilities().
  virtual boost::asio::awaitable<backend_capabilities> job_backend();
  /// Stops following jobs and awaits every coroutine the backend started.
  virtual boost::asio::awaitable<void> shutdown() = 0;

 protected:
  explicit backend(backend_context ctx) : ctx_(std::move(ctx)) {}
  backend_context ctx_;
};

/// How a backend is registered: what it is and does (its description, with
/// its options), how its configuration is checked, and how one is made.
struct backend_registration {
  backend_description description;
  /// Throws tjob::error (invalid_argument) for an unknown member or a bad
  /// value of `config`, naming it by `name_of` (never null).
  std::function<void(const boost::json::object& config,
                     const std::function<std::string(std::string_view)>& name_of)>
      check;
  /// Makes the backend (its config is ctx.cfg.backend_config, checked).
  std::function<std::shared_ptr<backend>(backend_context ctx)> make;
};

/// Adds a backend to the registry (registry/registry.cpp) of this program,
/// after the built-in ones: a program (a test) may bring its own. Throws
/// tjob::error when the id is taken or is not a lowercase word.
void register_backend(backend_registration r);

/// The backend `ctx.cfg.backend` names, made by its registration. Throws
/// tjob::error for an id no backend has, a config it refuses, or one that
/// cannot be used (a bad kubeconfig, an unusable $TJOB_HOME).
std::shared_ptr<backend> make_backend(backend_context ctx);

/// A member of a backend's JSON config, read with a clear error naming it
/// (by `name_of`) when it has the wrong type. For the backends' checks.
struct config_reader {
  const boost::json::object& config;
  const std::function<std::string(std::string_view)>& name_of;
  std::string_view backend;  ///< "container", for messages
  /// Refuses members not among `known`.
  void only(std::initializer_list<std::string_view> known) const;
  std::optional<std::string> text(std::string_view member) const;
  std::optional<std::vector<std::string>> texts(std::string_view member) const;
  std::optional<bool> flag(std::string_view member) const;
  /// A whole number at least `least`.
  std::optional<std::int64_t> number(std::string_view member, std::int64_t least = 0) const;
  [[noreturn]] void bad(std::string_view member, const std::string& why) const;
};

}  // namespace tjob::detail
