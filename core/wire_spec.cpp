// Job specs as JSON (tjob/wire.hpp): a train_request written for tjob serve,
// the supervisor and the Python package, and read back with every field
// checked, a bad one named (spec_reader).
#include "core/json_fields.hpp"
#include "core/spec_json.hpp"

#include <tjob/spec.hpp>
#include <tjob/wire.hpp>

#include <fmt/format.h>
#include <boost/json.hpp>

#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace tjob {

namespace json = boost::json;
using detail::to_array;
using detail::to_object;

// --- specs

json::object to_json(const train_request& r) {
  json::object t;
  if (const auto* c = std::get_if<command_trainer>(&r.job_trainer)) {
    t["kind"] = "command";
    t["command"] = to_array(c->command);
    t["env"] = to_object(c->env);
    t["working_dir"] = c->working_dir;
    if (!c->code_dir.empty()) t["code_dir"] = c->code_dir;
    t["image"] = c->image;
    t["cpus"] = c->cpus;
    t["memory"] = c->memory;
  } else {
    const auto& p = std::get<python_trainer>(r.job_trainer);
    t["kind"] = "python";
    t["source"] = p.source;
    if (!p.source_file.empty()) t["source_file"] = p.source_file;
    t["function"] = p.function;
    if (p.function_args.empty()) {
      t["function_args"] = json::object();
    } else {
      boost::system::error_code ec;
      auto args = json::parse(p.function_args, ec);
      t["function_args"] = ec ? json::value(p.function_args) : args;  // refused when read back
    }
    t["args"] = to_array(p.args);
    t["packages_to_install"] = to_array(p.packages_to_install);
    t["pip_index_urls"] = to_array(p.pip_index_urls);
    t["env"] = to_object(p.env);
    t["working_dir"] = p.working_dir;
    if (!p.code_dir.empty()) t["code_dir"] = p.code_dir;
    t["python"] = p.python;
    t["system_site_packages"] = p.system_site_packages;
    t["keep_venv"] = p.keep_venv;
    t["refresh_venv"] = p.refresh_venv;
    t["procs_per_node"] = p.procs_per_node;
    t["cpu_limit"] = p.cpu_limit;
    t["memory_limit"] = p.memory_limit;
    t["gpus"] = p.gpus;
    t["image"] = p.image;
  }
  json::object o;
  o["name"] = r.name;
  o["runtime"] = r.runtime;
  o["num_nodes"] = r.num_nodes;
  o["labels"] = to_object(r.labels);
  o["annotations"] = to_object(r.annotations);
  o["priority"] = r.priority;
  o["active_deadline"] = r.active_deadline.count();
  if (r.warning) o["warning"] = detail::to_json(*r.warning);
  if (r.begin) o["begin"] = format_time(*r.begin);
  o["after_ok"] = to_array(r.after_ok);
  o["after_any"] = to_array(r.after_any);
  o["after_not_ok"] = to_array(r.after_not_ok);
  o["array"] = r.array;
  o["array_limit"] = r.array_limit;
  if (r.retry.max_restarts > 0) o["retry"] = detail::to_json(r.retry);
  o["trainer"] = std::move(t);
  return o;
}

spec_error::spec_error(std::string field, std::string message)
    : error(errc::invalid_argument, std::move(message)), field_(std::move(field)) {}

namespace {

// Reads one object of a spec strictly: each field at most once, of its type;
// finish() refuses whatever was not read, by name.
class spec_reader {
 public:
  spec_reader(const json::value& v, std::string path, std::string what)
      : path_(std::move(path)), what_(std::move(what)) {
    if (!v.is_object()) throw spec_error(path_.empty() ? "" : path_, label() + "must be a JSON object");
    o_ = &v.get_object();
  }

  std::string field(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

  [[noreturn]] void refuse(const char* key, const std::string& problem) const {
    throw spec_error(field(key), "job spec: " + field(key) + ": " + problem);
  }

  const json::value* get(const char* key) {
    known_.insert(key);
    auto* v = o_->if_contains(key);
    return v && !v->is_null() ? v : nullptr;
  }

  std::optional<std::string> text(const char* key) {
    auto* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) refuse(key, "must be a string");
    return std::string(v->get_string());
  }

  std::optional<bool> flag(const char* key) {
    auto* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_bool()) refuse(key, "must be true or false");
    return v->get_bool();
  }

