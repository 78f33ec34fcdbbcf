#include "adapters/local/local_impl.hpp"

#include "adapters/local/log_files.hpp"
#include "adapters/process/cgroup.hpp"
#include "core/secrets.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <csignal>
#include <fstream>
#include <optional>
#include <tuple>

extern char** environ;

namespace tjob::local {

namespace {

job_shape shape_of(const job_rec& j) {
  job_shape s;
  for (const auto& st : j.steps) s.steps.push_back(st.row.name);
  s.setup = j.phases.size();
  s.lease = j.gpus_per_node > 0 || j.queued || j.waits_to_queue();
  s.queued = j.queued || j.waits_to_queue();
  s.venv_cache = j.venv_inputs != nullptr;
  s.retry = j.retry.get();
  return s;
}

bool is_abort(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& x) {
    return x.code() == asio::error::operation_aborted;
  } catch (...) {
  }
  return false;
}

}  // namespace

void job_rec::post(job_input in) {
  inbox.push_back(std::move(in));
  wake_inbox();
}

void job_rec::wake_inbox(error_code ec) {
  if (!inbox_waiter) return;
  auto* w = inbox_waiter.get();
  w->resume(std::move(inbox_waiter), ec);
}

namespace {

// run_job's wait for its next input: its completion handler is kept in the
// job until post() (or shutdown, with operation_aborted) resumes it. Not a
// coroutine: it returns the awaitable operation.
asio::awaitable<void> next_input(const std::shared_ptr<job_rec>& j) {
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(error_code)>(
      [j](auto handler) {
        struct held final : job_rec::waiter {
          explicit held(decltype(handler) h) : h(std::move(h)) {}
          void resume(std::unique_ptr<job_rec::waiter>, error_code ec) override {
            auto ex = asio::get_associated_executor(h);
            asio::post(ex, [h = std::move(h), ec]() mutable { std::move(h)(ec); });
          }
          decltype(handler) h;
        };
        j->inbox_waiter = std::make_unique<held>(std::move(handler));
      },
      asio::use_awaitable);
}

}  // namespace

// The job's coroutine: the shell around its state machine (job_fsm.hpp). It
// hands the machine one input at a time and carries out the actions it
// answers with (take_turn); what those bring back later (a process's exit, a
// lease, the grace timer, a cancel) arrives in the job's inbox, and the
// coroutine sleeps until it does. It decides nothing itself. Its frame is
// what a running job costs: the turn's inputs and actions live in
// take_turn's stack, not here.
asio::awaitable<void> engine_state::run_job(std::shared_ptr<job_rec> j) {
  if (j->torch_port) j->master_port = detail::free_port();
  job_fsm fsm(shape_of(*j));
  std::unique_ptr<asio::steady_timer> grace;  // made when first armed: most jobs never need it
  std::vector<step_outcome> outcomes;
  std::size_t blamed = 0;
  for (auto& s : j->steps) s.times = log_times.track(s.log_path);
  j->inbox.insert(j->inbox.begin(), job_input::begin());
  while (!take_turn(j, fsm, grace, outcomes, blamed)) {
    // Resumed by the next input; at shutdown with operation_aborted, which
    // ends the coroutine (shutting the engine down is not cancelling its
    // jobs: they stay as they are).
    asio::awaitable<void> next = next_input(j);  // named: g++ 12 and temporaries in a co_await
    co_await std::move(next);
    if (stopping) co_return;
  }
  if (grace) grace->cancel();
  co_await finish_job(j, std::move(outcomes), blamed);
}

// Feeds the machine every input in the inbox, and what the actions bring
// back at once (a spawn's answer) ahead of anything later. True when the job
// has finished, with `outcomes` filled.
bool engine_state::take_turn(const std::shared_ptr<job_rec>& j, job_fsm& fsm,
                             std::unique_ptr<asio::steady_timer>& grace, std::vector<step_outcome>& outcomes,
                             std::size_t& blamed) {
  std::vector<job_input> now;
  for (;;) {
    if (now.empty()) {
      if (j->op_failure) std::rethrow_exception(std::exchange(j->op_failure, nullptr));
      if (j->inbox.empty()) return false;
      now.swap(j->inbox);
    }
    job_input in = std::move(now.front());
    now.erase(now.begin());
    // What this input's actions bring back goes ahead of the inputs already
    // waiting: a spawn's `spawned` before a cancel that came in the same batch
    // (after it, the cancel found no process to stop, and the job ran on to
    // its natural end: seen as a cancel of a just-admitted job under load).
    std::vector<job_input> made;
    for (auto& a : fsm.on(in)) {
      if (a.k == job_action::kind::finish) {
        outcomes = std::move(a.outcomes);
        blamed = a.blamed;
        return true;
      }
      perform(j, a, made, grace);
    }
    now.insert(now.begin(), std::make_move_iterator(made.begin()), std::make_move_iterator(made.end()));
  }
}

