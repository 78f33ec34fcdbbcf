// The pure part of sweeps: the checks of a request, the search algorithms
// (grid, random, TPE) and the metrics a trial's output reports. No I/O.
#pragma once

#include <tjob/sweep.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tjob::detail {

/// What is wrong with the request (empty search space, min >= max, a
/// loguniform from 0, an unknown algorithm, a bad count), as a tjob::error
/// (invalid_argument) naming the field and the fix; before any trial exists.
void check_sweep_request(const sweep_request& r);

/// The number of trials the sweep makes: num_trials, and for grid at most
/// the grid's size.
int sweep_trial_count(const sweep_request& r);

/// A trial that has ended with a value of the objective: its parameters and
/// that value, as the algorithm learns from them.
struct observation {
  std::vector<std::pair<std::string, std::string>> parameters;
  double value = 0;
};

/// The parameters of trial `index` (name -> JSON value text, in the search
/// space's order). random: drawn from `seed` and the index alone, so the same
/// seed gives the same trials whatever order they end in. grid: the index-th
/// point of the grid (choices as given; a continuous parameter on `grid_points`
/// evenly spaced values, log-spaced for loguniform). tpe: random for the first
/// trials, then drawn by Parzen estimators of the observations so far (the
/// objective's direction applied: `done` values are to be minimised).
std::vector<std::pair<std::string, std::string>> sweep_parameters(const sweep_request& r, std::uint64_t seed,
                                                                  int index, const std::vector<observation>& done);

/// How many points a continuous parameter has on the grid: the fewest that
/// make the grid hold num_trials points (at least 2).
int grid_points(const sweep_request& r);

/// The `name=value` pairs of one line of a trial's output (Katib's default
/// collector's format), of the metrics named in `wanted` only: `loss=0.25`,
/// `epoch 3: loss=0.25, accuracy=0.9`. Values that are not finite numbers,
/// and names not wanted, are left out; a bad line gives nothing.
std::vector<std::pair<std::string, double>> metric_pairs(std::string_view line,
                                                         const std::vector<std::string>& wanted);

/// The median stopping rule (median_stop) for a running trial whose
/// objective values so far are `reported` (in order), against the completed
/// trials' histories of it: why it is to be stopped ("EarlyStopped: ..."),
/// or empty when it goes on. `maximize`: higher is better.
std::string median_stop_verdict(const median_stop& rule, const std::vector<double>& reported,
                                const std::vector<std::vector<double>>& completed, bool maximize,
                                const std::string& metric);

/// Adds a value to the trial's metric of that name (min, max, latest, history).
void record_metric(std::vector<trial_metric>& metrics, const std::string& name, double value,
                   clock::time_point when);

/// A value as JSON text, the shortest that reads back to it ("0.001", "5").
std::string number_text(double v);

/// The text that stands for a parameter's value in a command line: a
/// string's own characters, anything else its JSON.
std::string parameter_argument(const std::string& json_value);

}  // namespace tjob::detail
