// tjob/client.hpp — trainer_client: the blocking facade, Kubeflow's
// TrainerClient method for method.
//
// Threading: the client runs an engine on its own io_context and thread; its
//   methods may be called from any thread, also concurrently (each runs on the
//   engine's thread), and block until done.
// Cancellation: see engine.hpp; destroying the client is not cancelling jobs.
// Errors: methods throw tjob::error.
// Lifetime: a log_reader must not outlive its client. A job started with
//   train() is owned by this client's engine: destroy the client (or end the
//   program) while it runs and the job is later found `lost` and its
//   processes killed. A job started with train_detached() is owned by a small
//   supervising process of its own (the `tjob train` way), so it runs to its
//   end after the program returns; any client on the same $TJOB_HOME can
//   follow, wait for, cancel or delete it. On the container and kubernetes
//   backends the daemon or the cluster owns every job, and train_detached is
//   train.
#pragma once

#include <tjob/engine.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tjob {

class trainer_client;

/// Blocking iteration over a step's log lines (see log_stream).
class log_reader {
 public:
  log_reader(log_reader&&) noexcept;
  log_reader& operator=(log_reader&&) noexcept;
  ~log_reader();
  /// The next line (with its '\n'), or nullopt at the end.
  std::optional<std::string> next();
  /// The next chunk of bytes (see log_stream::read_some), or nullopt at the end.
  std::optional<std::string> read_some();
  /// Everything up to the end, concatenated.
  std::string read_all();

 private:
  friend class trainer_client;
  struct impl;
  explicit log_reader(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

class trainer_client {
 public:
  explicit trainer_client(engine_config config = {});
  trainer_client(const trainer_client&) = delete;
  trainer_client& operator=(const trainer_client&) = delete;
  ~trainer_client();

  std::string train(train_request request);
  /// train(), with the job handed to a supervising process (see Lifetime):
  /// it outlives this client and this program. Bad input is refused with
  /// the same errors as train() before anything is created.
  std::string train_detached(train_request request);
  /// Several jobs (a job array's members) handed to one supervising process
  /// that owns them all; all or nothing: when one is refused, those already
  /// submitted are deleted and its error is raised. Returns their names.
  std::vector<std::string> train_detached(const std::vector<train_request>& requests);
  train_job get_job(const std::string& name);
  std::vector<train_job> list_jobs(std::optional<std::string> runtime = {});
  /// See engine::wait_for_jobs_change.
  std::vector<train_job> wait_for_jobs_change(const std::vector<train_job>& known,
                                              std::optional<std::string> runtime = {},
                                              std::chrono::milliseconds timeout = std::chrono::seconds(600));
  /// See engine::wait_for_job_change.
  train_job wait_for_job_change(const std::string& name, const train_job& known,
                                std::chrono::milliseconds timeout = std::chrono::seconds(600));
  log_reader get_job_logs(const std::string& name, log_options options = {});
  train_job wait_for_job_status(const std::string& name,
                                std::set<job_status> statuses = {job_status::complete},
                                std::chrono::milliseconds timeout = std::chrono::seconds(600));
  void cancel_job(const std::string& name, cancel_options options = {});
  /// cancel_job of each, side by side on the engine (a graceful cancel waits
  /// for its job's end; a job array's members need not wait for each other).
  /// Jobs that are gone are skipped; the first other failure is raised once
  /// every cancel has ended.
  void cancel_jobs(const std::vector<std::string>& names, cancel_options options = {});
  void delete_job(const std::string& name);
  std::vector<event> get_job_events(const std::string& name);
  /// See engine::get_queue.
  std::vector<queue_entry> get_queue();
  /// See engine::job_backend: the backend that runs the jobs (for the
  /// remote backend, the server's).
  backend_capabilities job_backend();
  std::vector<runtime> list_runtimes();
  std::vector<std::string> runtime_problems();
  runtime get_runtime(const std::string& name);
  std::vector<venv_cache_entry> list_venv_cache();
  std::vector<venv_cache_entry> prune_venv_cache(std::chrono::seconds unused_for);
  store_check check_store(bool repair);

  const std::filesystem::path& home() const;
  const engine_config& config() const;

 private:
  friend class log_reader;
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// trainer_client(config).train_detached(request), without an engine in this
/// process: the supervisor is the only one to open the store.
std::string train_detached(const train_request& request, engine_config config = {});
/// The same for several jobs, owned by one supervisor (see the method).
std::vector<std::string> train_detached(const std::vector<train_request>& requests,
                                        engine_config config = {});

/// The body of a supervisor process (`tjob __supervise`): reads what
/// train_detached writes on stdin, answers on stdout, owns the jobs until
/// they end, and returns the process's exit status. SIGTERM, SIGINT or SIGHUP
/// cancels them. A program named in engine_config::supervisor calls it.
int supervisor_main();

}  // namespace tjob
