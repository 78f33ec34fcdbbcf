#include "engine/engine_impl.hpp"

#include "adapters/container/container_backend.hpp"
#include "adapters/kubernetes/kube_backend.hpp"

#include "adapters/process/cgroup.hpp"
#include "adapters/process/proc_info.hpp"
#include "adapters/process/python_setup.hpp"
#include "engine/log_files.hpp"
#include "engine/log_stream_impl.hpp"
#include "engine/messages.hpp"
#include "engine/names.hpp"
#include "engine/runtimes.hpp"
#include "engine/spec_json.hpp"
#include "engine/trainer_checks.hpp"
#include "engine/strings.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/post.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <netinet/in.h>
#include <pwd.h>
#include <sstream>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char** environ;

namespace tjob {

namespace asio = boost::asio;
namespace json = boost::json;
using boost::system::error_code;
using detail::event_kind;
using detail::job_event;
using detail::printable;
using detail::quote;
using detail::has_nul;
using detail::check_env;
using steady = std::chrono::steady_clock;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             clock::now().time_since_epoch())
      .count();
}

namespace {

clock::time_point from_ms(std::int64_t ms) {
  return clock::time_point(std::chrono::milliseconds(ms));
}

[[noreturn]] void fail(errc e, std::string message, std::string diagnostics = {}) {
  throw error(e, std::move(message), std::move(diagnostics));
}

std::string join_argv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out.push_back(' ');
    out += printable(a, 200);
  }
  return out;
}

// mkdir -p with mode 0700 for every directory it creates. It tries the
// directory itself first: for a new job that is one system call per level.
void make_private_dirs(const std::filesystem::path& p) {
  if (::mkdir(p.c_str(), 0700) == 0) return;
  if (errno == ENOENT && p.has_parent_path() && p.parent_path() != p) {
    make_private_dirs(p.parent_path());
    if (::mkdir(p.c_str(), 0700) == 0) return;
  }
  int e = errno;
  std::error_code ec;
  if (e == EEXIST && std::filesystem::is_directory(p, ec)) return;
  throw std::system_error(e, std::generic_category(), "cannot create " + p.string());
}

std::string spec_json(const command_trainer& t, const std::string& executable) {
  json::object spec;
  spec["trainer"] = detail::to_json(t);
  spec["executable"] = executable;
  return json::serialize(spec);
}

void raise_open_file_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

std::shared_ptr<spdlog::logger> quiet_logger() {
  auto l = std::make_shared<spdlog::logger>("tjob.engine",
                                            std::make_shared<spdlog::sinks::stderr_sink_mt>());
  l->set_level(spdlog::level::warn);
  return l;
}


// Kills what is left of a step whose owner died: the leader if it is still
// the process we recorded, else any members left in its process group.
void kill_orphan_group(std::int64_t pid, std::uint64_t start) {
  if (pid <= 0) return;
  auto p = static_cast<pid_t>(pid);
  if (process::is_same_process(p, start)) {
    ::killpg(p, SIGKILL);
  } else if (!process::start_time(p) && process::count_group_members(p) > 0) {
    ::killpg(p, SIGKILL);  // the leader is gone; nobody else can own that group id
  }
}

}  // namespace

std::filesystem::path default_home() {
  if (const char* h = std::getenv("TJOB_HOME"); h && *h) return h;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x)
    return std::filesystem::path(x) / "tjob";
  std::string home;
  if (const char* h = std::getenv("HOME"); h && *h) home = h;
  if (home.empty()) {
    // Never a guessable place in shared temp space: the user's own home.
    passwd pw{}, *found = nullptr;
    std::vector<char> buf(16384);
    if (::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found && pw.pw_dir &&
        *pw.pw_dir)
      home = pw.pw_dir;
  }
  if (home.empty())
    fail(errc::store_unavailable,
         "no place for the store: HOME is not set and this user has no home directory; set TJOB_HOME");
  return std::filesystem::path(home) / ".local" / "state" / "tjob";
}

train_job to_job(const detail::job_row& row) {
  train_job j;
  j.name = row.name;
  j.runtime = row.runtime;
  j.num_nodes = row.num_nodes;
  j.creation_timestamp = from_ms(row.created_ms);
  j.status = row.status;
  j.reason = row.reason;
  for (const auto& s : row.steps)
    j.steps.push_back(step{s.name, s.status, s.exit_code, s.reason, s.pid});
  return j;
}

// ---------------------------------------------------------------------------
// construction, store writes

