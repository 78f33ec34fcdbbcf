// The retry policy of a connection that fails again and again (a watch, the
// daemon's event stream, a read the server did not answer): a delay that
// doubles from `first` up to `cap`, and starts over after a success. Pure: it
// reads no clock and waits for nothing; the caller's timer waits `next()`.
#pragma once

#include <algorithm>
#include <chrono>

namespace tjob::detail {

class backoff {
 public:
  using duration = std::chrono::milliseconds;
  constexpr backoff(duration first, duration cap) noexcept
      : first_(first), cap_(std::max(first, cap)), next_(first) {}

  /// The delay before the next try; each call doubles the one after, up to the cap.
  constexpr duration next() noexcept {
    duration d = next_;
    next_ = std::min(next_ * 2, cap_);
    return d;
  }
  /// A try succeeded: the next failure waits `first` again.
  constexpr void reset() noexcept { next_ = first_; }
  /// What next() would answer, without moving on.
  constexpr duration peek() const noexcept { return next_; }

 private:
  duration first_, cap_, next_;
};

}  // namespace tjob::detail
