// The progress endpoint of an engine that owns jobs (local and container
// backends): Kubeflow's status endpoint, served on loopback HTTPS, so that
// training code calling update_trainjob_status (or tjob.report) reports.
//
// Each job gets a token of its own and a URL
// https://127.0.0.1:PORT/v1/jobs/<job>/progress; its reports (POST, the body
// Kubeflow's client sends) go to the job's sink. A report is refused, and
// nothing of it reaches the sink, when it has no token (401), another job's
// (403), a body that does not read (400, detail::parse_progress_body), over
// 1 MiB (413), comes too fast (429, detail::progress_gate), or comes after
// the job ended (409).
//
// Threading: the engine's executor only (construct, call and destroy there).
// Lifetime: stop() before the owner joins its task group; connections still
//   open then end without calling a sink.
// Errors: start() throws tjob::error when the listener cannot be made.
#pragma once

#include "adapters/progress/home_tls.hpp"
#include "core/progress.hpp"
#include "core/task_group.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>

namespace spdlog {
class logger;
}

namespace tjob::progress {

/// Takes job `job`'s report (`record`: it becomes an event, else only the
/// latest); returns empty when taken, else why not (the job has ended: 409).
/// The job's name is an argument, so that a sink needs to hold no copy of it
/// (one that holds only a weak_ptr fits std::function's own storage: no heap
/// block per job).
using sink = std::function<boost::asio::awaitable<std::string>(std::string job,
                                                               detail::progress_report report, bool record)>;

/// The environment variables Kubeflow's client reads.
inline constexpr const char* url_variable = "KUBEFLOW_TRAINER_SERVER_URL";
inline constexpr const char* ca_variable = "KUBEFLOW_TRAINER_SERVER_CA_CERT";
inline constexpr const char* token_variable = "KUBEFLOW_TRAINER_SERVER_TOKEN";

class server {
 public:
  /// Its accept loop and connections are tasks of `tasks` (the owning
  /// backend's): stop() ends them, and the backend's join waits for them.
  server(boost::asio::any_io_executor ex, std::shared_ptr<spdlog::logger> log, detail::task_group& tasks);
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  ~server();

  /// Listens on 127.0.0.1 (an ephemeral port) with `tls` (TLS is set up at
  /// the first connection). Once; later calls do nothing.
  void start(const tls_files& tls);
  bool started() const;
  /// The job reports to `s` from now; its URL. A job added again gets a new
  /// token (the old one is refused).
  std::string add(const std::string& job, const std::string& token, sink s);
  /// The URL a job reports to (what add returned for it).
  std::string url(const std::string& job) const;
  /// The job has ended (`how`: "Complete", "Failed"): its reports are refused.
  void end(const std::string& job, std::string how);
  /// Forgets the job (deleted): its reports are refused as unknown.
  void forget(const std::string& job);
  /// Closes the listener and the connections.
  void stop();

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

/// A new token: 32 random bytes as hex.
std::string new_token();

/// The variables for a job: its URL, and the paths of the CA and of the
/// file holding its token as the job sees them.
std::map<std::string, std::string> job_environment(const std::string& url, const std::string& ca_path,
                                                   const std::string& token_path);

}  // namespace tjob::progress
