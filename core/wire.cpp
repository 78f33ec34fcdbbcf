// Jobs, events, runtimes and specs as JSON (tjob/wire.hpp): one encoding for
// the CLI's -o json, tjob serve and its clients.
#include "core/json_fields.hpp"

#include <tjob/wire.hpp>

#include <fmt/chrono.h>
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

namespace {

// RFC 3339, UTC, milliseconds: what `tjob get -o json` has always printed.
std::string time_text(clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03d}Z", tm, static_cast<int>(ms % 1000));
}

json::value time_or_null(const std::optional<clock::time_point>& t) {
  if (!t) return nullptr;
  return json::value(time_text(*t));
}

// --- reading answers: a field missing or of another type is a protocol error

[[noreturn]] void malformed(const std::string& what, const std::string& field) {
  throw error(errc::protocol_error, what + ": field '" + field + "' is missing or of the wrong type");
}

const json::object& object_of(const json::value& v, const std::string& what) {
  if (!v.is_object()) throw error(errc::protocol_error, what + ": not a JSON object");
  return v.get_object();
}

std::string text_at(const json::object& o, const char* key, const std::string& what) {
  auto* v = o.if_contains(key);
  if (!v || !v->is_string()) malformed(what, key);
  return std::string(v->get_string());
}

std::int64_t int_at(const json::object& o, const char* key, const std::string& what) {
  auto* v = o.if_contains(key);
  // (a uint64 past int64's range is malformed too: to_number would throw Boost's own error)
  if (!v || !(v->is_int64() ||
              (v->is_uint64() &&
               v->get_uint64() <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))))
    malformed(what, key);
  return v->to_number<std::int64_t>();
}

clock::time_point time_at(const json::object& o, const char* key, const std::string& what) {
  auto t = parse_time(text_at(o, key, what));
  if (!t) malformed(what, key);
  return *t;
}

std::optional<clock::time_point> optional_time_at(const json::object& o, const char* key,
                                                  const std::string& what) {
  auto* v = o.if_contains(key);
  if (!v || v->is_null()) return std::nullopt;
  return time_at(o, key, what);
}

job_status status_at(const json::object& o, const std::string& what) {
  auto s = parse_job_status(text_at(o, "status", what));
  if (!s) malformed(what, "status");
  return *s;
}

void read_progress(const json::object& o, const std::string& what, std::optional<int>& percent,
                   std::optional<std::int64_t>& remaining,
                   std::vector<std::pair<std::string, std::string>>& metrics) {
  if (o.contains("progress_percent")) percent = static_cast<int>(int_at(o, "progress_percent", what));
  if (o.contains("estimated_remaining_seconds")) remaining = int_at(o, "estimated_remaining_seconds", what);
  if (auto* m = o.if_contains("metrics")) {
    if (!m->is_object()) malformed(what, "metrics");
    for (const auto& [name, value] : m->get_object()) {
      if (!value.is_string()) malformed(what, "metrics");
      metrics.emplace_back(std::string(name), std::string(value.get_string()));
    }
  }
}

std::vector<std::string> texts_at(const json::object& o, const char* key, const std::string& what) {
  auto* v = o.if_contains(key);
  if (!v || !v->is_array()) malformed(what, key);
  std::vector<std::string> out;
  for (const auto& e : v->get_array()) {
    if (!e.is_string()) malformed(what, key);
    out.emplace_back(e.get_string());
  }
  return out;
}

}  // namespace

// Reported progress (a job's latest, a Progress event's): each field only
// when it was reported.
void put_progress(json::object& o, const std::optional<int>& percent,
                  const std::optional<std::int64_t>& remaining,
                  const std::vector<std::pair<std::string, std::string>>& metrics) {
  if (percent) o["progress_percent"] = *percent;
  if (remaining) o["estimated_remaining_seconds"] = *remaining;
  if (!metrics.empty()) {
    json::object m;
    for (const auto& [name, value] : metrics) m[name] = value;
    o["metrics"] = std::move(m);
  }
}