// A job ready to start asks for its turn: its dependencies first, then the
// admission queue, then its GPUs.
void engine_state::request_lease(const std::shared_ptr<job_rec>& j) {
  if (j->waits_to_queue()) {
    wait_dependencies(j);
  } else if (j->queued) {
    // A Python job's log carries tjob's progress lines (venv, pip); a
    // command's is its program's bytes alone: the Queued event says it.
    auto note = std::exchange(j->queue_note, {});
    if (!j->venv.empty()) log_progress(*j, j->steps[0], "[tjob] waiting for " + note + "\n");
    join_queue(j);
  } else {
    start_op(j, lease_gpus(j), "waiting for GPUs");
  }
}

void engine_state::signal_steps(job_rec& j, const job_action& a) {
  for (auto i : a.steps) {
    auto& s = j.steps[i];
    if (a.forced)
      log->info("job {} step {}: still running {} ms after SIGTERM; sending SIGKILL", j.row.name, s.row.name,
                j.grace.count());
    s.proc.signal_group(a.forced ? SIGKILL : SIGTERM);
    if (const auto* tree = s.tree_cgroup()) process::signal_all(*tree, a.forced ? SIGKILL : SIGTERM);
  }
}

// A cancel or the deadline, in the job's log: what stops it, and how.
void engine_state::record_cancel(job_rec& j, bool deadline) {
  std::string why = deadline ? "the active deadline of " + std::to_string(j.deadline.count()) +
                                   " s passed (DeadlineExceeded)"
                             : "cancel requested";
  if (deadline && !j.venv.empty())  // (a command's log stays its own bytes)
    log_progress(j, j.steps[0], "[tjob] " + why + "; stopping the job\n");
  queue_write([name = j.row.name, t = now_ms(), grace = j.grace.count(),
               why = std::move(why)](detail::store& db) {
    db.append_event(name, "", t, log_event::cancel_requested,
                    why + ": SIGTERM to the process group, SIGKILL after " + std::to_string(grace) + " ms");
  });
}

void engine_state::perform(const std::shared_ptr<job_rec>& j, job_action& a, std::vector<job_input>& now,
                           std::unique_ptr<asio::steady_timer>& grace) {
  using A = job_action::kind;
  switch (a.k) {
    case A::request_lease:
      request_lease(j);
      break;
    case A::abandon_lease:
      leave_queue(*j);
      j->op_stop.emit(asio::cancellation_type::terminal);
      break;
    case A::abandon_venv_wait:
      j->op_stop.emit(asio::cancellation_type::terminal);
      break;
    case A::resolve_venv:
      start_op(j, resolve_venv(j), "the venv cache");
      break;
    case A::wait_venv:
      start_op(j, wait_venv(j), "waiting for the venv cache", true);
      break;
    case A::finalize_venv:
      start_op(j, finalize_venv(j), "the venv cache");
      break;
    case A::end_venv_build:
      end_venv_build(j, a.ok);
      break;
    case A::spawn:
      if (j->backoff_timer && a.step == 0) end_backoff(*j);  // a restarted job's next attempt
      now.push_back(spawn_phase(j, a.step, a.phase, a.first));
      if (a.first && now.back().k == job_input::kind::spawned) arm_deadline(j);
      break;
    case A::signal:
      signal_steps(*j, a);
      break;
    case A::arm_timer:
      if (!grace) grace = std::make_unique<asio::steady_timer>(ex);
      grace->expires_after(j->grace);
      grace->async_wait([w = std::weak_ptr<job_rec>(j)](error_code ec) {
        if (auto jr = w.lock(); jr && !ec) jr->post(job_input::timer_fired());
      });
      break;
    case A::note:
      log_progress(*j, j->steps[a.step], "[tjob] " + a.text + "\n");
      if (a.setup_event)
        queue_write([name = j->row.name, step = j->steps[a.step].row.name, t = now_ms(),
                     text = std::move(a.text)](detail::store& db) {
          db.append_event(name, step, t, log_event::setup, text);
        });
      break;
    case A::record_cancel:
      record_cancel(*j, a.deadline);
      break;
    case A::restart:
      if (grace) grace->cancel();
      restart_attempt(j, a);
      break;
    case A::respawn:
      respawn_later(j, a);
      break;
    case A::finish:
      break;  // run_job's
  }
}

