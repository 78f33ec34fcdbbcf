// The active deadline the engine enforces for the container backend
// (core/deadline): measured on the steady clock once the start is known, so
// a step of the wall clock neither ends a job early nor lets it run on.
#include "core/deadline.hpp"

#include <doctest/doctest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <optional>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

// A job that runs from `start`; its watch wakes every 100 ms, as a job's log
// lines and events wake a real one, and each wake reads the job again.
struct running_job : tjob::detail::job_watch {
  asio::steady_timer timer;
  tjob::clock::time_point start;
  running_job(asio::io_context& io, tjob::clock::time_point s) : timer(io), start(s) {}
  asio::awaitable<std::optional<tjob::train_job>> current() override {
    tjob::train_job j;
    j.status = tjob::job_status::running;
    j.start_time = start;
    co_return j;
  }
  asio::awaitable<bool> changed(steady::time_point deadline) override {
    const auto wake = steady::now() + 100ms;
    timer.expires_at(std::min(deadline, wake));
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    co_return deadline > wake;
  }
};

// The wall clock as the test sets it: true time until the first read, then
// shifted by `jump` (an NTP step right after the start was seen).
tjob::clock::duration jump{};
int reads = 0;
tjob::clock::time_point stepped_clock() { return tjob::clock::now() + (reads++ == 0 ? 0s : jump); }

struct outcome {
  std::optional<bool> past;
  steady::duration took{};
};

// A job that started `since` ago by the wall clock (negative: ahead of it),
// watched with a deadline of `limit` while the wall clock steps by `step`.
// `took` counts from before the start's wall time is taken, so a deadline
// that keeps its limit never took less than it.
outcome run_deadline(tjob::clock::duration since, std::chrono::seconds limit, tjob::clock::duration step) {
  jump = step;
  reads = 0;
  asio::io_context io;
  outcome o;
  const auto t0 = steady::now();
  running_job w(io, tjob::clock::now() - since);
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        o.past = co_await tjob::detail::ran_past_deadline(w, limit, &stepped_clock);
        o.took = steady::now() - t0;
      },
      [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
      });
  io.run_for(30s);  // the hard bound: a deadline of 1 s that is still waiting by then failed
  return o;
}

}  // namespace

TEST_CASE("an active deadline is measured on the steady clock: a wall-clock step moves it by nothing") {
  for (auto step : {tjob::clock::duration(1h), tjob::clock::duration(-1h), tjob::clock::duration(0s)}) {
    CAPTURE(std::chrono::duration_cast<std::chrono::seconds>(step).count());
    auto o = run_deadline(0s, 1s, step);
    REQUIRE(o.past);  // it ended (a step back of an hour kept it waiting an hour)
    CHECK(*o.past);
    CHECK(o.took >= 1s);  // never before its limit (a step forward ended it at once)
  }
}

TEST_CASE("an active deadline seen late counts what the job ran before, bounded by the limit") {
  // Started long before it was seen (the engine came back): past at once. A
  // limit of an hour, which run_deadline's 30 s bound would cut, proves it
  // did not wait (no duration to compare, which a busy machine could stretch).
  auto late = run_deadline(2h, 3600s, 0s);
  REQUIRE(late.past);
  CHECK(*late.past);
  // A start in the future (the peer's clock ahead of ours): the whole limit, not more.
  auto ahead = run_deadline(-1h, 1s, 0s);
  REQUIRE(ahead.past);
  CHECK(*ahead.past);
  CHECK(ahead.took >= 1s);
}
