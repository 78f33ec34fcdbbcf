#include "core/deadline.hpp"

#include <tjob/error.hpp>
#include <tjob/status.hpp>

#include <algorithm>

namespace tjob::detail {

using steady = std::chrono::steady_clock;

boost::asio::awaitable<bool> ran_past_deadline(job_watch& w, std::chrono::seconds limit,
                                               clock::time_point (*wall_now)()) {
  // The first start seen: a node the daemon restarts reports its latest.
  std::optional<clock::time_point> first;
  steady::time_point ends{};  // first + limit, on the steady clock
  for (;;) {
    std::optional<train_job> job;
    try {
      job = co_await w.current();
    } catch (const error& e) {
      if (e.code() == errc::job_not_found) co_return false;  // deleted: nothing to stop
      throw;
    }
    auto until = steady::time_point::max();  // not started: until it changes
    if (!job) {
      until = steady::now() + std::chrono::seconds(1);  // unreadable for a moment
    } else if (is_terminal(job->status)) {
      co_return false;
    } else if (job->start_time) {
      if (!first || *job->start_time < *first) {
        first = job->start_time;
        const auto ran = std::clamp<clock::duration>(wall_now() - *first, clock::duration::zero(), limit);
        ends = steady::now() - std::chrono::duration_cast<steady::duration>(ran) + limit;
      }
      if (steady::now() >= ends) co_return true;
      until = ends;
    }
    co_await w.changed(until);
  }
}

}  // namespace tjob::detail