void engine_state::restart_attempt(const std::shared_ptr<job_rec>& j, job_action& a) {
  for (std::size_t i = 0; i < j->steps.size() && i < a.outcomes.size(); ++i) {
    auto& s = j->steps[i];
    auto& o = a.outcomes[i];
    // A Python job's log says so; a command's stays its program's bytes (the
    // Restarting event says it).
    if (!j->venv.empty()) log_progress(*j, s, "[tjob] " + o.message + "\n");
    // Where attempt N begins: "N OFFSET" lines, for logs --attempt. The
    // processes of the failed attempt have ended, so the log is whole.
    std::error_code ec;
    auto size = std::filesystem::exists(s.log_path) ? std::filesystem::file_size(s.log_path, ec) : 0;
    auto path = attempts_path(j->row.name, s.row.name);
    std::filesystem::create_directories(path.parent_path(), ec);
    if (auto wec = detail::append_file(path, fmt::format("{} {}\n", a.attempt, ec ? 0 : size)))
      log->warn("job {}: cannot write {}: {}", j->row.name, path.string(), wec.message());
    s.row.pid = 0;
    s.row.pid_start = 0;
    apply(*j, s, o.ev, o.message, o.reason);
  }
  // The next attempt's torch nodes meet on a fresh port, and its worker
  // failures are its own.
  if (j->torch_port) j->master_port = detail::free_port();
  if (j->failure_watch) {
    j->failure_watch = false;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(failures_dir(*j), ec))
      std::filesystem::remove(e.path(), ec);
  }
  if (!j->backoff_timer) j->backoff_timer = std::make_unique<asio::steady_timer>(ex);
  j->backoff_timer->expires_after(a.delay);
  j->backoff_timer->async_wait([w = std::weak_ptr<job_rec>(j)](error_code ec) {
    if (auto jr = w.lock(); jr && !ec) jr->post(job_input::backoff_elapsed());
  });
  wait_backoff(j);
}

// A child operation of the job (a lease wait, a venv cache step): it posts
// its answer to the job's inbox, and op_stop abandons it. One that fails
// fails the job (run_job rethrows it); one abandoned answers `abandoned`
// when the machine waits for that.
void engine_state::start_op(const std::shared_ptr<job_rec>& j, asio::awaitable<void> op, const char* what,
                            bool answer_when_abandoned) {
  tasks.spawn(
      std::move(op), what,
      [self = shared_from_this(), j, what, answer_when_abandoned](std::exception_ptr e) {
        if (!e || self->stopping) return;
        if (is_abort(e)) {
          if (answer_when_abandoned) j->post(job_input::venv_waited());
          return;
        }
        j->op_failure = e;
        j->wake_inbox();
      },
      j->op_stop.slot());
}

// The job's end: the venv and the GPUs go before it is recorded, so that
// whoever waits for the end finds them gone.
asio::awaitable<void> engine_state::finish_job(std::shared_ptr<job_rec> j, std::vector<step_outcome> outcomes,
                                               std::size_t blamed) {
  if (j->deadline_timer) j->deadline_timer->cancel();
  if (j->warning && j->warning->timer) j->warning->timer->cancel();
  if (j->respawns)
    for (auto& t : j->respawns->by_step)
      if (t) t->cancel();
  if (j->backoff_timer) {
    j->backoff_timer->cancel();
    end_backoff(*j);
  }
  if (j->gpus_per_node > 0) release_gpus(*j);
  if (!j->venv.empty()) {
    if (j->remove_venv) {
      co_await remove_tree(j->venv, j->row.name);
    } else if (std::filesystem::exists(j->venv)) {
      log_progress(*j, j->steps[0], "[tjob] venv kept at " + j->venv.string() + "\n");
    }
  }
  // The logs are whole: their last lines get their times before anyone
  // sees the steps end.
  for (auto& s : j->steps) s.times.finish();
  // The blamed step first: the job's reason is the first failure recorded,
  // in memory and in the log's fold alike.
  auto end_step = [&](std::size_t i) {
    auto& o = outcomes[i];
    if (o.exit_code) j->steps[i].row.exit_code = o.exit_code;
    apply(*j, j->steps[i], o.ev, o.message, o.reason);
  };
  const std::size_t n = std::min(j->steps.size(), outcomes.size());
  if (blamed < n) end_step(blamed);
  for (std::size_t i = 0; i < n; ++i)
    if (i != blamed) end_step(i);
}

