// A one-shot-per-notification wake-up: the waiting side suspends on a timer
// whose deadline is its timeout; `notify()` cancels the timer to wake it early.
// A notification that arrives while nobody waits is kept, so a check followed
// by a wait can never miss one.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <vector>

namespace tjob::detail {

class wake_signal {
 public:
  explicit wake_signal(const boost::asio::any_io_executor& ex) : timer_(ex) {}

  void notify() {
    pending_ = true;
    timer_.cancel();
  }

  /// True when notified, false when `deadline` passed first.
  boost::asio::awaitable<bool> wait_until(std::chrono::steady_clock::time_point deadline) {
    if (!pending_) {
      timer_.expires_at(deadline);
      boost::system::error_code ec;
      co_await timer_.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
    }
    bool woken = pending_;
    pending_ = false;
    co_return woken;
  }

 private:
  boost::asio::steady_timer timer_;
  bool pending_ = false;
};

/// The wake signals interested in one thing; members unregister themselves.
class wake_list {
 public:
  void add(wake_signal* w) { items_.push_back(w); }
  void remove(wake_signal* w) { std::erase(items_, w); }
  void notify_all() {
    for (auto* w : items_) w->notify();
  }
  bool empty() const noexcept { return items_.empty(); }

 private:
  std::vector<wake_signal*> items_;
};

/// Registers a wake signal in a list for as long as it lives.
class wake_registration {
 public:
  wake_registration(wake_list& list, wake_signal* w) : list_(&list), w_(w) { list_->add(w_); }
  wake_registration(const wake_registration&) = delete;
  wake_registration& operator=(const wake_registration&) = delete;
  ~wake_registration() { list_->remove(w_); }

 private:
  wake_list* list_;
  wake_signal* w_;
};

}  // namespace tjob::detail
