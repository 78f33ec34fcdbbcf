#include "cli/job_request.hpp"

#include <tjob/error.hpp>
#include <tjob/spec.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

namespace tjob::cli {

namespace {

std::map<std::string, std::string> parse_env(const std::vector<std::string>& entries) {
  std::map<std::string, std::string> env;
  for (const auto& e : entries) {
    auto eq = e.find('=');
    if (eq == std::string::npos || eq == 0)
      throw usage_error("--env '" + e + "': expected NAME=VALUE (for example --env LR=0.1)");
    env[e.substr(0, eq)] = e.substr(eq + 1);
  }
  return env;
}

// `--resources cpu=N,memory=4Gi,gpu=G` as the map set_resources_per_node takes.
std::map<std::string, std::string> parse_resources(const std::string& spec) {
  std::map<std::string, std::string> r;
  std::size_t start = 0;
  while (!spec.empty() && start <= spec.size()) {
    auto end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    auto item = spec.substr(start, end - start);
    auto eq = item.find('=');
    r[item.substr(0, eq)] = eq == std::string::npos ? std::string() : item.substr(eq + 1);
    start = end + 1;
  }
  return r;
}

// --label and --annotation, KEY=VALUE each.
void add_metadata(const job_options& o, train_request& req) {
  for (const auto& [flag, from, into] : {std::tuple{"--label", &o.labels, &req.labels},
                                         std::tuple{"--annotation", &o.annotations, &req.annotations}})
    for (const auto& e : *from) {
      auto eq = e.find('=');
      if (eq == std::string::npos || eq == 0)
        throw usage_error(std::string(flag) + " '" + e + "': expected KEY=VALUE (for example " + flag +
                          " team=vision)");
      (*into)[e.substr(0, eq)] = e.substr(eq + 1);
    }
}

// A Python job's own: its packages, its function, its interpreter and venv.
void add_python_options(CLI::App* cmd, job_options& o) {
  cmd->add_option("--package", o.packages,
                  "A package to pip-install into the job's venv (repeatable), after the runtime's")
      ->allow_extra_args(false);
  cmd->add_option("--index-url", o.index_urls,
                  "Package index (repeatable): the first is pip's --index-url, the rest "
                  "--extra-index-url; default $DEFAULT_PIP_INDEX_URLS, else PyPI")
      ->allow_extra_args(false);
  cmd->add_option("--func", o.func,
                  "Run this function of FILE.py (called with --args) "
                  "instead of running the file as a script");
  cmd->add_option("--args", o.args, "Keyword arguments of --func, as a JSON object");
  cmd->add_option("--python", o.python, "The interpreter for the venv; default: python3 on PATH");
  cmd->add_flag("--system-site-packages", o.system_site_packages,
                "Let the venv see the interpreter's packages (a system torch, numpy, ...)");
  cmd->add_flag("--keep-venv", o.keep_venv, "Keep the job's venv after it ends (for debugging)");
  cmd->add_flag("--refresh", o.refresh,
                "Rebuild the cached venv this job would copy, so unpinned packages get their newest "
                "release (the cache also does this once an entry with unpinned packages is a day old)");
}

// When the job may start and how long it runs: priority, deadline, retries, dependencies.
void add_scheduling_options(CLI::App* cmd, job_options& o) {
  cmd->add_option("--priority", o.priority,
                  "Admission order: higher starts first, first submitted first within a priority "
                  "(default 0; docs/scheduling.md)");
  cmd->add_option("--deadline", o.deadline,
                  "Stop the job this long after it starts running (3600, 90s, 10m, 2h): SIGTERM, SIGKILL "
                  "after --grace; it ends Failed, reason DeadlineExceeded");
  cmd->add_option(
         "--signal", o.warning,
         "Warn the job this long before its --deadline with this signal, as Slurm's --signal: SIG[@TIME] "
         "(USR1@90s; default 60 s), so that it saves a checkpoint; a Python job's tjob.stop_requested() "
         "turns true, a command must handle the signal itself")
      ->option_text("SIG[@TIME]");
  cmd->add_option("--begin", o.begin,
                  "Start the job no earlier than this time, as Slurm's --begin: now+N[s|m|h|d], HH:MM[:SS], "
                  "YYYY-MM-DD[THH:MM[:SS]] (local time) or RFC 3339; until then it waits, Created, reason "
                  "Waiting (then the queue, as any job)")
      ->option_text("TIME");
  cmd->add_option("--retries", o.retries,
                  "Restart the job up to this many times when its code fails (exits non-zero or is killed "
                  "by a signal), after a backoff (--retry-backoff); each attempt is in the job's events and "
                  "its log (logs --attempt N). Local backend; container: the daemon's restart policy "
                  "on-failure:N, one node (default 0)");
  cmd->add_option("--retry-on", o.retry_on,
                  "Retry only these exit codes (comma-separated; a signal's is 128 + its number); default: "
                  "every failure")
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_option("--no-retry-on", o.no_retry_on,
                  "Never retry these exit codes (comma-separated), whatever --retry-on says")
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_option("--retry-backoff", o.retry_backoff,
                  "The wait before each restart: INITIAL[,FACTOR[,MAX]], as 1s,2,60s (the default): 1 s, "
                  "then twice the last, at most 60 s");
  cmd->add_option("--after-ok", o.after_ok,
                  "Start only after this job has ended Complete (repeatable, or comma-separated); if it "
                  "fails, this job ends Failed, reason DependencyNeverSatisfied")
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_option("--after-any", o.after_any,
                  "Start only after this job has ended, however it ended (repeatable)")
      ->delimiter(',')
      ->allow_extra_args(false);
  cmd->add_option("--after-not-ok", o.after_not_ok,
                  "Start only after this job has ended Failed (repeatable); if it completes, this job ends "
                  "Failed, reason DependencyNeverSatisfied")
      ->delimiter(',')
      ->allow_extra_args(false);
}

}  // namespace

void add_job_options(CLI::App* cmd, job_options& o) {
  cmd->add_option("--name", o.name, "Job name (an RFC 1035 label); default: generated");
  cmd->add_option("--runtime", o.runtime, "Runtime name; default: torch-distributed");
  cmd->add_option("--env", o.env,
                  "Environment variable NAME=VALUE for the job (repeatable); "
                  "laid over tjob's own environment")
      ->allow_extra_args(false);
  cmd->add_option("--label", o.labels, "Kubernetes backend: a label KEY=VALUE of the TrainJob (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--annotation", o.annotations,
                  "Kubernetes backend: an annotation KEY=VALUE of the TrainJob (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--workdir", o.workdir, "Working directory of the job; default: the current directory");
  cmd->add_option(
      "--working-dir", o.code_dir,
      "A directory sent with the job: a snapshot (.gitignore and .tjobignore excludes, at most 256 "
      "MiB) becomes its working directory and is importable; local, container and Slurm backends");
  add_python_options(cmd, o);
  cmd->add_option("--image", o.image,
                  "Container backend: the image of the job's containers; default: the runtime's");
  cmd->add_option("--num-nodes", o.num_nodes,
                  "Nodes of a torch job, each a torchrun (steps node-0 ... node-N-1), default 1");
  cmd->add_option(
      "--resources", o.resources,
      "Per node, as cpu=N,memory=4Gi,gpu=G: N processes (torchrun --nproc_per_node), "
      "and N CPUs of CPU time where cgroups allow; "
      "M of memory for the node's processes together (a memory cgroup; where none can be made, an "
      "address-space limit per process, with a warning); G GPUs leased "
      "from $TJOB_GPU_DEVICES as CUDA_VISIBLE_DEVICES. The job waits in the queue until they fit "
      "in the budgets. For a command after `--`: cpu=N,memory=M are what it is admitted for "
      "(default cpu=1), not limits");
  add_scheduling_options(cmd, o);
  cmd->add_option("command", o.command,
                  "FILE.py [ARGS...] to run Python training code in a venv (everything after FILE.py "
                  "is the script's own, as with `python FILE.py ARGS...`), or `-- CMD [ARGS...]` "
                  "to run a program (nothing is run through a shell)")
      ->required();
}

namespace {

// The registered backends that `has` a capability: "the container and kubernetes backends".
template <class Has>
std::string backends_that(Has has) {
  std::vector<std::string> ids;
  for (const auto& b : registered_backends())
    if (has(b.capabilities)) ids.push_back(b.id);
  std::string out = "the ";
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i == 0 ? "" : i + 1 == ids.size() ? " and " : ", ") + ids[i];
  return out + (ids.size() == 1 ? " backend" : " backends");
}

// How to choose them: "--backend container or --backend kubernetes".
template <class Has>
std::string choices_of(Has has) {
  std::string out;
  for (const auto& b : registered_backends())
    if (has(b.capabilities)) out += (out.empty() ? "" : " or ") + std::string("--backend ") + b.id;
  return out;
}

}  // namespace