// A phase's environment: its own, and for the job's code the checkpoint
// contract, the failure watch of a torch gang, the progress helper and the
// node's GPUs (starting the line hook and the failure watch they need).
std::map<std::string, std::string> engine_state::phase_environment(const std::shared_ptr<job_rec>& j,
                                                                   const step_rec& s, const phase& ph,
                                                                   std::size_t index) {
  auto env = ph.env;
  env.emplace(token_variable, job_token(j->row));
  if (ph.final && j->checkpoints()) {
    // The checkpoint contract (docs/scheduling.md): a directory every attempt
    // sees, and which attempt this is (as Slurm's SLURM_RESTART_COUNT).
    env.insert_or_assign("TJOB_CHECKPOINT_DIR", j->dir + "/checkpoints");
    env.insert_or_assign("TJOB_RESTART_COUNT", std::to_string(std::max(s.row.attempt, 1) - 1));
  }
  if (ph.final && !j->venv.empty() && !j->line_hook) install_line_hook(*j);
  if (ph.final && ph.torch_port && j->steps.size() > 1) {
    start_failure_watch(j);
    env.insert_or_assign("TJOB_FAILURE_DIR", failures_dir(*j).string());
  }
  if (ph.final && j->reports_progress && progress.started()) {
    for (const auto& [k, v] :
         progress::job_environment(progress.url(j->row.name), progress_ca, j->dir + "/progress-token"))
      env.emplace(k, v);  // (the job's own settings win)
    // `import tjob` finds the helper (report) after whatever the job's own path has
    std::string base;
    if (auto it = env.find("PYTHONPATH"); it != env.end())
      base = it->second;
    else if (const char* p = inherited("PYTHONPATH"))
      base = p;
    env.insert_or_assign("PYTHONPATH", base.empty() ? progress_pythonpath : base + ":" + progress_pythonpath);
  }
  if (ph.final && index < j->node_devices.size())
    env.insert_or_assign("CUDA_VISIBLE_DEVICES", j->node_devices[index]);
  return env;
}