  std::optional<std::int64_t> number(const char* key, std::int64_t lo, std::int64_t hi) {
    auto* v = get(key);
    if (!v) return std::nullopt;
    std::int64_t n = 0;
    if (v->is_int64())
      n = v->get_int64();
    else if (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(hi))
      n = static_cast<std::int64_t>(v->get_uint64());
    else
      refuse(key, fmt::format("must be a whole number from {} to {}", lo, hi));
    if (n < lo || n > hi) refuse(key, fmt::format("{} is out of range; give {} to {}", n, lo, hi));
    return n;
  }

  std::optional<std::vector<std::string>> texts(const char* key) {
    auto* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_array()) refuse(key, "must be an array of strings");
    std::vector<std::string> out;
    for (const auto& e : v->get_array()) {
      if (!e.is_string()) refuse(key, fmt::format("item {} must be a string", out.size()));
      out.emplace_back(e.get_string());
    }
    return out;
  }

  std::optional<double> real(const char* key, double lo, double hi) {
    auto* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_number()) refuse(key, fmt::format("must be a number from {} to {}", lo, hi));
    double d = v->to_number<double>();
    if (!(d >= lo && d <= hi)) refuse(key, fmt::format("{} is out of range; give {} to {}", d, lo, hi));
    return d;
  }

  std::optional<std::vector<int>> codes(const char* key) {
    auto* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_array()) refuse(key, "must be an array of exit codes (1 to 255)");
    std::vector<int> out;
    for (const auto& e : v->get_array()) {
      if (!e.is_int64() || e.get_int64() < 1 || e.get_int64() > 255)
        refuse(key, fmt::format("item {} must be an exit code from 1 to 255", out.size()));
      out.push_back(static_cast<int>(e.get_int64()));
    }
    return out;
  }

  std::optional<std::map<std::string, std::string>> text_map(const char* key) {
    auto* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_object()) refuse(key, "must be an object of strings");
    std::map<std::string, std::string> out;
    for (const auto& kv : v->get_object()) {
      if (!kv.value().is_string())
        throw spec_error(field(key) + "." + std::string(kv.key()),
                         "job spec: " + field(key) + "." + std::string(kv.key()) + ": must be a string");
      out[std::string(kv.key())] = std::string(kv.value().get_string());
    }
    return out;
  }

  /// Refuses the fields that were not read, naming the first and the known ones.
  void finish() const {
    for (const auto& kv : *o_) {
      std::string key(kv.key());
      if (known_.count(key)) continue;
      std::string names;
      for (const auto& k : known_) names += (names.empty() ? "" : ", ") + k;
      auto f = path_.empty() ? key : path_ + "." + key;
      throw spec_error(f, "job spec: " + f + ": unknown field; " + label() + "has " + names);
    }
  }

 private:
  std::string label() const { return what_ + " "; }
  const json::object* o_ = nullptr;
  std::string path_, what_;
  std::set<std::string> known_;
};

// A working directory to send with the job names a directory of the
// server's machine: only a client on its unix socket may (as source_file).
std::string code_dir_from(spec_reader& r, bool allow_local_paths) {
  auto v = r.text("code_dir");
  if (!v || v->empty()) return {};
  if (!allow_local_paths)
    r.refuse(
        "code_dir",
        "a spec over TCP cannot name a directory of the server's machine; bake the code into an image, or "
        "submit on the server's unix socket");
  if (v->front() != '/')
    r.refuse("code_dir", "give the absolute path of the directory on the server's machine");
  return *v;
}

command_trainer command_from(spec_reader& r, bool allow_local_paths) {
  command_trainer t;
  t.code_dir = code_dir_from(r, allow_local_paths);
  if (auto v = r.texts("command")) t.command = std::move(*v);
  if (auto v = r.text_map("env")) t.env = std::move(*v);
  if (auto v = r.text("working_dir")) t.working_dir = std::move(*v);
  if (auto v = r.text("image")) t.image = std::move(*v);
  if (auto v = r.number("cpus", 0, 1024)) t.cpus = static_cast<int>(*v);
  if (auto v = r.number("memory", 0, std::int64_t(1) << 60)) t.memory = static_cast<std::uint64_t>(*v);
  r.finish();  // an unknown field first: a misspelt "comand" is named as such
  if (t.command.empty())
    r.refuse("command", "give the program and its arguments, as [\"python3\", \"train.py\"]");
  return t;
}

