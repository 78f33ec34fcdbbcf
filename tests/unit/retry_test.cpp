// The retry rule (engine/retry): which failed attempts are tried again, after
// how long, and which policies are refused.
#include "core/retry.hpp"

#include <tjob/error.hpp>

#include <doctest/doctest.h>

#include <string>

using namespace tjob;
using std::chrono::milliseconds;

namespace {

retry_policy policy(int restarts) {
  retry_policy p;
  p.max_restarts = restarts;
  return p;
}

std::string refusal(const retry_policy& p) {
  try {
    detail::check_retry("TrainJob 'x'", p);
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("the backoff grows by its factor from the first wait, up to its cap") {
  auto p = policy(10);
  p.backoff = milliseconds(1000);
  p.backoff_factor = 2;
  p.max_backoff = milliseconds(5000);
  std::vector<long> waits;
  for (int attempt = 1; attempt <= 5; ++attempt)
    waits.push_back(static_cast<long>(detail::decide_retry(p, attempt, 1).delay.value().count()));
  CHECK(waits == std::vector<long>{1000, 2000, 4000, 5000, 5000});
  p.backoff_factor = 1;  // constant
  CHECK(detail::decide_retry(p, 7, 1).delay == milliseconds(1000));
  p.backoff = milliseconds(0);  // at once
  CHECK(detail::decide_retry(p, 1, 1).delay == milliseconds(0));
  p.backoff = milliseconds(86'400'000);
  p.backoff_factor = 100;
  p.max_backoff = milliseconds(86'400'000);
  p.max_restarts = 1000;
  CHECK(detail::decide_retry(p, 1000, 1).delay == milliseconds(86'400'000));  // no overflow before the cap
}

TEST_CASE("which failures are retried: the count, retry_on and never_retry, never_retry winning") {
  auto p = policy(2);
  CHECK(detail::decide_retry(p, 1, 1).delay.has_value());
  CHECK(detail::decide_retry(p, 2, 137).delay.has_value());
  auto last = detail::decide_retry(p, 3, 1);
  CHECK_FALSE(last.delay.has_value());
  CHECK(last.why_not == "no restarts left (2 of 2 used)");
  p.retry_on = {75, 137};
  CHECK(detail::decide_retry(p, 1, 75).delay.has_value());
  CHECK(detail::decide_retry(p, 1, 1).why_not == "exit code 1 is not one that is retried (75, 137)");
  p.never_retry = {137};
  CHECK(detail::decide_retry(p, 1, 137).why_not == "exit code 137 is never retried");
  auto none = detail::decide_retry(policy(0), 1, 1);
  CHECK_FALSE(none.delay.has_value());
  CHECK(none.why_not.empty());  // nobody asked for restarts: nothing to explain
}

TEST_CASE("a policy out of range is refused, naming the job, the field and the fix") {
  CHECK(refusal(policy(0)).empty());
  CHECK(refusal(policy(1000)).empty());
  CHECK(refusal(policy(-1)) == "TrainJob 'x': max_restarts=-1 is out of range; give 0 to 1000 restarts");
  CHECK(refusal(policy(1001)).find("max_restarts=1001") != std::string::npos);
  auto p = policy(1);
  p.backoff_factor = 0.5;
  CHECK(refusal(p) == "TrainJob 'x': backoff_factor=0.5 is out of range; give 1 (a constant backoff) to 100");
  p = policy(1);
  p.backoff = milliseconds(-1);
  CHECK(refusal(p).find("backoff=-1 ms is out of range") != std::string::npos);
  p = policy(1);
  p.retry_on = {0};
  CHECK(refusal(p) ==
        "TrainJob 'x': retry_on has exit code 0; give codes 1 to 255 (a signal's: 128 + its number)");
  p = policy(0);
  p.never_retry = {2};
  CHECK(refusal(p).find("without max_restarts") != std::string::npos);
}

TEST_CASE("a policy as a person reads it") {
  CHECK(detail::describe_retry(policy(0)) == "no restarts");
  auto p = policy(3);
  p.retry_on = {1, 75};
  CHECK(detail::describe_retry(p) == "3 restarts, on exit codes 1, 75, backoff 1 s x2 up to 60 s");
  p = policy(1);
  p.backoff = milliseconds(250);
  p.backoff_factor = 1;
  CHECK(detail::describe_retry(p) == "1 restart, backoff 0.25 s");
}
