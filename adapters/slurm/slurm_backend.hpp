// The slurm backend: a TrainJob is one Slurm job, submitted with sbatch and
// read back from squeue and from the files its nodes leave in the job's
// directory on a shared file system (docs/slurm.md). Slurm is the truth for
// whether a job waits, runs or has ended; the files say how each node ended.
// Nothing of tjob's runs while a job does: a tjob started later (another
// process, another machine with the same shared directory) sees the same jobs.
// Waiters share one poll of the queue (one squeue per interval for every job,
// the interval short while something changes, and none while nobody waits).
// The one header of the slurm backend that the registry sees.
//
// Threading: the engine's executor; one thread.
// Errors: tjob::error naming the job; Slurm's refusals are backend_error with
//   the command's own message.
// Lifetime: shutdown() ends the poll loop and awaits it.
#pragma once

#include "core/driver.hpp"

#include <memory>

namespace tjob::slurm {

/// The slurm backend's registration: id "slurm", its options
/// (slurm_submit.hpp) and capabilities.
detail::backend_registration registration();

class backend final : public detail::backend {
 public:
  /// Runs nothing yet: Slurm's commands are found at the first operation.
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

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tjob::slurm