namespace {

// The options that not every backend takes, refused by name on one that does not.
void check_backend_options(const job_options& o, const backend_capabilities& backend) {
  if (!o.image.empty() && !backend.takes_image)
    throw usage_error("--image is for " + backends_that([](const auto& c) { return c.takes_image; }) + "; add " +
                      choices_of([](const auto& c) { return c.takes_image; }));
  if (!o.workdir.empty() && !backend.runs_here && !backend.workdir_in_image)
    throw usage_error("--workdir: a job on the " + backend.id +
                      " backend has no working directory; it runs where its image says; drop --workdir");
  // Where the job does not run here, --workdir names a directory inside its
  // image (a container runs in /workspace without one).
  if (!o.code_dir.empty() && !o.workdir.empty())
    throw usage_error("--working-dir " + o.code_dir +
                      " is sent with the job and becomes its working directory; "
                      "drop --workdir");
  if (!o.code_dir.empty() && !backend.takes_code_dir && !backend.forwards)
    throw usage_error("--working-dir is for " +
                      backends_that([](const auto& c) { return c.takes_code_dir; }) + "; add " +
                      choices_of([](const auto& c) { return c.takes_code_dir; }));
  if ((!o.labels.empty() || !o.annotations.empty()) && !backend.keeps_labels)
    throw usage_error("--label and --annotation are for " +
                      backends_that([](const auto& c) { return c.keeps_labels; }) + "; add " +
                      choices_of([](const auto& c) { return c.keeps_labels; }));
  if (!o.warning.empty() && !backend.stop_warning && !backend.forwards)
    throw usage_error("--signal is for " + backends_that([](const auto& c) { return c.stop_warning; }) +
                      "; add " + choices_of([](const auto& c) { return c.stop_warning; }));
  if (!o.begin.empty() && !backend.begin_time && !backend.forwards)
    throw usage_error("--begin is for " + backends_that([](const auto& c) { return c.begin_time; }) +
                      "; add " + choices_of([](const auto& c) { return c.begin_time; }));
}

// When the job may start and how long it runs: priority, dependencies, deadline, retries.
void add_scheduling(const job_options& o, train_request& req) {
  req.priority = o.priority;
  req.after_ok = o.after_ok;
  req.after_any = o.after_any;
  req.after_not_ok = o.after_not_ok;
  if (!o.deadline.empty()) req.active_deadline = parse_deadline(o.deadline);
  if (!o.begin.empty()) {
    req.begin = parse_begin_time(o.begin, clock::now());
    if (!req.begin) throw usage_error("--begin " + o.begin + ": not a time; give " + begin_time_forms);
  }
  if (!o.warning.empty()) {
    try {
      req.warning = parse_stop_warning(o.warning);
    } catch (const error& e) {
      throw usage_error(std::string("--") + e.what());
    }
  }
  if ((!o.retry_on.empty() || !o.no_retry_on.empty() || !o.retry_backoff.empty()) && o.retries <= 0)
    throw usage_error("--retry-on, --no-retry-on and --retry-backoff need --retries N (how many restarts)");
  req.retry.max_restarts = o.retries;
  req.retry.retry_on = o.retry_on;
  req.retry.never_retry = o.no_retry_on;
  if (!o.retry_backoff.empty()) parse_retry_backoff(o.retry_backoff, req.retry);
}

// A command after `--`.
command_trainer command_of(const job_options& o, const std::string& workdir, const std::string& code_dir) {
  const bool python_options = !o.packages.empty() || !o.index_urls.empty() || !o.func.empty() ||
                              !o.args.empty() || !o.python.empty() || o.system_site_packages || o.keep_venv ||
                              o.refresh;
  if (python_options)
    throw usage_error(
        "--package, --index-url, --func, --args, --python, --system-site-packages, "
        "--keep-venv and --refresh are for Python jobs (FILE.py), not commands after `--`");
  command_trainer t;
  t.command = o.command;
  t.env = parse_env(o.env);
  t.working_dir = workdir;
  t.code_dir = code_dir;
  t.image = o.image;
  for (const auto& [key, value] : parse_resources(o.resources)) {
    if (key != "cpu" && key != "memory")
      throw usage_error("--resources " + key + "=" + value +
                        ": a command after `--` takes cpu=N and memory=M (what it is admitted for); gpu= "
                        "is for Python jobs");
    // One rule for numbers and units: Kubeflow's resources_per_node.
    python_trainer probe;
    try {
      set_resources_per_node(probe, {{key, value}}, "--resources");
    } catch (const error& e) {
      throw usage_error(e.what());
    }
    if (key == "cpu")
      t.cpus = probe.procs_per_node;
    else
      t.memory = probe.memory_limit;
  }
  return t;
}

// A Python file (FILE.py) and its options.
python_trainer python_of(const job_options& o, const backend_capabilities& backend,
                         const std::string& workdir, const std::string& code_dir) {
  const auto& file = o.command.front();
  if (file.size() < 4 || file.compare(file.size() - 3, 3, ".py") != 0)
    throw usage_error("'" + file +
                      "': give a Python file (FILE.py) to train, or a command after "
                      "`--` (for example: tjob run -- " +
                      file + " ...)");
  python_trainer t;
  std::error_code ec;
  t.source_file = std::filesystem::absolute(file, ec).string();
  t.function = o.func;
  t.function_args = o.args;
  t.args.assign(o.command.begin() + 1, o.command.end());
  if (!o.func.empty() && !t.args.empty())
    throw usage_error("arguments after FILE.py are for scripts; pass a function's arguments with --args");
  t.packages_to_install = o.packages;
  t.pip_index_urls = o.index_urls;
  t.env = parse_env(o.env);
  if (!backend.runs_here && !o.workdir.empty())
    throw usage_error(
        "--workdir: a Python job in a container runs in /workspace (its work dir); "
        "drop --workdir");
  t.working_dir = backend.runs_here ? workdir : std::string();
  t.code_dir = code_dir;
  t.image = o.image;
  t.python = o.python;
  t.system_site_packages = o.system_site_packages;
  t.keep_venv = o.keep_venv;
  t.refresh_venv = o.refresh;
  try {
    set_resources_per_node(t, parse_resources(o.resources), "--resources");
  } catch (const error& e) {
    throw usage_error(e.what());
  }
  return t;
}

}  // namespace

