// Sweeps (tjob/sweep.hpp): the owner's loop, the supervisor that runs it,
// and what any process does to a sweep (read, cancel, delete, resume).
//
// The owner keeps at most parallel_trials trials that have not ended; each
// round it follows them (one list of the jobs), records what ended (metrics
// from the job's Progress events and its stdout), ends the sweep when
// max_failed_trials is passed or the last trial has ended, makes the next
// trials' parameters and submits them, then waits for a job to change. A
// trial's parameters are recorded (Pending) before it is submitted, so an
// owner that dies leaves nothing unknown: a Pending trial whose job exists
// was submitted and is followed, one without a job is submitted then.
#include "core/names.hpp"
#include "core/sweep_search.hpp"
#include "engine/supervise.hpp"
#include "engine/sweep_record.hpp"

#include <tjob/sweep.hpp>
#include <tjob/wire.hpp>

#include <boost/json.hpp>

#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace tjob {

namespace json = boost::json;
using namespace detail;

namespace {

constexpr std::int64_t protocol_version = 1;
constexpr auto owner_wake = std::chrono::seconds(30);  // a backstop: a trial's change wakes it first
constexpr auto save_every = std::chrono::milliseconds(100);
constexpr std::size_t finish_lanes = 4;  // threads reading ended trials' metrics

const objective& primary(const sweep_request& r) { return r.objectives.front(); }

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

// The trial's job: the template with the trial's name and parameters.
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
    for (const auto& [k, v] : metric_pairs(line, wanted)) record_metric(t.metrics, k, v, when.value_or(clock::now()));
  }
}

void set_objective(const sweep_request& r, sweep_trial& t) {
  t.objective.reset();
  for (const auto& m : t.metrics)
    if (m.name == primary(r).metric) t.objective = primary(r).maximize ? m.max : m.min;
}

// A trial whose job has ended: its status, reason, metrics and objective.
void finish_trial(trainer_client& client, const sweep_request& r, sweep_trial& t, const train_job& job) {
  t.status = std::string(to_string(job.status));
  t.reason = job.reason;
  read_metrics(client, r, t, job);
  set_objective(r, t);
  if (job.status == job_status::complete && !t.objective) {
    t.status = "Failed";
    t.reason = "MetricsUnavailable: it never reported the objective '" + primary(r).metric +
               "' (tjob.report(" + primary(r).metric + "=...) or a line '" + primary(r).metric +
               "=<number>' on its stdout)";
  }
}

// A trial that runs: its status, and its latest reported metrics (the
// history is read once it ends).
bool follow_trial(const sweep_request& r, sweep_trial& t, const train_job& job) {
  bool changed = false;
  const std::string status(to_string(job.status));
  if (t.status != status || t.reason != job.reason) {
    t.status = status;
    t.reason = job.reason;
    changed = true;
  }
  for (const auto& reported : job.metrics) {
    const auto& k = reported.first;  // (clang 14 cannot capture a structured binding)
    auto x = number_of(reported.second);
    if (!x) continue;
    auto it = std::find_if(t.metrics.begin(), t.metrics.end(), [&](const trial_metric& m) { return m.name == k; });
    if (it != t.metrics.end() && it->latest == *x) continue;
    record_metric(t.metrics, k, *x, job.progress_updated.value_or(clock::now()));
    changed = true;
  }
  if (changed) set_objective(r, t);
  return changed;
}

std::optional<int> best_trial(const sweep_job& s) {
  std::optional<int> best;
  const bool maximize = primary(s.request).maximize;
  for (std::size_t i = 0; i < s.trials.size(); ++i) {
    const auto& t = s.trials[i];
    if (t.status != "Complete" || !t.objective) continue;
    if (!best || (maximize ? *t.objective > *s.trials[*best].objective : *t.objective < *s.trials[*best].objective))
      best = static_cast<int>(i);
  }
  return best;
}