python_trainer python_from(spec_reader& r, bool allow_source_file) {
  python_trainer t;
  t.code_dir = code_dir_from(r, allow_source_file);
  if (auto v = r.text("source")) t.source = std::move(*v);
  if (r.get("source_file") && !allow_source_file)
    r.refuse("source_file",
             "a spec over TCP carries the code itself; send the file's text as \"source\" (a file is named "
             "only by a client on the server's unix socket)");
  if (auto v = r.text("source_file")) {
    if (v->empty() || v->front() != '/')
      r.refuse("source_file", "give the absolute path of the training file on the server's machine");
    t.source_file = std::move(*v);
  }
  if (auto v = r.text("function")) t.function = std::move(*v);
  if (auto* v = r.get("function_args")) {
    if (!v->is_object()) r.refuse("function_args", "must be a JSON object of keyword arguments");
    if (!v->get_object().empty()) {
      // Boost.JSON 1.81 reads a number of more than 17 significant digits to
      // within an ulp, not exactly, so the text it writes for a double may
      // read back as another one, and that one's as the first (fuzz_api_spec
      // found such a pair). The arguments are written and read until a text
      // comes again; the least text of that cycle is kept, which is the same
      // from wherever in the cycle it starts, so the spec encodes to itself.
      // Each reading must be finite: Boost.JSON reads 1e400 (or a number
      // within an ulp of the largest double) as an infinity and writes that
      // as `Infinity`, which it cannot read back.
      json::value now = *v;
      std::vector<std::string> seen;
      for (;;) {
        if (!detail::finite_numbers(now))
          r.refuse("function_args",
                   "holds a number beyond a double's range (such as 1e400), which JSON cannot carry back; "
                   "pass it as a string");
        auto text = json::serialize(now);
        if (auto at = std::find(seen.begin(), seen.end(), text); at != seen.end()) {
          t.function_args = *std::min_element(at, seen.end());
          break;
        }
        if (seen.size() == 8)
          r.refuse("function_args",
                   "holds a number with more digits than a double keeps, which does not read back as "
                   "itself; pass it as a string");
        seen.push_back(std::move(text));
        now = json::parse(seen.back());  // finite numbers are written as JSON
      }
    }
  }
  if (auto v = r.texts("args")) t.args = std::move(*v);
  if (auto v = r.texts("packages_to_install")) t.packages_to_install = std::move(*v);
  if (auto v = r.texts("pip_index_urls")) t.pip_index_urls = std::move(*v);
  if (auto v = r.text_map("env")) t.env = std::move(*v);
  if (auto v = r.text("working_dir")) t.working_dir = std::move(*v);
  if (auto v = r.text("python")) t.python = std::move(*v);
  if (auto v = r.flag("system_site_packages")) t.system_site_packages = *v;
  if (auto v = r.flag("keep_venv")) t.keep_venv = *v;
  if (auto v = r.flag("refresh_venv")) t.refresh_venv = *v;
  if (auto v = r.number("procs_per_node", 1, 1024)) t.procs_per_node = static_cast<int>(*v);
  if (auto v = r.flag("cpu_limit")) t.cpu_limit = *v;
  if (auto v = r.number("memory_limit", 0, std::int64_t(1) << 60))
    t.memory_limit = static_cast<std::uint64_t>(*v);
  if (auto v = r.number("gpus", 0, 64)) t.gpus = static_cast<int>(*v);
  if (auto v = r.text("image")) t.image = std::move(*v);
  if (auto v = r.text_map("resources_per_node")) {
    try {
      set_resources_per_node(t, *v, "resources_per_node");
    } catch (const error& e) {
      r.refuse("resources_per_node", e.what());
    }
  }
  r.finish();
  if (t.source.empty() && t.source_file.empty())
    r.refuse("source", "give the Python source text of the training code");
  return t;
}

}  // namespace

