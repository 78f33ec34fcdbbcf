// tjob serve: every job's status changes, numbered, for /v1/watch.
//
// One loop per server waits on the engine (wait_for_jobs_change, woken by
// the backend's own signals) and turns each change into a numbered JSON line
// ({"seq","type":"ADDED|MODIFIED|DELETED","job"}) kept in a ring of the last
// `history` lines, so a watcher that reconnects with ?since=SEQ resumes with
// no gap, on the Kubernetes watch model. Sequence numbers start at the
// server's start time in microseconds, so a number from an earlier server
// is older than every one this server kept, and is refused as expired.
//
// Threading: the engine's executor only.
// Cancellation: changed() takes the caller's cancellation slot; stop() ends
//   run() and wakes every changed() (the server is draining).
#pragma once

#include <tjob/engine.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tjob::serve {

class watch_hub {
 public:
  struct line {
    std::int64_t seq = 0;
    std::string runtime;                      ///< the job's, for ?runtime=
    std::shared_ptr<const std::string> text;  ///< the JSON line, with its '\n'
  };

  watch_hub(engine& e, std::size_t history);

  /// Lists the jobs once: the first state.
  boost::asio::awaitable<void> load();
  /// After load(): follows every change until stop().
  boost::asio::awaitable<void> run();
  void stop();
  bool stopped() const { return stopped_; }

  /// The latest sequence number (of the last change, or the start).
  std::int64_t head() const { return head_; }
  /// Every job as last seen, as ADDED lines numbered head(): what a watch
  /// without ?since= begins with.
  std::vector<line> snapshot() const;
  /// The lines after `seq`, or nullopt when `seq` is expired (older than
  /// the ring, or not one of this server's).
  std::optional<std::vector<line>> since(std::int64_t seq) const;
  /// Every job as last seen.
  std::vector<const train_job*> jobs() const;
  /// Called for each change: `before` null for a job that appeared, `now`
  /// null for one that went (the metrics count them).
  std::function<void(const train_job* before, const train_job* now)> on_change;

  /// Waits until head() > seq, or stop(), or the caller's cancellation.
  boost::asio::awaitable<void> changed(std::int64_t seq);

 private:
  void publish(const char* type, const train_job& job);

  engine& engine_;
  std::size_t history_;
  std::int64_t head_;
  struct kept_job {
    train_job job;
    std::uint64_t round = 0;  ///< the last re-list that saw it
  };
  std::map<std::string, kept_job> jobs_;
  std::uint64_t round_ = 0;
  std::vector<train_job> known_;  ///< as load() found them, in the engine's order
  std::deque<line> ring_;
  boost::asio::steady_timer wake_;
  boost::asio::cancellation_signal cancel_;  ///< ends run()'s wait on the engine
  bool stopped_ = false;
};

}  // namespace tjob::serve