json::object to_json(const train_job& job) {
  json::array steps;
  for (const auto& s : job.steps) {
    json::object o;
    o["name"] = s.name;
    o["status"] = std::string(to_string(s.status));
    if (s.exit_code)
      o["exit_code"] = *s.exit_code;
    else
      o["exit_code"] = nullptr;
    o["reason"] = s.reason;
    if (s.attempt > 1) o["attempt"] = s.attempt;  // (a job without restarts looks as it did)
    steps.push_back(std::move(o));
  }
  json::object o;
  o["name"] = job.name;
  o["status"] = std::string(to_string(job.status));
  o["reason"] = job.reason;
  o["runtime"] = job.runtime;
  o["num_nodes"] = job.num_nodes;
  o["creation_timestamp"] = time_text(job.creation_timestamp);
  o["start_time"] = time_or_null(job.start_time);
  o["end_time"] = time_or_null(job.end_time);
  o["steps"] = std::move(steps);
  if (job.queue_position) o["queue_position"] = *job.queue_position;
  if (!job.array.empty()) o["array"] = job.array;
  // Progress, once reported (a job without any looks as it did).
  put_progress(o, job.progress_percent, job.estimated_remaining_seconds, job.metrics);
  if (job.progress_updated) o["updated"] = time_text(*job.progress_updated);
  return o;
}

json::object to_json(const event& ev) {
  json::object o;
  o["seq"] = ev.seq;
  o["time"] = time_text(ev.time);
  o["step"] = ev.step;
  o["reason"] = ev.reason;
  o["message"] = ev.message;
  put_progress(o, ev.progress_percent, ev.estimated_remaining_seconds, ev.metrics);
  return o;
}

json::object to_json(const runtime& rt) {
  json::object t;
  t["trainer_type"] = rt.trainer.trainer_type;
  t["framework"] = rt.trainer.framework;
  t["image"] = rt.trainer.image;
  t["num_nodes"] = rt.trainer.num_nodes;
  t["device"] = rt.trainer.device;
  t["device_count"] = rt.trainer.device_count;
  t["packages"] = to_array(rt.trainer.packages);
  json::object o;
  o["name"] = rt.name;
  o["kind"] = rt.kind;
  o["trainer"] = std::move(t);
  return o;
}

json::object to_json(const venv_cache_entry& e) {
  json::object o;
  o["key"] = e.key;
  o["python"] = e.python;
  o["python_version"] = e.python_version;
  o["packages"] = to_array(e.packages);
  o["index_urls"] = to_array(e.index_urls);
  o["system_site_packages"] = e.system_site_packages;
  o["bytes"] = e.bytes;
  o["created"] = time_text(e.created);
  o["last_used"] = time_text(e.last_used);
  o["problem"] = e.problem;
  return o;
}

json::object to_json(const queue_entry& e) {
  json::object o;
  o["name"] = e.name;
  o["position"] = e.position;
  o["priority"] = e.priority;
  o["waits_for"] = e.waits_for;
  o["since"] = time_text(e.since);
  o["cpus"] = e.cpus;
  o["memory"] = e.memory;
  o["gpus"] = e.gpus;
  return o;
}

queue_entry queue_entry_from_json(const json::value& v) {
  const std::string what = "queue entry";
  const auto& o = object_of(v, what);
  queue_entry e;
  e.name = text_at(o, "name", what);
  const std::string in = "queue entry " + e.name;
  e.position = static_cast<int>(int_at(o, "position", in));
  e.priority = static_cast<int>(int_at(o, "priority", in));
  e.waits_for = text_at(o, "waits_for", in);
  e.since = time_at(o, "since", in);
  e.cpus = static_cast<int>(int_at(o, "cpus", in));
  e.memory = static_cast<std::uint64_t>(int_at(o, "memory", in));
  e.gpus = static_cast<int>(int_at(o, "gpus", in));
  return e;
}

