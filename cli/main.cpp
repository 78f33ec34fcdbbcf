// tjob — run TrainJobs from a shell.
#include "cli/backend_options.hpp"
#include "cli/docs.hpp"
#include "cli/engine_options.hpp"
#include "cli/job_query.hpp"
#include "cli/job_request.hpp"
#include "cli/list_watch.hpp"
#include "cli/render.hpp"
#include "cli/run_job.hpp"
#include "cli/serve_cmd.hpp"
#include "cli/status_line.hpp"
#include "cli/sweep_cmd.hpp"

#include <tjob/client.hpp>
#include <tjob/sweep.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>
#include <boost/system/system_error.hpp>

#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <system_error>
#include <tuple>

namespace {

using namespace tjob;
using tjob::cli::common_options;
using tjob::cli::forwards;
using tjob::cli::job_options;
using tjob::cli::make_config;
using tjob::cli::output_format;
using tjob::cli::parse_format;
using tjob::cli::parse_statuses;
using tjob::cli::write_out;

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;

using tjob::cli::usage_error;

// The run interrupts of this process (static: the signal thread outlives
// cmd_run's frame).
cli::run_interrupts& interrupts_of(double grace_seconds) {
  static cli::run_interrupts interrupts(grace_seconds);
  return interrupts;
}

int cmd_run(const common_options& common, const job_options& jo) {
  // A reader that goes away (`| head`) must not kill the job's owner.
  std::signal(SIGPIPE, SIG_IGN);
  auto cfg = make_config(common);
  // (set up before any client thread, so that every thread has the signals blocked)
  auto& interrupts = interrupts_of(common.grace_seconds);
  cli::handle_signals([](int sig) { interrupts_of(0).on_signal(sig); });
  std::optional<trainer_client> remote;
  if (forwards(cfg)) remote.emplace(cfg);  // asked for the server's backend first
  auto req = cli::make_request(jo, remote ? remote->job_backend() : find_backend(cfg.backend)->capabilities);
  std::optional<trainer_client> local;
  trainer_client& client = remote ? *remote : local.emplace(cfg);
  // However this frame ends (a throw too), no cancel thread outlives the client.
  struct detach_at_end {
    ~detach_at_end() { interrupts_of(0).detach(); }
  } detach_guard;
  if (!jo.array.empty()) return cli::run_array(client, req, jo.array, jo.stream_step, interrupts);
  auto name = client.train(req);
  interrupts.attach(client, {name});
  // A job that waits (for admission, its dependencies) says so: it has not started.
  const auto submitted = client.get_job(name);
  const bool waits = submitted.status == job_status::created && !submitted.reason.empty();
  if (waits)
    std::fprintf(stderr, "tjob: job %s submitted; it waits (%s%s): tjob queue says for what\n", name.c_str(),
                 submitted.reason.c_str(),
                 submitted.queue_position ? (" #" + std::to_string(*submitted.queue_position)).c_str() : "");
  else
    std::fprintf(stderr, "tjob: job %s started\n", name.c_str());
  std::vector<std::string> steps;
  if (!jo.stream_step.empty())
    steps.push_back(jo.stream_step);
  else
    steps = cli::job_steps(client, name);
  {
    std::optional<cli::status_line> line;
    if (!jo.no_progress && cli::status_line_wanted()) line.emplace(client, name);
    std::optional<cli::restart_notices> restarts;
    if (req.retry.max_restarts > 0) restarts.emplace(client, name);
    cli::stream_steps(client, name, steps);
  }  // (the status line is cleared before the last words)
  auto job = client.wait_for_job_status(name, {job_status::complete, job_status::failed},
                                        std::chrono::hours(24 * 365));
  interrupts.detach();
  // Its own run time, from its first start (the wait in the queue said apart).
  auto took = [&] {
    if (!job.start_time || !job.end_time) return fmt::format("(it never started)");
    const double ran = std::chrono::duration<double>(*job.end_time - *job.start_time).count();
    const double waited = std::chrono::duration<double>(*job.start_time - job.creation_timestamp).count();
    return waits ? fmt::format("in {:.2f} s, after {:.2f} s waiting", ran, waited)
                 : fmt::format("in {:.2f} s", ran);
  };
  if (job.status == job_status::complete) {
    std::fprintf(stderr, "tjob: job %s Complete %s\n", name.c_str(), took().c_str());
    return exit_ok;
  }
  std::fprintf(stderr, "tjob: job %s Failed %s: %s\n", name.c_str(), took().c_str(), job.reason.c_str());
  // cancelled by our signal: the shell's convention, 128 + the signal (130 for Ctrl-C)
  if (int sig = interrupts.first_signal(); sig && job.reason == "cancelled") return 128 + sig;
  return cli::exit_code_of(job);
}

int cmd_train(const common_options& common, const job_options& jo) {
  auto cfg = make_config(common);
  std::optional<trainer_client> remote;
  if (forwards(cfg)) remote.emplace(cfg);  // the server owns the jobs
  auto req = cli::make_request(jo, remote ? remote->job_backend() : find_backend(cfg.backend)->capabilities);
  std::vector<train_request> reqs;
  if (jo.array.empty())
    reqs.push_back(std::move(req));
  else
    reqs = cli::array_requests(req, jo.array);
  if (remote) {  // the server owns them
    for (const auto& r : reqs) write_out(remote->train(r) + "\n");
    return exit_ok;
  }
  cfg.supervisor = cli::self_exe();  // this very binary supervises the jobs: one process for an array
  for (const auto& name : tjob::train_detached(reqs, cfg)) write_out(name + "\n");
  return exit_ok;
}

// Every command's options and subcommands, as the parser fills them in.
struct commands {
  common_options common;
  job_options run_opts, train_opts;
  cli::sweep_options sweep;  // optimize
  std::optional<int> trial;  // logs SWEEP --trial
  std::string format = "table", list_runtime, job_name, step = "node-0", statuses = "Complete", list_statuses;
  std::vector<std::string> job_names;      // get, wait, delete, cancel: one or more
  std::vector<std::string> runtime_names;  // runtimes NAME...
  // --grace of delete and cancel: when given, the cancel's; else the job's own
  CLI::Option *del_grace = nullptr, *cancel_grace = nullptr;
  bool cancel_checkpoint = false;  // cancel --checkpoint
  bool follow = false, no_progress = false, prune_all = false, delete_all = false, all_steps = false,
       watch = false, timestamps = false, repair = false;
  std::string since;
  long long tail = -1;
  int attempt = 0;
  double timeout = 600, unused_days = 7;
  CLI::App *run = nullptr, *train = nullptr, *list = nullptr, *get = nullptr, *logs = nullptr,
           *wait = nullptr, *del = nullptr, *cancel = nullptr, *events = nullptr, *runtimes = nullptr,
           *cache_list = nullptr, *cache_prune = nullptr, *version = nullptr, *completion = nullptr,
           *serve = nullptr, *queue = nullptr, *doctor = nullptr, *optimize = nullptr, *sweeps = nullptr;
  cli::serve_options serve_opts;
  std::string shell;
  CLI::Option *tail_opt = nullptr, *step_opt = nullptr, *attempt_opt = nullptr;
};

// The options every command takes: the store, the backend and its settings.
// run and train: submit a job.
void add_job_commands(CLI::App& app, commands& c) {
  c.run =
      app.add_subcommand("run",
                         "Submit a job, stream its log and wait for it; exit 0 when it is Complete, else "
                         "with the failed step's exit code (1 without one).\n"
                         "Ctrl-C cancels the job (SIGTERM, then SIGKILL after --grace) and records it as "
                         "Failed, reason cancelled; a second Ctrl-C kills it at once; tjob then exits 130.");
  cli::add_job_options(c.run, c.run_opts);
  c.run->add_option("--step", c.run_opts.stream_step,
                    "Stream only this step's log (default: every node's; with several, each line after "
                    "its node's name, [node-1])");
  c.run->add_option("--grace", c.common.grace_seconds,
                    "Seconds between SIGTERM and SIGKILL on cancel (default 10)");
  c.run->add_flag("--no-progress", c.run_opts.no_progress,
                  "No status line below the log on a terminal (the job's progress, its setup phase); "
                  "without a terminal there is none");
  c.run->add_option("--array", c.run_opts.array,
                    "Run a job array (as tjob train --array: NAME-0 ... with $TJOB_ARRAY_INDEX, %N at "
                    "most N at once), stream every member's log after its name ([NAME-3] ...), and exit "
                    "0 when all are Complete, else with the first failed member's code");
  c.train = app.add_subcommand(
      "train",
      "Submit a job and print its name. The job keeps running after this command exits: a "
      "small supervising process (`tjob __supervise`, in its own session) owns it until it "
      "ends. If that process is killed, the job is marked Failed (reason lost) and its "
      "processes are stopped by the next tjob that opens the store.");
  cli::add_job_options(c.train, c.train_opts);
  c.train->add_option(
      "--array", c.train_opts.array,
      "Submit a job array, as Slurm's --array: 0-99 (or 1,3,5, or 0-15:4) makes jobs NAME-0 ... "
      "NAME-99, each with $TJOB_ARRAY_INDEX; %N runs at most N of them at once (0-99%8). "
      "wait, cancel, delete and get take NAME for them all");
  c.train->add_option("--grace", c.common.grace_seconds,
                      "Seconds between SIGTERM and SIGKILL on cancel (default 10)");
  c.optimize = cli::add_optimize_command(app, c.sweep);
  c.sweeps = app.add_subcommand("sweeps", "List the sweeps: NAME STATUS ALGORITHM TRIALS BEST AGE");
  c.sweeps->add_option("-o,--output", c.format, "table, name, json or yaml");
}

// logs: one step's, every step's, or a sweep trial's.
void add_logs_command(CLI::App& app, commands& c) {
  c.logs = app.add_subcommand("logs", "Print a step's log; with -f, follow it until the step ends");
  c.logs->add_option("name", c.job_name, "Job name")->required();
  c.logs->add_flag("-f,--follow", c.follow, "Stream new output until the step ends");
  c.logs->add_flag("--no-progress", c.no_progress,
                   "With -f: no status line below the log on a terminal (the job's progress)");
  c.step_opt = c.logs->add_option("--step", c.step, "Step (default node-0)");
  c.logs->add_flag("--all-steps", c.all_steps,
                   "Every step's log, each line after its step (\"[node-1] ...\"); with -f, "
                   "as the lines come");
  c.tail_opt = c.logs->add_option("--tail", c.tail, "Only the last N lines");
  c.logs->add_flag("--timestamps", c.timestamps,
                   "Begin each line with the time it was written (RFC 3339, UTC, nanoseconds; local jobs: "
                   "to about 50 ms)");
  c.attempt_opt =
      c.logs->add_option("--attempt", c.attempt,
                         "Only what this attempt of a restarted job wrote (1 = the first; tjob get shows the "
                         "attempt); default: every attempt's output, one after another");
  c.logs->add_option("--trial", c.trial, "For a sweep: trial N's log (default: the best trial's)");
  c.logs->add_option("--since", c.since,
                     "Only lines written since a time (2026-12-03T19:00:00Z) or for a duration back "
                     "from now (30s, 10m, 1h30m)");
}

// list, get, logs, wait, delete, cancel, events: one job or all of them.
void add_query_commands(CLI::App& app, commands& c) {
  c.list = app.add_subcommand("list", "List jobs: NAME STATUS RUNTIME STEPS PROGRESS AGE (-o wide: more)");
  c.list->add_option("-o,--output", c.format, "table, wide, name, json or yaml");
  c.list->add_option("--runtime", c.list_runtime, "Only jobs of this runtime");
  c.list->add_flag("-w,--watch", c.watch,
                   "After the list, print each job again whenever it changes (appears, changes status or "
                   "a step, or is deleted), until interrupted; -o json prints one object per line");
  c.list->add_option("--status", c.list_statuses,
                     "Only jobs in these statuses: a comma-separated list of Created, Running, Complete, "
                     "Failed (any case)");
  c.get = app.add_subcommand(
      "get", "Show jobs with their steps (-o json or yaml: one object, or a list for several); no name: all");
  c.get->add_option("name", c.job_names, "Job names (default: every job, as list shows them)");
  c.get->add_option("-o,--output", c.format, "table, wide, name, json or yaml");
  add_logs_command(app, c);
  c.wait = app.add_subcommand("wait",
                              "Wait until the job reaches one of the statuses; exit 0 then. A job that fails "
                              "when Failed was not asked for exits 1 with its exit code and last log lines.");
  c.wait->add_option("name", c.job_names, "Job names: each in turn, within the one timeout")->required();
  c.wait->add_option("--status", c.statuses, "Comma-separated statuses (default Complete)");
  c.wait->add_option("--timeout", c.timeout, "Seconds (default 600)");
  c.del = app.add_subcommand("delete",
                             "Delete a job: cancel it if it runs (SIGTERM, SIGKILL after --grace), then "
                             "remove its record, events, logs and work dir");
  c.del->add_option("name", c.job_names, "Job names");
  c.del->add_flag("--all", c.delete_all, "Every job (with --status: every job in those statuses)");
  c.del->add_option("--status", c.list_statuses, "With --all: only jobs in these statuses (comma-separated)");
  c.del_grace =
      c.del->add_option("--grace", c.common.grace_seconds,
                        "Seconds between SIGTERM and SIGKILL (default: the job's own, as it was submitted)");
  c.cancel =
      app.add_subcommand("cancel", "Cancel a running job (SIGTERM, SIGKILL after --grace); it stays, Failed");
  c.cancel->add_option("name", c.job_names, "Job names")->required();
  c.cancel_grace = c.cancel->add_option(
      "--grace", c.common.grace_seconds,
      "Seconds between SIGTERM and SIGKILL (default: the job's own, as it was submitted)");
  c.cancel->add_flag(
      "--checkpoint", c.cancel_checkpoint,
      "Warn the job first: its --signal now, then up to that warning's lead time for it to save "
      "and end, then SIGTERM (local and slurm backends)");
  c.queue = app.add_subcommand("queue",
                               "List the jobs waiting for admission, next first: POSITION NAME PRIORITY "
                               "WAITING NEEDS WAITS-FOR (docs/scheduling.md)");
  c.queue->add_option("-o,--output", c.format, "table, wide, name, json or yaml");
  c.events = app.add_subcommand("events", "Show a job's event log");
  c.events->add_option("name", c.job_name, "Job name")->required();
  c.events->add_option("-o,--output", c.format, "table, wide, name, json or yaml");
}

// runtimes and cache.
void add_other_commands(CLI::App& app, commands& c) {
  c.version = app.add_subcommand("version", "Print tjob's version (as --version does)");
  c.completion = app.add_subcommand("completion",
                                    "Print a shell completion script: `source <(tjob completion bash)`, or "
                                    "save `tjob completion zsh` as _tjob in a directory on $fpath");
  c.completion->add_option("shell", c.shell, "bash or zsh")->required();
  c.serve = app.add_subcommand(
      "serve",
      "Serve the engine over HTTP (API v1, JSON; see /v1/openapi.json) in the foreground, with a log line "
      "per request on stderr. SIGTERM or SIGINT drains it: no new jobs, streams end, then it exits; jobs "
      "are not cancelled. The server owns the jobs it starts, as tjob run does.");
  cli::add_serve_options(c.serve, c.serve_opts);
  c.runtimes = app.add_subcommand("runtimes", "List the training runtimes, or show those named");
  c.runtimes->add_option("name", c.runtime_names, "Runtime names (Kubeflow's get_runtime)");
  c.runtimes->add_option("-o,--output", c.format, "table, wide, name, json or yaml");
  auto* cache =
      app.add_subcommand("cache",
                         "The venv cache of local Python jobs: one venv per interpreter, package list, "
                         "index URLs and system-site-packages flag, copied into each job");
  cache->require_subcommand(1);
  c.cache_list = cache->add_subcommand("list", "List the cached venvs: KEY PYTHON PACKAGES SIZE LAST-USED");
  c.cache_list->add_option("-o,--output", c.format, "table, wide, name, json or yaml");
  c.cache_prune =
      cache->add_subcommand("prune",
                            "Remove cached venvs no job has used for --unused-for days (default 7), broken "
                            "ones and abandoned builds; venvs in use are left alone");
  c.cache_prune->add_option("--unused-for", c.unused_days, "Days without a job using it (default 7)");
  c.cache_prune->add_flag("--all", c.prune_all, "Remove every cached venv that is not in use");
  c.doctor = app.add_subcommand("doctor",
                                "Check the store for damage (every page, every index against its table); "
                                "exit 1 when it is damaged");
  c.doctor->add_flag("--repair", c.repair, "Rebuild damaged indexes from the tables (nothing is lost)");
}

// An unknown command is named with the list of the known ones.
bool known_command(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return true;
  std::string known;
  bool found = false;
  for (const auto* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    found = found || sub->get_name() == argv[1];
    known += (known.empty() ? "" : ", ") + sub->get_name();
  }
  if (!found)
    std::fprintf(stderr, "tjob: error: unknown command '%s'; the commands are: %s\n", argv[1], known.c_str());
  return found;
}

// A cancel with the --grace given to cancel or delete.
cancel_options given_grace(const commands& c) {
  cancel_options o;
  o.grace = std::chrono::milliseconds(static_cast<long long>(c.common.grace_seconds * 1000));
  return o;
}

// The jobs of `list` and `delete --all`, in the statuses asked for.
std::vector<train_job> jobs_listed(trainer_client& client, const commands& c,
                                   const std::set<job_status>& listed) {
  auto all = client.list_jobs(c.list_runtime.empty() ? std::nullopt : std::optional(c.list_runtime));
  if (!listed.empty()) std::erase_if(all, [&](const train_job& j) { return !listed.count(j.status); });
  return all;
}

void show_logs(trainer_client& client, const commands& c) {
  const auto& name = c.job_name;
  log_options lo{.step = c.step, .follow = c.follow, .timestamps = c.timestamps};
  if (c.tail_opt->count() > 0) lo.tail = static_cast<std::size_t>(c.tail);
  if (!c.since.empty()) lo.since = cli::parse_since(c.since, clock::now());
  if (c.attempt_opt->count() > 0) lo.attempt = c.attempt;
  if (c.all_steps) {
    if (c.step_opt->count() > 0) throw usage_error("logs: give --step or --all-steps, not both");
    std::vector<std::string> steps;
    for (const auto& s : client.get_job(name).steps) steps.push_back(s.name);
    if (!steps.empty()) cli::stream_steps(client, name, steps, lo);
    return;
  }
  std::optional<cli::status_line> line;
  if (c.follow && !c.no_progress && cli::status_line_wanted()) line.emplace(client, name);
  auto reader = client.get_job_logs(name, lo);
  while (auto chunk = reader.read_some())
    if (!cli::write_log(*chunk)) break;
}

// Each job in turn (an array: each member), within the one timeout; a line
// per job, its name first when there are several.
void wait_jobs(trainer_client& client, const commands& c, const std::set<job_status>& wanted) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long long>(c.timeout * 1000));
  const bool several = c.job_names.size() > 1;
  for (const auto& given : c.job_names)
    cli::each_job(client, given, [&](const std::string& n) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      auto job = client.wait_for_job_status(n, wanted, std::max(left, std::chrono::milliseconds(1)));
      write_out((several || n != given ? n + " " : std::string()) + std::string(to_string(job.status)) +
                "\n");
    });
}

