#include "core/sweep_search.hpp"

#include <tjob/error.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace tjob::detail {

namespace {

using dist = search_parameter::distribution;

constexpr int max_trials = 10'000;
constexpr std::size_t max_history = 2'000;  // values kept per metric of a trial
constexpr int tpe_startup = 10;             // random trials before the model (Optuna's default)
constexpr int tpe_candidates = 24;          // draws from the good density per trial (Optuna's)

[[noreturn]] void refuse(const sweep_request& r, const std::string& field, const std::string& what) {
  throw error(errc::invalid_argument,
              "sweep " + (r.name.empty() ? std::string("(unnamed)") : r.name) + ": " + field + ": " + what);
}

bool identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

bool metric_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/';
}

// splitmix64: small, fast, and the same numbers on every machine.
struct random_source {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {  // Box-Muller
    double u1 = unit(), u2 = unit();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }
};

random_source source_for(std::uint64_t seed, int index) {
  random_source r{seed ^ (0xd1b54a32d192ed03ULL * static_cast<std::uint64_t>(index + 1))};
  r.next();
  return r;
}

// A continuous parameter in the space the algorithms work in: log for loguniform.
double to_inner(const search_parameter& p, double v) {
  return p.kind == dist::loguniform ? std::log(v) : v;
}
double from_inner(const search_parameter& p, double u) {
  double v = p.kind == dist::loguniform ? std::exp(u) : u;
  return std::clamp(v, p.min, p.max);
}
std::pair<double, double> inner_bounds(const search_parameter& p) { return {to_inner(p, p.min), to_inner(p, p.max)}; }

std::string draw_uniform(const search_parameter& p, random_source& rng) {
  if (p.kind == dist::choice) {
    auto i = static_cast<std::size_t>(rng.unit() * static_cast<double>(p.choices.size()));
    return p.choices[std::min(i, p.choices.size() - 1)];
  }
  auto [lo, hi] = inner_bounds(p);
  return number_text(from_inner(p, lo + (hi - lo) * rng.unit()));
}

std::vector<std::pair<std::string, std::string>> random_point(const sweep_request& r, random_source& rng) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& p : r.search_space) out.emplace_back(p.name, draw_uniform(p, rng));
  return out;
}

std::vector<std::pair<std::string, std::string>> grid_point(const sweep_request& r, int index) {
  const int points = grid_points(r);
  std::vector<std::pair<std::string, std::string>> out(r.search_space.size());
  auto rest = static_cast<std::uint64_t>(index);
  // The last parameter changes fastest, as itertools.product's.
  for (std::size_t k = r.search_space.size(); k-- > 0;) {
    const auto& p = r.search_space[k];
    const std::uint64_t n = p.kind == dist::choice ? p.choices.size() : static_cast<std::uint64_t>(points);
    const auto at = rest % n;
    rest /= n;
    if (p.kind == dist::choice) {
      out[k] = {p.name, p.choices[at]};
    } else {
      auto [lo, hi] = inner_bounds(p);
      double u = lo + (hi - lo) * static_cast<double>(at) / static_cast<double>(n - 1);
      // (12 digits: a grid point is 0.01, not exp(log(0.01))'s 0.010000000000000004)
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.12g", from_inner(p, u));
      out[k] = {p.name, number_text(std::strtod(buf, nullptr))};
    }
  }
  return out;
}

// --- TPE: one Parzen estimator per parameter, after Bergstra et al. (2011)
// and Optuna's defaults (the prior as one more kernel, the "magic clip").

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

struct parzen {
  // continuous: kernels (mu, sigma, weight) truncated to [lo, hi]
  std::vector<double> mu, sigma, weight;
  double lo = 0, hi = 1;
  // categorical: a weight per choice
  std::vector<double> cat;

  double log_density(double u) const {
    double total = 0, wsum = 0;
    for (std::size_t i = 0; i < mu.size(); ++i) {
      const double z = (u - mu[i]) / sigma[i];
      const double mass = normal_cdf((hi - mu[i]) / sigma[i]) - normal_cdf((lo - mu[i]) / sigma[i]);
      total += weight[i] * std::exp(-0.5 * z * z) / (sigma[i] * std::sqrt(2 * M_PI) * std::max(mass, 1e-12));
      wsum += weight[i];
    }
    return std::log(std::max(total / wsum, 1e-300));
  }
  double sample(random_source& rng) const {
    double wsum = 0;
    for (double w : weight) wsum += w;
    double pick = rng.unit() * wsum;
    std::size_t i = 0;
    while (i + 1 < weight.size() && pick >= weight[i]) pick -= weight[i++];
    for (int tries = 0; tries < 100; ++tries) {
      const double u = mu[i] + sigma[i] * rng.normal();
      if (u >= lo && u <= hi) return u;
    }
    return std::clamp(mu[i], lo, hi);
  }
  double log_cat(std::size_t k) const {
    double s = 0;
    for (double w : cat) s += w;
    return std::log(cat[k] / s);
  }
  std::size_t sample_cat(random_source& rng) const {
    double s = 0;
    for (double w : cat) s += w;
    double pick = rng.unit() * s;
    std::size_t k = 0;
    while (k + 1 < cat.size() && pick >= cat[k]) pick -= cat[k++];
    return k;
  }
};

