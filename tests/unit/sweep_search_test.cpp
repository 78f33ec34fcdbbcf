// The pure part of sweeps: checks, algorithms, metric lines, the request's JSON.
#include "core/sweep_search.hpp"

#include <tjob/error.hpp>
#include <tjob/sweep.hpp>

#include <doctest/doctest.h>
#include <boost/json.hpp>

#include <cmath>
#include <set>
#include <string>
#include <vector>

using namespace tjob;
using namespace tjob::detail;
using dist = search_parameter::distribution;

namespace {

sweep_request request(std::string algorithm = "random") {
  sweep_request r;
  r.name = "sw";
  r.trial.job_trainer = command_trainer{{"true"}};
  r.search_space.push_back({"lr", dist::loguniform, 1e-3, 1e-1, {}});
  r.search_space.push_back({"epochs", dist::choice, 0, 0, {"5", "10"}});
  r.objectives.push_back({});
  r.algorithm = std::move(algorithm);
  r.num_trials = 20;
  return r;
}

std::string refusal(const sweep_request& r) {
  try {
    check_sweep_request(r);
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
    return e.what();
  }
  return {};
}

double value(const std::vector<std::pair<std::string, std::string>>& p, const std::string& name) {
  for (const auto& [k, v] : p)
    if (k == name) return std::stod(v);
  FAIL("no parameter " << name);
  return 0;
}

// Branin on [-5, 10] x [0, 15]: its minimum is 0.397887.
double branin(double x, double y) {
  const double a = 1, b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, r = 6, s = 10, t = 1 / (8 * M_PI);
  return a * std::pow(y - b * x * x + c * x - r, 2) + s * (1 - t) * std::cos(x) + s;
}

double best_of(const std::string& algorithm, std::uint64_t seed, int budget) {
  sweep_request r;
  r.search_space.push_back({"x", dist::uniform, -5, 10, {}});
  r.search_space.push_back({"y", dist::uniform, 0, 15, {}});
  r.algorithm = algorithm;
  r.num_trials = budget;
  std::vector<observation> done;
  double best = INFINITY;
  for (int i = 0; i < budget; ++i) {
    auto p = sweep_parameters(r, seed, i, done);
    const double v = branin(value(p, "x"), value(p, "y"));
    best = std::min(best, v);
    done.push_back({p, v});
  }
  return best;
}

}  // namespace

TEST_CASE("a sweep request is refused field by field before any trial") {
  CHECK(refusal(request()).empty());
  auto r = request();
  r.search_space.clear();
  CHECK(refusal(r).find("search_space: it is empty") != std::string::npos);
  r = request();
  r.search_space[0] = {"lr", dist::uniform, 0.5, 0.1, {}};
  CHECK(refusal(r).find("search_space.lr: min 0.5 is not below max 0.1") != std::string::npos);
  r.search_space[0] = {"lr", dist::loguniform, 0, 0.1, {}};
  CHECK(refusal(r).find("search_space.lr: a loguniform range must be above 0") != std::string::npos);
  r.search_space[0] = {"lr", dist::choice, 0, 0, {}};
  CHECK(refusal(r).find("search_space.lr: a choice needs at least one value") != std::string::npos);
  r.search_space[0] = {"lr", dist::choice, 0, 0, {"adam"}};
  CHECK(refusal(r).find("is not a JSON value") != std::string::npos);
  r.search_space[0] = {"2lr", dist::uniform, 0, 1, {}};
  CHECK(refusal(r).find("'2lr' is not a parameter name") != std::string::npos);
  r = request();
  r.algorithm = "bayes";
  CHECK(refusal(r).find("algorithm: 'bayes' is not an algorithm; use random, grid or tpe") != std::string::npos);
  r = request();
  r.num_trials = 0;
  CHECK(refusal(r).find("trial_config.num_trials") != std::string::npos);
  r = request();
  r.parallel_trials = 0;
  CHECK(refusal(r).find("trial_config.parallel_trials") != std::string::npos);
  r = request();
  r.max_failed_trials = -1;
  CHECK(refusal(r).find("trial_config.max_failed_trials") != std::string::npos);
  r = request();
  r.objectives.push_back({"loss", true});
  CHECK(refusal(r).find("metric 'loss' is given twice") != std::string::npos);
  r = request();
  r.trial.array = "a";
  CHECK(refusal(r).find("trial_template") != std::string::npos);
  r = request();
  r.early_stopping = median_stop{.min_trials_required = 0};
  CHECK(refusal(r).find("early_stopping.min_trials_required: 0 must be 1 or more") != std::string::npos);
  r.early_stopping = median_stop{.start_step = -2};
  CHECK(refusal(r).find("early_stopping.start_step: -2 must be 1 or more") != std::string::npos);
}