namespace detail {

json::object to_json(const retry_policy& p) {
  json::array on, never;
  for (int c : p.retry_on) on.push_back(c);
  for (int c : p.never_retry) never.push_back(c);
  return {{"max_restarts", p.max_restarts},     {"backoff_ms", p.backoff.count()},
          {"backoff_factor", p.backoff_factor}, {"max_backoff_ms", p.max_backoff.count()},
          {"retry_on", std::move(on)},          {"never_retry", std::move(never)}};
}

retry_policy retry_from_json(const json::value& v) {
  spec_reader rr(v, "retry", "a retry policy");
  constexpr std::int64_t day_ms = 86'400'000;
  retry_policy p;
  if (auto n = rr.number("max_restarts", 0, 1000)) p.max_restarts = static_cast<int>(*n);
  if (auto n = rr.number("backoff_ms", 0, day_ms)) p.backoff = std::chrono::milliseconds(*n);
  if (auto d = rr.real("backoff_factor", 1, 100)) p.backoff_factor = *d;
  if (auto n = rr.number("max_backoff_ms", 0, day_ms)) p.max_backoff = std::chrono::milliseconds(*n);
  if (auto c = rr.codes("retry_on")) p.retry_on = std::move(*c);
  if (auto c = rr.codes("never_retry")) p.never_retry = std::move(*c);
  rr.finish();
  return p;
}

json::object to_json(const stop_warning& w) {
  return {{"signal", signal_name(w.signal)}, {"before", w.before.count()}};
}

stop_warning warning_from_json(const json::value& v) {
  spec_reader wr(v, "warning", "a warning");
  stop_warning w;
  if (auto sig = wr.text("signal")) {
    auto n = signal_number(*sig);
    if (!n) wr.refuse("signal", "'" + *sig + "' is not a signal a job can handle; give a name such as USR1");
    w.signal = *n;
  } else {
    wr.refuse("signal", "missing; give the signal's name, such as USR1");
  }
  if (auto n = wr.number("before", 1, std::int64_t(366) * 86400)) w.before = std::chrono::seconds(*n);
  wr.finish();
  return w;
}

}  // namespace detail

train_request request_from_json(const json::value& v, bool allow_source_file) {
  spec_reader r(v, "", "a job spec");
  train_request req;
  if (auto s = r.text("name")) req.name = std::move(*s);
  if (auto s = r.text("runtime")) req.runtime = std::move(*s);
  if (auto n = r.number("num_nodes", 1, 1024)) req.num_nodes = static_cast<int>(*n);
  if (auto m = r.text_map("labels")) req.labels = std::move(*m);
  if (auto m = r.text_map("annotations")) req.annotations = std::move(*m);
  if (auto n = r.number("priority", -1'000'000, 1'000'000)) req.priority = static_cast<int>(*n);
  if (auto n = r.number("active_deadline", 0, std::int64_t(366) * 86400))
    req.active_deadline = std::chrono::seconds(*n);
  if (auto* wv = r.get("warning")) req.warning = detail::warning_from_json(*wv);
  if (auto v = r.text("begin")) {
    req.begin = parse_begin_time(*v, clock::now());
    if (!req.begin) r.refuse("begin", "\"" + *v + "\" is not a time; give " + begin_time_forms);
  }
  if (auto v = r.texts("after_ok")) req.after_ok = std::move(*v);
  if (auto v = r.texts("after_any")) req.after_any = std::move(*v);
  if (auto v = r.texts("after_not_ok")) req.after_not_ok = std::move(*v);
  if (auto v = r.text("array")) req.array = std::move(*v);
  if (auto n = r.number("array_limit", 0, 100'000)) req.array_limit = static_cast<int>(*n);
  if (auto* rv = r.get("retry")) req.retry = detail::retry_from_json(*rv);
  auto* tv = r.get("trainer");
  r.finish();
  if (!tv)
    r.refuse("trainer",
             "missing; give {\"kind\": \"command\", \"command\": [...]} or {\"kind\": \"python\", "
             "\"source\": ...}");
  {
    spec_reader kind_of(*tv, "trainer", "a trainer");
    auto kind = kind_of.text("kind");
    if (kind == std::optional<std::string>("command")) {
      spec_reader t(*tv, "trainer", "a command trainer");
      t.text("kind");
      req.job_trainer = command_from(t, allow_source_file);
    } else if (kind == std::optional<std::string>("python")) {
      spec_reader t(*tv, "trainer", "a python trainer");
      t.text("kind");
      req.job_trainer = python_from(t, allow_source_file);
    } else {
      kind_of.refuse("kind", "give \"command\" (a program) or \"python\" (Python training code)");
    }
  }
  return req;
}

}  // namespace tjob