engine::impl::impl(asio::any_io_executor executor, engine_config config)
    : ex(executor),
      cfg(std::move(config)),
      log(cfg.logger ? cfg.logger : quiet_logger()),
      watch(executor, log),
      idle(executor) {
  home = cfg.home.empty() ? default_home() : cfg.home;
  home = std::filesystem::absolute(home);
  jobs_dir = home / "jobs";
  // A store somebody else owns, or can write into, could be swapped under us
  // (a planted directory in shared temp space): refused, as ssh refuses keys,
  // before anything is made in it.
  struct stat hs {};
  if (::stat(home.c_str(), &hs) == 0) {
    if (hs.st_uid != ::geteuid())
      fail(errc::store_unavailable, "TJOB_HOME " + home.string() + " belongs to uid " +
                                        std::to_string(hs.st_uid) + ", not to this user (uid " +
                                        std::to_string(::geteuid()) +
                                        "); use a directory of your own (TJOB_HOME)");
    if (hs.st_mode & (S_IWGRP | S_IWOTH))
      fail(errc::store_unavailable, "TJOB_HOME " + home.string() +
                                        " can be written by other users (mode " +
                                        fmt::format("{:04o}", hs.st_mode & 07777) +
                                        "); chmod 700 it, or use another directory");
  }
  try {
    make_private_dirs(jobs_dir);
  } catch (const std::system_error& e) {
    fail(errc::store_unavailable,
         "cannot use " + home.string() + " as TJOB_HOME: " + e.code().message() +
             "; set TJOB_HOME to a writable directory",
         e.what());
  }
  if (::access(home.c_str(), W_OK | X_OK) != 0 || ::access(jobs_dir.c_str(), W_OK | X_OK) != 0)
    fail(errc::store_unavailable, "cannot use " + home.string() + " as TJOB_HOME: " +
                                      std::strerror(errno) +
                                      "; set TJOB_HOME to a writable directory");
  auto db_path = home / "tjob.db";
  // Create the database file ourselves so it is 0600 from its first byte
  // (SQLite gives its -wal and -shm files the same mode).
  int fd = ::open(db_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    fail(errc::store_unavailable, "cannot open the store " + db_path.string() + ": " +
                                      std::strerror(errno) +
                                      "; set TJOB_HOME to a writable directory");
  ::close(fd);
  db = std::make_unique<detail::store>(db_path, cfg.store_busy_timeout);
  checkpointer = std::make_unique<detail::wal_checkpointer>(db_path);
  db->on_wal_full = [this] { start_checkpoint(); };
  venv_store = detail::venv_cache::cache(home / "cache" / "venvs");
  gpu_devices = cfg.gpu_devices;
  if (gpu_devices.empty()) {
    if (const char* env = std::getenv("TJOB_GPU_DEVICES"); env && *env) {
      gpu_devices = detail::split_list(env);
    } else {
      for (int n = 0; n < 64; ++n)
        if (std::filesystem::exists("/dev/nvidia" + std::to_string(n))) gpu_devices.push_back(std::to_string(n));
    }
  }
  self_pid = ::getpid();
  self_start = process::start_time(self_pid).value_or(0);
  raise_open_file_limit();
  reconcile_all();
}

void engine::impl::queue_write(std::function<void(detail::store&)> w, std::function<void()> after,
                               std::function<void(std::exception_ptr)> failed) {
  pending.push_back({std::move(w), std::move(after), std::move(failed)});
  if (!flush_posted) {
    flush_posted = true;
    asio::post(ex, [self = shared_from_this()] {
      if (self->flush_posted) self->flush();
    });
  }
}

asio::awaitable<bool> engine::impl::insert_job(detail::job_row row, std::string created_message) {
  struct outcome {
    explicit outcome(const asio::any_io_executor& ex) : done(ex) {}
    bool inserted = false;
    std::exception_ptr error;
    detail::wake_signal done;
  };
  auto st = std::make_shared<outcome>(ex);
  queue_write(
      [st, row = std::move(row), message = std::move(created_message)](detail::store& db) {
        st->inserted = db.insert_job(row);
        if (st->inserted) db.append_event(row.name, "", row.created_ms, "Created", message);
      },
      [st] { st->done.notify(); },
      [st](std::exception_ptr x) {
        st->error = x;
        st->done.notify();
      });
  co_await st->done.wait_until(steady::time_point::max());
  if (st->error) std::rethrow_exception(st->error);
  co_return st->inserted;
}

void engine::impl::start_checkpoint() {
  if (checkpoint_running || stopping) return;
  checkpoint_running = true;
  if (!checkpoint_thread) checkpoint_thread = std::make_unique<asio::thread_pool>(1);
  asio::post(*checkpoint_thread, [w = weak_from_this(), c = checkpointer.get(), ex = ex] {
    auto why = c->run();
    asio::post(ex, [w, why = std::move(why)] {
      if (auto self = w.lock()) {
        self->checkpoint_running = false;
        if (!why.empty()) self->log->warn("{}", why);
      }
    });
  });
}

// Group commit: every write queued during one reactor turn goes into one
// transaction; the notifications that depend on it run after it commits.
void engine::impl::flush() {
  flush_posted = false;
  if (pending.empty()) return;
  auto writes = std::move(pending);
  pending.clear();
  std::vector<std::function<void()>> done;  // what runs once the commit is visible
  try {
    db->begin();
    for (auto& w : writes) {
      if (!w.apply) continue;
      try {
        w.apply(*db);
      } catch (const std::exception& e) {
        if (w.failed) {
          // Its caller hears of it; the write is not retried.
          done.push_back([f = std::move(w.failed), x = std::current_exception()] { f(x); });
          w.after = nullptr;
        } else {
          log->error("store write skipped: {}", e.what());
        }
      }
    }
    db->commit();
  } catch (const std::exception& e) {
    db->rollback();
    // Writes whose caller waits for the answer (a new job's record) fail now;
    // the rest are kept, in order, ahead of anything queued since, and retried.
    auto error = std::current_exception();
    std::vector<pending_write> keep;
    for (auto& w : writes) {
      if (w.failed)
        w.failed(error);
      else
        keep.push_back(std::move(w));
    }
    log->error("store commit failed, {} writes will be retried: {}", keep.size(), e.what());
    for (auto& w : pending) keep.push_back(std::move(w));
    pending = std::move(keep);
    if (!pending.empty()) {
      auto timer = std::make_shared<asio::steady_timer>(ex, std::chrono::milliseconds(200));
      timer->async_wait([self = shared_from_this(), timer](error_code) { self->flush(); });
    }
    return;
  }
  for (auto& w : writes)
    if (w.after) done.push_back(std::move(w.after));
  for (auto& d : done) d();
}

// ---------------------------------------------------------------------------
// job records

std::shared_ptr<job_rec> engine::impl::owned(std::string_view name) const {
  auto it = jobs.find(name);
  return it == jobs.end() ? nullptr : it->second;
}

train_job engine::impl::snapshot(const job_rec& j) const {
  detail::job_row row = j.row;
  row.steps.clear();
  for (const auto& s : j.steps) row.steps.push_back(s.row);
  return to_job(row);
}

bool engine::impl::owner_alive(const detail::job_row& row) const {
  return process::is_same_process(static_cast<pid_t>(row.owner_pid), row.owner_start);
}

std::optional<detail::job_row> engine::impl::load_fresh(const std::string& name) {
  auto row = db->load_job(name);
  if (row && !is_terminal(row->status) && !owned(name) && !owner_alive(*row)) {
    reconcile_row(*row);
    row = db->load_job(name);
  }
  return row;
}

void engine::impl::throw_not_found(const std::string& name) const {
  fail(errc::job_not_found, "No TrainJob with name " + quote(name) + " in " + home.string() +
                                "; `tjob list` shows the jobs there");
}

void engine::impl::check_running() const {
  if (stopping) fail(errc::shut_down, "the engine is shutting down");
}

bool engine::impl::apply(job_rec& j, step_rec& s, job_event ev, std::string message,
                         std::string reason) {
  auto to = detail::next(s.row.status, ev);
  if (!to) {
    log->debug("job {} step {}: {} rejected in {}", j.row.name, s.row.name,
               detail::event_reason(ev.kind), to_string(s.row.status));
    return false;
  }
  s.row.status = *to;
  if (ev.kind == event_kind::exited) s.row.exit_code = ev.exit_code;
  if (*to == job_status::failed) s.row.reason = std::move(reason);
  std::vector<job_status> statuses;
  for (const auto& st : j.steps) statuses.push_back(st.row.status);
  j.row.status = detail::aggregate(statuses);
  if (j.row.status == job_status::failed && j.row.reason.empty()) j.row.reason = s.row.reason;

  queue_write(
      [name = j.row.name, step = s.row, status = j.row.status, jreason = j.row.reason,
       t = now_ms(), what = std::string(detail::event_reason(ev.kind)),
       message = std::move(message)](detail::store& db) {
        db.append_event(name, step.name, t, what, message);
        db.update_step(name, step);
        db.update_job_status(name, status, jreason);
      },
      [self = shared_from_this(), weak = std::weak_ptr<job_rec>(owned(j.row.name))] {
        auto jr = weak.lock();
        if (!jr) return;
        // An ended job is the store's from now on: the table holds running jobs only,
        // so memory does not grow with the history. Holders of the record keep it.
        if (is_terminal(jr->row.status)) {
          auto it = self->jobs.find(jr->row.name);
          if (it != self->jobs.end() && it->second == jr) self->jobs.erase(it);
        }
        jr->watchers.notify_all();
      });
  return true;
}

void engine::impl::spawn_internal(asio::awaitable<void> op, const char* what) {
  ++internal_coroutines;
  asio::co_spawn(ex, std::move(op), [self = shared_from_this(), what](std::exception_ptr e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        if (!self->stopping) self->log->error("{}: {}", what, x.what());
      }
    }
    if (--self->internal_coroutines == 0) self->idle.notify();
  });
}

void engine::impl::start_job(std::shared_ptr<job_rec> j) {
  ++internal_coroutines;
  auto& slot_owner = j->stop;
  asio::co_spawn(ex, run_job(j),
                 asio::bind_cancellation_slot(
                     slot_owner.slot(), [self = shared_from_this(), j](std::exception_ptr e) {
                       if (e && !self->stopping) {
                         std::string why;
                         try {
                           std::rethrow_exception(e);
                         } catch (const std::exception& x) {
                           why = x.what();
                         } catch (...) {
                           why = "unknown error";
                         }
                         self->log->error("job {}: {}", j->row.name, why);
                         self->fail_unfinished(*j, why);
                       }
                       if (--self->internal_coroutines == 0) self->idle.notify();
                     }));
}

// The engine could not supervise a job any more: whatever still runs of it is
// stopped, and the job is recorded as Failed rather than left Running.
void engine::impl::fail_unfinished(job_rec& j, const std::string& why) {
  for (auto& s : j.steps) {
    if (is_terminal(s.row.status)) continue;
    s.proc.signal_group(SIGKILL);
    if (s.row.status == job_status::created)
      apply(j, s, {event_kind::start_failed}, "engine error: " + why, "engine error: " + why);
    else
      apply(j, s, {event_kind::lost}, "engine error: " + why, "lost: " + why);
  }
}