job_input engine_state::spawn_phase(const std::shared_ptr<job_rec>& j, std::size_t index,
                                    std::size_t phase_index, bool first) {
  step_rec& s = j->steps[index];
  phase& ph = phase_index == code_phase ? j->node_phases[index] : j->phases[phase_index];
  process::spawn_spec spec;
  spec.executable = ph.executable;
  spec.argv = ph.argv;
  if (ph.torch_port)
    for (auto& a : spec.argv)
      if (auto at = a.find(master_port_placeholder); at != std::string::npos)
        a.replace(at, master_port_placeholder.size(), std::to_string(j->master_port));
  auto env = phase_environment(j, s, ph, index);
  spec.env = process::environment_entries(env);
  spec.inherited_env = inherited_env();
  spec.cwd = ph.cwd;
  if (!ph.title.empty()) log_progress(*j, s, "[tjob] " + ph.title + "\n");
  spec.stdout_path = s.log_path;
  if (auto why = descriptors_short(); !why.empty())
    return job_input::spawn_failed(index, phase_index, ph.name, why,
                                   "cannot start " + quote(spec.executable) + ": " + why, true,
                                   live_children > 0);
  const std::string cgroup_name = job_token(j->row) + "-" + s.row.name;
  const int tree_fd = open_tree(*j, s, cgroup_name);
  spec.cgroup_procs_fd = tree_fd;
  auto child = process::child::spawn(ex, spec);
  if (tree_fd >= 0) ::close(tree_fd);
  if (!child) {
    const auto& f = child.error();
    std::string message =
        "cannot start " + quote(spec.executable) + " (" + ph.name + "): " +
        (f.code == process::process_errc::log_unopenable ? "cannot open its log " + s.log_path + ": "
                                                         : std::string()) +
        f.diagnostics;
    const bool transient =
        f.code == process::process_errc::no_processes || f.code == process::process_errc::no_descriptors;
    return job_input::spawn_failed(index, phase_index, ph.name, f.diagnostics + refused_limit(f.code),
                                   std::move(message), transient, live_children > 0);
  }
  s.proc = std::move(*child);
  s.code_runs = ph.final;
  ++live_children;
  s.row.pid = s.proc.pid();
  s.row.pid_start = s.proc.start_time();
  limit_step(*j, s, ph, cgroup_name);
  std::string what =
      "process " + std::to_string(s.row.pid) + " started (" + ph.name + "): " + join_argv(detail::masked_args(spec.argv));
  if (first) {
    apply(*j, s, {event_kind::started}, what, {});
  } else {
    queue_write([name = j->row.name, row = s.row, t = now_ms(), what](detail::store& db) {
      db.update_step(name, row);  // the pid that a crash recovery must kill
      db.append_event(name, row.name, t, log_event::setup, what);
    });
  }
  // Started: what it was built from is not needed while it runs (a job of
  // one node lets go of its whole plan once its code runs).
  std::string name = ph.name;
  const bool final = ph.final;
  if (!j->retry) ph.release_plan();  // (a job with restarts keeps it: the next attempt starts from it)
  if (final && j->steps.size() == 1 && !j->retry) {
    std::vector<phase>().swap(j->phases);
    std::vector<phase>().swap(j->node_phases);
  }
  await_exit(j, index, std::move(name));
  return job_input::spawned(index);
}

void engine_state::await_exit(const std::shared_ptr<job_rec>& j, std::size_t index, std::string what) {
  auto& s = j->steps[index];
  s.proc.exit_signal().async_wait(
      asio::posix::descriptor_base::wait_read,
      asio::bind_cancellation_slot(
          s.stop->slot(),
          [self = shared_from_this(), j, index, what = std::move(what), t0 = steady::now()](error_code ec) {
            auto& s = j->steps[index];
            // The wait is over: its cancellation handler (which names the
            // pidfd's reactor state, freed with the pidfd) must not outlive it.
            s.stop->slot().clear();
            if (ec == asio::error::operation_aborted) return;
            if (ec) {
              j->op_failure = std::make_exception_ptr(
                  boost::system::system_error(ec, "waiting for process " + std::to_string(s.row.pid)));
              j->wake_inbox();
              return;
            }
            auto reaped = s.proc.reap();
            if (!reaped) {  // the job fails with it (run_job rethrows it)
              j->op_failure = std::make_exception_ptr(
                  error(make_error_code(detail::errc_of(reaped.error().code)), reaped.error().message));
              j->wake_inbox();
              return;
            }
            if (!*reaped) {  // woken, but it has not exited: wait on
              self->await_exit(j, index, what);
              return;
            }
            self->step_exited(j, index, **reaped, what, steady::now() - t0);
          }));
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
  auto spawned = process::child::spawn(ex, spec);
  ::close(fds[1]);
  asio::posix::stream_descriptor out(ex, fds[0]);
  if (!spawned) co_return std::nullopt;
  auto child = std::move(*spawned);
  error_code ec;
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
  std::optional<process::exit_status> st;
  for (;;) {
    co_await child.exit_signal().async_wait(asio::posix::descriptor_base::wait_read,
                                            asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    auto reaped = child.reap();
    if (!reaped) break;
    if (*reaped) {
      st = **reaped;
      break;
    }  // a wake-up that was not its exit: wait on
  }
  limit.cancel();
  if (!st || st->code != 0) co_return std::nullopt;
  co_return text;
}

void engine_state::log_progress(job_rec& j, step_rec& s, const std::string& line) {
  if (auto ec = detail::append_file(s.log_path, line))
    log->warn("job {}: cannot write {}: {}", j.row.name, s.log_path, ec.message());
  j.watchers.notify_all();
}

}  // namespace tjob::local
