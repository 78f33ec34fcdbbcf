// `tjob optimize` (a hyperparameter sweep, tjob/sweep.hpp), `tjob sweeps`,
// and what get, logs, wait, cancel and delete do when given a sweep's name.
// Only the public API (include/tjob) is used.
#pragma once

#include "cli/engine_options.hpp"
#include "cli/job_request.hpp"
#include "cli/render.hpp"

#include <tjob/sweep.hpp>

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tjob::cli {

struct sweep_options {
  job_options job;                   // the trial's template, as `tjob train` takes a job
  std::vector<std::string> params;   // --param NAME=uniform:MIN:MAX | loguniform:MIN:MAX | choice:A,B
  std::string objective = "loss";    // --objective
  bool maximize = false;             // --maximize
  std::vector<std::string> metrics;  // --metric: more to record
  std::string algorithm = "random";
  std::optional<unsigned long long> seed;
  int trials = 10, parallel = 1;
  std::optional<int> max_failed;
  bool median_stop = false;                                 // --median-stop
  std::optional<int> median_start_step, median_min_trials;  // its settings (each implies it)
  bool wait = false;   // --wait: follow it to its end, exit 0 when Complete
  std::string resume;  // --resume NAME
  std::string format = "table";
};

/// `optimize` (its options on `cmd`) and `sweeps`.
CLI::App* add_optimize_command(CLI::App& app, sweep_options& o);

/// Runs `tjob optimize`; returns the exit status.
int cmd_optimize(const common_options& common, sweep_options& o, output_format f);

/// The search space's `--param` values as parameters. Throws usage_error
/// naming the flag and the fix.
std::vector<search_parameter> parse_params(const std::vector<std::string>& params);

/// `tjob sweeps`: NAME STATUS ALGORITHM TRIALS BEST AGE.
std::string render_sweeps(const std::vector<sweep_job>& sweeps, output_format f);
/// `tjob get SWEEP`: the sweep, then its trials sorted by the objective
/// (best first) with their parameters and metrics.
std::string render_sweep(const sweep_job& s, output_format f);

/// Whether `name` is a sweep's (then get, logs, wait, cancel and delete
/// mean the sweep).
bool is_sweep(const std::string& name, const engine_config& cfg);

/// The trial job `logs SWEEP` shows: --trial N's, else the best trial's
/// (Kubeflow's get_job_logs), else the last that started.
std::string trial_job(const sweep_job& s, std::optional<int> trial);

/// `wait SWEEP`: until it has ended (or `timeout`); prints its status. 0 when
/// it is in one of `wanted`.
int wait_sweep(const std::string& name, const engine_config& cfg, const std::vector<std::string>& wanted,
               std::chrono::milliseconds timeout);

/// What get, logs, wait, cancel and delete were asked, for the sweeps among
/// their names.
struct sweep_query {
  bool get = false, logs = false, wait = false, cancel = false, del = false;
  std::vector<std::string>* names = nullptr;  // get, wait, cancel, delete
  std::string* log_name = nullptr;            // logs
  std::optional<int> trial;                   // logs --trial
  std::set<job_status> wanted;                // wait --for
  std::chrono::milliseconds timeout{600'000};
  output_format format = output_format::table;
  int exit_code = 0;  // set when a wait saw a sweep end otherwise
};

/// Does what was asked to the sweeps named and takes them out of the names;
/// `logs SWEEP` becomes the logs of its trial (trial_job). True when only
/// sweeps were named (nothing is left to do).
bool take_sweeps(sweep_query& q, const engine_config& cfg);

}  // namespace tjob::cli
