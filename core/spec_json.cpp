#include "core/spec_json.hpp"

#include "core/json_fields.hpp"

#include <tjob/error.hpp>
#include <tjob/spec.hpp>

#include <boost/json.hpp>

namespace tjob::detail {

namespace json = boost::json;

namespace {

std::vector<std::string> strings(const json::value& v) {
  std::vector<std::string> out;
  for (const auto& a : v.as_array()) out.push_back(json::value_to<std::string>(a));
  return out;
}

std::map<std::string, std::string> string_map(const json::value& v) {
  std::map<std::string, std::string> out;
  for (const auto& kv : v.as_object()) out[std::string(kv.key())] = json::value_to<std::string>(kv.value());
  return out;
}

}  // namespace

json::object to_json(const command_trainer& t) {
  json::object o;
  o["kind"] = "command";
  o["command"] = to_array(t.command);
  o["env"] = to_object(t.env);
  o["working_dir"] = t.working_dir;
  if (!t.code_dir.empty()) o["code_dir"] = t.code_dir;
  o["cpus"] = t.cpus;
  o["memory"] = t.memory;
  if (!t.image.empty()) o["image"] = t.image;
  return o;
}

json::object to_json(const python_trainer& t) {
  json::object o;
  o["kind"] = "python";
  o["source"] = t.source;
  o["source_file"] = t.source_file;
  o["function"] = t.function;
  o["function_args"] = t.function_args;
  o["args"] = to_array(t.args);
  o["packages_to_install"] = to_array(t.packages_to_install);
  o["pip_index_urls"] = to_array(t.pip_index_urls);
  o["env"] = to_object(t.env);
  o["working_dir"] = t.working_dir;
  if (!t.code_dir.empty()) o["code_dir"] = t.code_dir;
  o["python"] = t.python;
  o["system_site_packages"] = t.system_site_packages;
  o["keep_venv"] = t.keep_venv;
  o["refresh_venv"] = t.refresh_venv;
  o["procs_per_node"] = t.procs_per_node;
  o["memory_limit"] = t.memory_limit;
  o["cpu_limit"] = t.cpu_limit;
  o["gpus"] = t.gpus;
  if (!t.image.empty()) o["image"] = t.image;
  return o;
}

json::object to_json(const trainer& t) {
  return std::visit([](const auto& x) { return to_json(x); }, t);
}

namespace {

trainer trainer_fields(const json::object& o) {
  if (o.at("kind").as_string() == "python") {
    python_trainer t;
    t.source = json::value_to<std::string>(o.at("source"));
    t.source_file = json::value_to<std::string>(o.at("source_file"));
    t.function = json::value_to<std::string>(o.at("function"));
    t.function_args = json::value_to<std::string>(o.at("function_args"));
    t.args = strings(o.at("args"));
    t.packages_to_install = strings(o.at("packages_to_install"));
    t.pip_index_urls = strings(o.at("pip_index_urls"));
    t.env = string_map(o.at("env"));
    t.working_dir = json::value_to<std::string>(o.at("working_dir"));
    if (auto* d = o.if_contains("code_dir")) t.code_dir = json::value_to<std::string>(*d);  // since issue 40
    t.python = json::value_to<std::string>(o.at("python"));
    t.system_site_packages = o.at("system_site_packages").as_bool();
    t.keep_venv = o.at("keep_venv").as_bool();
    if (auto* r = o.if_contains("refresh_venv")) t.refresh_venv = r->as_bool();  // absent before 0.x specs
    t.procs_per_node = static_cast<int>(o.at("procs_per_node").to_number<std::int64_t>());
    t.memory_limit = o.at("memory_limit").to_number<std::uint64_t>();
    t.cpu_limit = o.at("cpu_limit").as_bool();
    t.gpus = static_cast<int>(o.at("gpus").to_number<std::int64_t>());
    if (auto* i = o.if_contains("image")) t.image = json::value_to<std::string>(*i);  // container jobs
    return t;
  }
  command_trainer t;
  t.command = strings(o.at("command"));
  t.env = string_map(o.at("env"));
  t.working_dir = json::value_to<std::string>(o.at("working_dir"));
  if (auto* d = o.if_contains("code_dir")) t.code_dir = json::value_to<std::string>(*d);  // since issue 40
  // absent from the specs of stores made before admission
  if (auto* c = o.if_contains("cpus")) t.cpus = static_cast<int>(c->to_number<std::int64_t>());
  if (auto* m = o.if_contains("memory")) t.memory = m->to_number<std::uint64_t>();
  if (auto* i = o.if_contains("image")) t.image = json::value_to<std::string>(*i);  // container jobs
  return t;
}

}  // namespace

trainer trainer_from_json(const json::object& o) {
  // A spec is data from outside (a pipe, a file): any field missing or of the
  // wrong type is one clear error, never an exception of the JSON library's.
  try {
    return trainer_fields(o);
  } catch (const std::exception&) {
    throw error(errc::invalid_argument,
                "job spec: a field is missing or of the wrong type; a spec is what to_json(trainer) writes");
  }
}

}  // namespace tjob::detail

namespace tjob {

std::string trainer_to_json(const trainer& t) { return boost::json::serialize(detail::to_json(t)); }

trainer trainer_from_json(std::string_view text) {
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  if (ec || !v.is_object())
    throw error(errc::invalid_argument, "job spec: not a JSON object (" +
                                            (ec ? ec.message() : std::string("another JSON value")) + ")");
  return detail::trainer_from_json(v.as_object());
}

}  // namespace tjob