TEST_CASE("the median stopping rule stops a trial worse than the completed trials' median, and no other") {
  const median_stop rule{.min_trials_required = 3, .start_step = 2};
  // Running averages at 2 reports: 1.5, 2.5, 3.5 (the third's later reports do not count); median 2.5.
  const std::vector<std::vector<double>> done{{1, 2, 0.5}, {3, 2}, {4, 3, 9}};
  CHECK(median_stop_verdict(rule, {5, 2.6}, done, false, "loss")
            .starts_with("EarlyStopped: its best loss 2.6 "));
  CHECK(median_stop_verdict(rule, {5, 2.5}, done, false, "loss").empty());              // not worse: goes on
  CHECK(median_stop_verdict(rule, {9}, done, false, "loss").empty());                   // before start_step
  CHECK(median_stop_verdict(rule, {9, 9}, {done[0], done[1]}, false, "loss").empty());  // too few completed
  CHECK(
      median_stop_verdict(rule, {9, 9}, {done[0], done[1], {}}, false, "loss").empty());  // one reported none
  // Maximising: the best is the highest; at 3 reports the averages are 1.1667, 2.5, 5.333: median 2.5.
  CHECK(median_stop_verdict(rule, {1, 2, 2.4}, done, true, "acc").find("median 2.5 of 3") !=
        std::string::npos);
  CHECK(median_stop_verdict(rule, {1, 2.5, 0}, done, true, "acc").empty());
  // An even count takes the middle two's mean: (1.5 + 2.5) / 2 = 2 at 2 reports.
  const std::vector<std::vector<double>> four{{1, 2}, {3, 2}, {4, 3}, {0, 0}};
  CHECK(median_stop_verdict(rule, {3, 2.1}, four, false, "loss").find("median 2.0 of 4") !=
        std::string::npos);
}

TEST_CASE("random search: the same seed gives the same trials, in range, whatever ended first") {
  auto r = request();
  std::vector<observation> none, some{{{{"lr", "0.01"}, {"epochs", "5"}}, 1.0}};
  std::set<std::string> epochs;
  for (int i = 0; i < 50; ++i) {
    auto a = sweep_parameters(r, 42, i, none);
    CHECK(a == sweep_parameters(r, 42, i, some));
    const double lr = value(a, "lr");
    CHECK(lr >= 1e-3);
    CHECK(lr <= 1e-1);
    epochs.insert(a[1].second);
  }
  CHECK(epochs == std::set<std::string>{"5", "10"});
  CHECK(sweep_parameters(r, 42, 3, none) != sweep_parameters(r, 43, 3, none));
  // loguniform: about as many draws below the geometric middle (0.01) as above
  int below = 0;
  for (int i = 0; i < 400; ++i) below += value(sweep_parameters(r, 7, i, none), "lr") < 0.01;
  CHECK(below > 150);
  CHECK(below < 250);
}

TEST_CASE("grid search covers the grid, each point once, within the budget") {
  auto r = request("grid");
  r.search_space[0] = {"x", dist::uniform, 0, 1, {}};
  r.num_trials = 6;
  CHECK(grid_points(r) == 3);
  CHECK(sweep_trial_count(r) == 6);
  std::set<std::vector<std::pair<std::string, std::string>>> seen;
  for (int i = 0; i < 6; ++i) seen.insert(sweep_parameters(r, 0, i, {}));
  CHECK(seen.size() == 6);
  CHECK(seen.count({{"x", "0.0"}, {"epochs", "5"}}) == 1);
  CHECK(seen.count({{"x", "0.5"}, {"epochs", "10"}}) == 1);
  CHECK(seen.count({{"x", "1.0"}, {"epochs", "10"}}) == 1);
  // choices alone: the grid is their product, and the budget stops at it
  r.search_space[0] = {"opt", dist::choice, 0, 0, {"\"adam\"", "\"sgd\"", "\"lamb\""}};
  r.num_trials = 100;
  CHECK(sweep_trial_count(r) == 6);
  // loguniform points are evenly spaced in log
  r.search_space = {{"lr", dist::loguniform, 1e-3, 1e-1, {}}};
  r.num_trials = 3;
  CHECK(sweep_parameters(r, 0, 1, {})[0].second == "0.01");
}

TEST_CASE("TPE draws random trials first, then near the best observations") {
  auto r = request("tpe");
  r.search_space = {{"x", dist::uniform, 0, 100, {}}};
  auto as_random = r;
  as_random.algorithm = "random";
  std::vector<observation> done;
  for (int i = 0; i < 10; ++i) {
    auto p = sweep_parameters(r, 5, i, done);
    CHECK(p == sweep_parameters(as_random, 5, i, {}));
    done.push_back({p, std::abs(value(p, "x") - 80)});
  }
  int near = 0;
  for (int i = 10; i < 40; ++i) {
    auto p = sweep_parameters(r, 5, i, done);
    near += std::abs(value(p, "x") - 80) < 20;
    done.push_back({p, std::abs(value(p, "x") - 80)});
  }
  CHECK(near > 20);  // random would put about 40% of them there
}