std::size_t choice_index(const search_parameter& p, const std::string& v) {
  auto it = std::find(p.choices.begin(), p.choices.end(), v);
  return it == p.choices.end() ? p.choices.size() : static_cast<std::size_t>(it - p.choices.begin());
}

const std::string* value_of(const observation& o, const std::string& name) {
  for (const auto& [n, v] : o.parameters)
    if (n == name) return &v;
  return nullptr;
}

parzen estimator(const search_parameter& p, const std::vector<const observation*>& obs) {
  parzen e;
  if (p.kind == dist::choice) {
    e.cat.assign(p.choices.size(), 1.0);  // the prior: one count each
    for (const auto* o : obs)
      if (const auto* v = value_of(*o, p.name))
        if (auto k = choice_index(p, *v); k < p.choices.size()) e.cat[k] += 1;
    return e;
  }
  std::tie(e.lo, e.hi) = inner_bounds(p);
  const double span = e.hi - e.lo;
  std::vector<double> points;
  for (const auto* o : obs)
    if (const auto* v = value_of(*o, p.name)) {
      char* end = nullptr;
      double x = std::strtod(v->c_str(), &end);
      if (end != v->c_str() && std::isfinite(x)) points.push_back(to_inner(p, std::clamp(x, p.min, p.max)));
    }
  points.push_back((e.lo + e.hi) / 2);  // the prior's kernel
  std::vector<double> sorted = points;
  std::sort(sorted.begin(), sorted.end());
  const double min_sigma = span / std::min(100.0, 1.0 + static_cast<double>(points.size()));
  for (std::size_t i = 0; i < points.size(); ++i) {
    const bool prior = i + 1 == points.size();
    double s = span;
    if (!prior) {
      auto it = std::lower_bound(sorted.begin(), sorted.end(), points[i]);
      const double left = it == sorted.begin() ? e.lo : *std::prev(it);
      auto up = std::upper_bound(sorted.begin(), sorted.end(), points[i]);
      const double right = up == sorted.end() ? e.hi : *up;
      s = std::clamp(std::max(points[i] - left, right - points[i]), min_sigma, span);
    }
    e.mu.push_back(points[i]);
    e.sigma.push_back(s);
    e.weight.push_back(1.0);
  }
  return e;
}

std::vector<std::pair<std::string, std::string>> tpe_point(const sweep_request& r, random_source& rng,
                                                           const std::vector<observation>& done) {
  std::vector<const observation*> sorted;
  for (const auto& o : done)
    if (std::isfinite(o.value)) sorted.push_back(&o);
  if (static_cast<int>(sorted.size()) < tpe_startup) return random_point(r, rng);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const observation* a, const observation* b) { return a->value < b->value; });
  const auto n_good = std::clamp<std::size_t>(static_cast<std::size_t>(std::ceil(0.1 * sorted.size())), 1, 25);
  std::vector<const observation*> good(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(n_good));
  std::vector<const observation*> bad(sorted.begin() + static_cast<std::ptrdiff_t>(n_good), sorted.end());
  std::vector<std::pair<std::string, std::string>> out;
  // Each parameter on its own (independent TPE): the candidate of the good
  // density with the highest ratio of good to bad.
  for (const auto& p : r.search_space) {
    const parzen l = estimator(p, good), g = estimator(p, bad);
    double best_score = -INFINITY;
    std::string best;
    for (int c = 0; c < tpe_candidates; ++c) {
      double score = 0;
      std::string text;
      if (p.kind == dist::choice) {
        auto k = l.sample_cat(rng);
        score = l.log_cat(k) - g.log_cat(k);
        text = p.choices[k];
      } else {
        double u = l.sample(rng);
        score = l.log_density(u) - g.log_density(u);
        text = number_text(from_inner(p, u));
      }
      if (score > best_score) best_score = score, best = text;
    }
    out.emplace_back(p.name, best);
  }
  return out;
}

}  // namespace

