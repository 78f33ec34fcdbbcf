// tjob/client.hpp — trainer_client: the blocking facade, Kubeflow's
// TrainerClient method for method.
//
// Threading: the client runs an engine on its own io_context and thread; its
//   methods may be called from any thread, also concurrently (each runs on the
//   engine's thread), and block until done.
// Cancellation: see engine.hpp; destroying the client is not cancelling jobs.
// Errors: methods throw tjob::error.
// Lifetime: a log_reader must not outlive its client.
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
  train_job get_job(const std::string& name);
  std::vector<train_job> list_jobs(std::optional<std::string> runtime = {});
  log_reader get_job_logs(const std::string& name, log_options options = {});
  train_job wait_for_job_status(const std::string& name,
                                std::set<job_status> statuses = {job_status::complete},
                                std::chrono::milliseconds timeout = std::chrono::seconds(600));
  void cancel_job(const std::string& name, cancel_options options = {});
  void delete_job(const std::string& name);
  std::vector<event> get_job_events(const std::string& name);
  std::vector<runtime> list_runtimes();
  std::vector<std::string> runtime_problems();
  runtime get_runtime(const std::string& name);
  std::vector<venv_cache_entry> list_venv_cache();
  std::vector<venv_cache_entry> prune_venv_cache(std::chrono::seconds unused_for);

  const std::filesystem::path& home() const;

 private:
  friend class log_reader;
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tjob
