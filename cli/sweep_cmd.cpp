// See sweep_cmd.hpp.
#include "cli/sweep_cmd.hpp"

#include "cli/backend_options.hpp"
#include "cli/run_job.hpp"

#include <tjob/backends.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tjob::cli {

namespace json = boost::json;
using dist = search_parameter::distribution;

namespace {

std::optional<double> number(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// A choice as JSON: a number as it is, true/false/null, anything else a string.
std::string choice_json(const std::string& s) {
  if (number(s) || s == "true" || s == "false" || s == "null") return s;
  return json::serialize(json::value(s));
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (;;) {
    auto next = s.find(sep, at);
    out.push_back(s.substr(at, next == std::string::npos ? std::string::npos : next - at));
    if (next == std::string::npos) return out;
    at = next + 1;
  }
}

std::string value_shown(const std::string& json_text) {
  try {
    auto v = json::parse(json_text);
    if (v.is_string()) return std::string(v.as_string());
    if (v.is_double()) return fmt::format("{:.6g}", v.as_double());
  } catch (const std::exception&) {
  }
  return json_text;
}

std::string metric_shown(double v) { return fmt::format("{:.6g}", v); }

const trial_metric* metric(const sweep_trial& t, const std::string& name) {
  for (const auto& m : t.metrics)
    if (m.name == name) return &m;
  return nullptr;
}

std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i)
      line += i + 1 == r.size() ? r[i] : r[i] + std::string(width[i] - r[i].size() + 3, ' ');
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

bool sweep_ended_status(const std::string& s) { return s == "Complete" || s == "Failed"; }

std::string best_shown(const sweep_job& s) {
  if (!s.best) return "-";
  const auto& t = s.trials.at(static_cast<std::size_t>(*s.best));
  return t.name + " " + s.request.objectives.front().metric + "=" + metric_shown(*t.objective);
}

}  // namespace

std::vector<search_parameter> parse_params(const std::vector<std::string>& params) {
  std::vector<search_parameter> out;
  for (const auto& given : params) {
    const auto how = "; write NAME=uniform:MIN:MAX, NAME=loguniform:MIN:MAX or NAME=choice:A,B,C";
    auto eq = given.find('=');
    if (eq == std::string::npos || eq == 0) throw usage_error("--param " + given + ": no NAME=" + how);
    search_parameter p;
    p.name = given.substr(0, eq);
    auto spec = given.substr(eq + 1);
    auto colon = spec.find(':');
    auto kind = spec.substr(0, colon);
    auto rest = colon == std::string::npos ? std::string() : spec.substr(colon + 1);
    if (kind == "choice") {
      p.kind = dist::choice;
      if (rest.empty()) throw usage_error("--param " + given + ": a choice needs values" + how);
      for (const auto& c : split(rest, ',')) p.choices.push_back(choice_json(c));
    } else if (kind == "uniform" || kind == "loguniform") {
      p.kind = kind == "uniform" ? dist::uniform : dist::loguniform;
      auto bounds = split(rest, ':');
      auto lo = bounds.size() == 2 ? number(bounds[0]) : std::nullopt;
      auto hi = bounds.size() == 2 ? number(bounds[1]) : std::nullopt;
      if (!lo || !hi) throw usage_error("--param " + given + ": a " + kind + " range is MIN:MAX, two numbers" + how);
      p.min = *lo;
      p.max = *hi;
    } else {
      throw usage_error("--param " + given + ": '" + kind + "' is not a distribution" + how);
    }
    out.push_back(std::move(p));
  }
  return out;
}

CLI::App* add_optimize_command(CLI::App& app, sweep_options& o) {
  auto* cmd = app.add_subcommand(
      "optimize",
      "Run a hyperparameter sweep (Kubeflow's optimize()): trials NAME-0, NAME-1, ... of the job given as to "
      "tjob train, each with its own parameters (a Python function's keyword arguments; a script's or "
      "command's ${trialParameters.NAME} in its arguments; each has $TJOB_TRIAL_PARAMETERS), at most "
      "--parallel at "
      "once; the best by --objective is kept. Prints the sweep's name (a supervising process owns it); "
      "--wait follows it to its end. tjob get NAME shows the trials, best first");
  add_job_options(cmd, o.job);
  cmd->get_option("command")->required(false);  // not with --resume; cmd_optimize asks for it
  cmd->add_option("--param", o.params,
                  "A parameter of the search space (repeatable): NAME=uniform:MIN:MAX, "
                  "NAME=loguniform:MIN:MAX or NAME=choice:A,B,C");
  cmd->add_option("--objective", o.objective,
                  "The metric to optimise (default loss), as the trials report it: tjob.report(loss=...) "
                  "or a line loss=<number> on stdout");
  cmd->add_flag("--maximize", o.maximize, "Maximise the objective (default: minimise)");
  cmd->add_option("--metric", o.metrics, "Another metric to record from the trials' output (repeatable)");
  cmd->add_option("--algorithm", o.algorithm, "random (default), grid or tpe");
  cmd->add_option("--seed", o.seed, "Seed of random and tpe: the same seed, the same trials");
  cmd->add_option("--trials", o.trials, "How many trials (default 10; grid: at most the grid)");
  cmd->add_option("--parallel", o.parallel, "The most trials that run at once (default 1)");
  cmd->add_option("--max-failed", o.max_failed,
                  "End the sweep Failed once more trials than this have failed (default: never)");
  cmd->add_flag("--median-stop", o.median_stop,
                "Stop a trial early (Katib's median stopping rule) once its best objective is worse than the "
                "median of the completed trials' running averages at as many reports (tjob.report)");
  cmd->add_option("--median-stop-start-step", o.median_start_step,
                  "--median-stop, judging a trial from its Nth report of the objective on (default 4)");
  cmd->add_option("--median-stop-min-trials", o.median_min_trials,
                  "--median-stop, once this many trials have completed (default 3)");
  cmd->add_flag("--wait", o.wait,
                "Follow the sweep to its end, show its trials, and exit 0 when it is Complete, else 1");
  cmd->add_option("--resume", o.resume,
                  "Hand the sweep NAME, whose owner has gone, to a new one; it goes on where it stopped and "
                  "runs no trial twice");
  cmd->add_option("-o,--output", o.format, "With --wait: table, json or yaml");
  return cmd;
}