train_request make_request(const job_options& o, const backend_capabilities& backend) {
  check_backend_options(o, backend);
  train_request req;
  req.name = o.name;
  req.runtime = o.runtime;
  std::error_code ec;
  const std::string code_dir =
      o.code_dir.empty() ? o.code_dir : std::filesystem::absolute(o.code_dir, ec).string();
  std::string workdir = !backend.runs_here  ? o.workdir
                        : !code_dir.empty() ? std::string()
                        : o.workdir.empty() ? std::filesystem::current_path(ec).string()
                                            : std::filesystem::absolute(o.workdir, ec).string();
  req.num_nodes = o.num_nodes;
  add_metadata(o, req);
  add_scheduling(o, req);
  if (o.command_mode)
    req.job_trainer = command_of(o, workdir, code_dir);
  else
    req.job_trainer = python_of(o, backend, workdir, code_dir);
  return req;
}

std::vector<train_request> array_requests(const train_request& req, const std::string& spec) {
  if (req.name.empty())
    throw usage_error(
        "--array needs --name: the members are NAME-0, NAME-1, ... and NAME addresses them all");
  try {
    return array_members(req, spec);
  } catch (const error& e) {
    throw usage_error("--" + std::string(e.what()));  // "--array SPEC: ...", as the flag was given
  }
}

