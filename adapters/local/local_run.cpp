#include "adapters/local/local_impl.hpp"

#include "adapters/local/log_files.hpp"
#include "adapters/process/cgroup.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <csignal>

extern char** environ;

namespace tjob::local {

// A job runs its phases (local_impl.hpp): the setup phases once, in node-0
// (a venv serves every node of the job), then each node's own code at the
// same time. One node failing stops the others (JobSet's default policy).
// A job of one node that needs no GPUs and no cached venv (a command job, the
// common case) runs in this frame: a running job costs it, run_phases' frame
// and its pidfd. Everything else is in run_other, the ending in finish_job.
asio::awaitable<void> engine_state::run_job(std::shared_ptr<job_rec> j) {
  if (j->steps.size() != 1 || j->gpus_per_node > 0 || j->venv_inputs || j->torch_port) {
    co_await run_other(j);
    co_return;
  }
  std::vector<phase*> all;
  for (auto& ph : j->phases) all.push_back(&ph);
  all.push_back(&j->node_phases[0]);
  std::vector<step_outcome> outcomes(1);
  outcomes[0] = co_await run_phases(j, 0, std::move(all), false);
  co_await finish_job(j, std::move(outcomes));
}

asio::awaitable<void> engine_state::run_other(std::shared_ptr<job_rec> j) {
  if (j->torch_port) j->master_port = detail::free_port();
  if (j->gpus_per_node > 0 && !co_await lease_gpus(j)) {
    for (auto& s : j->steps)
      apply(*j, s, {event_kind::cancelled}, "cancelled while waiting for GPUs", "cancelled");
    co_return;
  }
  std::vector<step_outcome> outcomes;
  if (j->venv_inputs) {
    auto ended = co_await prepare_venv(j);
    if (ended) {
      outcomes.resize(j->steps.size());
      outcomes[0] = std::move(*ended);
      for (std::size_t i = 1; i < outcomes.size(); ++i)
        outcomes[i] = {{event_kind::start_failed},
                       "not started: node-0's setup did not succeed",
                       j->cancel_requested ? "cancelled" : "setup failed in node-0",
                       false};
      co_await finish_job(j, std::move(outcomes));
      co_return;
    }
  }
  if (j->steps.size() > 1) {
    outcomes = co_await run_nodes(j);
  } else {
    std::vector<phase*> all;
    for (auto& ph : j->phases) all.push_back(&ph);
    all.push_back(&j->node_phases[0]);
    step_outcome out = co_await run_phases(j, 0, std::move(all), j->setup_started);
    outcomes.push_back(std::move(out));
  }
  co_await finish_job(j, std::move(outcomes));
}

asio::awaitable<std::vector<step_outcome>> engine_state::run_nodes(std::shared_ptr<job_rec> j) {
  std::size_t nodes = j->steps.size();
  std::vector<phase*> setup;
  for (auto& ph : j->phases) setup.push_back(&ph);
  std::vector<step_outcome> outcomes(nodes);
  auto& first = outcomes[0];
  if (!setup.empty()) first = co_await run_phases(j, 0, setup, j->setup_started);
  bool setup_ok = setup.empty() ||
                  (first.ev.kind == event_kind::exited && first.ev.exit_code == 0 && !j->cancel_requested);
  if (!setup_ok) {
    for (std::size_t i = 1; i < nodes; ++i)
      outcomes[i] = {{event_kind::start_failed},
                     "not started: node-0's setup did not succeed",
                     j->cancel_requested ? "cancelled" : "setup failed in node-0",
                     false};
    co_return outcomes;
  }
  // Shared with the node coroutines, which may outlive this frame on shutdown.
  struct node_group {
    explicit node_group(const asio::any_io_executor& ex, std::size_t n) : outcomes(n), done(ex) {}
    std::vector<step_outcome> outcomes;
    std::size_t remaining = 0;
    detail::wake_signal done;
  };
  auto group = std::make_shared<node_group>(ex, nodes);
  group->remaining = nodes;
  for (std::size_t i = 0; i < nodes; ++i) {
    std::vector<phase*> code{&j->node_phases[i]};
    bool started = i == 0 && (!setup.empty() || j->setup_started);
    auto slot = j->steps[i].stop->slot();
    tasks.spawn(
        [](std::shared_ptr<engine_state> self, std::shared_ptr<job_rec> j, std::size_t i,
           std::vector<phase*> code, bool started, std::shared_ptr<node_group> g) -> asio::awaitable<void> {
          auto out = co_await self->run_phases(j, i, code, started);
          g->outcomes[i] = out;
          bool failed = !(out.ev.kind == event_kind::exited && out.ev.exit_code == 0);
          if (failed && !j->failed_node && !j->cancel_requested) {
            j->failed_node = j->steps[i].row.name;
            self->stop_other_nodes(j, i);
          }
        }(shared_from_this(), j, i, std::move(code), started, group),
        "node",
        [group](std::exception_ptr) {
          --group->remaining;
          group->done.notify();
        },
        slot);
  }
  while (group->remaining > 0) co_await group->done.wait_until(steady::time_point::max());
  co_return std::move(group->outcomes);
}

asio::awaitable<void> engine_state::finish_job(std::shared_ptr<job_rec> j,
                                               std::vector<step_outcome> outcomes) {
  std::size_t nodes = j->steps.size();
  // The venv and the GPUs go before the end is recorded: whoever waits for
  // the end finds them gone.
  if (j->gpus_per_node > 0) release_gpus(*j);
  if (!j->venv.empty()) {
    if (j->remove_venv) {
      co_await remove_tree(j->venv, j->row.name);
    } else if (std::filesystem::exists(j->venv)) {
      log_progress(*j, j->steps[0], "[tjob] venv kept at " + j->venv.string() + "\n");
    }
  }
  for (std::size_t i = 0; i < nodes; ++i) {
    auto& o = outcomes[i];
    if (j->cancel_requested && !o.started && o.ev.kind != event_kind::cancelled)
      o = {{event_kind::cancelled}, "cancelled before it started", "cancelled", false};
    if (j->steps[i].stopped && j->failed_node && o.ev.kind == event_kind::exited && o.ev.exit_code != 0)
      o.reason = "stopped: " + *j->failed_node + " failed (" + o.reason + ")";
    apply(*j, j->steps[i], o.ev, o.message, o.reason);
  }
}

asio::awaitable<bool> engine_state::lease_gpus(std::shared_ptr<job_rec> j) {
  std::size_t nodes = j->steps.size();
  std::size_t need = static_cast<std::size_t>(j->gpus_per_node) * nodes;
  detail::wake_signal w(ex);
  detail::wake_registration own(device_waiters, &w), mine(j->watchers, &w);
  int wd = -1;
  bool said = false;
  std::optional<std::vector<std::string>> got;
  for (;;) {
    if (j->cancel_requested) break;
    check_running();
    got = transact([&](detail::store& db) { return db.lease_devices(j->row.name, gpu_devices, need); });
    if (got) break;
    if (!said) {
      said = true;
      // Another process's release changes the store: its inotify wakes us too.
      wd = watch.add(home, &w);
      log_progress(*j, j->steps[0],
                   "[tjob] waiting for " + std::to_string(need) + " GPU(s); the engine's " +
                       std::to_string(gpu_devices.size()) + " are in use\n");
      queue_write([name = j->row.name, t = now_ms(), need](detail::store& db) {
        db.append_event(name, "", t, log_event::queued, "waiting for " + std::to_string(need) + " GPU(s)");
      });
    }
    co_await w.wait_until(steady::time_point::max());
  }
  watch.remove(wd, &w);
  if (!got) co_return false;
  std::string summary;
  for (std::size_t i = 0; i < nodes; ++i) {
    std::string ids;
    for (int k = 0; k < j->gpus_per_node; ++k)
      ids += (k ? "," : "") + (*got)[i * static_cast<std::size_t>(j->gpus_per_node) + k];
    j->node_devices.push_back(ids);
    summary += (i ? "; " : "") + j->steps[i].row.name + ": " + ids;
  }
  log_progress(*j, j->steps[0], "[tjob] GPUs (CUDA_VISIBLE_DEVICES) " + summary + "\n");
  queue_write([name = j->row.name, t = now_ms(), summary](detail::store& db) {
    db.append_event(name, "", t, log_event::devices_leased, "CUDA_VISIBLE_DEVICES " + summary);
  });
  co_return true;
}

void engine_state::release_gpus(job_rec& j) {
  try {
    transact([&](detail::store& db) { db.release_devices(j.row.name); });
  } catch (const std::exception& e) {
    log->error("job {}: cannot release its GPUs: {}", j.row.name, e.what());
  }
  device_waiters.notify_all();
}

void engine_state::stop_other_nodes(std::shared_ptr<job_rec> j, std::size_t failed) {
  bool any = false;
  for (std::size_t i = 0; i < j->steps.size(); ++i)
    if (i != failed && j->steps[i].row.status == job_status::running) {
      j->steps[i].stopped = true;
      j->steps[i].proc.signal_group(SIGTERM);
      any = true;
    }
  if (any) spawn_internal(escalate(j, /*terminated=*/true), "stopping the other nodes");
}

// Starts one phase of step `index`; its process writes its output straight
// into the step's log, so the log is complete whatever happens to the engine,
// and the engine holds no pipe. False, with `out` saying why, when it could not
// start. Not a coroutine: nothing it builds (the environment, argv) stays in
// the job's frame while the process runs.
bool engine_state::start_phase(job_rec& j, std::size_t index, const phase& ph, step_outcome& out) {
  step_rec& s = j.steps[index];
  process::spawn_spec spec;
  spec.executable = ph.executable;
  spec.argv = ph.argv;
  if (ph.torch_port)
    for (auto& a : spec.argv)
      if (auto at = a.find(master_port_placeholder); at != std::string::npos)
        a.replace(at, master_port_placeholder.size(), std::to_string(j.master_port));
  auto env = ph.env;
  env.emplace(token_variable, job_token(j.row));
  if (ph.final && index < j.node_devices.size())
    env.insert_or_assign("CUDA_VISIBLE_DEVICES", j.node_devices[index]);
  spec.env = process::merge_environment(environ, env);
  spec.cwd = ph.cwd;
  if (!ph.title.empty()) log_progress(j, s, "[tjob] " + ph.title + "\n");
  spec.stdout_path = s.log_path;
  error_code ec;
  std::string failed_step;
  auto child = process::child::spawn(ex, spec, ec, &failed_step);
  if (ec) {
    out.message =
        "cannot start " + quote(spec.executable) + " (" + ph.name +
        "): " + (failed_step == "open the log" ? "cannot open its log " + s.log_path + ": " : std::string()) +
        ec.message();
    if (!out.started) {
      out.ev = {event_kind::start_failed};
      out.reason = "start failed: " + ec.message();
    } else {
      out.ev = {event_kind::exited, 127};
      out.reason = "setup failed: " + ph.name + ": " + ec.message();
      log_progress(j, s, "[tjob] " + out.message + "\n");
    }
    return false;
  }
  s.proc = std::move(child);
  s.row.pid = s.proc.pid();
  s.row.pid_start = s.proc.start_time();
  if (ph.memory_limit) {
    // posix_spawn cannot set limits in the child; the program has only just
    // been exec'd, so what it starts later inherits the limit.
    rlimit lim{ph.memory_limit, ph.memory_limit};
    if (::prlimit(s.row.pid, RLIMIT_AS, &lim, nullptr) != 0)
      log_progress(j, s,
                   std::string("[tjob] could not set the memory limit: ") + std::strerror(errno) + "\n");
  }
  if (ph.cpu_limit > 0) {
    // As with the memory limit: moved right after exec, before it starts workers.
    std::string why_not;
    auto dir = process::limit_cpu(s.row.pid, job_token(j.row) + "-" + s.row.name, ph.cpu_limit, why_not);
    if (dir) {
      s.cgroup = *dir;
      log_progress(j, s,
                   "[tjob] CPU time limited to " + std::to_string(ph.cpu_limit) + " CPU(s) (" + *dir + ")\n");
    } else {
      log_progress(j, s, "[tjob] CPU time not limited: " + why_not + "\n");
    }
  }
  std::string what =
      "process " + std::to_string(s.row.pid) + " started (" + ph.name + "): " + join_argv(spec.argv);
  if (!out.started) {
    apply(j, s, {event_kind::started}, what, {});
    out.started = true;
  } else {
    queue_write([name = j.row.name, row = s.row, t = now_ms(), what](detail::store& db) {
      db.update_step(name, row);  // the pid that a crash recovery must kill
      db.append_event(name, row.name, t, log_event::setup, what);
    });
  }
  return true;
}

// Runs `phases` as step `index`, one after another; the outcome says how
// the last one that ran ended. The step is Running from its first phase.
asio::awaitable<step_outcome> engine_state::run_phases(std::shared_ptr<job_rec> j, std::size_t index,
                                                       std::vector<phase*> phases, bool started) {
  step_rec& s = j->steps[index];
  step_outcome out{{event_kind::cancelled}, "cancelled before it started", "cancelled", started};
  for (auto* ph : phases) {
    if (j->cancel_requested || s.stopped) break;
    auto t0 = steady::now();
    if (!start_phase(*j, index, *ph, out)) co_return out;
    // Started: what it was built from is not needed while it runs (a job of
    // one node lets go of its whole plan once its code runs).
    const std::string what = ph->name;
    const bool final = ph->final;
    ph->release_plan();
    if (final && j->steps.size() == 1) {
      std::vector<phase>().swap(j->phases);
      std::vector<phase>().swap(j->node_phases);
    }
    error_code ec;
    co_await s.proc.exit_signal().async_wait(asio::posix::descriptor_base::wait_read,
                                             asio::redirect_error(asio::use_awaitable, ec));
    if (ec) throw boost::system::system_error(ec, "waiting for process " + std::to_string(s.row.pid));
    process::exit_status st = s.proc.reap();
    // The step ends with its main process, as a container does: whatever it
    // left behind in its process group goes with it.
    s.proc.signal_group(SIGKILL);
    s.proc = process::child();  // its pidfd: the one descriptor a running job holds
    if (!s.cgroup.empty()) {
      process::remove_cgroup(s.cgroup);  // its processes are gone: the group was killed
      s.cgroup.clear();
    }
    double secs = std::chrono::duration<double>(steady::now() - t0).count();

    if (j->cancel_requested || db->has_event(j->row.name, log_event::cancel_requested)) {
      j->cancel_requested = true;
      s.row.exit_code = st.code;
      out.ev = {event_kind::cancelled};
      out.message = "cancelled; the process ended: " + describe(st);
      out.reason = "cancelled";
      co_return out;
    }
    out.ev = {event_kind::exited, st.code};
    if (!final) {
      if (st.code != 0) {
        log_progress(*j, s, fmt::format("[tjob] {} failed after {:.2f} s: {}\n", what, secs, describe(st)));
        out.message = what + " failed: " + describe(st) + " (its output is in the step's log)";
        out.reason = "setup failed: " + what + " " + describe(st);
        co_return out;
      }
      log_progress(*j, s, fmt::format("[tjob] {} done in {:.2f} s\n", what, secs));
      queue_write([name = j->row.name, step = s.row.name, t = now_ms(),
                   text = fmt::format("{} done in {:.2f} s", what, secs)](detail::store& db) {
        db.append_event(name, step, t, log_event::setup, text);
      });
      continue;
    }
    out.message = "process " + std::to_string(s.row.pid) + " ended: " + describe(st);
    out.reason = describe(st);
  }
  co_return out;
}

// Deleting a tree (a venv: thousands of files) is blocking work: it runs on
// the pool, and the coroutine comes back to the reactor after it.
asio::awaitable<void> engine_state::remove_tree(std::filesystem::path dir, std::string job) {
  std::error_code ec;
  co_await blocking([&] { std::filesystem::remove_all(dir, ec); });
  if (ec) log->warn("job {}: could not remove {}: {}", job, dir.string(), ec.message());
}

asio::awaitable<void> engine_state::blocking(std::function<void()> f) {
  auto self = shared_from_this();
  // bind_executor: the coroutine resumes on the pool. A plain post(pool,
  // use_awaitable) would run an empty handler there and resume it here.
  co_await asio::post(asio::bind_executor(pool, asio::use_awaitable));
  std::exception_ptr error;
  try {
    f();
  } catch (...) {
    error = std::current_exception();
  }
  co_await asio::post(self->ex, asio::use_awaitable);
  if (error) std::rethrow_exception(error);
}

asio::awaitable<std::optional<std::string>> engine_state::capture_output(process::spawn_spec spec,
                                                                         std::chrono::milliseconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) co_return std::nullopt;
  spec.stdout_fd = fds[1];
  error_code ec;
  auto child = process::child::spawn(ex, spec, ec);
  ::close(fds[1]);
  asio::posix::stream_descriptor out(ex, fds[0]);
  if (ec) co_return std::nullopt;
  // The timer's handler may run after this frame is gone (the engine shutting
  // down destroys it mid-read): it holds the process group by value, and the
  // frame's end takes it away.
  auto group = std::make_shared<pid_t>(child.pid());
  struct forget_group {
    std::shared_ptr<pid_t> g;
    ~forget_group() { *g = 0; }
  } forget{group};
  asio::steady_timer limit(ex, timeout);
  limit.async_wait([group](error_code e) {
    if (!e && *group > 0) ::killpg(*group, SIGKILL);  // too slow: it goes, and its output ends
  });
  std::string text;
  std::array<char, 4096> buf;
  for (;;) {
    std::size_t n =
        co_await out.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    if (text.size() < (1u << 16)) text.append(buf.data(), std::min(n, (1u << 16) - text.size()));
  }
  co_await child.exit_signal().async_wait(asio::posix::descriptor_base::wait_read,
                                          asio::redirect_error(asio::use_awaitable, ec));
  limit.cancel();
  auto st = child.reap();
  if (st.code != 0) co_return std::nullopt;
  co_return text;
}

void engine_state::log_progress(job_rec& j, step_rec& s, const std::string& line) {
  if (auto ec = detail::append_file(s.log_path, line))
    log->warn("job {}: cannot write {}: {}", j.row.name, s.log_path, ec.message());
  j.watchers.notify_all();
}

asio::awaitable<void> engine_state::escalate(std::shared_ptr<job_rec> j, bool terminated) {
  if (!terminated)
    for (auto& s : j->steps)
      if (s.row.status == job_status::running) s.proc.signal_group(SIGTERM);
  detail::wake_signal w(ex);
  detail::wake_registration reg(j->watchers, &w);
  auto deadline = steady::now() + cfg.grace_period;
  while (!stopping && !is_terminal(j->row.status) && steady::now() < deadline)
    co_await w.wait_until(deadline);
  if (stopping || is_terminal(j->row.status)) co_return;
  for (auto& s : j->steps) {
    if (s.row.status != job_status::running) continue;
    log->info("job {} step {}: still running {} ms after SIGTERM; sending SIGKILL", j->row.name, s.row.name,
              cfg.grace_period.count());
    s.proc.signal_group(SIGKILL);
  }
}

}  // namespace tjob::local