std::string render_sweeps(const std::vector<sweep_job>& sweeps, output_format f) {
  if (f == output_format::json || f == output_format::yaml) {
    json::array a;
    for (const auto& s : sweeps) a.push_back(json::parse(sweep_to_json(s)));
    return f == output_format::json ? json::serialize(a) + "\n" : to_yaml(a);
  }
  if (f == output_format::name) {
    std::string out;
    for (const auto& s : sweeps) out += s.name + "\n";
    return out;
  }
  std::vector<std::vector<std::string>> rows{{"NAME", "STATUS", "ALGORITHM", "TRIALS", "BEST", "AGE"}};
  const auto now = clock::now();
  for (const auto& s : sweeps) {
    int ended = 0;
    for (const auto& t : s.trials) ended += t.status == "Complete" || t.status == "Failed";
    rows.push_back({s.name, s.status + (s.status == "Running" && !s.owned ? " (no owner)" : ""),
                    s.request.algorithm, fmt::format("{}/{}", ended, s.request.num_trials), best_shown(s),
                    format_age(s.creation_timestamp, now)});
  }
  return table(rows);
}

std::string render_sweep(const sweep_job& s, output_format f) {
  if (f == output_format::json) return sweep_to_json(s) + "\n";
  if (f == output_format::yaml) return to_yaml(json::parse(sweep_to_json(s)));
  if (f == output_format::name) return s.name + "\n";
  const auto& goal = s.request.objectives.front();
  std::string out = fmt::format("Sweep {}: {}{}\n", s.name, s.status, s.reason.empty() ? "" : " (" + s.reason + ")");
  out += fmt::format("Objective: {} {}; algorithm {} (seed {}); {} trials, {} at once\n",
                     goal.maximize ? "maximize" : "minimize", goal.metric, s.request.algorithm,
                     s.request.seed ? std::to_string(*s.request.seed) : "-", s.request.num_trials,
                     s.request.parallel_trials);
  if (const auto& rule = s.request.early_stopping)
    out += fmt::format("Early stopping: median rule from report {}, once {} trials have completed\n",
                       rule->start_step, rule->min_trials_required);
  out += "Best: " + best_shown(s) + "\n";
  if (!sweep_ended_status(s.status) && !s.owned)
    out += "Owner: none (it died): tjob optimize --resume " + s.name + " goes on\n";
  // Best first; trials without a value after, in their order.
  std::vector<const sweep_trial*> order;
  for (const auto& t : s.trials) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [&](const sweep_trial* a, const sweep_trial* b) {
    if (a->objective.has_value() != b->objective.has_value()) return a->objective.has_value();
    if (!a->objective) return false;
    return goal.maximize ? *a->objective > *b->objective : *a->objective < *b->objective;
  });
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> head{"TRIAL", "STATUS"};
  for (const auto& p : s.request.search_space) head.push_back(p.name);
  for (const auto& o : s.request.objectives) head.push_back(o.metric);
  head.push_back("REASON");
  rows.push_back(head);
  for (const auto* t : order) {
    std::vector<std::string> row{t->name, t->status};
    for (const auto& p : s.request.search_space) {
      std::string v = "-";
      for (const auto& [k, x] : t->parameters)
        if (k == p.name) v = value_shown(x);
      row.push_back(v);
    }
    for (std::size_t i = 0; i < s.request.objectives.size(); ++i) {
      const auto* m = metric(*t, s.request.objectives[i].metric);
      row.push_back(i == 0 && t->objective ? metric_shown(*t->objective) : m ? metric_shown(m->latest) : "-");
    }
    row.push_back(t->reason);
    rows.push_back(std::move(row));
  }
  return out + "\n" + table(rows);
}

