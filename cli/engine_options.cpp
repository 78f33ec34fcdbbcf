#include "cli/engine_options.hpp"

#include "cli/job_request.hpp"

#include <tjob/backends.hpp>

#include <cstdlib>
#include <filesystem>

namespace tjob::cli {

namespace {

// "local and container backends": the backends whose jobs tjob admits.
std::string admitting_backends() {
  std::vector<std::string> ids;
  for (const auto& b : registered_backends())
    if (b.capabilities.admission) ids.push_back(b.id);
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i)
    out += (i == 0 ? "" : i + 1 == ids.size() ? " and " : ", ") + ids[i];
  return out + (ids.size() == 1 ? " backend" : " backends");
}

// A backend that hands jobs to a server (remote) takes none of this
// engine's own settings, nor the variables this engine reads (they would be
// silently ignored): they are the server's.
void refuse_server_settings(const backend_options::chosen& chosen, const common_options& o) {
  if (!chosen.capabilities.forwards) return;
  if (!o.runtime_dirs.empty() || o.no_venv_cache || o.venv_cache_ttl || o.max_running || o.cpu_budget ||
      !o.memory_budget.empty())
    throw usage_error(server_settings_refusal(chosen.chosen_by));
  for (const char* var :
       {"TJOB_PYTHON", "TJOB_SYSTEM_SITE_PACKAGES", "TJOB_VENV_CACHE", "TJOB_VENV_CACHE_TTL"})
    if (const char* v = std::getenv(var); v && *v)
      throw usage_error(chosen.chosen_by + ": " + var + "=" + v +
                        " is read by the engine that runs the jobs, which is the server's: set it in tjob "
                        "serve's environment (or give --python, --system-site-packages on the job), and "
                        "unset it here");
}

}  // namespace

// The backend hands the jobs to a server (remote): the server's settings rule.
bool forwards(const engine_config& cfg) {
  auto b = find_backend(cfg.backend);
  return b && b->capabilities.forwards;
}

engine_config make_config(const common_options& o) {
  auto chosen = o.backends.choose();
  refuse_server_settings(chosen, o);
  engine_config cfg;
  cfg.backend = chosen.id;
  cfg.backend_config = std::move(chosen.config);
  if (!o.home.empty()) cfg.home = o.home;
  if (!o.runtime_dirs.empty()) {
    cfg.runtime_dirs.push_back(std::filesystem::path(cfg.home.empty() ? default_home() : cfg.home) /
                               "runtimes");
    for (const auto& d : o.runtime_dirs) cfg.runtime_dirs.push_back(std::filesystem::absolute(d));
  }
  if (o.grace_seconds < 0) throw usage_error("--grace must be 0 or more seconds");
  if (const char* v = std::getenv("TJOB_VENV_CACHE"); v && std::string_view(v) == "0") cfg.venv_cache = false;
  if (o.no_venv_cache) cfg.venv_cache = false;
  auto ttl = o.venv_cache_ttl;
  if (const char* v = std::getenv("TJOB_VENV_CACHE_TTL"); !ttl && v && *v) {
    char* end = nullptr;
    ttl = std::strtoll(v, &end, 10);
    if (*end != '\0') throw usage_error(std::string("TJOB_VENV_CACHE_TTL=") + v + ": give whole seconds");
  }
  if (ttl && *ttl < 0) throw usage_error("--venv-cache-ttl must be 0 (never expire) or more seconds");
  if (ttl) cfg.venv_cache_unpinned_ttl = std::chrono::seconds(*ttl);
  cfg.grace_period = std::chrono::milliseconds(static_cast<long long>(o.grace_seconds * 1000));
  if (const char* t = std::getenv("TJOB_STORE_BUSY_TIMEOUT_MS"); t && *t)
    cfg.store_busy_timeout = std::chrono::milliseconds(std::atoll(t));
  if (o.max_running) {
    if (*o.max_running < 0) throw usage_error("--max-running must be 0 (no limit) or more jobs");
    cfg.admission.max_running = *o.max_running;
  }
  if (o.cpu_budget) {
    if (*o.cpu_budget < 0) throw usage_error("--cpu-budget must be 0 (no limit) or more CPUs");
    cfg.admission.cpus = *o.cpu_budget;
  }
  if (o.memory_budget == "0") {
    cfg.admission.memory = 0;
  } else if (!o.memory_budget.empty()) {
    try {
      cfg.admission.memory = parse_memory(o.memory_budget, "--memory-budget");
    } catch (const error& e) {
      throw usage_error(e.what());
    }
  }
  bool budgets = o.max_running || o.cpu_budget || !o.memory_budget.empty();
  if (budgets && !chosen.capabilities.admission && !chosen.capabilities.forwards)
    throw usage_error("--max-running, --cpu-budget and --memory-budget are the admission budgets of the " +
                      admitting_backends() + "; the " + chosen.id + " backend's jobs go to the " +
                      (chosen.capabilities.queued_by.empty() ? std::string("peer at once")
                                                             : chosen.capabilities.queued_by) +
                      " (docs/scheduling.md)");
  return cfg;
}

void add_common_options(CLI::App& app, common_options& common) {
  app.add_option("--home", common.home, "The store directory (overrides $TJOB_HOME)");
  app.add_option("--runtime-dir", common.runtime_dirs,
                 "A directory of runtime manifests (ClusterTrainingRuntime YAML) that override "
                 "the built-in ones and $TJOB_HOME/runtimes by name (repeatable)")
      ->allow_extra_args(false);
  common.backends.add_to(app);
  app.add_flag("--no-venv-cache", common.no_venv_cache,
               "Local Python jobs: build a fresh venv in every job instead of copying the cached "
               "one ($TJOB_VENV_CACHE=0 does the same)");
  app.add_option("--venv-cache-ttl", common.venv_cache_ttl,
                 "Local Python jobs: seconds a cached venv with unpinned packages is used before it is "
                 "rebuilt; 0: never ($TJOB_VENV_CACHE_TTL, default 86400)");
  app.add_option("--max-running", common.max_running,
                 "Admission: at most N local (or container) jobs run at once, the others wait in the queue "
                 "(0: no limit; "
                 "default: admission.max_running of $TJOB_HOME/config.yaml, else no limit)");
  app.add_option(
      "--cpu-budget", common.cpu_budget,
      "Admission: the CPUs local (or container) jobs hold together (0: no limit; default: config.yaml, else "
      "this machine's CPUs)");
  app.add_option(
      "--memory-budget", common.memory_budget,
      "Admission: the memory local (or container) jobs hold together, as 16Gi (0: no limit; default: "
      "config.yaml, else MemTotal)");
}

}  // namespace tjob::cli
