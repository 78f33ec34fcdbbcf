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
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
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

/// Wake lists by name, and one for waiters on every name: a change of one
/// name wakes that name's waiters and the every-name ones (the files of a
/// watched directory; the jobs of a server's watch stream).
class named_wake_lists {
 public:
  /// `name` empty: woken by every change.
  void add(wake_signal* w, const std::string& name = {}) {
    if (name.empty())
      any_.add(w);
    else
      named_[name].add(w);
  }
  /// Removes `w` wherever it is; a name nobody waits on any more is forgotten.
  void remove(wake_signal* w) {
    any_.remove(w);
    for (auto it = named_.begin(); it != named_.end();) {
      it->second.remove(w);
      it = it->second.empty() ? named_.erase(it) : std::next(it);
    }
  }
  /// A change of `name`.
  void notify(std::string_view name) {
    any_.notify_all();
    if (auto it = named_.find(name); it != named_.end()) it->second.notify_all();
  }
  /// A change of anything (or of what cannot be told apart).
  void notify_all() {
    any_.notify_all();
    for (auto& [name, list] : named_) list.notify_all();
  }
  bool empty() const noexcept { return any_.empty() && named_.empty(); }

 private:
  wake_list any_;
  std::map<std::string, wake_list, std::less<>> named_;
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
