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
boost::asio::awaitable<bool> ran_past_deadline(job_watch& w, std::chrono::seconds limit);

}  // namespace tjob::detail