train_job job_from_json(const json::value& v) {
  const std::string what = "job";
  const auto& o = object_of(v, what);
  train_job j;
  j.name = text_at(o, "name", what);
  const std::string in = "job " + j.name;
  j.status = status_at(o, in);
  j.reason = text_at(o, "reason", in);
  j.runtime = text_at(o, "runtime", in);
  j.num_nodes = static_cast<int>(int_at(o, "num_nodes", in));
  j.creation_timestamp = time_at(o, "creation_timestamp", in);
  j.start_time = optional_time_at(o, "start_time", in);
  j.end_time = optional_time_at(o, "end_time", in);
  if (o.contains("queue_position")) j.queue_position = static_cast<int>(int_at(o, "queue_position", in));
  if (o.contains("array")) j.array = text_at(o, "array", in);
  read_progress(o, in, j.progress_percent, j.estimated_remaining_seconds, j.metrics);
  if (o.contains("updated")) j.progress_updated = time_at(o, "updated", in);
  auto* steps = o.if_contains("steps");
  if (!steps || !steps->is_array()) malformed(in, "steps");
  for (const auto& sv : steps->get_array()) {
    const auto& so = object_of(sv, in + " step");
    step s;
    s.name = text_at(so, "name", in + " step");
    s.status = status_at(so, in + " step " + s.name);
    if (auto* ec = so.if_contains("exit_code"); ec && !ec->is_null())
      s.exit_code = static_cast<int>(int_at(so, "exit_code", in));
    s.reason = text_at(so, "reason", in + " step " + s.name);
    if (so.contains("attempt")) s.attempt = static_cast<int>(int_at(so, "attempt", in + " step " + s.name));
    j.steps.push_back(std::move(s));
  }
  return j;
}

event event_from_json(const json::value& v) {
  const std::string what = "event";
  const auto& o = object_of(v, what);
  event e;
  e.seq = int_at(o, "seq", what);
  e.time = time_at(o, "time", what);
  e.step = text_at(o, "step", what);
  e.reason = text_at(o, "reason", what);
  e.message = text_at(o, "message", what);
  read_progress(o, what, e.progress_percent, e.estimated_remaining_seconds, e.metrics);
  return e;
}

runtime runtime_from_json(const json::value& v) {
  const std::string what = "runtime";
  const auto& o = object_of(v, what);
  runtime rt;
  rt.name = text_at(o, "name", what);
  rt.kind = text_at(o, "kind", what);
  auto* tv = o.if_contains("trainer");
  if (!tv) malformed(what, "trainer");
  const auto& t = object_of(*tv, what + " trainer");
  rt.trainer.trainer_type = text_at(t, "trainer_type", what);
  rt.trainer.framework = text_at(t, "framework", what);
  rt.trainer.image = text_at(t, "image", what);
  rt.trainer.num_nodes = static_cast<int>(int_at(t, "num_nodes", what));
  rt.trainer.device = text_at(t, "device", what);
  rt.trainer.device_count = text_at(t, "device_count", what);
  rt.trainer.packages = texts_at(t, "packages", what);
  return rt;
}

venv_cache_entry venv_cache_entry_from_json(const json::value& v) {
  const std::string what = "venv cache entry";
  const auto& o = object_of(v, what);
  venv_cache_entry e;
  e.key = text_at(o, "key", what);
  e.python = text_at(o, "python", what);
  e.python_version = text_at(o, "python_version", what);
  e.packages = texts_at(o, "packages", what);
  e.index_urls = texts_at(o, "index_urls", what);
  auto* ssp = o.if_contains("system_site_packages");
  if (!ssp || !ssp->is_bool()) malformed(what, "system_site_packages");
  e.system_site_packages = ssp->get_bool();
  e.bytes = static_cast<std::uint64_t>(int_at(o, "bytes", what));
  e.created = time_at(o, "created", what);
  e.last_used = time_at(o, "last_used", what);
  e.problem = text_at(o, "problem", what);
  return e;
}

}  // namespace tjob
