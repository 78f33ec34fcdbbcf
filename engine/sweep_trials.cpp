// See sweep_trials.hpp.
#include "engine/sweep_trials.hpp"

#include "core/sweep_search.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <variant>

namespace tjob::detail {

namespace json = boost::json;

namespace {

std::vector<std::string> objective_names(const sweep_request& r) {
  std::vector<std::string> out;
  for (const auto& o : r.objectives) out.push_back(o.metric);
  return out;
}

const std::string* parameter(const sweep_trial& t, const std::string& name) {
  for (const auto& [k, v] : t.parameters)
    if (k == name) return &v;
  return nullptr;
}

// ${trialParameters.NAME} (Katib's placeholder) replaced in `s`.
std::string substitute(std::string s, const sweep_trial& t, bool& used) {
  static const std::string open = "${trialParameters.";
  for (std::size_t at = s.find(open); at != std::string::npos; at = s.find(open, at)) {
    auto close = s.find('}', at);
    if (close == std::string::npos) break;
    const auto name = s.substr(at + open.size(), close - at - open.size());
    const auto* v = parameter(t, name);
    if (!v) {
      at = close;
      continue;
    }
    const auto arg = parameter_argument(*v);
    s.replace(at, close + 1 - at, arg);
    at += arg.size();
    used = true;
  }
  return s;
}

std::optional<double> number_of(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v;
}

// The metrics of a trial that has ended: its Progress events, then the
// `name=value` lines of its last attempt's stdout (node-0's, as Katib reads
// the primary container's).
void read_metrics(trainer_client& client, const sweep_request& r, sweep_trial& t, const train_job& job) {
  t.metrics.clear();
  if (job.progress_updated)  // (a job that never reported has no Progress event to read)
    for (const auto& e : client.get_job_events(t.name))
      for (const auto& [k, v] : e.metrics)
        if (auto x = number_of(v)) record_metric(t.metrics, k, *x, e.time);
  log_options lo{.step = job.steps.empty() ? "node-0" : job.steps.front().name, .timestamps = true};
  if (!job.steps.empty()) lo.attempt = job.steps.front().attempt;
  std::string logs;
  try {
    logs = client.get_job_logs(t.name, lo).read_all();
  } catch (const error&) {  // no log (it never started): its events say why
  }
  const auto wanted = objective_names(r);
  std::string_view rest = logs;
  while (!rest.empty()) {
    auto nl = rest.find('\n');
    auto line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    auto sp = line.find(' ');
    auto when = sp == std::string_view::npos ? std::nullopt : parse_time(line.substr(0, sp));
    if (when) line.remove_prefix(sp + 1);
    for (const auto& [k, v] : metric_pairs(line, wanted))
      record_metric(t.metrics, k, v, when.value_or(clock::now()));
  }
}

// A trial's objective: its metric's min when minimising, max when maximising
// (Katib's default strategy).
void set_objective(const sweep_request& r, sweep_trial& t) {
  t.objective.reset();
  for (const auto& m : t.metrics)
    if (m.name == primary(r).metric) t.objective = primary(r).maximize ? m.max : m.min;
}

}  // namespace

const objective& primary(const sweep_request& r) { return r.objectives.front(); }

train_request trial_request(const sweep_job& s, const sweep_trial& t, bool arrays) {
  train_request req = s.request.trial;
  req.name = t.name;
  if (arrays) {
    req.array = s.name;
    req.array_limit = s.request.parallel_trials;
  }
  json::object all;
  for (const auto& [k, v] : t.parameters) all[k] = json::parse(v);
  // Every trial knows its sweep, its index and its parameters (a JSON object:
  // tjob.trial_parameters() reads it); a command or a script also gets them
  // where its arguments or environment say ${trialParameters.NAME}.
  auto placed = [&](std::vector<std::string>& argv, std::map<std::string, std::string>& env) {
    bool used = false;
    for (auto& a : argv) a = substitute(a, t, used);
    for (auto& [k, v] : env) v = substitute(v, t, used);
    env["TJOB_SWEEP"] = s.name;
    env["TJOB_TRIAL_INDEX"] = std::to_string(t.index);
    env["TJOB_TRIAL_PARAMETERS"] = json::serialize(all);
  };
  if (auto* py = std::get_if<python_trainer>(&req.job_trainer)) {
    if (!py->function.empty()) {  // Katib's way: each parameter a keyword argument
      json::object args;
      if (!py->function_args.empty()) args = json::parse(py->function_args).as_object();
      for (const auto& [k, v] : all) args[k] = v;
      py->function_args = json::serialize(args);
    }
    placed(py->args, py->env);
  } else if (auto* cmd = std::get_if<command_trainer>(&req.job_trainer)) {
    placed(cmd->command, cmd->env);
  }
  return req;
}

bool early_stopped(const sweep_trial& t) { return t.reason.starts_with(early_stop_prefix); }

void finish_trial(trainer_client& client, const sweep_request& r, sweep_trial& t, const train_job& job) {
  // A trial the median rule stopped is Complete, with what it reported; one
  // that ended by itself before the stop reached it ended as it ended.
  const bool stopped = early_stopped(t) && job.status != job_status::complete;
  const auto verdict = t.reason;
  t.status = std::string(to_string(job.status));
  t.reason = job.reason;
  read_metrics(client, r, t, job);
  set_objective(r, t);
  if (stopped && t.objective) {
    t.status = "Complete";
    t.reason = verdict;
    return;
  }
  if (job.status == job_status::complete && !t.objective) {
    t.status = "Failed";
    t.reason = "MetricsUnavailable: it never reported the objective '" + primary(r).metric +
               "' (tjob.report(" + primary(r).metric + "=...) or a line '" + primary(r).metric +
               "=<number>' on its stdout)";
  }
}

// (The history of a running trial's metrics is read once it ends: here only
// what its job shows now, its latest report.)
bool follow_trial(const sweep_request& r, sweep_trial& t, const train_job& job) {
  bool changed = false;
  const std::string status(to_string(job.status));
  if (t.status != status || (t.reason != job.reason && !early_stopped(t))) {
    t.status = status;
    if (!early_stopped(t)) t.reason = job.reason;
    changed = true;
  }
  for (const auto& reported : job.metrics) {
    const auto& k = reported.first;  // (clang 14 cannot capture a structured binding)
    auto x = number_of(reported.second);
    if (!x) continue;
    auto it =
        std::find_if(t.metrics.begin(), t.metrics.end(), [&](const trial_metric& m) { return m.name == k; });
    if (it != t.metrics.end() && it->latest == *x) continue;
    record_metric(t.metrics, k, *x, job.progress_updated.value_or(clock::now()));
    changed = true;
  }
  if (changed) set_objective(r, t);
  return changed;
}

std::string median_stop_check(trainer_client& client, const sweep_job& s, const sweep_trial& t) {
  const auto& rule = *s.request.early_stopping;
  const auto& goal = primary(s.request);
  std::vector<double> reported;
  for (const auto& e : client.get_job_events(t.name))
    for (const auto& [k, v] : e.metrics)
      if (k == goal.metric)
        if (auto x = number_of(v)) reported.push_back(*x);
  std::vector<std::vector<double>> completed;  // (a stopped trial is not a yardstick)
  for (const auto& c : s.trials) {
    if (c.status != "Complete" || early_stopped(c)) continue;
    for (const auto& m : c.metrics)
      if (m.name == goal.metric) {
        std::vector<double> h;
        for (const auto& point : m.history) h.push_back(point.second);
        completed.push_back(std::move(h));
      }
  }
  return median_stop_verdict(rule, reported, completed, goal.maximize, goal.metric);
}

std::optional<int> best_trial(const sweep_job& s) {
  std::optional<int> best;
  const bool maximize = primary(s.request).maximize;
  for (std::size_t i = 0; i < s.trials.size(); ++i) {
    const auto& t = s.trials[i];
    if (t.status != "Complete" || !t.objective) continue;
    if (!best ||
        (maximize ? *t.objective > *s.trials[*best].objective : *t.objective < *s.trials[*best].objective))
      best = static_cast<int>(i);
  }
  return best;
}

std::string failed_list(const sweep_job& s, int limit) {
  std::string out;
  int n = 0;
  for (const auto& t : s.trials)
    if (t.status == "Failed" && n++ < limit)
      out += (out.empty() ? "" : "; ") + t.name + " (" + t.reason + ")";
  return out;
}

bool usage_class(const error& e) {
  return is_usage_error(e.code()) || e.code() == errc::runtime_not_found ||
         e.code() == errc::executable_not_found;
}

}  // namespace tjob::detail
