#include "core/retry.hpp"

#include "core/fail.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tjob::detail {

namespace {

bool has(const std::vector<int>& codes, int code) {
  return std::find(codes.begin(), codes.end(), code) != codes.end();
}

std::string codes_text(const std::vector<int>& codes) {
  std::string out;
  for (int c : codes) out += (out.empty() ? "" : ", ") + std::to_string(c);
  return out;
}

}  // namespace

std::string wait_text(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? fmt::format("{} s", d.count() / 1000)
                               : fmt::format("{:.3g} s", static_cast<double>(d.count()) / 1000);
}

retry_decision decide_retry(const retry_policy& p, int attempt, int exit_code) {
  if (p.max_restarts <= 0) return {};
  if (has(p.never_retry, exit_code))
    return {std::nullopt, fmt::format("exit code {} is never retried", exit_code)};
  if (!p.retry_on.empty() && !has(p.retry_on, exit_code))
    return {std::nullopt,
            fmt::format("exit code {} is not one that is retried ({})", exit_code, codes_text(p.retry_on))};
  if (attempt > p.max_restarts)
    return {std::nullopt, fmt::format("no restarts left ({} of {} used)", attempt - 1, p.max_restarts)};
  // backoff × factor^(attempt-1), at most max_backoff; computed in double so
  // that a long run of restarts cannot overflow before the cap.
  const double first = static_cast<double>(p.backoff.count());
  const double cap = static_cast<double>(std::max(p.max_backoff, p.backoff).count());
  const double d = std::min(cap, first * std::pow(p.backoff_factor, attempt - 1));
  return {std::chrono::milliseconds(static_cast<std::int64_t>(d)), {}};
}

void check_retry(const std::string& who, const retry_policy& p) {
  if (p.max_restarts < 0 || p.max_restarts > 1000)
    fail(errc::invalid_argument,
         fmt::format("{}: max_restarts={} is out of range; give 0 to 1000 restarts", who, p.max_restarts));
  const auto day = std::chrono::milliseconds(std::chrono::hours(24));
  if (p.backoff.count() < 0 || p.backoff > day)
    fail(errc::invalid_argument,
         fmt::format("{}: backoff={} ms is out of range; give 0 to a day before the first restart", who,
                     p.backoff.count()));
  if (p.max_backoff.count() < 0 || p.max_backoff > day)
    fail(errc::invalid_argument,
         fmt::format("{}: max_backoff={} ms is out of range; give 0 to a day", who, p.max_backoff.count()));
  if (!(p.backoff_factor >= 1 && p.backoff_factor <= 100))
    fail(errc::invalid_argument,
         fmt::format("{}: backoff_factor={} is out of range; give 1 (a constant backoff) to 100", who,
                     p.backoff_factor));
  for (const auto* codes : {&p.retry_on, &p.never_retry})
    for (int c : *codes)
      if (c < 1 || c > 255)
        fail(errc::invalid_argument,
             fmt::format("{}: {} has exit code {}; give codes 1 to 255 (a signal's: 128 + its number)", who,
                         codes == &p.retry_on ? "retry_on" : "never_retry", c));
  if (p.max_restarts == 0 && (!p.retry_on.empty() || !p.never_retry.empty()))
    fail(errc::invalid_argument,
         fmt::format("{}: retry_on/never_retry without max_restarts: say how many restarts (max_restarts, "
                     "the CLI's --retries)",
                     who));
}

std::string describe_retry(const retry_policy& p) {
  if (p.max_restarts <= 0) return "no restarts";
  std::string out = fmt::format("{} restart{}", p.max_restarts, p.max_restarts == 1 ? "" : "s");
  if (!p.retry_on.empty()) out += ", on exit codes " + codes_text(p.retry_on);
  if (!p.never_retry.empty()) out += ", never on " + codes_text(p.never_retry);
  out += ", backoff " + wait_text(p.backoff);
  if (p.backoff_factor != 1)
    out += fmt::format(" x{:g} up to {}", p.backoff_factor, wait_text(p.max_backoff));
  return out;
}

}  // namespace tjob::detail
