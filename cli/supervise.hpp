// `tjob train`: what keeps a job running after the submitting shell exits is
// a small supervising process, `tjob __supervise`, started in its own session.
// It receives the request on stdin, answers with the job's name (or the error)
// on stdout, then owns the job until it ends and exits. Signalling it with
// SIGTERM cancels the job; SIGKILL leaves the job to be marked `lost` by the
// next tjob that looks at the store.
#pragma once

#include <tjob/engine.hpp>

#include <boost/json/value.hpp>

#include <string>

namespace tjob::cli {

boost::json::value request_to_json(const train_request& req, const engine_config& cfg);
void request_from_json(const boost::json::value& v, train_request& req, engine_config& cfg);

struct submit_result {
  std::string name;    ///< set on success
  std::string error;   ///< set on failure
  bool usage = false;  ///< the error was caused by the request
};

/// Starts the supervisor and returns once it has accepted or refused the job.
submit_result submit_detached(const train_request& req, const engine_config& cfg);

/// The supervisor's main.
int supervise_main();

/// Blocks SIGINT, SIGTERM and SIGHUP in this thread (and the threads it
/// creates later) and calls `on_signal` from a thread of its own for each.
void handle_signals(std::function<void(int)> on_signal);

}  // namespace tjob::cli