// A job runs its phases (engine_impl.hpp): the setup phases once, in node-0
// (a venv serves every node of the job), then each node's own code at the
// same time. One node failing stops the others (JobSet's default policy).
// A job of one node that needs no GPUs and no cached venv (a command job, the
// common case) runs in this frame: a running job costs it, run_phases' frame
// and its pidfd. Everything else is in run_other, the ending in finish_job.
asio::awaitable<void> engine::impl::run_job(std::shared_ptr<job_rec> j) {
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

asio::awaitable<void> engine::impl::run_other(std::shared_ptr<job_rec> j) {
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
        outcomes[i] = {{event_kind::start_failed}, "not started: node-0's setup did not succeed",
                       j->cancel_requested ? "cancelled" : "setup failed in node-0", false};
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

asio::awaitable<std::vector<step_outcome>> engine::impl::run_nodes(std::shared_ptr<job_rec> j) {
  std::size_t nodes = j->steps.size();
  std::vector<phase*> setup;
  for (auto& ph : j->phases) setup.push_back(&ph);
  std::vector<step_outcome> outcomes(nodes);
  auto& first = outcomes[0];
  if (!setup.empty()) first = co_await run_phases(j, 0, setup, j->setup_started);
  bool setup_ok = setup.empty() || (first.ev.kind == event_kind::exited && first.ev.exit_code == 0 &&
                                    !j->cancel_requested);
  if (!setup_ok) {
    for (std::size_t i = 1; i < nodes; ++i)
      outcomes[i] = {{event_kind::start_failed}, "not started: node-0's setup did not succeed",
                     j->cancel_requested ? "cancelled" : "setup failed in node-0", false};
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
    ++internal_coroutines;
    asio::co_spawn(
        ex,
        [](std::shared_ptr<engine::impl> self, std::shared_ptr<job_rec> j, std::size_t i,
           std::vector<phase*> code, bool started,
           std::shared_ptr<node_group> g) -> asio::awaitable<void> {
          auto out = co_await self->run_phases(j, i, code, started);
          g->outcomes[i] = out;
          bool failed = !(out.ev.kind == event_kind::exited && out.ev.exit_code == 0);
          if (failed && !j->failed_node && !j->cancel_requested) {
            j->failed_node = j->steps[i].row.name;
            self->stop_other_nodes(j, i);
          }
        }(shared_from_this(), j, i, std::move(code), started, group),
        asio::bind_cancellation_slot(j->steps[i].stop->slot(),
                                     [self = shared_from_this(), group](std::exception_ptr) {
                                       --group->remaining;
                                       group->done.notify();
                                       if (--self->internal_coroutines == 0) self->idle.notify();
                                     }));
  }
  while (group->remaining > 0) co_await group->done.wait_until(steady::time_point::max());
  co_return std::move(group->outcomes);
}

asio::awaitable<void> engine::impl::finish_job(std::shared_ptr<job_rec> j,
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
    if (j->steps[i].stopped && j->failed_node && o.ev.kind == event_kind::exited &&
        o.ev.exit_code != 0)
      o.reason = "stopped: " + *j->failed_node + " failed (" + o.reason + ")";
    apply(*j, j->steps[i], o.ev, o.message, o.reason);
  }
}

asio::awaitable<bool> engine::impl::lease_gpus(std::shared_ptr<job_rec> j) {
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
      log_progress(*j, j->steps[0], "[tjob] waiting for " + std::to_string(need) +
                                        " GPU(s); the engine's " + std::to_string(gpu_devices.size()) +
                                        " are in use\n");
      queue_write([name = j->row.name, t = now_ms(), need](detail::store& db) {
        db.append_event(name, "", t, "Queued", "waiting for " + std::to_string(need) + " GPU(s)");
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
    db.append_event(name, "", t, "DevicesLeased", "CUDA_VISIBLE_DEVICES " + summary);
  });
  co_return true;
}

void engine::impl::release_gpus(job_rec& j) {
  try {
    transact([&](detail::store& db) { db.release_devices(j.row.name); });
  } catch (const std::exception& e) {
    log->error("job {}: cannot release its GPUs: {}", j.row.name, e.what());
  }
  device_waiters.notify_all();
}

void engine::impl::stop_other_nodes(std::shared_ptr<job_rec> j, std::size_t failed) {
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
bool engine::impl::start_phase(job_rec& j, std::size_t index, const phase& ph, step_outcome& out) {
  step_rec& s = j.steps[index];
  process::spawn_spec spec;
  spec.executable = ph.executable;
  spec.argv = ph.argv;
  if (ph.torch_port)
    spec.argv.insert(spec.argv.begin() + 3, "--master_port=" + std::to_string(j.master_port));
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
    out.message = "cannot start " + quote(spec.executable) + " (" + ph.name + "): " +
                  (failed_step == "open the log" ? "cannot open its log " + s.log_path + ": " : std::string()) +
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
      log_progress(j, s, std::string("[tjob] could not set the memory limit: ") + std::strerror(errno) + "\n");
  }
  if (ph.cpu_limit > 0) {
    // As with the memory limit: moved right after exec, before it starts workers.
    std::string why_not;
    auto dir = process::limit_cpu(s.row.pid, job_token(j.row) + "-" + s.row.name, ph.cpu_limit, why_not);
    if (dir) {
      s.cgroup = *dir;
      log_progress(j, s, "[tjob] CPU time limited to " + std::to_string(ph.cpu_limit) + " CPU(s) (" + *dir + ")\n");
    } else {
      log_progress(j, s, "[tjob] CPU time not limited: " + why_not + "\n");
    }
  }
  std::string what = "process " + std::to_string(s.row.pid) + " started (" + ph.name + "): " +
                     join_argv(ph.argv);
  if (!out.started) {
    apply(j, s, {event_kind::started}, what, {});
    out.started = true;
  } else {
    queue_write([name = j.row.name, row = s.row, t = now_ms(), what](detail::store& db) {
      db.update_step(name, row);  // the pid that a crash recovery must kill
      db.append_event(name, row.name, t, "Setup", what);
    });
  }
  return true;
}

// Runs `phases` as step `index`, one after another; the outcome says how
// the last one that ran ended. The step is Running from its first phase.
asio::awaitable<step_outcome> engine::impl::run_phases(std::shared_ptr<job_rec> j, std::size_t index,
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

    if (j->cancel_requested || db->has_event(j->row.name, "CancelRequested")) {
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
        db.append_event(name, step, t, "Setup", text);
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
asio::awaitable<void> engine::impl::remove_tree(std::filesystem::path dir, std::string job) {
  std::error_code ec;
  co_await blocking([&] { std::filesystem::remove_all(dir, ec); });
  if (ec) log->warn("job {}: could not remove {}: {}", job, dir.string(), ec.message());
}

asio::awaitable<void> engine::impl::blocking(std::function<void()> f) {
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

asio::awaitable<std::optional<std::string>> engine::impl::capture_output(process::spawn_spec spec,
                                                                         std::chrono::milliseconds timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) co_return std::nullopt;
  spec.stdout_fd = fds[1];
  error_code ec;
  auto child = process::child::spawn(ex, spec, ec);
  ::close(fds[1]);
  asio::posix::stream_descriptor out(ex, fds[0]);
  if (ec) co_return std::nullopt;
  asio::steady_timer limit(ex, timeout);
  limit.async_wait([&](error_code e) {
    if (!e) child.signal_group(SIGKILL);  // too slow: it goes, and its output ends
  });
  std::string text;
  std::array<char, 4096> buf;
  for (;;) {
    std::size_t n = co_await out.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
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

// Which interpreter a job's python is. A native binary says it itself; a
// script (a pyenv shim) picks one when it runs, so it is asked, as the venv
// phase would run it (same environment and directory).
asio::awaitable<std::optional<std::pair<std::string, std::string>>> engine::impl::python_identity(job_rec& j) {
  const std::string given = j.venv_inputs->python;
  if (auto n = detail::venv_cache::native_identity(given)) co_return n;
  const phase& venv = j.phases.front();
  std::string memo = given + "\n" + detail::venv_cache::file_identity(given) + "\n" + venv.cwd;
  for (const char* v : {"PYENV_VERSION", "PATH"}) {
    auto it = venv.env.find(v);
    const char* e = it != venv.env.end() ? it->second.c_str() : std::getenv(v);
    memo += std::string("\n") + (e ? e : "");
  }
  if (auto it = python_identities.find(memo); it != python_identities.end()) {
    if (detail::venv_cache::file_identity(it->second.first) == it->second.second) co_return it->second;
  }
  process::spawn_spec spec;
  spec.executable = given;
  spec.argv = {given, "-I", "-S", "-c", "import os, sys; print(os.path.realpath(sys.executable))"};
  spec.env = process::merge_environment(environ, venv.env);
  spec.cwd = venv.cwd;
  auto out = co_await capture_output(std::move(spec), std::chrono::seconds(30));
  if (!out) co_return std::nullopt;
  while (!out->empty() && std::isspace(static_cast<unsigned char>(out->back()))) out->pop_back();
  auto n = detail::venv_cache::native_identity(*out);
  if (n) python_identities[memo] = *n;
  co_return n;
}

// Another builder of `key` is at work: in this engine, its end wakes us; in
// another process, the entry appearing does (inotify on the cache), and a
// re-check every 200 ms covers a builder that died and a copy in progress,
// neither of which changes a file.
asio::awaitable<void> engine::impl::wait_for_venv(const std::string& key, detail::wake_signal& w) {
  if (auto it = venv_building.find(key); it != venv_building.end()) {
    auto building = it->second;
    detail::wake_registration reg(*building, &w);
    co_await w.wait_until(steady::time_point::max());
    co_return;
  }
  int wd = watch.add(venv_store.root(), &w);
  co_await w.wait_until(steady::now() + std::chrono::milliseconds(200));
  watch.remove(wd, &w);
}

asio::awaitable<std::optional<step_outcome>> engine::impl::prepare_venv(std::shared_ptr<job_rec> j) {
  auto& s = j->steps[0];
  auto& in = *j->venv_inputs;
  auto failed = [&](const std::string& why) {
    log_progress(*j, s, "[tjob] " + why + "\n");
    step_outcome out;
    out.ev = j->setup_started ? job_event{event_kind::exited, 1} : job_event{event_kind::start_failed};
    out.message = why;
    out.reason = "setup failed: " + why;
    out.started = j->setup_started;
    return out;
  };
  auto id = co_await python_identity(*j);
  if (!id) {
    // Without knowing the interpreter a cached venv could be the wrong one:
    // this job builds its own, as without the cache.
    log_progress(*j, s, "[tjob] venv cache not used: cannot tell which interpreter " + in.python + " runs\n");
    j->venv_inputs.reset();
    co_return std::nullopt;
  }
  in.python = id->first;
  in.python_identity = id->second;
  const std::string key = detail::venv_cache::key_of(in);
  detail::wake_signal w(ex);
  detail::wake_registration on_cancel(j->watchers, &w);
  for (;;) {
    if (j->cancel_requested)
      co_return step_outcome{{event_kind::cancelled}, "cancelled before it started", "cancelled", j->setup_started};
    check_running();
    int fd = -1;
    try {
      // What is there, under a shared lock: nobody rebuilds or removes it meanwhile.
      fd = venv_store.try_lock(key, false);
      if (fd >= 0) {
        std::optional<std::string> problem;
        co_await blocking([&] { problem = venv_store.check(key); });
        if (!problem) {
          auto t0 = steady::now();
          co_await blocking([&] { venv_store.copy_to(key, j->venv); });
          detail::venv_cache::cache::unlock(fd);
          double secs = std::chrono::duration<double>(steady::now() - t0).count();
          auto text = fmt::format("venv from the cache ({}) in {:.3f} s", key, secs);
          log_progress(*j, s, "[tjob] " + text + "\n");
          queue_write([name = j->row.name, t = now_ms(), text](detail::store& db) {
            db.append_event(name, "node-0", t, "Setup", text);
          });
          j->phases.clear();
          co_return std::nullopt;
        }
        detail::venv_cache::cache::unlock(fd);
        fd = -1;
        if (*problem != "missing")
          log_progress(*j, s, "[tjob] the cached venv " + key + " is broken (" + *problem + "); rebuilding it\n");
      }
      // Build it, under the exclusive lock.
      fd = venv_store.try_lock(key, true);
    } catch (const std::exception& e) {
      detail::venv_cache::cache::unlock(fd);
      co_return failed(std::string("venv cache: ") + e.what());
    }
    if (fd < 0) {
      co_await wait_for_venv(key, w);
      continue;
    }
    std::optional<std::string> problem;
    auto build = venv_store.build_dir(key, j->row.name);
    try {
      co_await blocking([&] {
        problem = venv_store.check(key);
        if (problem) venv_store.remove(key);  // a broken entry, and builds nobody finished
      });
    } catch (const std::exception& e) {
      detail::venv_cache::cache::unlock(fd);
      co_return failed(std::string("venv cache: ") + e.what());
    }
    if (!problem) {  // somebody finished it just now
      detail::venv_cache::cache::unlock(fd);
      continue;
    }
    venv_building[key] = std::make_shared<detail::wake_list>();
    // The venv and pip phases build into the cache instead of the job.
    const std::string from = j->venv.string(), to = (build / "venv").string();
    auto retarget = [&](std::string& p) {
      if (p.rfind(from, 0) == 0) p = to + p.substr(from.size());
    };
    std::vector<phase*> setup;
    for (auto& ph : j->phases) {
      retarget(ph.executable);
      for (auto& a : ph.argv) retarget(a);
      setup.push_back(&ph);
    }
    log_progress(*j, s, "[tjob] building the cached venv " + key + "\n");
    std::optional<step_outcome> ended;
    try {
      co_await blocking([&] {
        if (::mkdir(build.c_str(), 0700) != 0)
          throw std::system_error(errno, std::generic_category(), "cannot create " + build.string());
      });
      auto out = co_await run_phases(j, 0, setup, false);
      j->setup_started = out.started;
      if (out.ev.kind == event_kind::exited && out.ev.exit_code == 0 && !j->cancel_requested) {
        auto t0 = steady::now();
        co_await blocking([&] {
          venv_store.finalize(key, build, in);
          venv_store.copy_to(key, j->venv);
        });
        double secs = std::chrono::duration<double>(steady::now() - t0).count();
        log_progress(*j, s, fmt::format("[tjob] venv cached as {}; copied in {:.3f} s\n", key, secs));
      } else {
        ended = std::move(out);
        co_await blocking([&] {
          std::error_code ec;
          std::filesystem::remove_all(build, ec);
        });
      }
    } catch (const std::exception& e) {
      ended = failed(std::string("venv cache: ") + e.what());
    }
    detail::venv_cache::cache::unlock(fd);
    if (auto it = venv_building.find(key); it != venv_building.end()) {
      it->second->notify_all();
      venv_building.erase(it);
    }
    if (ended) co_return ended;
    j->phases.clear();
    co_return std::nullopt;
  }
}

void engine::impl::log_progress(job_rec& j, step_rec& s, const std::string& line) {
  if (auto ec = detail::append_file(s.log_path, line))
    log->warn("job {}: cannot write {}: {}", j.row.name, s.log_path, ec.message());
  j.watchers.notify_all();
}

asio::awaitable<void> engine::impl::escalate(std::shared_ptr<job_rec> j, bool terminated) {
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
    log->info("job {} step {}: still running {} ms after SIGTERM; sending SIGKILL", j->row.name,
              s.row.name, cfg.grace_period.count());
    s.proc.signal_group(SIGKILL);
  }
}

asio::awaitable<void> engine::impl::cancel_owned(std::shared_ptr<job_rec> j) {
  if (is_terminal(j->row.status)) co_return;
  if (!j->cancel_requested) {
    j->cancel_requested = true;
    j->watchers.notify_all();  // a job waiting for GPUs gives up its place
    queue_write([name = j->row.name, t = now_ms(),
                 grace = cfg.grace_period.count()](detail::store& db) {
      db.append_event(name, "", t, "CancelRequested",
                      "cancel requested: SIGTERM to the process group, SIGKILL after " +
                          std::to_string(grace) + " ms");
    });
  }
  if (!j->escalating) {
    j->escalating = true;
    spawn_internal(escalate(j, false), "cancel");
  }
  detail::wake_signal w(ex);
  detail::wake_registration reg(j->watchers, &w);
  while (!is_terminal(j->row.status)) {
    check_running();
    co_await w.wait_until(steady::time_point::max());
  }
}

asio::awaitable<void> engine::impl::cancel_foreign(const std::string& name) {
  auto row = load_fresh(name);
  if (!row) throw_not_found(name);
  if (is_terminal(row->status)) co_return;
  transact([&](detail::store& db) {
    db.append_event(name, "", now_ms(), "CancelRequested",
                    "cancel requested by process " + std::to_string(self_pid) +
                        ": SIGTERM to the process group, SIGKILL after " +
                        std::to_string(cfg.grace_period.count()) + " ms");
  });
  auto signal_steps = [&](const detail::job_row& r, int sig) {
    for (const auto& s : r.steps)
      if (s.status == job_status::running &&
          process::is_same_process(static_cast<pid_t>(s.pid), s.pid_start))
        ::killpg(static_cast<pid_t>(s.pid), sig);
  };
  signal_steps(*row, SIGTERM);
  foreign_watch fw(*this, *row, false);
  auto wait_for_end = [&](steady::time_point deadline) -> asio::awaitable<bool> {
    for (;;) {
      check_running();
      auto r = load_fresh(name);
      if (!r || is_terminal(r->status)) co_return true;
      if (!co_await fw.wait_until(deadline)) co_return false;
    }
  };
  if (co_await wait_for_end(steady::now() + cfg.grace_period)) co_return;
  if (auto r = db->load_job(name)) signal_steps(*r, SIGKILL);
  if (!co_await wait_for_end(steady::now() + std::chrono::seconds(30)))
    fail(errc::timeout, "TrainJob " + quote(name) +
                            " did not end after SIGKILL; its owner (pid " +
                            std::to_string(row->owner_pid) + ") is not answering");
}

// ---------------------------------------------------------------------------
// reconciliation

void engine::impl::reconcile_all() { reconcile_rows(db->load_unfinished()); }

bool engine::impl::reconcile_row(const detail::job_row& row) { return reconcile_rows({row}) > 0; }

std::string engine::impl::job_token(const detail::job_row& row) const {
  return fmt::format("{:016x}-{}-{}", std::hash<std::string>{}(home.string()), row.name,
                     row.created_ms);
}

// A job recorded as unfinished whose owner is gone is Failed, reason `lost`:
// nobody saw how it ended. What is left of its processes is killed: the
// process groups on record, and any process carrying the job's token in its
// environment (that covers a child started just before its pid was committed).
std::size_t engine::impl::reconcile_rows(const std::vector<detail::job_row>& rows) {
  std::vector<const detail::job_row*> orphaned;
  std::set<std::string> tokens;
  for (const auto& row : rows) {
    if (owner_alive(row)) continue;
    orphaned.push_back(&row);
    tokens.insert(std::string(token_variable) + "=" + job_token(row));
    for (const auto& s : row.steps)
      if (!is_terminal(s.status)) kill_orphan_group(s.pid, s.pid_start);
  }
  if (orphaned.empty()) return 0;
  for (const auto& [pid, entry] : process::find_by_environment(tokens)) {
    log->info("killing process {} left behind by a lost job ({})", pid, entry);
    ::kill(pid, SIGKILL);
  }
  for (const auto* row : orphaned)
    for (const auto& s : row->steps)
      process::remove_cgroup(process::cgroup_dir_for(job_token(*row) + "-" + s.name));
  std::size_t marked = 0;
  for (const auto* row : orphaned) {
    bool done = transact([&](detail::store& db) {
      auto cur = db.load_job(row->name);
      if (!cur || is_terminal(cur->status) || cur->owner_pid != row->owner_pid ||
          cur->owner_start != row->owner_start)
        return false;
      std::vector<job_status> statuses;
      for (auto& s : cur->steps) {
        if (auto to = detail::next(s.status, {event_kind::lost})) {
          std::string was(to_string(s.status));
          s.status = *to;
          s.reason = "lost";
          db.update_step(cur->name, s);
          db.append_event(cur->name, s.name, now_ms(), "Lost",
                          "the process that supervised the job (pid " +
                              std::to_string(cur->owner_pid) + ") ended while the step was " +
                              was + "; nobody saw how it ended");
        }
        statuses.push_back(s.status);
      }
      db.update_job_status(cur->name, detail::aggregate(statuses), "lost");
      return true;
    });
    if (done) ++marked;
  }
  return marked;
}

// ---------------------------------------------------------------------------
// foreign jobs

foreign_watch::foreign_watch(engine::impl& e, const detail::job_row& row, bool logs)
    : e_(e), name_(row.name), logs_(logs), wake_(e.ex) {
  store_wd_ = e_.watch.add(e_.home, &wake_);
  if (logs) log_wd_ = e_.watch.add(e_.jobs_dir / row.name / "logs", &wake_);
  if (row.owner_pid > 0) {
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(row.owner_pid), 0));
    if (fd >= 0) {
      owner_.emplace(e_.ex, fd);
      // The pid may have been reused between the check and the open.
      if (!e_.owner_alive(row)) owner_.reset();
    }
  }
}

foreign_watch::~foreign_watch() {
  e_.watch.remove(store_wd_, &wake_);
  e_.watch.remove(log_wd_, &wake_);
}

asio::awaitable<bool> foreign_watch::wait_until(steady::time_point deadline) {
  // The log directory appears just after the job's row; watch it once it is there.
  if (logs_ && log_wd_ < 0) log_wd_ = e_.watch.add(e_.jobs_dir / name_ / "logs", &wake_);
  if (!owner_ || !owner_->is_open()) co_return co_await wake_.wait_until(deadline);
  using namespace asio::experimental::awaitable_operators;
  auto r = co_await (wake_.wait_until(deadline) ||
                     owner_->async_wait(asio::posix::descriptor_base::wait_read,
                                        asio::use_awaitable));
  if (r.index() == 1) {
    owner_.reset();
    if (auto row = e_.db->load_job(name_)) e_.reconcile_row(*row);
    co_return true;
  }
  co_return std::get<0>(r);
}

// ---------------------------------------------------------------------------
// messages

std::string engine::impl::failure_message(const train_job& job) {
  std::map<std::string, std::string> last_logs;
  for (const auto& s : job.steps) {
    if (s.status != job_status::failed) continue;
    auto path = jobs_dir / job.name / "logs" / (s.name + ".log");
    detail::log_cursor cur(path, detail::tail_offset(path, cfg.failure_log_lines));
    auto& text = last_logs[s.name];
    while (cur.read_more(text) > 0 && text.size() < (1u << 20)) {
    }
  }
  return detail::failure_message(job, last_logs);
}

// ---------------------------------------------------------------------------
// engine

engine::engine(asio::any_io_executor ex, engine_config config)
    : impl_(std::make_shared<impl>(ex, std::move(config))) {
  auto& e = *impl_;
  if (e.cfg.backend == backend_kind::local) return;
  detail::remote_context ctx;
  ctx.ex = e.ex;
  ctx.home = e.home;
  ctx.log = e.log;
  std::weak_ptr<impl> weak = impl_;
  ctx.runtimes = [weak] { return weak.lock()->runtimes(); };
  ctx.grace_period = e.cfg.grace_period;
  ctx.failure_log_lines = e.cfg.failure_log_lines;
  if (e.cfg.backend == backend_kind::container)
    e.remote = std::make_shared<container::backend>(std::move(ctx), e.cfg.container);
  else
    e.remote = std::make_shared<kube::backend>(std::move(ctx), e.cfg.kubernetes);
}

engine::~engine() = default;

asio::any_io_executor engine::get_executor() const { return impl_->ex; }
const std::filesystem::path& engine::home() const { return impl_->home; }

namespace {

std::string check_working_dir(const std::string& who, const std::string& dir) {
  if (dir.empty()) return dir;
  std::error_code fec;
  auto wd = std::filesystem::absolute(dir, fec);
  if (fec || !std::filesystem::is_directory(wd, fec))
    fail(errc::invalid_argument, who + ": working_dir " + quote(dir) +
                                     " is not a directory; create it, or leave working_dir "
                                     "empty to use the job's own work dir");
  return wd.string();
}

std::string path_of(const std::map<std::string, std::string>& env) {
  if (auto it = env.find("PATH"); it != env.end()) return it->second;
  if (const char* p = std::getenv("PATH")) return p;
  return {};
}

std::string find_program(const std::string& who, const std::string& prog,
                         const std::map<std::string, std::string>& env, const std::string& cwd,
                         const char* hint) {
  auto path = path_of(env);
  auto exe = process::find_executable(prog, path, cwd.empty() ? "." : cwd);
  if (!exe) {
    if (prog.find('/') != std::string::npos)
      fail(errc::executable_not_found,
           who + ": " + quote(prog) +
               " is not an executable file; check the path (relative paths start from the "
               "working dir) and its execute permission");
    fail(errc::executable_not_found, who + ": cannot find executable " + quote(prog) +
                                         " on PATH (" + printable(path, 300) + "); " + hint);
  }
  std::error_code ec;
  return std::filesystem::absolute(*exe, ec).string();
}

}  // namespace

// The phases of a command job: the command itself.
void engine::impl::plan_command(job_rec& j, const std::string& who, command_trainer& ct) {
  detail::check_command(who, ct);
  ct.working_dir = check_working_dir(who, ct.working_dir);
  phase ph;
  ph.name = "command";
  ph.final = true;
  ph.executable = find_program(who, ct.command.front(), ct.env, ct.working_dir,
                               "give its full path or fix PATH");
  ph.argv = ct.command;
  ph.env = ct.env;
  ph.cwd = ct.working_dir;
  j.spec = spec_json(ct, ph.executable);
  j.node_phases.push_back(std::move(ph));
}

// The phases of a Python job, as Kubeflow's local backend runs them, done
// right: venv, pip (only when there is something to install), the code.
void engine::impl::plan_python(job_rec& j, const std::string& who, python_trainer& pt,
                               const runtime& rt, int num_nodes) {
  std::string source = detail::check_python_code(who, pt);
  pt.working_dir = check_working_dir(who, pt.working_dir);
  std::vector<std::string> packages;
  try {
    packages = process::merge_packages(rt.trainer.packages, pt.packages_to_install);
  } catch (const error& e) {
    fail(errc::invalid_argument, who + ": " + e.what());
  }
  auto python = find_program(who, pt.python.empty() ? "python3" : pt.python, pt.env, {},
                             "install python3 or pass the interpreter (--python)");

  j.venv = std::filesystem::path(j.dir) / "venv";
  j.remove_venv = cfg.cleanup_venv && !pt.keep_venv;
  auto work = std::filesystem::path(j.dir) / "work";
  auto cwd = pt.working_dir.empty() ? work.string() : pt.working_dir;
  auto venv_python = (j.venv / "bin" / "python").string();
  std::map<std::string, std::string> env = pt.env;
  env.emplace("PIP_DISABLE_PIP_VERSION_CHECK", "1");
  env.emplace("PYTHONUNBUFFERED", "1");  // progress reaches the log as it is printed

  phase venv;
  venv.name = "venv";
  venv.title = "creating a virtual environment with " + python +
               (pt.system_site_packages ? " (with system site packages)" : "");
  venv.executable = python;
  venv.argv = {python, "-m", "venv", "--without-pip"};
  if (pt.system_site_packages) venv.argv.push_back("--system-site-packages");
  venv.argv.push_back(j.venv.string());
  venv.env = env;
  venv.cwd = cwd;
  j.phases.push_back(venv);

  if (!packages.empty()) {
    phase pip;
    pip.name = "pip install";
    pip.title = "installing " + std::to_string(packages.size()) + " package(s): " + join_argv(packages);
    pip.executable = venv_python;
    pip.argv = {venv_python, "-c", std::string(process::pip_bootstrap_code())};
    for (auto& a : process::pip_install_args(packages, process::index_urls(pt.pip_index_urls)))
      pip.argv.push_back(std::move(a));
    pip.env = env;
    pip.env.emplace("TJOB_PIP_CACHE", (home / "cache" / "pip").string());
    pip.cwd = cwd;
    j.phases.push_back(pip);
  }

  // A function gets a training file with its call appended; script text
  // (the API's `source` without a function) is written as it is; a script
  // file runs where it is.
  std::string file = pt.source_file;
  if (!pt.function.empty() || !pt.source.empty()) {
    file = (work / ("train_" + j.row.name + ".py")).string();
    j.files.emplace_back(file, pt.function.empty()
                                   ? source
                                   : process::training_file(source, pt.function, !pt.function_args.empty()));
    if (!pt.function_args.empty())
      j.files.emplace_back((work / ("train_" + j.row.name + ".kwargs.json")).string(), pt.function_args);
  }
  if (pt.gpus < 0) fail(errc::invalid_argument, who + ": gpus must be 0 or more");
  if (pt.gpus > 0) {
    auto need = static_cast<std::size_t>(pt.gpus) * static_cast<std::size_t>(num_nodes);
    if (need > gpu_devices.size())
      fail(errc::invalid_argument,
           who + ": needs " + std::to_string(need) + " GPU(s) (gpu=" + std::to_string(pt.gpus) +
               " per node x " + std::to_string(num_nodes) + " node(s)) but this engine has " +
               std::to_string(gpu_devices.size()) +
               "; set the device list (engine_config.gpu_devices or TJOB_GPU_DEVICES) or ask for fewer");
    j.gpus_per_node = pt.gpus;
  }
  phase code;
  code.name = rt.trainer.framework == "torch" ? "torchrun" : "python";
  code.final = true;
  code.memory_limit = pt.memory_limit;
  code.cpu_limit = pt.cpu_limit ? pt.procs_per_node : 0;
  code.executable = venv_python;
  code.env = env;
  code.cwd = cwd;
  for (int node = 0; node < num_nodes; ++node) {
    phase ph = code;
    if (rt.trainer.framework == "torch") {
      // Inside a venv there may be no torchrun script; the module is the same
      // program. `--redirects 9:1 --tee 9:1` works around the Python 3.11
      // crash of Debian's torch 1.13 (docs/kubeflow-differences.md) and changes
      // nothing for ranks below 9. The nodes meet on 127.0.0.1 at a port
      // chosen free when the job starts (static rendezvous).
      ph.argv = {venv_python, "-m", "torch.distributed.run",
                 "--nnodes=" + std::to_string(num_nodes), "--node_rank=" + std::to_string(node),
                 "--nproc_per_node=" + std::to_string(pt.procs_per_node), "--master_addr=127.0.0.1",
                 "--monitor_interval=0.2", "--redirects", "9:1", "--tee", "9:1"};
      ph.torch_port = true;
      j.torch_port = true;
    } else {
      ph.argv = {venv_python, "-u"};
    }
    ph.argv.push_back(file);
    ph.argv.insert(ph.argv.end(), pt.args.begin(), pt.args.end());
    j.node_phases.push_back(std::move(ph));
  }
  if (cfg.venv_cache) {
    detail::venv_cache::inputs in;
    in.python = python;  // the real interpreter is found when the job starts
    in.packages = packages;
    if (!packages.empty()) in.index_urls = process::index_urls(pt.pip_index_urls);
    in.system_site_packages = pt.system_site_packages;
    j.venv_inputs = std::make_unique<detail::venv_cache::inputs>(std::move(in));
  }
  j.spec = json::serialize(json::object{{"trainer", detail::to_json(pt)}, {"python", python}});
}

asio::awaitable<std::string> engine::train(train_request req) {
  if (impl_->cfg.backend != backend_kind::kubernetes && (!req.labels.empty() || !req.annotations.empty()))
    fail(errc::invalid_argument,
         std::string(req.labels.empty() ? "Annotations" : "Labels") +
             " option is not compatible with the " + std::string(to_string(impl_->cfg.backend)) +
             " backend (TrainJob " + quote(req.name) +
             "); only the kubernetes backend keeps labels and annotations");
  if (auto c = impl_->remote) co_return co_await c->train(std::move(req));
  auto& e = *impl_;
  e.check_running();
  const bool generated = req.name.empty();
  auto catalog = e.runtimes();
  const runtime* rt = &detail::check_request(req, catalog);
  std::string name = req.name;
  std::string who = detail::who(name);
  if (req.num_nodes != 1 && std::holds_alternative<command_trainer>(req.job_trainer))
    fail(errc::invalid_argument, who + ": num_nodes=" + std::to_string(req.num_nodes) +
                                     ": a command job runs one node; use a Python trainer on a "
                                     "torch runtime for several");

  auto j = std::make_shared<job_rec>();
  auto plan = [&] {
    j->phases.clear();
    j->node_phases.clear();
    j->files.clear();
    j->dir = (e.jobs_dir / name).string();
    j->row.name = name;
    if (auto* ct = std::get_if<command_trainer>(&req.job_trainer))
      e.plan_command(*j, who, *ct);
    else
      e.plan_python(*j, who, std::get<python_trainer>(req.job_trainer), *rt, req.num_nodes);
  };
  plan();
  for (;;) {
    std::string spec = j->spec;
    j->row = {};
    j->row.name = name;
    j->row.runtime = req.runtime;
    j->row.num_nodes = req.num_nodes;
    j->row.created_ms = now_ms();
    j->row.spec = spec;
    j->row.status = job_status::created;
    j->row.owner_pid = e.self_pid;
    j->row.owner_start = e.self_start;
    j->row.steps.clear();
    for (int node = 0; node < req.num_nodes; ++node) {
      detail::step_row st;
      st.name = "node-" + std::to_string(node);
      j->row.steps.push_back(st);
    }
    std::string created = "created by process " + std::to_string(e.self_pid) + ": " +
                          join_argv(j->node_phases[0].argv);
    detail::job_row row = j->row;
    bool inserted = co_await e.insert_job(std::move(row), std::move(created));
    if (inserted) {
      // The request is in the store now; a running job does not keep a copy.
      std::string().swap(j->spec);
      std::string().swap(j->row.spec);
      break;
    }
    if (!generated)
      fail(errc::duplicate_name, "TrainJob " + quote(name) +
                                     " already exists; choose another name, or delete it first "
                                     "(tjob delete " + name + ")");
    name = detail::generate_job_name();
    who = detail::who(name);
    plan();  // the paths in the plan hold the name
  }
  // The job's own work dir is made only when something runs or is written in
  // it (a command given a working dir needs none: a directory less per job).
  const std::string work = j->dir + "/work";
  bool needs_work = !j->files.empty();
  for (auto* list : {&j->phases, &j->node_phases})
    for (auto& ph : *list) {
      if (ph.cwd.empty()) ph.cwd = work;
      needs_work |= ph.cwd == work;
    }
  for (auto& s : j->row.steps) {
    step_rec sr;
    sr.row = s;
    sr.log_path = j->dir + "/logs/" + s.name + ".log";
    j->steps.push_back(std::move(sr));
  }
  // Directories and files are made on the pool: on a disk filesystem each new
  // inode costs tens of microseconds, which the reactor spends on other jobs.
  // The logs are created here too, so a job's process only opens its own.
  std::optional<std::system_error> made_not;
  try {
    co_await e.blocking([&] {
      make_private_dirs(j->dir + "/logs");
      if (needs_work) make_private_dirs(work);
      for (const auto& [path, text] : j->files) {
        if (auto ec = detail::append_file(path, text))
          throw std::system_error(ec.value(), std::generic_category(), "cannot write " + path);
      }
      for (const auto& s : j->steps) {
        int fd = ::open(s.log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) throw std::system_error(errno, std::generic_category(), "cannot create " + s.log_path);
        ::close(fd);
      }
    });
  } catch (const std::system_error& x) {
    made_not = x;
  }
  if (made_not) {
    e.transact([&](detail::store& db) { db.delete_job(name); });
    std::error_code rec;
    std::filesystem::remove_all(j->dir, rec);
    fail(errc::store_unavailable, "TrainJob " + quote(name) + ": " + made_not->what() +
                                      "; check that " + e.jobs_dir.string() + " is writable");
  }
  j->row.steps.clear();
  e.jobs.emplace(name, j);
  e.start_job(j);
  co_return name;
}

asio::awaitable<train_job> engine::get_job(std::string name) {
  if (auto c = impl_->remote) co_return co_await c->get_job(std::move(name));
  auto& e = *impl_;
  if (auto j = e.owned(name)) co_return e.snapshot(*j);
  auto row = e.load_fresh(name);
  if (!row) e.throw_not_found(name);
  co_return to_job(*row);
}

asio::awaitable<std::vector<train_job>> engine::list_jobs(std::optional<std::string> runtime) {
  if (auto c = impl_->remote) co_return co_await c->list_jobs(std::move(runtime));
  auto& e = *impl_;
  std::vector<train_job> out;
  for (auto& row : e.db->load_jobs()) {
    if (runtime && row.runtime != *runtime) continue;
    if (auto j = e.owned(row.name)) {
      out.push_back(e.snapshot(*j));
      continue;
    }
    if (!is_terminal(row.status) && !e.owner_alive(row) && e.reconcile_row(row))
      if (auto fresh = e.db->load_job(row.name)) row = std::move(*fresh);
    out.push_back(to_job(row));
  }
  co_return out;
}

asio::awaitable<train_job> engine::wait_for_job_status(std::string name,
                                                       std::set<job_status> statuses,
                                                       std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds::zero())
    fail(errc::invalid_argument,
         "Timeout must be a positive number, got timeout=" + std::to_string(timeout.count()) +
             "ms (waiting for TrainJob " + quote(name) + ")");
  if (statuses.empty())
    fail(errc::invalid_argument, "waiting for TrainJob " + quote(name) +
                                     ": the set of statuses to wait for is empty; give at "
                                     "least one of Created, Running, Complete, Failed");
  if (auto c = impl_->remote) co_return co_await c->wait_for_job_status(std::move(name), std::move(statuses), timeout);
  auto& e = *impl_;
  auto deadline = steady::now() + timeout;
  auto settle = [&](const train_job& job) -> bool {
    if (statuses.count(job.status)) return true;
    if (job.status == job_status::failed) fail(errc::job_failed, e.failure_message(job));
    if (is_terminal(job.status)) {
      std::string wanted;
      for (auto s : statuses) wanted += (wanted.empty() ? "" : ", ") + std::string(to_string(s));
      fail(errc::unreachable_status, "TrainJob " + job.name + " is " +
                                         std::string(to_string(job.status)) +
                                         " and will not reach status: " + wanted);
    }
    return false;
  };
  auto timed_out = [&] {
    std::string wanted;
    for (auto s : statuses) wanted += (wanted.empty() ? "" : ", ") + std::string(to_string(s));
    fail(errc::timeout, "Timeout waiting for TrainJob " + name + " to reach status: " + wanted);
  };

  if (auto j = e.owned(name)) {
    detail::wake_signal w(e.ex);
    detail::wake_registration reg(j->watchers, &w);
    for (;;) {
      auto job = e.snapshot(*j);
      if (settle(job)) co_return job;
      e.check_running();
      if (!co_await w.wait_until(deadline) && steady::now() >= deadline) timed_out();
    }
  }
  auto row = e.load_fresh(name);
  if (!row) e.throw_not_found(name);
  foreign_watch fw(e, *row, false);
  for (;;) {
    auto job = to_job(*row);
    if (settle(job)) co_return job;
    e.check_running();
    if (!co_await fw.wait_until(deadline) && steady::now() >= deadline) timed_out();
    row = e.load_fresh(name);
    if (!row) e.throw_not_found(name);
  }
}

asio::awaitable<void> engine::cancel_job(std::string name) {
  if (auto c = impl_->remote) co_return co_await c->cancel_job(std::move(name));
  auto& e = *impl_;
  e.check_running();
  if (auto j = e.owned(name)) {
    co_await e.cancel_owned(j);
    co_return;
  }
  co_await e.cancel_foreign(name);
}

asio::awaitable<void> engine::delete_job(std::string name) {
  if (auto c = impl_->remote) co_return co_await c->delete_job(std::move(name));
  auto& e = *impl_;
  e.check_running();
  if (auto j = e.owned(name)) {
    co_await e.cancel_owned(j);
  } else {
    auto row = e.load_fresh(name);
    if (!row) e.throw_not_found(name);
    if (!is_terminal(row->status)) co_await e.cancel_foreign(name);
  }
  // The job's last writes must land before its rows go. (An ended job is no
  // longer in the job table: its record went with the commit of its end.)
  e.transact([&](detail::store& db) { db.delete_job(name); });
  co_await e.remove_tree(e.jobs_dir / name, name);
}

asio::awaitable<std::vector<event>> engine::get_job_events(std::string name) {
  if (auto c = impl_->remote) co_return co_await c->get_job_events(std::move(name));
  auto& e = *impl_;
  e.flush();
  if (!e.owned(name) && !e.load_fresh(name)) e.throw_not_found(name);
  std::vector<event> out;
  for (auto& r : e.db->load_events(name))
    out.push_back(event{r.seq, from_ms(r.time_ms), r.step, r.reason, r.message});
  co_return out;
}

detail::runtime_catalog engine::impl::runtimes(bool report) const {
  auto dirs = cfg.runtime_dirs;
  if (dirs.empty()) dirs.push_back(home / "runtimes");
  auto cat = runtime_cache.load(dirs);
  if (report)
    for (const auto& p : cat.problems) log->warn("runtime skipped: {}", p);
  return cat;
}

asio::awaitable<std::vector<runtime>> engine::list_runtimes() {
  if (auto c = impl_->remote)
    if (auto r = co_await c->list_runtimes()) co_return std::move(*r);
  co_return impl_->runtimes().runtimes;
}

asio::awaitable<std::vector<std::string>> engine::runtime_problems() {
  if (auto c = impl_->remote)
    if (auto p = co_await c->runtime_problems()) co_return std::move(*p);
  co_return impl_->runtimes(false).problems;
}

asio::awaitable<runtime> engine::get_runtime(std::string name) {
  if (auto c = impl_->remote)
    if (auto r = co_await c->list_runtimes()) {
      detail::runtime_catalog cat;
      cat.runtimes = std::move(*r);
      cat.how_to_add = "create one in the cluster (a TrainingRuntime or a ClusterTrainingRuntime)";
      auto* found = cat.find(name);
      if (!found) fail(errc::runtime_not_found, cat.not_found_message(name));
      co_return *found;
    }
  auto cat = impl_->runtimes();
  auto* r = cat.find(name);
  if (!r) fail(errc::runtime_not_found, cat.not_found_message(name));
  co_return *r;
}

namespace {

venv_cache_entry to_entry(const detail::venv_cache::entry_info& e) {
  venv_cache_entry v;
  v.key = e.key;
  v.python = e.from.python;
  v.python_version = e.python_version;
  v.packages = e.from.packages;
  v.index_urls = e.from.index_urls;
  v.system_site_packages = e.from.system_site_packages;
  v.bytes = e.bytes;
  v.created = from_ms(e.created_ms);
  v.last_used = from_ms(e.last_used_ms);
  v.problem = e.problem;
  return v;
}

}  // namespace

asio::awaitable<std::vector<venv_cache_entry>> engine::list_venv_cache() {
  auto& e = *impl_;
  std::vector<detail::venv_cache::entry_info> found;
  co_await e.blocking([&] { found = e.venv_store.list(); });
  std::vector<venv_cache_entry> out;
  for (const auto& f : found) out.push_back(to_entry(f));
  co_return out;
}

asio::awaitable<std::vector<venv_cache_entry>> engine::prune_venv_cache(std::chrono::seconds unused_for) {
  auto& e = *impl_;
  std::vector<detail::venv_cache::entry_info> removed;
  co_await e.blocking([&] { removed = e.venv_store.prune(unused_for); });
  std::vector<venv_cache_entry> out;
  for (const auto& f : removed) out.push_back(to_entry(f));
  co_return out;
}

asio::awaitable<void> engine::shutdown() {
  auto self = impl_;
  auto& e = *impl_;
  if (e.remote) co_await e.remote->shutdown();
  if (!e.stopping) {
    e.stopping = true;
    for (auto& [name, j] : e.jobs) {
      j->stop.emit(asio::cancellation_type::terminal);
      for (auto& st : j->steps) st.stop->emit(asio::cancellation_type::terminal);
      j->watchers.notify_all();
    }
    e.watch.close();
  }
  while (e.internal_coroutines > 0) co_await e.idle.wait_until(steady::time_point::max());
  e.flush();
  e.pool.join();
  if (e.checkpoint_thread) e.checkpoint_thread->join();
}

}  // namespace tjob