void delete_jobs(trainer_client& client, const commands& c, const std::set<job_status>& listed) {
  auto names = c.job_names;
  if (c.delete_all)
    for (const auto& j : jobs_listed(client, c, listed)) names.push_back(j.name);
  for (const auto& n : names)
    cli::each_job(client, n, [&](const std::string& m) {
      if (c.del_grace->count() > 0) client.cancel_job(m, given_grace(c));  // (a no-op once it has ended)
      client.delete_job(m);
      write_out("deleted " + m + "\n");
    });
}

void prune_cache(trainer_client& client, const commands& c) {
  if (c.unused_days < 0)
    throw usage_error(fmt::format("--unused-for {}: must be 0 or more days", c.unused_days));
  auto unused = std::chrono::seconds(c.prune_all ? 0 : static_cast<long long>(c.unused_days * 86400));
  auto removed = client.prune_venv_cache(unused);
  for (const auto& e : removed) write_out("removed " + e.key + "\n");
  write_out(fmt::format("{} cached venv(s) removed\n", removed.size()));
}

// The options the query commands check before anything is read.
void check_query_options(const commands& c) {
  if (*c.logs && c.tail_opt->count() > 0 && c.tail < 0)
    throw usage_error(fmt::format("--tail {}: must be 0 or more lines", c.tail));
  if (*c.wait && c.timeout <= 0)
    throw usage_error(fmt::format("--timeout {}: must be more than 0 seconds", c.timeout));
  if (*c.del) {
    if (c.delete_all == !c.job_names.empty())
      throw usage_error("delete: give job names or --all, not both or neither");
    if (!c.list_statuses.empty() && !c.delete_all) throw usage_error("delete: --status goes with --all");
  }
}

