// tjob/sweep.hpp — hyperparameter sweeps (Kubeflow's OptimizerClient, Katib's
// Experiment): a parent of trials, each a job `<sweep>-<i>` with its own
// parameters, of which the engine keeps the best by an objective metric.
//
// Threading: the free functions may be called from any thread.
// Lifetime: a sweep is owned by a supervising process of its own (`tjob
//   __sweep`), as a detached job is: it outlives the program that started it.
//   Its record is $TJOB_HOME/sweeps/<name>/sweep.json; an owner that dies
//   leaves the record as it was, and resume_sweep hands it to a new owner,
//   which runs no trial twice.
// Errors: tjob::error, naming the field and the fix (invalid_argument), or
//   job_not_found for a name that is no sweep.
#pragma once

#include <tjob/client.hpp>
#include <tjob/types.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tjob {

/// One dimension of a search space (Kubeflow's Search.uniform,
/// Search.loguniform, Search.choice).
struct search_parameter {
  enum class distribution { uniform, loguniform, choice };
  std::string name;  ///< the keyword the trial's function takes (a Python identifier)
  distribution kind = distribution::uniform;
  double min = 0, max = 0;  ///< uniform and loguniform: min < max (loguniform: 0 < min)
  /// choice: the values, each a JSON value as text ("5", "0.01", "\"adam\"").
  std::vector<std::string> choices;
};

/// What a sweep optimises (Kubeflow's Objective): a metric the trials report.
struct objective {
  std::string metric = "loss";
  bool maximize = false;
};

/// Early stopping by Katib's median stopping rule: a running trial is
/// stopped once it has reported the objective `start_step` times or more and
/// its best value so far is worse than the median of the completed trials'
/// running averages over as many reports; only once `min_trials_required`
/// trials have completed. A trial stopped so is Complete, reason
/// EarlyStopped, with the metrics it reported. It reads the trials' Progress
/// reports (tjob.report, update_trainjob_status) as they come; `name=value`
/// lines on stdout are read when a trial ends, too late for it.
struct median_stop {
  int min_trials_required = 3;
  int start_step = 4;
};

/// Everything optimize() needs (Kubeflow's optimize() arguments).
struct sweep_request {
  std::string name;  ///< empty: generated (a letter + 11 hex characters)
  /// The template of every trial (Kubeflow's TrainJobTemplate); its name and
  /// array are the sweep's to set. A Python function gets each parameter as
  /// a keyword argument (Katib's way); a script or a command gets
  /// `${trialParameters.NAME}` replaced in its arguments and environment.
  /// Every trial has $TJOB_SWEEP, $TJOB_TRIAL_INDEX and
  /// $TJOB_TRIAL_PARAMETERS (a JSON object of them all).
  train_request trial;
  std::vector<search_parameter> search_space;
  /// The first is optimised, the others recorded; empty: minimise `loss`.
  std::vector<objective> objectives;
  /// "random" (Kubeflow's default), "grid" or "tpe" (tree-structured Parzen
  /// estimators, after Optuna's default sampler).
  std::string algorithm = "random";
  /// random and tpe draw from it: the same seed, the same parameters, trial
  /// by trial. Unset: one is chosen and recorded.
  std::optional<std::uint64_t> seed;
  int num_trials = 10;      ///< grid: at most the grid's size
  int parallel_trials = 1;  ///< the most trials that run at once
  /// The sweep ends Failed once more than this many trials have failed
  /// (Katib's maxFailedTrialCount); unset: it goes on until num_trials.
  std::optional<int> max_failed_trials;
  /// Early stopping of hopeless trials; unset: none (Katib's default).
  std::optional<median_stop> early_stopping;
};

/// What a trial reported of one metric (Kubeflow's Metric): through
/// tjob.report / update_trainjob_status, or `name=value` on its stdout.
struct trial_metric {
  std::string name;
  double min = 0, max = 0, latest = 0;
  /// Every value in the order reported, with when.
  std::vector<std::pair<clock::time_point, double>> history;
};

/// One trial of a sweep (Kubeflow's Trial).
struct sweep_trial {
  int index = 0;
  std::string name;  ///< its job: <sweep>-<index>
  /// name -> value as JSON text, in the search space's order.
  std::vector<std::pair<std::string, std::string>> parameters;
  /// Pending (not submitted yet), then the job's: Created, Running,
  /// Complete, Failed.
  std::string status = "Pending";
  std::string reason;
  std::vector<trial_metric> metrics;
  /// The objective's value for this trial (its best: the min when
  /// minimising, the max when maximising, as Katib's default strategy).
  std::optional<double> objective;
};

/// A sweep as its record has it (Kubeflow's OptimizationJob).
struct sweep_job {
  std::string name;
  sweep_request request;  ///< with its seed and name filled in
  std::string status = "Created";  ///< Created, Running, Complete, Failed
  std::string reason;
  clock::time_point creation_timestamp;
  std::optional<clock::time_point> end_time;
  std::vector<sweep_trial> trials;
  std::optional<int> best;  ///< index into trials of the best so far
  /// Whether a process owns it now (false for an ended sweep, and for one
  /// whose owner died: resume_sweep).
  bool owned = false;
};

/// The request as JSON text (how a sweep is stored and sent), and back.
/// sweep_request_from_json throws tjob::error (invalid_argument) naming the
/// member that is wrong.
std::string sweep_request_to_json(const sweep_request& r);
sweep_request sweep_request_from_json(std::string_view text);
/// A sweep as JSON (`tjob get -o json`, the Python package).
std::string sweep_to_json(const sweep_job& s);

/// Checks the request (every error names its field and the fix) before any
/// trial exists, records the sweep and hands it to a supervising process;
/// returns its name. A name already taken by a sweep or a job is refused.
std::string optimize(sweep_request request, engine_config config = {});
/// Hands a sweep whose owner has gone (killed, its machine restarted) to a
/// new owner, which goes on where the record stops: trials submitted are
/// followed, not submitted again. Refused when it has an owner or has ended.
void resume_sweep(const std::string& name, engine_config config = {});
/// Drives a recorded sweep in this thread until it ends (the supervisor's
/// body; a program may own a sweep itself this way). Returns it as it ended.
sweep_job run_sweep(trainer_client& client, const std::string& name);

sweep_job get_sweep(const std::string& name, const engine_config& config = {});
/// Every sweep of the home, oldest first.
std::vector<sweep_job> list_sweeps(const engine_config& config = {});
/// Waits, without polling (inotify on its record), until the sweep differs
/// from `known` (a trial changed, it ended), then returns it; returns it as
/// it is when `timeout` passes first. Throws job_not_found once it is gone.
sweep_job wait_for_sweep_change(const std::string& name, const sweep_job& known,
                                std::chrono::milliseconds timeout, const engine_config& config = {});
/// Cancels its trials that have not ended and ends it Failed, reason
/// cancelled; a no-op for one that has ended.
void cancel_sweep(const std::string& name, const engine_config& config = {});
/// Cancels it, deletes every trial's job and removes its record.
void delete_sweep(const std::string& name, const engine_config& config = {});

/// The body of `tjob __sweep`: owns the sweep named on stdin's JSON.
int sweep_supervisor_main();

}  // namespace tjob