// ---------------------------------------------------------------------------
// logs

namespace tjob {

struct local_log final : log_stream::impl {
  std::shared_ptr<engine::impl> e;
  std::string job, step;
  bool follow = false;
  std::shared_ptr<job_rec> owned;  // null when another process runs the job
  detail::log_cursor cursor;
  detail::line_buffer buf;
  bool ending = false;
  std::unique_ptr<foreign_watch> foreign;
  std::unique_ptr<detail::wake_signal> wake;
  std::unique_ptr<detail::wake_registration> reg;
  int log_wd = -1;

  local_log(std::shared_ptr<engine::impl> eng, std::string j, std::string s, bool f,
            std::filesystem::path path, std::uint64_t offset)
      : e(std::move(eng)), job(std::move(j)), step(std::move(s)), follow(f),
        cursor(std::move(path), offset) {}

  // Whether the step has ended (or the job is gone): after that, what the file
  // holds is all there will be, because output is written before the status.
  bool step_ended() {
    if (owned) {
      for (const auto& s : owned->steps)
        if (s.row.name == step) return is_terminal(s.row.status);
      return true;
    }
    auto row = e->load_fresh(job);
    if (!row) return true;
    for (const auto& s : row->steps)
      if (s.name == step) return is_terminal(s.status);
    return true;
  }

