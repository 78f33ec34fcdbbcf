// The owner of a backend's coroutines (an events loop, a watch, a job, a
// node): each is started through the group, its end is reported (to its own
// handler, else a failure is logged with what it was), and join() waits
// until every one has ended. Nothing is `detached`.
//
// Threading: the executor's thread only.
// Cancellation: the group does not stop its tasks; their owner asks them to
//   end (close a stream, set a flag, notify), then awaits join().
// Lifetime: the group's state is shared with the tasks' completion handlers,
//   so a task may end after the group object is gone.
#pragma once

#include "core/wake.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>

#include <spdlog/logger.h>

#include <functional>
#include <memory>
#include <string>

namespace tjob::detail {

class task_group {
 public:
  task_group(const boost::asio::any_io_executor& ex, std::shared_ptr<spdlog::logger> log)
      : ex_(ex), state_(std::make_shared<state>(ex, std::move(log))) {}

  /// Starts `task`. `done`, when given, hears how it ended (a null pointer:
  /// it returned); without it a failure is logged, named by `what`. A signal
  /// emitted on `slot` ends the task.
  void spawn(boost::asio::awaitable<void> task, std::string what,
             std::function<void(std::exception_ptr)> done = {}, boost::asio::cancellation_slot slot = {}) {
    ++state_->running;
    auto ended = [s = state_, what = std::move(what), done = std::move(done)](std::exception_ptr e) {
      // Counted out whatever `done` or the log throws (out of memory, issue
      // 43): a task never counted out would keep join() waiting forever.
      struct count_out {
        state* st;
        ~count_out() {
          if (--st->running == 0) st->idle.notify();
        }
      } counted{s.get()};
      if (done) {
        done(e);
      } else if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          s->log->warn("{}: {}", what, x.what());
        } catch (...) {
          s->log->warn("{}: unknown error", what);
        }
      }
    };
    try {
      boost::asio::co_spawn(ex_, std::move(task), boost::asio::bind_cancellation_slot(slot, std::move(ended)));
    } catch (...) {  // not started (no memory for its frame): join() must not wait for it
      if (--state_->running == 0) state_->idle.notify();
      throw;
    }
  }

  std::size_t running() const noexcept { return state_->running; }

  /// Returns once every task started has ended.
  boost::asio::awaitable<void> join() {
    auto s = state_;
    while (s->running > 0) co_await s->idle.wait_until(std::chrono::steady_clock::time_point::max());
  }

 private:
  struct state {
    state(const boost::asio::any_io_executor& ex, std::shared_ptr<spdlog::logger> l)
        : idle(ex), log(std::move(l)) {}
    std::size_t running = 0;
    wake_signal idle;
    std::shared_ptr<spdlog::logger> log;
  };
  boost::asio::any_io_executor ex_;
  std::shared_ptr<state> state_;
};

}  // namespace tjob::detail
