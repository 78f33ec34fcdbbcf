// The retry rule of a job whose code failed (train_request::retry): whether
// the attempt that failed is tried again, and after how long. Pure: the
// backend that runs the job asks it when an attempt ends, and waits itself.
#pragma once

#include <tjob/types.hpp>

#include <chrono>
#include <optional>
#include <string>

namespace tjob::detail {

struct retry_decision {
  /// The wait before the next attempt; nullopt: the failure is the job's.
  std::optional<std::chrono::milliseconds> delay;
  /// Why not, for the job's last event: "exit code 2 is never retried",
  /// "no restarts left (3 of 3 used)"; empty when it is retried or when no
  /// restart was asked for.
  std::string why_not;
};

/// `attempt` (1 = the first) failed with `exit_code` (its blamed node's).
retry_decision decide_retry(const retry_policy& p, int attempt, int exit_code);

/// The policy's problems, as a request's: throws tjob::error
/// (invalid_argument) naming `who` (the job), the field and the fix.
void check_retry(const std::string& who, const retry_policy& p);

/// A wait as a person reads it: "1 s", "0.3 s".
std::string wait_text(std::chrono::milliseconds d);

/// "3 restarts, on exit codes 1, 75, backoff 1 s x2 up to 60 s": the policy
/// as a person reads it (tjob get, the Started event of a retried job).
std::string describe_retry(const retry_policy& p);

}  // namespace tjob::detail