  // Woken by the log growing (the job writes it directly: inotify on its
  // directory) and by the step's end (a transition here, or through the
  // store's watch for another process's job).
  asio::awaitable<void> wait_for_more() {
    if (owned) {
      if (!wake) {
        wake = std::make_unique<detail::wake_signal>(e->ex);
        reg = std::make_unique<detail::wake_registration>(owned->watchers, wake.get());
        log_wd = e->watch.add(e->jobs_dir / job / "logs", wake.get());
        co_return;  // re-check once the watch is in place: nothing can slip between
      }
      co_await wake->wait_until(steady::time_point::max());
      co_return;
    }
    if (!foreign) {
      auto row = e->db->load_job(job);
      if (!row) co_return;
      foreign = std::make_unique<foreign_watch>(*e, *row, true);
      co_return;  // re-check once the watch is in place: nothing can slip between
    }
    co_await foreign->wait_until(steady::time_point::max());
  }

  ~local_log() override {
    if (wake) e->watch.remove(log_wd, wake.get());
  }

  asio::awaitable<std::optional<std::string>> next(bool whole_lines) override {
    for (;;) {
      if (auto out = buf.take(whole_lines)) co_return out;
      if (cursor.read_more(buf.bytes()) > 0) continue;
      if (ending || !follow) co_return buf.take_rest();
      if (step_ended()) {
        ending = true;  // one more read takes whatever was written before the end
        continue;
      }
      if (e->stopping) fail(errc::shut_down, "the engine is shutting down");
      co_await wait_for_more();
    }
  }
};

log_stream::log_stream() = default;
log_stream::log_stream(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
log_stream::log_stream(log_stream&&) noexcept = default;
log_stream& log_stream::operator=(log_stream&&) noexcept = default;
log_stream::~log_stream() = default;

asio::awaitable<std::optional<std::string>> log_stream::next() {
  if (!impl_) co_return std::nullopt;
  co_return co_await impl_->next(false);
}
asio::awaitable<std::optional<std::string>> log_stream::read_some() {
  if (!impl_) co_return std::nullopt;
  co_return co_await impl_->next(true);
}

asio::awaitable<log_stream> engine::get_job_logs(std::string name, log_options options) {
  if (auto c = impl_->remote) co_return co_await c->get_job_logs(std::move(name), std::move(options));
  auto& e = *impl_;
  std::vector<std::string> steps;
  auto j = e.owned(name);
  if (j) {
    for (const auto& s : j->steps) steps.push_back(s.row.name);
  } else {
    auto row = e.load_fresh(name);
    if (!row) e.throw_not_found(name);
    for (const auto& s : row->steps) steps.push_back(s.name);
  }
  if (std::find(steps.begin(), steps.end(), options.step) == steps.end()) {
    std::string known;
    for (const auto& s : steps) known += (known.empty() ? "" : ", ") + s;
    fail(errc::step_not_found, "TrainJob " + quote(name) + " has no step " + quote(options.step) +
                                   "; its steps are: " + known);
  }
  auto path = e.jobs_dir / name / "logs" / (options.step + ".log");
  std::uint64_t offset = options.tail ? detail::tail_offset(path, *options.tail) : 0;
  auto p = std::make_unique<local_log>(impl_, name, options.step, options.follow, path, offset);
  p->owned = j;
  co_return log_stream(std::move(p));
}

}  // namespace tjob
