// See sweep_record.hpp.
#include "engine/sweep_record.hpp"

#include "core/sweep_search.hpp"

#include <tjob/error.hpp>
#include <tjob/wire.hpp>

#include <boost/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace tjob::detail {

namespace json = boost::json;
using dist = search_parameter::distribution;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw error(errc::invalid_argument, "sweep request: " + field + ": " + what);
}

// A JSON value as the text a parameter keeps: a number in its shortest form.
std::string value_text(const json::value& v) {
  if (v.is_double()) return number_text(v.as_double());
  return json::serialize(v);
}

json::value value_of_text(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const std::exception&) {
    return json::value(text);
  }
}

double number(const json::value& v, const std::string& field) {
  if (v.is_number()) return v.to_number<double>();
  bad(field, "must be a number");
}

std::int64_t integer(const json::value& v, const std::string& field) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64() && v.as_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    return static_cast<std::int64_t>(v.as_uint64());
  if (v.is_double() && v.as_double() == static_cast<double>(static_cast<std::int64_t>(v.as_double())))
    return static_cast<std::int64_t>(v.as_double());
  bad(field, "must be a whole number");
}

std::string text(const json::value& v, const std::string& field) {
  if (!v.is_string()) bad(field, "must be a string");
  return std::string(v.as_string());
}

const json::object& object(const json::value& v, const std::string& field) {
  if (!v.is_object()) bad(field, "must be an object");
  return v.as_object();
}

const json::array& array(const json::value& v, const std::string& field) {
  if (!v.is_array()) bad(field, "must be a list");
  return v.as_array();
}

void only(const json::object& o, std::initializer_list<const char*> known, const std::string& where) {
  for (const auto& [k, v] : o) {
    bool ok = false;
    for (const char* n : known) ok = ok || k == n;
    if (!ok) {
      std::string list;
      for (const char* n : known) list += std::string(list.empty() ? "" : ", ") + n;
      bad(where + std::string(k), "not a field of a sweep request; the fields are " + list);
    }
  }
}

search_parameter parameter_from(const json::value& v, const std::string& field) {
  const auto& o = object(v, field);
  only(o, {"name", "distribution", "min", "max", "choices"}, field + ".");
  search_parameter p;
  if (auto* n = o.if_contains("name")) p.name = text(*n, field + ".name");
  std::string kind = "uniform";
  if (auto* d = o.if_contains("distribution")) kind = text(*d, field + ".distribution");
  if (kind == "uniform")
    p.kind = dist::uniform;
  else if (kind == "loguniform" || kind == "logUniform")
    p.kind = dist::loguniform;
  else if (kind == "choice" || kind == "categorical")
    p.kind = dist::choice;
  else
    bad(field + ".distribution", "'" + kind + "' is not one; use uniform, loguniform or choice");
  if (p.kind == dist::choice) {
    const auto* c = o.if_contains("choices");
    if (!c) bad(field + ".choices", "a choice needs its values");
    for (const auto& x : array(*c, field + ".choices")) p.choices.push_back(value_text(x));
  } else {
    const auto* lo = o.if_contains("min");
    const auto* hi = o.if_contains("max");
    if (!lo || !hi) bad(field, "a " + kind + " range needs min and max");
    p.min = number(*lo, field + ".min");
    p.max = number(*hi, field + ".max");
  }
  return p;
}

std::string kind_name(dist k) {
  switch (k) {
    case dist::uniform:
      return "uniform";
    case dist::loguniform:
      return "loguniform";
    case dist::choice:
      return "choice";
  }
  return "uniform";
}

json::value time_or_null(const std::optional<clock::time_point>& t) {
  return t ? json::value(format_time(*t)) : json::value(nullptr);
}

clock::time_point time_of(const json::value& v) {
  if (v.is_string())
    if (auto t = parse_time(v.as_string())) return *t;
  return clock::time_point{};
}

json::object metric_to_json(const trial_metric& m) {
  json::array history;
  for (const auto& [t, v] : m.history) history.push_back(json::array{format_time(t), v});
  return {{"name", m.name}, {"min", m.min}, {"max", m.max}, {"latest", m.latest}, {"history", std::move(history)}};
}

trial_metric metric_from(const json::object& o) {
  trial_metric m;
  m.name = json::value_to<std::string>(o.at("name"));
  m.min = o.at("min").to_number<double>();
  m.max = o.at("max").to_number<double>();
  m.latest = o.at("latest").to_number<double>();
  for (const auto& h : o.at("history").as_array()) {
    const auto& pair = h.as_array();
    m.history.emplace_back(time_of(pair.at(0)), pair.at(1).to_number<double>());
  }
  return m;
}

}  // namespace

