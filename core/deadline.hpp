// An active deadline enforced by the engine for a backend whose peer has none
// (the container backend; the local backend's is its job state machine's, and
// Kubernetes' is the TrainJob's spec.activeDeadlineSeconds).
//
// Threading: the engine's executor.
// Cancellation: the watch's; an engine that shuts down ends it (shut_down).
#pragma once

#include "core/driver.hpp"

#include <chrono>

namespace tjob::detail {

/// Follows the job on `w` until it has run `limit` since its start_time
/// (true: it is past its deadline and has not ended), or until it ends or is
/// deleted first (false). The start is the peer's (the job's start_time, the
/// first one seen: a restarted container reports its latest).
///
/// The peer's start is a wall-clock time: it is read against `wall_now`
/// once, when first seen (what the job had run by then, taken as between 0
/// and `limit`), and from there the run is measured on the steady clock. So
/// a clock step (NTP, a suspended laptop's) moves the deadline by nothing,
/// and one before the start was seen by at most `limit` (issue 43).
boost::asio::awaitable<bool> ran_past_deadline(job_watch& w, std::chrono::seconds limit,
                                               clock::time_point (*wall_now)() = &clock::now);

}  // namespace tjob::detail
