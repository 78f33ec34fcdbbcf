// The options every command shares (--home, --backend and each backend's
// own, the runtime directories, the venv cache, the admission budgets) and
// the engine configuration they make.
#pragma once

#include "cli/backend_options.hpp"

#include <tjob/engine.hpp>

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace tjob::cli {

struct common_options {
  std::string home;
  std::vector<std::string> runtime_dirs;
  double grace_seconds = 10;
  backend_options backends;  // --backend and each backend's own options
  bool no_venv_cache = false;
  std::optional<long long> venv_cache_ttl;     // seconds
  std::optional<int> max_running, cpu_budget;  // admission budgets
  std::string memory_budget;
};

void add_common_options(CLI::App& app, common_options& common);

/// The engine's configuration from the options; throws usage_error naming
/// an option the chosen backend does not take.
engine_config make_config(const common_options& o);

/// The backend hands the jobs to a server (remote): the server's settings rule.
bool forwards(const engine_config& cfg);

}  // namespace tjob::cli