std::string failed_list(const sweep_job& s, int limit) {
  std::string out;
  int n = 0;
  for (const auto& t : s.trials)
    if (t.status == "Failed" && n++ < limit) out += (out.empty() ? "" : "; ") + t.name + " (" + t.reason + ")";
  return out;
}

// An owner's descriptor, closed when it goes.
struct owner_fd {
  int fd = -1;
  ~owner_fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool usage_class(const error& e) {
  return is_usage_error(e.code()) || e.code() == errc::runtime_not_found || e.code() == errc::executable_not_found;
}

class owner {
 public:
  owner(trainer_client& client, std::string name) : client_(client), name_(std::move(name)) {
    dir_ = sweep_dir(client.home(), name_);
  }

  // Drives the sweep to its end. `started` is called once the first round's
  // trials are submitted; a trial refused before it (a bad template) is
  // thrown instead, nothing of the sweep's jobs left.
  sweep_job drive(const std::function<void()>& started) {
    owned_.fd = take_owner(dir_);
    if (owned_.fd >= 0) {  // who owns it, for a person (the lock is what counts)
      const auto pid = std::to_string(::getpid()) + "\n";
      if (::ftruncate(owned_.fd, 0) != 0 || ::pwrite(owned_.fd, pid.data(), pid.size(), 0) < 0) {
      }
    }
    if (owned_.fd < 0)
      throw error(errc::invalid_argument, "sweep " + name_ +
                                              " has an owner already (another process drives it); "
                                              "tjob get " + name_ + " follows it");
    auto rec = read_record(dir_);
    if (!rec) throw error(errc::job_not_found, "sweep " + name_ + ": no such sweep");
    s_ = std::move(*rec);
    if (sweep_ended(s_.status)) {
      if (started) started();
      return s_;
    }
    const auto caps = client_.job_backend();
    arrays_ = caps.arrays;
    needs_owner_ = caps.needs_owner;
    total_ = sweep_trial_count(s_.request);
    const bool fresh = s_.trials.empty();
    s_.status = "Running";
    s_.owned = true;
    auto known = client_.list_jobs();
    bool dirty = false;
    for (bool first = true;; first = false) {
      bool changed = follow(known) || first;
      if (auto over = too_many_failed()) {
        end("Failed", *over);
        break;
      }
      if (plan() && !save()) break;
      changed = submit(first && started && fresh) || changed;
      if (first && started) started();
      if (not_ended() == 0 && static_cast<int>(s_.trials.size()) >= total_) {
        if (auto b = best_trial(s_))
          end("Complete", "");
        else
          end("Failed", s_.trials.empty() ? "no trial" : "no trial reported the objective '" +
                                                             primary(s_.request).metric +
                                                             "': " + failed_list(s_, 3));
        break;
      }
      // At most one write per save_every while trials change (a sweep of a
      // thousand short trials would otherwise write its record a thousand
      // times); a cancel or a delete from outside is seen on every round.
      dirty = dirty || changed;
      const auto since = std::chrono::steady_clock::now() - last_save_;
      if (ended_outside() || (dirty && since >= save_every)) {
        if (!save()) break;
        dirty = false;
      }
      const auto wake = dirty ? std::chrono::duration_cast<std::chrono::milliseconds>(save_every - since)
                              : std::chrono::milliseconds(owner_wake);
      known = client_.wait_for_jobs_change(known, std::nullopt, std::max(wake, std::chrono::milliseconds(1)));
    }
    s_.owned = false;
    return s_;
  }

 private:
  int not_ended() const {
    int n = 0;
    for (const auto& t : s_.trials) n += !trial_ended(t.status);
    return n;
  }