bool is_sweep(const std::string& name, const engine_config& cfg) {
  try {
    (void)get_sweep(name, cfg);
    return true;
  } catch (const error& e) {
    if (e.code() == errc::job_not_found) return false;
    throw;
  }
}

std::string trial_job(const sweep_job& s, std::optional<int> trial) {
  if (trial) {
    for (const auto& t : s.trials)
      if (t.index == *trial) return t.name;
    throw usage_error(fmt::format("logs {} --trial {}: the sweep has no such trial (it has {})", s.name, *trial,
                                  s.trials.empty() ? std::string("none yet")
                                                   : fmt::format("0 to {}", s.trials.size() - 1)));
  }
  if (s.best) return s.trials.at(static_cast<std::size_t>(*s.best)).name;
  for (auto it = s.trials.rbegin(); it != s.trials.rend(); ++it)
    if (it->status != "Pending") return it->name;
  throw usage_error("logs " + s.name + ": no trial has started yet");
}

int wait_sweep(const std::string& name, const engine_config& cfg, const std::vector<std::string>& wanted,
               std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto s = get_sweep(name, cfg);
  while (!sweep_ended_status(s.status)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw error(errc::timeout, fmt::format("sweep {}: still {} after the timeout", name, s.status));
    if (!s.owned && s.status != "Created")
      throw error(errc::unreachable_status, "sweep " + name + " has no owner (it died): tjob optimize --resume " +
                                                name + " goes on");
    s = wait_for_sweep_change(name, s, left, cfg);
  }
  write_out(s.status + "\n");
  return std::find(wanted.begin(), wanted.end(), s.status) != wanted.end() ? 0 : 1;
}

int cmd_optimize(const common_options& common, sweep_options& o, output_format f) {
  auto cfg = make_config(common);
  cfg.supervisor = self_exe();
  std::string name = o.resume;
  if (!o.resume.empty()) {
    resume_sweep(o.resume, cfg);
  } else {
    if (o.job.command.empty())
      throw usage_error("optimize: give the trial's training file (FILE.py) or a command after --, or "
                        "--resume NAME");
    sweep_request r;
    r.name = o.job.name;
    o.job.name.clear();
    r.trial = make_request(o.job, find_backend(cfg.backend)->capabilities);
    r.search_space = parse_params(o.params);
    r.objectives.push_back({o.objective, o.maximize});
    for (const auto& m : o.metrics) r.objectives.push_back({m, false});
    r.algorithm = o.algorithm;
    if (o.seed) r.seed = *o.seed;
    r.num_trials = o.trials;
    r.parallel_trials = o.parallel;
    r.max_failed_trials = o.max_failed;
    if (o.median_stop || o.median_start_step || o.median_min_trials) {
      median_stop rule;
      if (o.median_start_step) rule.start_step = *o.median_start_step;
      if (o.median_min_trials) rule.min_trials_required = *o.median_min_trials;
      r.early_stopping = rule;
    }
    name = optimize(std::move(r), cfg);
  }
  if (!o.wait) {
    write_out(name + "\n");
    return 0;
  }
  std::fprintf(stderr, "tjob: sweep %s started\n", name.c_str());
  auto s = get_sweep(name, cfg);
  while (!sweep_ended_status(s.status)) {
    if (!s.owned && s.status != "Created")
      throw error(errc::unreachable_status,
                  "sweep " + name + " lost its owner: tjob optimize --resume " + name + " goes on");
    s = wait_for_sweep_change(name, s, std::chrono::minutes(10), cfg);
  }
  write_out(render_sweep(s, f));
  return s.status == "Complete" ? 0 : 1;
}

bool take_sweeps(sweep_query& q, const engine_config& cfg) {
  if (q.logs) {
    if (is_sweep(*q.log_name, cfg)) *q.log_name = trial_job(get_sweep(*q.log_name, cfg), q.trial);
    return false;
  }
  std::vector<std::string> jobs;
  std::vector<std::string> wanted;
  for (auto st : q.wanted) wanted.emplace_back(to_string(st));
  int code = 0;
  const bool several = q.names->size() > 1;
  for (const auto& n : *q.names) {
    if (!is_sweep(n, cfg)) {
      jobs.push_back(n);
      continue;
    }
    if (q.get) {
      write_out(render_sweep(get_sweep(n, cfg), q.format));
    } else if (q.wait) {
      if (several) write_out(n + " ");
      code = std::max(code, wait_sweep(n, cfg, wanted, q.timeout));
    } else if (q.cancel) {
      cancel_sweep(n, cfg);
      write_out(n + " " + get_sweep(n, cfg).status + "\n");
    } else if (q.del) {
      delete_sweep(n, cfg);
      write_out("deleted " + n + "\n");
    }
  }
  if (code != 0) q.exit_code = code;
  const bool all_sweeps = jobs.empty() && !q.names->empty();
  *q.names = std::move(jobs);
  return all_sweeps;
}

}  // namespace tjob::cli