std::string number_text(double v) {
  if (!std::isfinite(v)) return "null";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    auto res = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(v));
    std::string s(buf, res.ptr);
    return s + ".0";  // a float stays a float in Python
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string parameter_argument(const std::string& json_value) {
  try {
    auto v = boost::json::parse(json_value);
    if (v.is_string()) return std::string(v.as_string());
  } catch (const std::exception&) {
  }
  return json_value;
}

int grid_points(const sweep_request& r) {
  std::uint64_t categorical = 1;
  int continuous = 0;
  for (const auto& p : r.search_space)
    if (p.kind == dist::choice)
      categorical *= std::max<std::size_t>(p.choices.size(), 1);
    else
      ++continuous;
  if (continuous == 0) return 1;
  // The most points per continuous parameter whose grid still fits the
  // budget, so that the sweep covers the whole grid; at least 2.
  int points = 2;
  for (;;) {
    std::uint64_t size = categorical;
    for (int i = 0; i < continuous && size <= static_cast<std::uint64_t>(max_trials); ++i)
      size *= static_cast<std::uint64_t>(points + 1);
    if (size > static_cast<std::uint64_t>(r.num_trials)) return points;
    ++points;
  }
}

int sweep_trial_count(const sweep_request& r) {
  if (r.algorithm != "grid") return r.num_trials;
  const auto points = static_cast<std::uint64_t>(grid_points(r));
  std::uint64_t size = 1;
  for (const auto& p : r.search_space) {
    size *= p.kind == dist::choice ? p.choices.size() : points;
    if (size >= static_cast<std::uint64_t>(r.num_trials)) return r.num_trials;
  }
  return static_cast<int>(size);
}

namespace {

// One parameter of the search space (`seen`: the names before it).
void check_parameter(const sweep_request& r, const search_parameter& p, std::set<std::string>& seen) {
  const std::string field = "search_space." + p.name;
  if (!identifier(p.name))
    refuse(r, "search_space",
           "'" + p.name +
               "' is not a parameter name: use letters, digits and '_', not beginning "
               "with a digit (it becomes a keyword argument)");
  if (!seen.insert(p.name).second) refuse(r, field, "given twice; give each parameter once");
  switch (p.kind) {
    case dist::uniform:
    case dist::loguniform:
      if (!std::isfinite(p.min) || !std::isfinite(p.max))
        refuse(r, field, "min and max must be finite numbers");
      if (p.min >= p.max)
        refuse(r, field,
               "min " + number_text(p.min) + " is not below max " + number_text(p.max) + "; give min < max");
      if (p.kind == dist::loguniform && p.min <= 0)
        refuse(r, field,
               "a loguniform range must be above 0 (min is " + number_text(p.min) +
                   "); use uniform for a range that reaches 0");
      break;
    case dist::choice: {
      if (p.choices.empty()) refuse(r, field, "a choice needs at least one value");
      std::set<std::string> values;
      for (const auto& c : p.choices) {
        try {
          (void)boost::json::parse(c);
        } catch (const std::exception&) {
          refuse(r, field, "choice '" + c + "' is not a JSON value (a string is quoted: \"adam\")");
        }
        if (!values.insert(c).second) refuse(r, field, "choice " + c + " is given twice");
      }
      break;
    }
  }
}

// The algorithm, the trials' numbers, early stopping and the trial template.
void check_trial_config(const sweep_request& r) {
  if (r.algorithm != "random" && r.algorithm != "grid" && r.algorithm != "tpe")
    refuse(r, "algorithm", "'" + r.algorithm + "' is not an algorithm; use random, grid or tpe");
  if (r.num_trials < 1 || r.num_trials > max_trials)
    refuse(r, "trial_config.num_trials",
           std::to_string(r.num_trials) + " is not from 1 to " + std::to_string(max_trials));
  if (r.parallel_trials < 1)
    refuse(r, "trial_config.parallel_trials", std::to_string(r.parallel_trials) + " must be 1 or more");
  if (r.max_failed_trials && *r.max_failed_trials < 0)
    refuse(r, "trial_config.max_failed_trials", std::to_string(*r.max_failed_trials) + " must be 0 or more");
  if (r.early_stopping) {
    if (r.early_stopping->min_trials_required < 1)
      refuse(r, "early_stopping.min_trials_required",
             std::to_string(r.early_stopping->min_trials_required) + " must be 1 or more");
    if (r.early_stopping->start_step < 1)
      refuse(r, "early_stopping.start_step",
             std::to_string(r.early_stopping->start_step) + " must be 1 or more");
  }
  if (!r.trial.array.empty())
    refuse(r, "trial_template", "a trial cannot be a job array's member: the sweep is the trials' array");
}

}  // namespace