  // Every trial not ended, against the jobs as listed.
  bool follow(const std::vector<train_job>& jobs) {
    std::map<std::string_view, const train_job*> by_name;
    for (const auto& j : jobs) by_name.emplace(j.name, &j);
    bool changed = false;
    std::vector<std::pair<sweep_trial*, const train_job*>> ended;
    for (auto& t : s_.trials) {
      if (trial_ended(t.status)) continue;
      auto it = by_name.find(t.name);
      if (it == by_name.end()) {
        if (t.status == "Pending") continue;  // not submitted yet (an owner died first)
        t.status = "Failed";
        t.reason = "its job was deleted";
        changed = true;
      } else if (is_terminal(it->second->status)) {
        ended.emplace_back(&t, it->second);
      } else {
        changed = follow_trial(s_.request, t, *it->second) || changed;
      }
    }
    finish_all(ended);
    changed = changed || !ended.empty();
    auto b = best_trial(s_);
    changed = changed || b != s_.best;
    s_.best = b;
    return changed;
  }

  // Reads the ended trials' metrics, a few at once: each read is a round trip
  // to the engine's thread (its cost is mostly the hop), and a thousand short
  // trials end together.
  void finish_all(const std::vector<std::pair<sweep_trial*, const train_job*>>& ended) {
    const std::size_t lanes = std::min<std::size_t>(finish_lanes, ended.size());
    auto lane = [&](std::size_t k) {
      for (std::size_t i = k; i < ended.size(); i += lanes)
        finish_trial(client_, s_.request, *ended[i].first, *ended[i].second);
    };
    if (lanes <= 1) {
      if (lanes == 1) lane(0);
      return;
    }
    std::vector<std::future<void>> others;
    for (std::size_t k = 1; k < lanes; ++k) others.push_back(std::async(std::launch::async, lane, k));
    std::exception_ptr failure;
    try {
      lane(0);
    } catch (...) {
      failure = std::current_exception();
    }
    for (auto& f : others) try {
        f.get();
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
    if (failure) std::rethrow_exception(failure);
  }

  std::optional<std::string> too_many_failed() const {
    if (!s_.request.max_failed_trials) return std::nullopt;
    int failed = 0;
    for (const auto& t : s_.trials) failed += t.status == "Failed";
    if (failed <= *s_.request.max_failed_trials) return std::nullopt;
    return std::to_string(failed) + " trials failed, more than max_failed_trials " +
           std::to_string(*s_.request.max_failed_trials) + ": " + failed_list(s_, 5);
  }

  // The next trials' parameters, recorded before they are submitted. Where
  // they do not depend on the trials' results (random, grid) and the backend
  // holds an array to its limit, every trial at once: the sweep is then the
  // array, its trials admitted as the array's members are. Otherwise as many
  // as may run.
  bool plan() {
    std::vector<observation> done;
    const double sign = primary(s_.request).maximize ? -1 : 1;
    for (const auto& t : s_.trials)
      if (t.status == "Complete" && t.objective) done.push_back({t.parameters, sign * *t.objective});
    const bool all_at_once = arrays_ && s_.request.algorithm != "tpe";
    bool changed = false;
    for (int open = not_ended();
         (all_at_once || open < s_.request.parallel_trials) && static_cast<int>(s_.trials.size()) < total_; ++open) {
      sweep_trial t;
      t.index = static_cast<int>(s_.trials.size());
      t.name = s_.name + "-" + std::to_string(t.index);
      t.parameters = sweep_parameters(s_.request, *s_.request.seed, t.index, done);
      s_.trials.push_back(std::move(t));
      changed = true;
    }
    return changed;
  }

  // Submits every Pending trial, together: where the backend needs an owner,
  // a supervising process of their own owns them (train_detached), so they
  // run on when this owner dies. Before the sweep is started (`refuse`), a
  // refusal (a bad template) is thrown, nothing of it submitted.
  bool submit(bool refuse) {
    std::vector<train_request> batch;
    std::vector<sweep_trial*> trials;
    for (auto& t : s_.trials)
      if (t.status == "Pending") {
        batch.push_back(trial_request(s_, t, arrays_));
        trials.push_back(&t);
      }
    if (batch.empty()) return false;
    try {
      if (needs_owner_) {
        (void)train_detached(batch, client_.config());
      } else {
        for (std::size_t i = 0; i < batch.size(); ++i) {
          client_.train(batch[i]);
          trials[i]->status = "Created";
        }
      }
      for (auto* t : trials) t->status = "Created";
    } catch (const error& e) {
      if (refuse && usage_class(e)) {
        for (auto* t : trials)
          if (t->status == "Created") try {
              client_.delete_job(t->name);
            } catch (const error&) {
            }
        throw error(e.code(), "sweep " + s_.name + ": trial_template: " + e.what(), e.diagnostics());
      }
      for (auto* t : trials)
        if (t->status == "Pending") {
          t->status = "Failed";
          t->reason = std::string("not submitted: ") + e.what();
        }
    }
    return true;
  }

  void end(const std::string& status, const std::string& reason) {
    cancel_open();
    s_.status = status;
    s_.reason = reason;
    s_.end_time = clock::now();
    s_.best = best_trial(s_);
    save();
  }

  void cancel_open() {
    std::vector<std::string> open;
    for (const auto& t : s_.trials)
      if (!trial_ended(t.status) && t.status != "Pending") open.push_back(t.name);
    try {
      client_.cancel_jobs(open);
    } catch (const error&) {  // gone already
    }
    for (auto& t : s_.trials) {
      if (trial_ended(t.status)) continue;
      if (t.status == "Pending") {
        t.status = "Failed";
        t.reason = "cancelled before it was submitted";
        continue;
      }
      try {
        auto job = client_.get_job(t.name);
        if (is_terminal(job.status)) finish_trial(client_, s_.request, t, job);
      } catch (const error&) {
        t.status = "Failed";
        t.reason = "its job was deleted";
      }
    }
  }

  // A cancel (the `cancelled` marker) or a delete (no record) from outside:
  // two looks at the directory, no read of the record.
  bool ended_outside() const {
    std::error_code ec;
    return std::filesystem::exists(dir_ / "cancelled", ec) || !std::filesystem::exists(dir_ / "sweep.json", ec);
  }

  // Writes the record; false when someone else ended it (a cancel) or
  // removed it (a delete): then the trials that run are cancelled.
  bool save() {
    std::optional<record_lock> lock(std::in_place, dir_);
    std::error_code ec;
    if (!std::filesystem::exists(dir_ / "sweep.json", ec)) {
      lock.reset();
      stopped_ = true;
      cancel_open();
      return false;
    }
    // A cancel recorded before this owner ended the sweep wins, whatever the
    // trials' ends (cancelled) made of it here.
    if (std::filesystem::exists(dir_ / "cancelled", ec) && s_.reason != "cancelled") {
      const bool ending = sweep_ended(s_.status);
      s_.status = "Failed";
      s_.reason = "cancelled";
      if (!s_.end_time) s_.end_time = clock::now();
      if (ending) {  // (end() has stopped what ran)
        write_record(dir_, s_);
        return false;
      }
      lock.reset();
      cancel_open();
      std::optional<record_lock> again(std::in_place, dir_);
      if (std::filesystem::exists(dir_ / "sweep.json", ec)) write_record(dir_, s_);
      return false;
    }
    write_record(dir_, s_);
    last_save_ = std::chrono::steady_clock::now();
    return !stopped_;
  }

  trainer_client& client_;
  std::string name_;
  std::filesystem::path dir_;
  owner_fd owned_;
  sweep_job s_;
  bool arrays_ = false, needs_owner_ = false, stopped_ = false;
  std::chrono::steady_clock::time_point last_save_{};
  int total_ = 0;
};

std::uint64_t fresh_seed() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

// A new sweep's record, its name checked free among sweeps and jobs.
std::string create_sweep(trainer_client& client, sweep_request r) {
  if (r.objectives.empty()) r.objectives.push_back(objective{});
  if (!r.seed) r.seed = fresh_seed();
  if (r.name.empty()) r.name = generate_job_name();
  check_sweep_request(r);
  const auto last = r.name + "-" + std::to_string(sweep_trial_count(r) - 1);
  if (auto problem = job_name_problem(last))
    throw error(errc::invalid_name, "sweep " + r.name + ": name: its last trial's name " + last + " " +
                                        *problem + "; give a shorter name");
  std::filesystem::create_directories(sweeps_dir(client.home()));
  const auto dir = sweep_dir(client.home(), r.name);
  std::error_code ec;
  if (!std::filesystem::create_directory(dir, ec))
    throw error(errc::duplicate_name, "sweep " + r.name + ": name: a sweep of that name exists; give another, "
                                      "or tjob delete " + r.name);
  for (const auto& j : client.list_jobs())
    if (j.name == r.name || j.array == r.name) {
      std::filesystem::remove(dir, ec);
      throw error(errc::duplicate_name, "sweep " + r.name +
                                            ": name: a job or job array of that name exists; "
                                            "give the sweep another name");
    }
  sweep_job s;
  s.name = r.name;
  s.request = std::move(r);
  s.creation_timestamp = clock::now();
  write_record(dir, s);
  return s.name;
}

json::value supervisor_body(const engine_config& cfg, const sweep_request* request, const std::string& resume) {
  json::object o;
  o["protocol"] = protocol_version;
  o["config"] = to_json(cfg);
  o["request"] = request ? json::value(detail::to_json(*request)) : json::value(nullptr);
  o["resume"] = resume;
  return o;
}

engine_config absolute_home(engine_config cfg) {
  if (cfg.home.empty()) cfg.home = default_home();
  cfg.home = std::filesystem::absolute(cfg.home);
  return cfg;
}

std::filesystem::path home_of(const engine_config& cfg) { return absolute_home(cfg).home; }

// An owner that has seen a cancel ends within a round (its trials' ends wake
// it); at most `limit` is waited for one that does not.
void wait_owner_gone(const std::filesystem::path& dir,
                     std::chrono::seconds limit = std::chrono::seconds(30)) {
  for (auto until = std::chrono::steady_clock::now() + limit;
       has_owner(dir) && std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace

std::string sweep_request_to_json(const sweep_request& r) { return json::serialize(detail::to_json(r)); }

sweep_request sweep_request_from_json(std::string_view text) {
  json::value v;
  try {
    v = json::parse(text);
  } catch (const std::exception& e) {
    throw error(errc::invalid_argument, std::string("sweep request: not JSON: ") + e.what());
  }
  return sweep_request_from(v);
}

std::string sweep_to_json(const sweep_job& s) { return json::serialize(record_to_json(s)); }

std::string optimize(sweep_request request, engine_config config) {
  if (request.objectives.empty()) request.objectives.push_back(objective{});
  if (!request.seed) request.seed = fresh_seed();
  if (request.name.empty()) request.name = generate_job_name();
  check_sweep_request(request);  // before any process is started
  config = absolute_home(std::move(config));
  const auto program = supervisor_program(config, "optimize");
  auto answer = ask_supervisor(program, "__sweep", json::serialize(supervisor_body(config, &request, {})),
                               "optimize");
  return json::value_to<std::string>(answer.at("name"));
}

void resume_sweep(const std::string& name, engine_config config) {
  config = absolute_home(std::move(config));
  auto s = get_sweep(name, config);
  if (sweep_ended(s.status))
    throw error(errc::invalid_argument, "sweep " + name + " has ended (" + s.status + "); nothing to resume");
  if (s.owned)
    throw error(errc::invalid_argument, "sweep " + name + " has an owner already; tjob get " + name + " follows it");
  const auto program = supervisor_program(config, "resume_sweep");
  ask_supervisor(program, "__sweep", json::serialize(supervisor_body(config, nullptr, name)), "resume_sweep");
}

sweep_job run_sweep(trainer_client& client, const std::string& name) {
  owner o(client, name);
  return o.drive({});
}

sweep_job get_sweep(const std::string& name, const engine_config& config) {
  const auto dir = sweep_dir(home_of(config), name);
  // The owner first: one that writes its last record and goes between the
  // two looks is then seen owning an ended sweep, never gone from a running one.
  const bool owned = !job_name_problem(name) && has_owner(dir);
  std::optional<sweep_job> s;
  if (!job_name_problem(name)) s = read_record(dir);
  if (!s) throw error(errc::job_not_found, "sweep " + name + ": no such sweep");
  s->owned = owned && !sweep_ended(s->status);
  return *s;
}

std::vector<sweep_job> list_sweeps(const engine_config& config) {
  std::vector<sweep_job> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(sweeps_dir(home_of(config)), ec)) {
    const bool owned = has_owner(entry.path());
    if (auto s = read_record(entry.path())) {
      s->owned = owned && !sweep_ended(s->status);
      out.push_back(std::move(*s));
    }
  }
  std::sort(out.begin(), out.end(), [](const sweep_job& a, const sweep_job& b) {
    return std::tie(a.creation_timestamp, a.name) < std::tie(b.creation_timestamp, b.name);
  });
  return out;
}

sweep_job wait_for_sweep_change(const std::string& name, const sweep_job& known,
                                std::chrono::milliseconds timeout, const engine_config& config) {
  const auto dir = sweep_dir(home_of(config), name);
  const auto until = std::chrono::steady_clock::now() + timeout;
  const auto was = sweep_to_json(known);
  int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (fd >= 0 && ::inotify_add_watch(fd, dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_CREATE) < 0) {
    ::close(fd);
    fd = -1;
  }
  struct closer {
    int fd;
    ~closer() {
      if (fd >= 0) ::close(fd);
    }
  } guard{fd};
  for (;;) {
    auto now = get_sweep(name, config);  // (after the watch: no change is missed between)
    if (sweep_to_json(now) != was) return now;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return now;
    if (fd < 0) {  // no inotify here: look again in a while
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(200)));
      continue;
    }
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 60'000)));
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
  }
}

namespace {
void cancel_sweep_as(const std::string& name, const engine_config& config, bool owner_is_me);
}

void cancel_sweep(const std::string& name, const engine_config& config) {
  cancel_sweep_as(name, config, false);
}

namespace {

// `owner_is_me`: the owner's own signal handler cancels; it records the end.
void cancel_sweep_as(const std::string& name, const engine_config& config, bool owner_is_me) {
  const auto dir = sweep_dir(home_of(config), name);
  (void)get_sweep(name, config);
  std::vector<std::string> open;
  {
    record_lock lock(dir);
    auto s = read_record(dir);
    if (!s) throw error(errc::job_not_found, "sweep " + name + ": no such sweep");
    if (sweep_ended(s->status)) return;
    s->status = "Failed";
    s->reason = "cancelled";
    s->end_time = clock::now();
    // (the owner looks for the marker, not into the record, on every round)
    if (FILE* f = std::fopen((dir / "cancelled").c_str(), "w")) std::fclose(f);
    for (const auto& t : s->trials)
      if (!trial_ended(t.status)) open.push_back(t.name);
    write_record(dir, *s);
  }
  // Every trial's job that has not ended, whatever the record says of it (a
  // Pending trial may have been submitted since), and any job of its array.
  trainer_client client(config);
  std::vector<std::string> cancel;
  for (const auto& j : client.list_jobs())
    if (!is_terminal(j.status) &&
        (j.array == name || std::find(open.begin(), open.end(), j.name) != open.end()))
      cancel.push_back(j.name);
  try {
    client.cancel_jobs(cancel);
  } catch (const error&) {
  }
  // The owner records how its trials ended, and goes: what this returns to
  // is then the sweep as it ended.
  if (owner_is_me) return;
  wait_owner_gone(dir);
  record_lock lock(dir);
  auto s = read_record(dir);
  if (!s) return;
  for (auto& t : s->trials) {
    if (trial_ended(t.status)) continue;
    try {
      auto job = client.get_job(t.name);
      if (is_terminal(job.status)) finish_trial(client, s->request, t, job);
    } catch (const error&) {
      t.status = "Failed";
      t.reason = t.status == "Pending" ? "cancelled before it was submitted" : "its job was deleted";
    }
  }
  write_record(dir, *s);
}

}  // namespace

void delete_sweep(const std::string& name, const engine_config& config) {
  const auto dir = sweep_dir(home_of(config), name);
  auto s = get_sweep(name, config);
  if (!sweep_ended(s.status)) cancel_sweep(name, config);
  wait_owner_gone(dir);  // then nothing submits a trial any more
  trainer_client client(config);
  for (const auto& j : client.list_jobs())
    if (j.array == name || std::any_of(s.trials.begin(), s.trials.end(),
                                       [&](const sweep_trial& t) { return t.name == j.name; })) {
      try {
        client.delete_job(j.name);
      } catch (const error& e) {
        if (e.code() != errc::job_not_found) throw;
      }
    }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec)
    throw error(errc::store_unavailable, "sweep " + name + ": its trials are deleted, but " + dir.string() +
                                             " cannot be removed: " + ec.message());
}

