// An engine's configuration and a backend's capabilities as JSON
// (tjob/wire.hpp): what a process hands its supervisor, and what tjob serve
// says of its backend.
#include "core/json_fields.hpp"

#include <tjob/wire.hpp>

#include <boost/json.hpp>

namespace tjob {

namespace json = boost::json;
using detail::to_array;

namespace {

// Reads the members of one object, refusing one of the wrong type by name.
struct reader {
  const json::object& o;
  std::string what;

  [[noreturn]] void bad(std::string_view key) const {
    throw error(errc::protocol_error, what + ": field '" + std::string(key) + "' is of the wrong type");
  }
  const json::value* at(std::string_view key) const {
    auto* v = o.if_contains(key);
    return v && !v->is_null() ? v : nullptr;
  }
  void text(std::string_view key, std::string& out) const {
    if (auto* v = at(key)) {
      if (!v->is_string()) bad(key);
      out = std::string(v->as_string());
    }
  }
  void flag(std::string_view key, bool& out) const {
    if (auto* v = at(key)) {
      if (!v->is_bool()) bad(key);
      out = v->as_bool();
    }
  }
  std::optional<std::int64_t> number(std::string_view key) const {
    auto* v = at(key);
    if (!v) return std::nullopt;
    if (v->is_int64()) return v->as_int64();
    if (v->is_uint64() && v->as_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
      return static_cast<std::int64_t>(v->as_uint64());
    bad(key);
  }
  std::vector<std::string> texts(std::string_view key) const {
    std::vector<std::string> out;
    if (auto* v = at(key)) {
      if (!v->is_array()) bad(key);
      for (const auto& x : v->as_array()) {
        if (!x.is_string()) bad(key);
        out.emplace_back(x.as_string());
      }
    }
    return out;
  }
};

}  // namespace

json::object to_json(const backend_capabilities& c) {
  return {{"id", c.id},
          {"runs_here", c.runs_here},
          {"forwards", c.forwards},
          {"needs_owner", c.needs_owner},
          {"owner_until_started", c.owner_until_started},
          {"admission", c.admission},
          {"queued_by", c.queued_by},
          {"restarts", c.restarts},
          {"arrays", c.arrays},
          {"keeps_labels", c.keeps_labels},
          {"takes_image", c.takes_image},
          {"workdir_in_image", c.workdir_in_image},
          {"runs_images_as_is", c.runs_images_as_is},
          {"takes_code_dir", c.takes_code_dir},
          {"venv_cache", c.venv_cache},
          {"stop_warning", c.stop_warning},
          {"begin_time", c.begin_time},
          {"job_files", c.job_files}};
}

backend_capabilities capabilities_from_json(const json::value& v) {
  if (!v.is_object()) throw error(errc::protocol_error, "a backend's capabilities: not a JSON object");
  reader r{v.as_object(), "a backend's capabilities"};
  backend_capabilities c;
  r.text("id", c.id);
  if (c.id.empty()) throw error(errc::protocol_error, "a backend's capabilities: field 'id' is missing");
  r.flag("runs_here", c.runs_here);
  r.flag("forwards", c.forwards);
  r.flag("needs_owner", c.needs_owner);
  r.flag("owner_until_started", c.owner_until_started);
  r.flag("admission", c.admission);
  r.text("queued_by", c.queued_by);
  r.flag("restarts", c.restarts);
  r.flag("arrays", c.arrays);
  r.flag("keeps_labels", c.keeps_labels);
  r.flag("takes_image", c.takes_image);
  r.flag("workdir_in_image", c.workdir_in_image);
  r.flag("runs_images_as_is", c.runs_images_as_is);
  r.flag("takes_code_dir", c.takes_code_dir);
  r.flag("venv_cache", c.venv_cache);
  r.flag("stop_warning", c.stop_warning);
  r.flag("begin_time", c.begin_time);
  r.text("job_files", c.job_files);
  return c;
}

json::object to_json(const engine_config& c) {
  json::object o;
  o["backend"] = c.backend;
  o["backend_config"] = c.backend_config;
  o["home"] = c.home.string();
  o["grace_ms"] = c.grace_period.count();
  o["store_busy_timeout_ms"] = c.store_busy_timeout.count();
  json::array dirs;
  for (const auto& d : c.runtime_dirs) dirs.emplace_back(d.string());
  o["runtime_dirs"] = std::move(dirs);
  o["cleanup_venv"] = c.cleanup_venv;
  o["venv_cache"] = c.venv_cache;
  o["venv_cache_ttl_s"] = c.venv_cache_unpinned_ttl.count();
  o["gpu_devices"] = to_array(c.gpu_devices);
  json::object admission;
  if (c.admission.max_running) admission["max_running"] = *c.admission.max_running;
  if (c.admission.cpus) admission["cpus"] = *c.admission.cpus;
  if (c.admission.memory) admission["memory"] = *c.admission.memory;
  o["admission"] = std::move(admission);
  o["failure_log_lines"] = c.failure_log_lines;
  o["supervisor"] = c.supervisor.string();
  o["clean_job_environment"] = c.clean_job_environment;
  return o;
}

engine_config engine_config_from_json(const json::value& v) {
  if (!v.is_object()) throw error(errc::protocol_error, "an engine's configuration: not a JSON object");
  reader r{v.as_object(), "an engine's configuration"};
  engine_config c;
  r.text("backend", c.backend);
  if (auto* b = r.at("backend_config")) {
    if (!b->is_object()) r.bad("backend_config");
    c.backend_config = b->as_object();
  }
  std::string home, supervisor;
  r.text("home", home);
  c.home = home;
  if (auto n = r.number("grace_ms")) c.grace_period = std::chrono::milliseconds(*n);
  if (auto n = r.number("store_busy_timeout_ms")) c.store_busy_timeout = std::chrono::milliseconds(*n);
  for (auto& d : r.texts("runtime_dirs")) c.runtime_dirs.emplace_back(std::move(d));
  r.flag("cleanup_venv", c.cleanup_venv);
  r.flag("venv_cache", c.venv_cache);
  if (auto n = r.number("venv_cache_ttl_s")) c.venv_cache_unpinned_ttl = std::chrono::seconds(*n);
  c.gpu_devices = r.texts("gpu_devices");
  if (auto* a = r.at("admission")) {
    if (!a->is_object()) r.bad("admission");
    reader ar{a->as_object(), "an engine's configuration: admission"};
    if (auto n = ar.number("max_running")) c.admission.max_running = static_cast<int>(*n);
    if (auto n = ar.number("cpus")) c.admission.cpus = static_cast<int>(*n);
    if (auto n = ar.number("memory")) c.admission.memory = static_cast<std::uint64_t>(*n);
  }
  if (auto n = r.number("failure_log_lines")) c.failure_log_lines = static_cast<std::size_t>(*n);
  r.text("supervisor", supervisor);
  c.supervisor = supervisor;
  r.flag("clean_job_environment", c.clean_job_environment);
  return c;
}

}  // namespace tjob
