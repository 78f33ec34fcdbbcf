// tjob serve: the setup phases of the Python jobs that end (venv, pip, cache
// copy), read from each one's Setup events once, in the background, for the
// metrics (tjob_setup_seconds, tjob_venv_cache_total).
//
// Threading: the engine's executor only.
// Cancellation: stop() ends run() and every drained().
#pragma once

#include "serve/metrics.hpp"

#include <tjob/engine.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include <deque>
#include <string>

namespace tjob::serve {

class setup_reader {
 public:
  setup_reader(engine& e, metrics& stats);

  /// A job that just ended: a Python job's (one with a runtime) Setup events
  /// are queued for reading; a command job has none.
  void job_ended(const train_job& job);
  /// Reads what is queued, until stop().
  boost::asio::awaitable<void> run();
  /// Returns once everything queued has been read (at once after stop()).
  boost::asio::awaitable<void> drained();
  void stop();

 private:
  engine& engine_;
  metrics& stats_;
  std::deque<std::string> queue_;  ///< jobs whose Setup events are not read yet (at most 10,000)
  bool reading_ = false;
  bool stopped_ = false;
  boost::asio::steady_timer queued_;  ///< cancel(): something was queued
  boost::asio::steady_timer read_;    ///< expires never; cancel(): the queue is empty
};

}  // namespace tjob::serve
