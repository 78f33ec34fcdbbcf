#include "engine/spec_json.hpp"

#include <boost/json.hpp>

namespace tjob::detail {

namespace json = boost::json;

json::object to_json(const command_trainer& t) {
  json::object o;
  o["kind"] = "command";
  json::array cmd;
  for (const auto& a : t.command) cmd.emplace_back(a);
  o["command"] = std::move(cmd);
  json::object env;
  for (const auto& [k, v] : t.env) env[k] = v;
  o["env"] = std::move(env);
  o["working_dir"] = t.working_dir;
  return o;
}

command_trainer command_trainer_from_json(const json::object& o) {
  command_trainer t;
  for (const auto& a : o.at("command").as_array()) t.command.push_back(json::value_to<std::string>(a));
  for (const auto& kv : o.at("env").as_object())
    t.env[std::string(kv.key())] = json::value_to<std::string>(kv.value());
  t.working_dir = json::value_to<std::string>(o.at("working_dir"));
  return t;
}

}  // namespace tjob::detail
