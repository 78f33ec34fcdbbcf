#include "cli/backend_options.hpp"

#include "cli/job_request.hpp"

#include <tjob/engine.hpp>

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <filesystem>

namespace tjob::cli {

namespace json = boost::json;

namespace {

// "a, b and c" (or "a, b or c")
std::string joined(const std::vector<std::string>& items, const char* last = " and ") {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i)
    out += (i == 0 ? "" : i + 1 == items.size() ? last : ", ") + items[i];
  return out;
}

// The long name of a CLI11 option name list ("-v,--volume" -> "--volume").
std::string long_name(const std::string& flags) {
  auto at = flags.rfind("--");
  return at == std::string::npos ? flags : flags.substr(at);
}

// How a backend is chosen, in words: "--backend container", or "--server URL"
// for one an option of its own chooses.
std::string how_to_choose(const backend_description& b) {
  for (const auto& o : b.options)
    if (o.selects_backend) return long_name(o.flags) + (o.value_name.empty() ? "" : " " + o.value_name);
  return "--backend " + b.id;
}

}  // namespace

std::string server_settings_refusal(const std::string& chosen_by) {
  return chosen_by +
         ": the server's backend runs the jobs, with the server's settings; --backend, --runtime-dir, the "
         "admission budgets, the venv cache's and the backends' options go to tjob serve (or leave out "
         "--server and unset TJOB_SERVER to run jobs here)";
}

bool backend_options::value::given() const { return cli && cli->count() > 0; }

std::string backend_options::value::from_env() const {
  if (option.env.empty()) return {};
  const char* v = std::getenv(option.env.c_str());
  return v ? v : "";
}

void backend_options::add_to(CLI::App& app) {
  auto backends = registered_backends();
  std::vector<std::string> choosable;
  for (const auto& b : backends)
    if (how_to_choose(b).rfind("--backend ", 0) == 0) choosable.push_back(b.summary);
  app.add_option("--backend", backend_, "Where jobs run: " + joined(choosable, " or "));
  for (const auto& b : backends)
    for (const auto& o : b.options) {
      auto& v = values_.emplace_back();
      v.backend = b;
      v.option = o;
      switch (o.kind) {
        case backend_option::value_kind::text:
        case backend_option::value_kind::path:
        case backend_option::value_kind::seconds:
          v.cli = app.add_option(o.flags, v.text, o.help);
          break;
        case backend_option::value_kind::texts:
          v.cli = app.add_option(o.flags, v.texts, o.help)->allow_extra_args(false);
          break;
        case backend_option::value_kind::flag:
          v.cli = app.add_flag(o.flags, v.flag, o.help);
          break;
      }
    }
}

std::string backend_options::flag_of(const std::string& backend, std::string_view member) const {
  for (const auto& v : values_)
    if (v.backend.id == backend && v.option.name == member) return long_name(v.option.flags);
  return std::string(member);  // (a member with no flag: the backend's own words)
}

std::string backend_options::given_flags(const std::string& backend) const {
  std::vector<std::string> flags;
  for (const auto& v : values_)
    if (v.backend.id == backend && !v.option.selects_backend) flags.push_back(long_name(v.option.flags));
  return joined(flags);
}

// An option of a backend other than the chosen one is a mistake, said as such.
void backend_options::refuse_others(const chosen& c) const {
  for (const auto& v : values_) {
    if (v.backend.id == c.id || !v.given()) continue;
    if (c.capabilities.forwards)
      throw usage_error(server_settings_refusal(c.chosen_by));
    throw usage_error(given_flags(v.backend.id) + " are for the " + v.backend.id + " backend; add " +
                      how_to_choose(v.backend));
  }
}

json::object backend_options::config_of(const std::string& backend) const {
  json::object config;
  for (const auto& v : values_) {
    if (v.backend.id != backend) continue;
    const auto& o = v.option;
    const bool given = v.given();
    switch (o.kind) {
      case backend_option::value_kind::text:
      case backend_option::value_kind::path:
      case backend_option::value_kind::seconds: {
        std::string text = given ? v.text : v.from_env();
        if (text.empty()) break;
        if (o.kind == backend_option::value_kind::path) text = std::filesystem::absolute(text).string();
        if (o.kind == backend_option::value_kind::seconds) {
          char* end = nullptr;
          long long n = std::strtoll(text.c_str(), &end, 10);
          if (*end != '\0' || n < 0) throw usage_error(long_name(o.flags) + " " + text + ": give whole seconds");
          config[o.name] = n;
        } else {
          config[o.name] = text;
        }
        break;
      }
      case backend_option::value_kind::texts:
        if (given) {
          json::array a;
          for (const auto& t : v.texts) a.emplace_back(t);
          config[o.name] = std::move(a);
        }
        break;
      case backend_option::value_kind::flag:
        if (given) config[o.name] = o.flag_value;
        break;
    }
  }
  return config;
}

backend_options::chosen backend_options::choose() const {
  chosen c;
  // An option that chooses its backend (--server, or its variable) wins.
  for (const auto& v : values_) {
    if (!v.option.selects_backend) continue;
    std::string given = v.given() ? v.text : v.from_env();
    if (given.empty()) continue;
    c.id = v.backend.id;
    c.chosen_by = long_name(v.option.flags) + " " + given;
    if (!backend_.empty() && backend_ != c.id)
      throw usage_error(server_settings_refusal(c.chosen_by));
    break;
  }
  if (c.id.empty()) {
    std::string b = backend_;
    if (b.empty())
      if (const char* e = std::getenv("TJOB_BACKEND"); e && *e) b = e;
    if (b.empty()) b = engine_config{}.backend;  // (the default backend)
    auto found = find_backend(b);
    std::vector<std::string> ids, others;
    for (const auto& r : registered_backends()) {
      if (how_to_choose(r).rfind("--backend ", 0) == 0)
        ids.push_back(r.id);
      else
        others.push_back(how_to_choose(r) + " for " + r.summary);
    }
    if (!found)
      throw usage_error("--backend " + b + ": unknown backend; use " + joined(ids, " or ") +
                        (others.empty() ? "" : " (or " + joined(others) + ")"));
    if (auto how = how_to_choose(*found); how.rfind("--backend ", 0) != 0) {
      std::string env;
      for (const auto& o : found->options)
        if (o.selects_backend && !o.env.empty()) env = " (or $" + o.env + ")";
      throw usage_error("--backend " + b + ": choose it with " + how + env);
    }
    c.id = b;
    c.chosen_by = "--backend " + b;
  }
  c.capabilities = find_backend(c.id)->capabilities;
  refuse_others(c);
  c.config = config_of(c.id);
  try {
    check_backend_config(c.id, c.config, [&](std::string_view member) { return flag_of(c.id, member); });
  } catch (const error& e) {
    throw usage_error(e.what());
  }
  return c;
}

}  // namespace tjob::cli