// The commands that read or change jobs through a client.
int run_query(commands& c) {
  auto fmt = parse_format(c.format);
  check_query_options(c);
  std::set<job_status> wanted, listed;
  if (*c.wait) wanted = parse_statuses(c.statuses);
  if (!c.list_statuses.empty()) listed = parse_statuses(c.list_statuses);
  if (*c.sweeps) return write_out(cli::render_sweeps(list_sweeps(make_config(c.common)), fmt)), exit_ok;
  cli::sweep_query sq{c.get->parsed(), c.logs->parsed(), c.wait->parsed(), c.cancel->parsed(), c.del->parsed(), &c.job_names, &c.job_name, c.trial, wanted,
                      std::chrono::milliseconds(static_cast<long long>(c.timeout * 1000)), fmt};
  if ((sq.get || sq.logs || sq.wait || sq.cancel || sq.del) && cli::take_sweeps(sq, make_config(c.common)))
    return sq.exit_code;
  trainer_client client(make_config(c.common));
  if (*c.list && c.watch) {
    cli::watch_list(client, c.list_runtime, listed, fmt);
  } else if (*c.list) {
    write_out(cli::render_jobs(jobs_listed(client, c, listed), fmt));
  } else if (*c.get) {
    std::vector<train_job> jobs;
    if (c.job_names.empty()) jobs = client.list_jobs();  // kubectl get: every one
    for (const auto& n : c.job_names)
      cli::each_job(client, n, [&](const std::string& m) { jobs.push_back(client.get_job(m)); });
    write_out(cli::render_job_list(jobs, fmt));
  } else if (*c.logs) {
    show_logs(client, c);
  } else if (*c.wait) {
    wait_jobs(client, c, wanted);
  } else if (*c.del) {
    delete_jobs(client, c, listed);
  } else if (*c.cancel) {
    for (const auto& n : c.job_names)
      cli::each_job(client, n, [&](const std::string& m) {
        auto how = c.cancel_grace->count() > 0 ? given_grace(c) : cancel_options{};
        how.checkpoint = c.cancel_checkpoint;
        client.cancel_job(m, how);
        write_out(fmt::format("{} {}\n", m, to_string(client.get_job(m).status)));
      });
  } else if (*c.events) {
    write_out(cli::render_events(client.get_job_events(c.job_name), fmt));
  } else if (*c.queue) {
    write_out(cli::render_queue(client.get_queue(), fmt));
  } else if (*c.runtimes) {
    write_out(cli::render_runtimes(cli::runtimes_named(client.list_runtimes(), c.runtime_names), fmt));
  } else if (*c.cache_list) {
    write_out(cli::render_venv_cache(client.list_venv_cache(), fmt));
  } else if (*c.cache_prune) {
    prune_cache(client, c);
  } else if (*c.doctor) {
    auto found = client.check_store(c.repair);
    write_out(cli::render_store_check(found));
    if (!found.problems.empty() && !found.repaired) return exit_failed;
  }
  return exit_ok;
}