int sweep_supervisor_main() {
  if (!leave_asker()) return 1;
  // SIGTERM, SIGINT or SIGHUP cancels the sweep (the owner then ends it).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  struct shared {
    std::mutex m;
    engine_config cfg;
    std::string name;  // once the sweep is recorded
    bool cancel_wanted = false;
  };
  auto state = std::make_shared<shared>();
  auto cancel = [](shared& st) {  // (st.m held)
    try {
      cancel_sweep_as(st.name, st.cfg, true);
    } catch (...) {
    }
  };
  std::thread([set, state, cancel] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      std::lock_guard lock(state->m);
      state->cancel_wanted = true;
      if (!state->name.empty()) cancel(*state);
    }
  }).detach();

  engine_config cfg;
  std::optional<sweep_request> request;
  std::string name;
  try {
    try {
      auto v = json::parse(read_all(STDIN_FILENO));
      const auto& o = v.as_object();
      if (o.at("protocol").to_number<std::int64_t>() != protocol_version)
        throw error(errc::invalid_argument,
                    "the sweep supervisor and the program that started it are of different tjob versions; "
                    "point engine_config::supervisor (or $TJOB_SUPERVISOR) at the tjob built with the library");
      cfg = engine_config_from_json(o.at("config"));
      if (!o.at("request").is_null()) request = sweep_request_from(o.at("request"));
      name = json::value_to<std::string>(o.at("resume"));
    } catch (const error&) {
      throw;
    } catch (const std::exception& e) {
      throw error(errc::invalid_argument, std::string("sweep supervisor: the request is not what optimize writes: ") +
                                              e.what());
    }
  } catch (const error& e) {
    respond_error(e);
    return 2;
  }
  std::unique_ptr<trainer_client> client;
  bool answered = false;
  try {
    client = std::make_unique<trainer_client>(cfg);
    if (request) name = create_sweep(*client, *request);
    {
      std::lock_guard lock(state->m);
      state->cfg = cfg;
      state->name = name;
    }
    owner o(*client, name);
    o.drive([&] {
      respond({{"name", name}});
      answered = true;
      redirect_output(sweep_dir(client->home(), name) / "owner.log");
      std::lock_guard lock(state->m);
      if (state->cancel_wanted) cancel(*state);
    });
  } catch (const error& e) {
    if (answered) {
      std::fprintf(stderr, "tjob sweep owner: %s\n", e.what());
      return 1;
    }
    if (request && !name.empty()) {  // refused before it started: nothing of it stays
      std::error_code ec;
      std::filesystem::remove_all(sweep_dir(client->home(), name), ec);
    }
    respond_error(e);
    return 2;
  } catch (const std::exception& e) {
    if (!answered) respond_error(error(errc::backend_error, e.what()));
    return 1;
  }
  return 0;
}

}  // namespace tjob