void check_sweep_request(const sweep_request& r) {
  if (!r.name.empty()) {
    if (auto problem = job_name_problem(r.name)) refuse(r, "name", *problem);
  }
  if (r.search_space.empty())
    refuse(r, "search_space",
           "it is empty; give at least one parameter, e.g. {\"lr\": Search.loguniform(1e-4, 1e-1)} "
           "(tjob optimize --param lr=loguniform:1e-4:1e-1)");
  std::set<std::string> seen;
  for (const auto& p : r.search_space) {
    check_parameter(r, p, seen);
  }
  std::set<std::string> metrics;
  for (const auto& o : r.objectives) {
    if (o.metric.empty() || !std::all_of(o.metric.begin(), o.metric.end(), metric_char))
      refuse(r, "objectives",
             "metric '" + o.metric + "' is not a metric name: use letters, digits, '_', '-', '.' or '/'");
    if (!metrics.insert(o.metric).second) refuse(r, "objectives", "metric '" + o.metric + "' is given twice");
  }
  check_trial_config(r);
}

std::vector<std::pair<std::string, std::string>> sweep_parameters(const sweep_request& r, std::uint64_t seed,
                                                                  int index, const std::vector<observation>& done) {
  if (r.algorithm == "grid") return grid_point(r, index);
  auto rng = source_for(seed, index);
  if (r.algorithm == "tpe") return tpe_point(r, rng, done);
  return random_point(r, rng);
}

std::vector<std::pair<std::string, double>> metric_pairs(std::string_view line,
                                                         const std::vector<std::string>& wanted) {
  std::vector<std::pair<std::string, double>> out;
  for (std::size_t eq = line.find('='); eq != std::string_view::npos; eq = line.find('=', eq + 1)) {
    std::size_t end = eq;
    while (end > 0 && line[end - 1] == ' ') --end;
    std::size_t begin = end;
    while (begin > 0 && metric_char(line[begin - 1])) --begin;
    std::size_t vbegin = eq + 1;
    while (vbegin < line.size() && line[vbegin] == ' ') ++vbegin;
    std::size_t vend = vbegin;
    while (vend < line.size() && !std::isspace(static_cast<unsigned char>(line[vend])) && line[vend] != ',' &&
           line[vend] != ';' && line[vend] != ')' && line[vend] != ']' && line[vend] != '}')
      ++vend;
    if (begin == end || vbegin == vend) continue;
    std::string name(line.substr(begin, end - begin));
    if (std::find(wanted.begin(), wanted.end(), name) == wanted.end()) continue;
    std::string text(line.substr(vbegin, vend - vbegin));
    char* stop = nullptr;
    double v = std::strtod(text.c_str(), &stop);
    if (stop != text.c_str() + text.size() || !std::isfinite(v)) continue;
    out.emplace_back(std::move(name), v);
  }
  return out;
}

std::string median_stop_verdict(const median_stop& rule, const std::vector<double>& reported,
                                const std::vector<std::vector<double>>& completed, bool maximize,
                                const std::string& metric) {
  const auto step = reported.size();
  if (step < static_cast<std::size_t>(rule.start_step) ||
      completed.size() < static_cast<std::size_t>(rule.min_trials_required))
    return {};
  std::vector<double> averages;
  for (const auto& h : completed) {
    if (h.empty()) continue;
    const auto n = std::min(step, h.size());
    double sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += h[i];
    averages.push_back(sum / static_cast<double>(n));
  }
  if (averages.size() < static_cast<std::size_t>(rule.min_trials_required)) return {};
  std::sort(averages.begin(), averages.end());
  const auto m = averages.size();
  const double median = m % 2 ? averages[m / 2] : (averages[m / 2 - 1] + averages[m / 2]) / 2;
  const double best = maximize ? *std::max_element(reported.begin(), reported.end())
                               : *std::min_element(reported.begin(), reported.end());
  if (maximize ? best >= median : best <= median) return {};
  return "EarlyStopped: its best " + metric + " " + number_text(best) + " after " + std::to_string(step) +
         " reports is worse than the median " + number_text(median) + " of " + std::to_string(m) +
         " completed trials' running averages (median stopping rule)";
}

void record_metric(std::vector<trial_metric>& metrics, const std::string& name, double value,
                   clock::time_point when) {
  auto it = std::find_if(metrics.begin(), metrics.end(), [&](const trial_metric& m) { return m.name == name; });
  if (it == metrics.end()) {
    metrics.push_back({name, value, value, value, {}});
    it = std::prev(metrics.end());
  }
  it->min = std::min(it->min, value);
  it->max = std::max(it->max, value);
  it->latest = value;
  if (it->history.size() < max_history) it->history.emplace_back(when, value);
}

}  // namespace tjob::detail
