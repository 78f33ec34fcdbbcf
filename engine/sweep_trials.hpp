// A sweep's trials: the job each one is (its parameters in its request), and
// what its job's end makes of it (status, metrics, objective). For the owner
// (sweep_owner.cpp) and for a cancel that records the trials itself.
#pragma once

#include <tjob/client.hpp>
#include <tjob/sweep.hpp>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::detail {

const objective& primary(const sweep_request& r);
/// The trial's job: the template with the trial's name and parameters.
train_request trial_request(const sweep_job& s, const sweep_trial& t, bool arrays);
/// A trial whose job has ended: its status, reason, metrics and objective.
void finish_trial(trainer_client& client, const sweep_request& r, sweep_trial& t, const train_job& job);
/// A trial that runs: its status and latest reported metrics; true when they changed.
bool follow_trial(const sweep_request& r, sweep_trial& t, const train_job& job);
/// The reason's first word of a trial the median stopping rule stopped.
inline constexpr std::string_view early_stop_prefix = "EarlyStopped";
bool early_stopped(const sweep_trial& t);
/// The median stopping rule (s.request.early_stopping, set) for a trial that
/// runs, from its Progress events so far: why it is to stop, or empty.
std::string median_stop_check(trainer_client& client, const sweep_job& s, const sweep_trial& t);
/// The best trial so far (an index into s.trials).
std::optional<int> best_trial(const sweep_job& s);
/// The failed trials and their reasons, at most `limit`: "s-0 (exit code 3); s-1 (...)".
std::string failed_list(const sweep_job& s, int limit);
/// A refusal of the request itself (not of the machine): a bad template.
bool usage_class(const error& e);

/// Drives a recorded sweep to its end (run_sweep, the supervisor); `started`
/// is called once the first trials are submitted, and a refusal of the
/// template before it is thrown.
sweep_job drive_sweep(trainer_client& client, const std::string& name, const std::function<void()>& started);

}  // namespace tjob::detail