int say_system_error(const char* what, bool limits) {
  std::fprintf(stderr, "tjob: error: %s%s\n", what,
               limits ? "; the OS would not give tjob another thread or process: raise the limits on "
                        "processes (ulimit -u) and memory (ulimit -v), or run fewer jobs at once"
                      : "");
  return exit_failed;
}

// What a command that failed prints, and its exit code.
int say_failure(std::exception_ptr failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "tjob: error: %s\n", e.what());
    return exit_usage;
  } catch (const tjob::error& e) {
    std::fprintf(stderr, "tjob: error: %s\n", e.what());
    return is_usage_error(e.code()) ? exit_usage : exit_failed;
  } catch (const std::system_error& e) {
    // A thread or process the OS would not give (issue 43: under ulimit -v
    // or -u this was a bare "Resource temporarily unavailable").
    const bool limits = e.code() == std::errc::resource_unavailable_try_again ||
                        e.code() == std::errc::not_enough_memory;  // (std::thread's are generic_category)
    return say_system_error(e.what(), limits);
  } catch (const boost::system::system_error& e) {  // Asio's threads
    const bool limits = e.code() == boost::system::errc::resource_unavailable_try_again ||
                        e.code() == boost::system::errc::not_enough_memory;
    return say_system_error(e.what(), limits);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "tjob: error: out of memory: raise the limit on tjob's memory (ulimit -v) or free some\n");
    return exit_failed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tjob: error: %s\n", e.what());
    return exit_failed;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "__supervise") return tjob::supervisor_main();
  if (argc >= 2 && std::string_view(argv[1]) == "__sweep") return tjob::sweep_supervisor_main();

  CLI::App app{
      "tjob — run Kubeflow-style TrainJobs on this machine.\n"
      "Jobs, events and logs live in $TJOB_HOME (default "
      "${XDG_STATE_HOME:-$HOME/.local/state}/tjob); every tjob on the machine sees them."};
  app.require_subcommand(0, 1);  // none: the usage, as docker and kubectl show it
  app.set_version_flag("--version", "tjob " TJOB_VERSION);
  commands c;
  add_common_options(app, c.common);
  app.fallthrough();
  add_job_commands(app, c);
  add_query_commands(app, c);
  add_other_commands(app, c);
  if (argc == 2 && std::string_view(argv[1]) == "__man") {  // the build makes tjob.1 with it
    write_out(cli::man_page(app, TJOB_VERSION));
    return exit_ok;
  }
  if (!known_command(app, argc, argv)) return exit_usage;
  const int ours = cli::tjob_args_end(app, argc, argv);
  const std::vector<std::string> script_args(argv + ours, argv + argc);
  try {
    app.parse(ours, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::fprintf(stderr, "tjob: error: %s (see tjob --help)\n", what.c_str());
    return exit_usage;
  }
  for (int i = 1; i < ours; ++i)
    if (std::string_view(argv[i]) == "--")
      c.run_opts.command_mode = c.train_opts.command_mode = c.sweep.job.command_mode = true;
  for (auto* o : {&c.run_opts, &c.train_opts, &c.sweep.job})
    o->command.insert(o->command.end(), script_args.begin(), script_args.end());

  if (app.get_subcommands().empty()) {
    write_out(app.help());
    return exit_ok;
  }
  if (*c.version) {
    write_out("tjob " TJOB_VERSION "\n");
    return exit_ok;
  }
  if (*c.completion) {
    if (c.shell != "bash" && c.shell != "zsh") {
      std::fprintf(stderr, "tjob: error: completion %s: use bash or zsh\n", c.shell.c_str());
      return exit_usage;
    }
    write_out(c.shell == "bash" ? cli::bash_completion(app) : cli::zsh_completion(app));
    return exit_ok;
  }
  try {
    if (*c.run) return cmd_run(c.common, c.run_opts);
    if (*c.train) return cmd_train(c.common, c.train_opts);
    if (*c.optimize) return cli::cmd_optimize(c.common, c.sweep, parse_format(c.sweep.format));
    if (*c.serve) {
      auto cfg = make_config(c.common);
      if (forwards(cfg))
        throw usage_error(
            "serve runs an engine here; it cannot be a client of another server: drop --server "
            "(and unset TJOB_SERVER)");
      return cli::run_serve(std::move(cfg), c.serve_opts);
    }
    return run_query(c);
  } catch (...) {
    return say_failure(std::current_exception());
  }
}
