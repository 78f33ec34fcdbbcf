#include "serve/setup_reader.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace tjob::serve {

namespace asio = boost::asio;

setup_reader::setup_reader(engine& e, metrics& stats)
    : engine_(e),
      stats_(stats),
      queued_(e.get_executor()),
      read_(e.get_executor(), asio::steady_timer::time_point::max()) {}

void setup_reader::job_ended(const train_job& job) {
  if (job.runtime.empty() || queue_.size() >= 10'000) return;
  queue_.push_back(job.name);
  queued_.cancel();
}

asio::awaitable<void> setup_reader::run() {
  for (;;) {
    while (!queue_.empty() && !stopped_) {
      auto name = std::move(queue_.front());
      queue_.pop_front();
      reading_ = true;
      try {
        auto events = co_await engine_.get_job_events(name);
        stats_.setup_events(events);
      } catch (const error&) {
        // deleted meanwhile: nothing to count
      }
      reading_ = false;
    }
    read_.cancel();
    if (stopped_) co_return;
    queued_.expires_at(asio::steady_timer::time_point::max());
    boost::system::error_code ec;
    co_await queued_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<void> setup_reader::drained() {
  while ((reading_ || !queue_.empty()) && !stopped_) {
    // (its expiry stays at the end of time: only run()'s cancel() wakes the waiters)
    boost::system::error_code ec;
    co_await read_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void setup_reader::stop() {
  stopped_ = true;
  queued_.cancel();
  read_.cancel();
}

}  // namespace tjob::serve