TEST_CASE("TPE beats random search on Branin at the same budget, over seeds") {
  std::vector<double> tpe, random;
  for (std::uint64_t seed = 1; seed <= 9; ++seed) {
    tpe.push_back(best_of("tpe", seed, 60));
    random.push_back(best_of("random", seed, 60));
  }
  std::sort(tpe.begin(), tpe.end());
  std::sort(random.begin(), random.end());
  CHECK(tpe[4] < random[4]);
}

TEST_CASE("metric lines: name=value pairs of the wanted metrics, bad ones ignored") {
  const std::vector<std::string> wanted{"loss", "accuracy"};
  using pairs = std::vector<std::pair<std::string, double>>;
  CHECK(metric_pairs("loss=0.25", wanted) == pairs{{"loss", 0.25}});
  CHECK(metric_pairs("epoch 3: loss=0.25, accuracy=0.9 lr=0.1", wanted) ==
        pairs{{"loss", 0.25}, {"accuracy", 0.9}});
  CHECK(metric_pairs("loss = 1e-3", wanted) == pairs{{"loss", 1e-3}});
  CHECK(metric_pairs("{loss=2}", wanted) == pairs{{"loss", 2}});
  CHECK(metric_pairs("loss=nan accuracy=inf", wanted).empty());
  CHECK(metric_pairs("loss=0.2.3 loss=abc loss= loss", wanted).empty());
  CHECK(metric_pairs("val_loss=0.3 myloss=1", wanted).empty());
  CHECK(metric_pairs("", wanted).empty());
  CHECK(metric_pairs("====", wanted).empty());
}

TEST_CASE("a metric keeps its min, max, latest and history") {
  std::vector<trial_metric> m;
  const auto t0 = clock::now();
  record_metric(m, "loss", 3, t0);
  record_metric(m, "loss", 1, t0 + std::chrono::seconds(1));
  record_metric(m, "loss", 2, t0 + std::chrono::seconds(2));
  REQUIRE(m.size() == 1);
  CHECK(m[0].min == 1);
  CHECK(m[0].max == 3);
  CHECK(m[0].latest == 2);
  CHECK(m[0].history.size() == 3);
  CHECK(m[0].history[1].second == 1);
}

TEST_CASE("a sweep request's JSON reads back the same, and a bad member is named") {
  auto r = request("tpe");
  r.seed = 18446744073709551615ULL;
  r.max_failed_trials = 2;
  r.parallel_trials = 3;
  r.objectives = {{"accuracy", true}, {"loss", false}};
  r.early_stopping = median_stop{.min_trials_required = 5, .start_step = 7};
  auto back = sweep_request_from_json(sweep_request_to_json(r));
  CHECK(sweep_request_to_json(back) == sweep_request_to_json(r));
  CHECK(back.seed == r.seed);
  REQUIRE(back.early_stopping);
  CHECK(back.early_stopping->start_step == 7);
  CHECK(back.early_stopping->min_trials_required == 5);
  CHECK(back.search_space[1].choices == std::vector<std::string>{"5", "10"});
  auto refused = [](const std::string& text) {
    try {
      (void)sweep_request_from_json(text);
    } catch (const error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refused(R"({"trial":{"trainer":{"kind":"command","command":["true"]}},"algoritm":"grid"})")
            .find("algoritm: not a field of a sweep request") != std::string::npos);
  CHECK(refused(R"({"trial":{"trainer":{"kind":"command","command":["true"]}},"search_space":[{"name":"x","distribution":"normal","min":0,"max":1}]})")
            .find("search_space[0].distribution: 'normal' is not one") != std::string::npos);
  CHECK(refused(R"({"search_space":[]})").find("trial: the trial's template is missing") != std::string::npos);
  CHECK(refused("{").find("not JSON") != std::string::npos);
  CHECK(
      refused(
          R"({"trial":{"trainer":{"kind":"command","command":["true"]}},"early_stopping":{"algorithm":"hyperband"}})")
          .find("early_stopping.algorithm: 'hyperband' is not one") != std::string::npos);
}

TEST_CASE("numbers are written shortest, and floats stay floats") {
  CHECK(number_text(0.001) == "0.001");
  CHECK(number_text(5) == "5.0");
  CHECK(number_text(-2.5) == "-2.5");
  CHECK(parameter_argument("\"adam\"") == "adam");
  CHECK(parameter_argument("0.1") == "0.1");
}