std::chrono::seconds parse_deadline(const std::string& value) {
  auto total = parse_seconds(value);
  if (!total || total->count() < 1)
    throw usage_error("--deadline " + value +
                      ": give whole seconds (3600) or a duration of whole units (90s, 10m, 2h, 1h30m)");
  if (total->count() > 366LL * 86400)
    throw usage_error("--deadline " + value + ": give at most a year (8784h)");
  return *total;
}

void parse_retry_backoff(const std::string& value, retry_policy& p) {
  auto refuse = [&] {
    return usage_error("--retry-backoff " + value +
                       ": give INITIAL[,FACTOR[,MAX]] as 1s,2,60s: durations in ms, s, m or h (or plain "
                       "seconds), and a factor of 1 to 100");
  };
  auto duration = [&](const std::string& text) {
    static const std::map<std::string, double, std::less<>> unit_ms = {
        {"", 1000}, {"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}};
    std::size_t i = 0;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    auto unit = unit_ms.find(std::string_view(text).substr(i));
    if (i == 0 || i > 12 || unit == unit_ms.end()) throw refuse();
    double number = 0;
    try {
      number = std::stod(text.substr(0, i));
    } catch (const std::exception&) {
      throw refuse();
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(number * unit->second));
  };
  std::vector<std::string> parts;
  std::string part;
  for (char c : value + ",") {
    if (c != ',') {
      part += c;
      continue;
    }
    parts.push_back(std::exchange(part, {}));
  }
  if (parts.empty() || parts.size() > 3) throw refuse();
  p.backoff = duration(parts[0]);
  if (parts.size() > 1) {
    try {
      std::size_t used = 0;
      p.backoff_factor = std::stod(parts[1], &used);
      if (used != parts[1].size()) throw refuse();
    } catch (const std::invalid_argument&) {
      throw refuse();
    } catch (const std::out_of_range&) {
      throw refuse();
    }
  }
  if (parts.size() > 2) p.max_backoff = duration(parts[2]);
}

clock::time_point parse_since(const std::string& value, clock::time_point now) {
  if (auto t = parse_time(value)) return *t;
  auto refuse = [&] {
    return usage_error("--since " + value +
                       ": give a duration back from now (30s, 10m, 1h30m; units ns, us, ms, s, m, h) or a "
                       "time in RFC 3339 (2026-12-03T19:00:00Z)");
  };
  static const std::map<std::string, double, std::less<>> unit_ns = {
      {"ns", 1}, {"us", 1e3}, {"\u00b5s", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
  double total = 0;
  std::size_t i = 0;
  if (value.empty()) throw refuse();
  while (i < value.size()) {
    std::size_t start = i;
    while (i < value.size() && (std::isdigit(static_cast<unsigned char>(value[i])) || value[i] == '.')) ++i;
    std::size_t unit_at = i;
    while (i < value.size() && !std::isdigit(static_cast<unsigned char>(value[i])) && value[i] != '.') ++i;
    auto number = value.substr(start, unit_at - start);
    auto unit = unit_ns.find(std::string_view(value).substr(unit_at, i - unit_at));
    if (number.empty() || number == "." || std::count(number.begin(), number.end(), '.') > 1 ||
        unit == unit_ns.end())
      throw refuse();
    total += std::strtod(number.c_str(), nullptr) * unit->second;
  }
  // further back than the clock reaches: everything
  const double reach = std::chrono::duration<double, std::nano>(now.time_since_epoch()).count();
  if (total >= reach) return clock::time_point{};
  return now - std::chrono::duration_cast<clock::duration>(std::chrono::duration<double, std::nano>(total));
}

}  // namespace tjob::cli