json::object to_json(const sweep_request& r) {
  json::object o;
  o["name"] = r.name;
  o["trial"] = tjob::to_json(r.trial);
  json::array space;
  for (const auto& p : r.search_space) {
    json::object q{{"name", p.name}, {"distribution", kind_name(p.kind)}};
    if (p.kind == dist::choice) {
      json::array c;
      for (const auto& x : p.choices) c.push_back(value_of_text(x));
      q["choices"] = std::move(c);
    } else {
      q["min"] = p.min;
      q["max"] = p.max;
    }
    space.push_back(std::move(q));
  }
  o["search_space"] = std::move(space);
  json::array objectives;
  for (const auto& x : r.objectives)
    objectives.push_back(json::object{{"metric", x.metric}, {"direction", x.maximize ? "maximize" : "minimize"}});
  o["objectives"] = std::move(objectives);
  o["algorithm"] = r.algorithm;
  o["seed"] = r.seed ? json::value(*r.seed) : json::value(nullptr);
  o["num_trials"] = r.num_trials;
  o["parallel_trials"] = r.parallel_trials;
  o["max_failed_trials"] = r.max_failed_trials ? json::value(*r.max_failed_trials) : json::value(nullptr);
  if (r.early_stopping)
    o["early_stopping"] = json::object{{"algorithm", "medianstop"},
                                       {"min_trials_required", r.early_stopping->min_trials_required},
                                       {"start_step", r.early_stopping->start_step}};
  else
    o["early_stopping"] = nullptr;
  return o;
}

sweep_request sweep_request_from(const json::value& v) {
  const auto& o = object(v, "the request");
  only(o,
       {"name", "trial", "search_space", "objectives", "algorithm", "seed", "num_trials", "parallel_trials",
        "max_failed_trials", "early_stopping"},
       "");
  sweep_request r;
  if (auto* n = o.if_contains("name")) r.name = text(*n, "name");
  if (auto* t = o.if_contains("trial")) {
    try {
      r.trial = request_from_json(*t, true);
    } catch (const spec_error& e) {
      bad("trial." + e.field(), e.what());
    }
  } else {
    bad("trial", "the trial's template is missing");
  }
  if (auto* s = o.if_contains("search_space")) {
    const auto& a = array(*s, "search_space");
    for (std::size_t i = 0; i < a.size(); ++i)
      r.search_space.push_back(parameter_from(a[i], "search_space[" + std::to_string(i) + "]"));
  }
  if (auto* s = o.if_contains("objectives")) {
    const auto& a = array(*s, "objectives");
    for (std::size_t i = 0; i < a.size(); ++i) {
      const std::string field = "objectives[" + std::to_string(i) + "]";
      const auto& x = object(a[i], field);
      only(x, {"metric", "direction"}, field + ".");
      objective ob;
      if (auto* m = x.if_contains("metric")) ob.metric = text(*m, field + ".metric");
      if (auto* d = x.if_contains("direction")) {
        auto dir = text(*d, field + ".direction");
        if (dir != "minimize" && dir != "maximize")
          bad(field + ".direction", "'" + dir + "' is not one; use minimize or maximize");
        ob.maximize = dir == "maximize";
      }
      r.objectives.push_back(ob);
    }
  }
  if (auto* a = o.if_contains("algorithm")) r.algorithm = text(*a, "algorithm");
  if (auto* s = o.if_contains("seed"); s && !s->is_null()) {
    if (s->is_uint64())
      r.seed = s->as_uint64();
    else if (s->is_int64() && s->as_int64() >= 0)
      r.seed = static_cast<std::uint64_t>(s->as_int64());
    else
      bad("seed", "must be a whole number of 0 or more");
  }
  if (auto* n = o.if_contains("num_trials")) r.num_trials = static_cast<int>(integer(*n, "num_trials"));
  if (auto* n = o.if_contains("parallel_trials"))
    r.parallel_trials = static_cast<int>(integer(*n, "parallel_trials"));
  if (auto* n = o.if_contains("max_failed_trials"); n && !n->is_null())
    r.max_failed_trials = static_cast<int>(integer(*n, "max_failed_trials"));
  if (auto* e = o.if_contains("early_stopping"); e && !e->is_null()) {
    const auto& x = object(*e, "early_stopping");
    only(x, {"algorithm", "min_trials_required", "start_step"}, "early_stopping.");
    median_stop rule;
    if (auto* a = x.if_contains("algorithm")) {
      auto name = text(*a, "early_stopping.algorithm");
      if (name != "medianstop")
        bad("early_stopping.algorithm", "'" + name + "' is not one; the one there is is medianstop");
    }
    if (auto* n = x.if_contains("min_trials_required"))
      rule.min_trials_required = static_cast<int>(integer(*n, "early_stopping.min_trials_required"));
    if (auto* n = x.if_contains("start_step"))
      rule.start_step = static_cast<int>(integer(*n, "early_stopping.start_step"));
    r.early_stopping = rule;
  }
  return r;
}

json::object record_to_json(const sweep_job& s) {
  json::object o;
  o["name"] = s.name;
  o["status"] = s.status;
  o["reason"] = s.reason;
  o["creation_timestamp"] = format_time(s.creation_timestamp);
  o["end_time"] = time_or_null(s.end_time);
  o["owned"] = s.owned;
  o["request"] = to_json(s.request);
  json::array trials;
  for (const auto& t : s.trials) {
    json::object params;
    for (const auto& [k, v] : t.parameters) params[k] = value_of_text(v);
    json::array metrics;
    for (const auto& m : t.metrics) metrics.push_back(metric_to_json(m));
    trials.push_back(json::object{{"index", t.index},
                                  {"name", t.name},
                                  {"parameters", std::move(params)},
                                  {"status", t.status},
                                  {"reason", t.reason},
                                  {"metrics", std::move(metrics)},
                                  {"objective", t.objective ? json::value(*t.objective) : json::value(nullptr)}});
  }
  o["trials"] = std::move(trials);
  o["best"] = s.best ? json::value(*s.best) : json::value(nullptr);
  return o;
}

sweep_job record_from_json(const json::value& v) {
  const auto& o = v.as_object();
  sweep_job s;
  s.name = json::value_to<std::string>(o.at("name"));
  s.status = json::value_to<std::string>(o.at("status"));
  s.reason = json::value_to<std::string>(o.at("reason"));
  s.creation_timestamp = time_of(o.at("creation_timestamp"));
  if (!o.at("end_time").is_null()) s.end_time = time_of(o.at("end_time"));
  s.request = sweep_request_from(o.at("request"));
  for (const auto& tv : o.at("trials").as_array()) {
    const auto& t = tv.as_object();
    sweep_trial trial;
    trial.index = static_cast<int>(t.at("index").to_number<std::int64_t>());
    trial.name = json::value_to<std::string>(t.at("name"));
    for (const auto& [k, x] : t.at("parameters").as_object()) trial.parameters.emplace_back(k, value_text(x));
    trial.status = json::value_to<std::string>(t.at("status"));
    trial.reason = json::value_to<std::string>(t.at("reason"));
    for (const auto& m : t.at("metrics").as_array()) trial.metrics.push_back(metric_from(m.as_object()));
    if (!t.at("objective").is_null()) trial.objective = t.at("objective").to_number<double>();
    s.trials.push_back(std::move(trial));
  }
  if (!o.at("best").is_null()) s.best = static_cast<int>(o.at("best").to_number<std::int64_t>());
  return s;
}

std::filesystem::path sweeps_dir(const std::filesystem::path& home) { return home / "sweeps"; }
std::filesystem::path sweep_dir(const std::filesystem::path& home, const std::string& name) {
  return sweeps_dir(home) / name;
}

std::optional<sweep_job> read_record(const std::filesystem::path& dir) {
  std::ifstream in(dir / "sweep.json", std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return record_from_json(json::parse(buf.str()));
  } catch (const std::exception& e) {
    throw error(errc::store_corrupt,
                "sweep record " + (dir / "sweep.json").string() + " cannot be read: " + e.what() +
                    "; tjob delete removes the sweep (its trials' jobs stay)");
  }
}

void write_record(const std::filesystem::path& dir, const sweep_job& s) {
  const auto file = dir / "sweep.json";
  const auto part = dir / "sweep.json.part";
  const std::string body = json::serialize(record_to_json(s)) + "\n";
  int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    throw error(errc::store_unavailable, "sweep " + s.name + ": cannot write " + part.string() + ": " +
                                             std::strerror(errno));
  std::string_view rest = body;
  bool ok = true;
  while (!rest.empty()) {
    ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  const int saved = errno;
  ::close(fd);
  if (!ok || ::rename(part.c_str(), file.c_str()) != 0) {
    ::unlink(part.c_str());
    throw error(errc::store_unavailable, "sweep " + s.name + ": cannot write " + file.string() + ": " +
                                             std::strerror(ok ? errno : saved) +
                                             "; the record is as it was: free space and tjob optimize --resume");
  }
}

record_lock::record_lock(const std::filesystem::path& dir) {
  fd_ = ::open((dir / "lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0)
    throw error(errc::store_unavailable, "cannot open " + (dir / "lock").string() + ": " + std::strerror(errno));
  while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
  }
}

record_lock::~record_lock() {
  if (fd_ >= 0) ::close(fd_);
}

int take_owner(const std::filesystem::path& dir) {
  int fd = ::open((dir / "owner").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return -1;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool has_owner(const std::filesystem::path& dir) {
  int fd = ::open((dir / "owner").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

bool sweep_ended(const std::string& status) { return status == "Complete" || status == "Failed"; }
bool trial_ended(const std::string& status) { return status == "Complete" || status == "Failed"; }

}  // namespace tjob::detail
