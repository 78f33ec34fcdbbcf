#include "adapters/local/local_impl.hpp"

#include "adapters/process/proc_info.hpp"
#include "core/messages.hpp"
#include "core/secrets.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <csignal>

namespace tjob::local {

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now().time_since_epoch()).count();
}

clock::time_point from_ms(std::int64_t ms) { return clock::time_point(std::chrono::milliseconds(ms)); }

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
train_job to_job(const detail::job_row& row) {
  train_job j;
  j.name = row.name;
  j.runtime = row.runtime;
  j.num_nodes = row.num_nodes;
  j.creation_timestamp = from_ms(row.created_ms);
  if (row.started_ms) j.start_time = from_ms(row.started_ms);
  if (row.ended_ms && is_terminal(row.status)) j.end_time = from_ms(row.ended_ms);
  j.status = row.status;
  j.reason = row.reason;
  j.array = row.array;
  for (const auto& s : row.steps)
    j.steps.push_back(step{s.name, s.status, s.exit_code, s.reason, s.pid, s.attempt});
  if (!row.progress.empty())
    detail::apply_progress(j, detail::progress_from_json(row.progress), from_ms(row.progress_ms));
  return j;
}

// ---------------------------------------------------------------------------
// construction, store writes

char* const* engine_state::inherited_env() const {
  return cfg.clean_job_environment ? clean_envp.data() : environ;
}

const char* engine_state::inherited(const char* key) const {
  if (!cfg.clean_job_environment) return std::getenv(key);
  const auto n = std::strlen(key);
  for (const auto& e : clean_env)
    if (e.size() > n && e[n] == '=' && e.compare(0, n, key) == 0) return e.c_str() + n + 1;
  return nullptr;
}

namespace {

// Creates the database file so that it is 0600 from its first byte (SQLite
// gives its -wal and -shm files the same mode), or checks that an existing
// one may be written; 0, or why not (an errno). An existing file is never
// opened here: POSIX record locks belong to the process, and closing any
// descriptor of the file drops every lock the process holds on it. Another
// engine of this process (a Python program's second client) lost its SQLite
// lock that way; the next process to close its connection then took the
// store as unused, checkpointed it and deleted its WAL under that engine,
// which went on reading the deleted WAL and no longer saw new jobs.
int create_store_file(const std::filesystem::path& db_path) {
  int fd = ::open(db_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);  // (a new file: no lock of this process is on it)
    return 0;
  }
  if (errno != EEXIST) return errno;
  return ::faccessat(AT_FDCWD, db_path.c_str(), R_OK | W_OK, AT_EACCESS) == 0 ? 0 : errno;
}

}  // namespace

engine_state::engine_state(const detail::backend_context& ctx)
    : ex(ctx.ex),
      cfg(ctx.cfg),
      log(ctx.log),
      tasks(ctx.ex, log),
      watch(ctx.ex, log, tasks),
      log_times(ctx.ex, log, tasks),
      progress(ctx.ex, log, tasks) {
  home = ctx.home;  // absolute, and checked by the engine
  jobs_dir = home / "jobs";
  if (cfg.clean_job_environment) {
    for (char** e = environ; e && *e; ++e) {
      std::string_view entry(*e);
      if (detail::job_environment_allowed(entry.substr(0, entry.find('=')))) clean_env.emplace_back(entry);
    }
    for (auto& e : clean_env) clean_envp.push_back(e.data());
    clean_envp.push_back(nullptr);
  }
  log_times.write_last_records_on(pool.get_executor());  // off the path from a step's end to its waiters
  // Named, so that `top -H`, perf and the benches tell its work from the reactor's.
  asio::post(pool, [] { ::pthread_setname_np(::pthread_self(), "tjob-pool"); });
  auto db_path = home / "tjob.db";
  store_wake_file = detail::store::wake_path(db_path).filename().string();
  open_access(db_path);
  db = std::make_unique<detail::store>(db_path, cfg.store_busy_timeout, !read_only.empty(),
                                       [&] { refuse_new_store_over_jobs(db_path); });
  checkpointer = std::make_unique<detail::wal_checkpointer>(db_path);
  db->on_wal_full = [this] { start_checkpoint(); };
  venv_store = detail::venv_cache::cache(home / "cache" / "venvs");
  gpu_devices = detail::gpu_devices(cfg);
  refresh_budget();  // (config.yaml's errors are raised here, at open)
  self_pid = ::getpid();
  self_start = process::start_time(self_pid).value_or(0);
  base_descriptors = process::open_descriptors();
  reconcile_all();
}

// A store that exists but cannot be written (a read-only mount, another
// user's files) is opened for reading: list, get, logs, events and waits
// work; what would write says why it cannot (check_writable). Makes the
// jobs directory and the store's file when they are not there.
void engine_state::open_access(const std::filesystem::path& db_path) {
  auto unwritable = [](int e) { return e == EROFS || e == EACCES || e == EPERM; };
  std::error_code ec;
  const bool existing = std::filesystem::is_directory(jobs_dir, ec) && std::filesystem::exists(db_path, ec);
  try {
    make_private_dirs(jobs_dir);
  } catch (const std::system_error& e) {
    if (!existing || !unwritable(e.code().value()))
      fail(errc::store_unavailable,
           "cannot use " + home.string() + " as TJOB_HOME: " + e.code().message() + "; " +
               detail::fix_for_errno(e.code().value(), home.string()),
           e.what());
  }
  int why = 0;
  if (::access(home.c_str(), W_OK | X_OK) != 0 || ::access(jobs_dir.c_str(), W_OK | X_OK) != 0)
    why = errno;
  else
    why = create_store_file(db_path);
  if (why == 0) {
    // a store this process may write
  } else if (existing && unwritable(why) && ::access(db_path.c_str(), R_OK) == 0) {
    read_only = std::string("the store ") + home.string() + " is read-only (" + std::strerror(why) +
                "): list, get, logs, events and wait work; to run or change jobs, make it writable or "
                "set TJOB_HOME to a writable directory";
    log->info("{}", read_only);
  } else {
    fail(errc::store_unavailable, "cannot use " + home.string() + " as TJOB_HOME: " + std::strerror(why) +
                                      "; " + detail::fix_for_errno(why, home.string()));
  }
}

// A new (empty) store beside job directories is a store that was lost,
// emptied or replaced (issue 43): taken as new, it would hide those jobs and
// give their names, and their directories, to new ones.
void engine_state::refuse_new_store_over_jobs(const std::filesystem::path& db_path) const {
  std::error_code ec;
  std::size_t count = 0;
  std::string some;
  for (std::filesystem::directory_iterator it(jobs_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec) || it->path().filename().string().starts_with(".")) continue;  // (a deletion's)
    if (++count <= 3) some += (some.empty() ? "" : ", ") + it->path().filename().string();
  }
  if (count == 0) return;
  fail(errc::store_corrupt,
       fmt::format("store {} is empty, but {} holds {} job director{} ({}{}): the store was lost, emptied or "
                   "replaced, and a new one would hide those jobs. Restore {} (from a backup), or move {} "
                   "aside to start with an empty store; nothing was changed",
                   db_path.string(), jobs_dir.string(), count, count == 1 ? "y" : "ies", some,
                   count > 3 ? ", ..." : "", db_path.string(), jobs_dir.string()));
}

void engine_state::queue_write(std::function<void(detail::store&)> w, std::function<void()> after,
                               std::function<void(std::exception_ptr)> failed) {
  pending.push_back({std::move(w), std::move(after), std::move(failed)});
  if (!flush_posted) {
    flush_posted = true;
    asio::post(ex, [self = shared_from_this()] {
      if (self->flush_posted) self->flush();
    });
  }
}

void log_decision(spdlog::logger& log, steady::time_point since, std::size_t jobs, std::size_t waiting,
                  std::optional<steady::time_point> decided) {
  if (!log.should_log(spdlog::level::trace)) return;
  const auto now = steady::now();
  const double us = std::chrono::duration<double, std::micro>(decided.value_or(now) - since).count();
  const double with_writes = std::chrono::duration<double, std::micro>(now - since).count();
  log.trace("admission decision: {:.1f} us for {} job(s); {} waiting here; {:.1f} us with its writes", us,
            jobs, waiting, with_writes);
}

detail::admission_plan plan_queue_head(detail::store& db, const detail::admission_budget& budget,
                                       std::vector<detail::queued_job>* rows) {
  for (std::size_t page = 8;; page *= 4) {
    detail::admission_plan plan;
    std::size_t waiting = 0;
    if (rows) {
      // every row, with its owner: the admitter's look reconciles dead ones
      *rows = db.load_queue_head(page);
      std::vector<detail::queue_row> plain;
      plain.reserve(rows->size());
      for (const auto& q : *rows) {
        waiting += q.row.admitted ? 0 : 1;
        plain.push_back(q.row);
      }
      plan = detail::plan_admission(std::move(plain), budget);
    } else {
      auto head = db.load_waiting(page);
      waiting = head.size();
      plan = detail::plan_admission(std::move(head), budget, db.admitted_totals());
    }
    if (!plan.blocker.empty() || waiting < page) return plan;
  }
}

// The job joins the admission queue (in the caller's transaction): admitted
// now when it fits and nobody waits ahead of it, else Queued. Empty when
// admitted; else what it waits for.
std::string join_admission_queue(detail::store& db, detail::queue_row adm,
                                 const detail::admission_budget& budget, std::int64_t t) {
  adm.seq = db.next_queue_seq();  // last of its priority
  std::string waiting;
  if (auto ahead = db.first_waiting_from(adm.priority)) {
    // Somebody waits ahead of it: it waits too, whatever is free (strict
    // order; the admitter, woken by this commit, lets in whoever fits). One
    // index seek, however long the queue is.
    db.enqueue(adm);
    waiting = "job " + *ahead + " ahead of it";
  } else {
    // It is the first to wait at its priority: it starts now if it fits
    // beside the admitted jobs.
    // With no limit that could hold it back (no budget set), the admitted
    // jobs' sums are not read: a scan of them per job (7 % of the reactor's
    // time per job at 64 running, in perf).
    if (detail::fits_regardless(adm, budget)) {
      adm.admitted = true;
      db.enqueue(adm);
      return {};
    }
    std::vector<detail::queue_row> rows{adm};
    auto plan = detail::plan_admission(std::move(rows), budget, db.admitted_totals());
    adm.admitted = std::find(plan.admit.begin(), plan.admit.end(), adm.job) != plan.admit.end();
    db.enqueue(adm);
    if (adm.admitted) return {};
    for (const auto& w : plan.queue)
      if (w.job == adm.job) waiting = w.waits_for + " (position 1)";
  }
  db.update_job_status(adm.job, job_status::created, std::string(detail::queued_reason));
  db.append_event(adm.job, "", t, log_event::queued, "waiting for " + waiting);
  return waiting;
}

asio::awaitable<bool> engine_state::insert_job(detail::job_row row, std::string created_message,
                                               const detail::queue_row* admission, std::string* waiting,
                                               std::string dependencies) {
  struct outcome {
    explicit outcome(const asio::any_io_executor& ex) : done(ex) {}
    bool inserted = false;
    std::string waiting;  // its place and what it waits for, when it is queued
    std::exception_ptr error;
    detail::wake_signal done;
  };
  auto st = std::make_shared<outcome>(ex);
  std::optional<detail::queue_row> adm;
  if (admission) adm = *admission;
  queue_write(
      [st, row = std::move(row), message = std::move(created_message), adm = std::move(adm), budget = budget,
       deps = std::move(dependencies), lg = log.get(),
       waiting = admission_waiting.size()](detail::store& db) mutable {
        st->inserted = db.insert_job(row);
        if (!st->inserted) return;
        db.append_event(row.name, "", row.created_ms, log_event::created, message);
        if (!deps.empty()) {  // it joins the queue once they have ended as it needs
          db.update_job_status(row.name, job_status::created, std::string(detail::waiting_reason));
          db.append_event(row.name, "", row.created_ms, log_event::waiting, "waiting for " + deps);
          return;
        }
        if (!adm) return;
        adm->job = row.name;
        adm->since_ms = row.created_ms;
        const auto t0 = steady::now();
        st->waiting = join_admission_queue(db, *adm, budget, row.created_ms);
        log_decision(*lg, t0, 1, waiting);
      },
      [st] { st->done.notify(); },
      [st](std::exception_ptr x) {
        st->error = x;
        st->done.notify();
      });
  co_await st->done.wait_until(steady::time_point::max());
  if (st->error) std::rethrow_exception(st->error);
  if (waiting) *waiting = std::move(st->waiting);
  co_return st->inserted;
}

void engine_state::start_checkpoint() {
  if (checkpoint_running || stopping) return;
  checkpoint_running = true;
  if (!checkpoint_thread) {
    checkpoint_thread = std::make_unique<asio::thread_pool>(1);
    asio::post(*checkpoint_thread, [] { ::pthread_setname_np(::pthread_self(), "tjob-checkpoint"); });
  }
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
void engine_state::flush() {
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
    // Said once, and again only when the error changes: a full disk can
    // last hours (issue 43: one line every 200 ms).
    if (commit_failures == 0) failing_since = steady::now();
    const bool news = commit_failures == 0 || commit_error != e.what();
    ++commit_failures;
    commit_error = e.what();
    // 200 ms, doubling, at most 10 s apart
    const auto retry = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(200L << std::min(commit_failures - 1, 6)), std::chrono::seconds(10));
    if (news)
      log->error("store commit failed, {} writes kept and retried (at most 10 s apart) until it succeeds: {}",
                 keep.size(), e.what());
    for (auto& w : pending) keep.push_back(std::move(w));
    pending = std::move(keep);
    if (!pending.empty()) {
      auto timer = std::make_shared<asio::steady_timer>(ex, retry);
      timer->async_wait([self = shared_from_this(), timer](error_code) { self->flush(); });
    }
    for (auto& [name, j] : jobs) j->watchers.notify_all();  // a wait may have to give up (check_recordable)
    return;
  }
  if (commit_failures > 0) {
    log->info("store commit succeeded after {} failed tries over {:.1f} s; the writes kept are in",
              commit_failures, std::chrono::duration<double>(steady::now() - failing_since).count());
    commit_failures = 0;
    commit_error.clear();
  }
  for (auto& w : writes)
    if (w.after) done.push_back(std::move(w.after));
  for (auto& d : done) d();
  committed.notify_all();
  log_times.write_held();  // the ended steps' last line times, now that their ends are committed
}

void engine_state::check_recordable(const job_rec& j) const {
  if (commit_failures == 0 || steady::now() - failing_since < cfg.store_failing_limit) return;
  for (const auto& s : j.steps)
    if (s.proc.pid() > 0) return;  // it runs: its end is not waiting on the store
  std::string how;
  for (const auto& s : j.steps)
    if (!s.ended_how.empty()) how += (how.empty() ? "" : ", ") + s.row.name + " " + s.ended_how;
  fail(errc::store_unavailable,
       "TrainJob " + quote(j.row.name) +
           (how.empty() ? std::string(" has no process running") : " ended (" + how + ")") +
           ", but the store has refused every write for " +
           std::to_string(
               std::chrono::duration_cast<std::chrono::seconds>(steady::now() - failing_since).count()) +
           " s, so its record is not complete: " + commit_error +
           ". This process keeps trying while it runs; once it has exited, the next tjob command records the "
           "job as Failed, reason lost, when the store can be written again");
}

std::optional<std::string> engine_state::full_file_system(const std::string& path) const {
  const auto dir = std::filesystem::path(path).parent_path();
  struct statvfs fs {};
  struct stat st {};
  if (::statvfs(dir.c_str(), &fs) != 0 || fs.f_bavail > 0 || ::stat(dir.c_str(), &st) != 0)
    return std::nullopt;
  return fmt::format(
      "the file system of its log ({}, device {}:{}) had no space left when it ended: its last output may be "
      "missing from the log; free space there",
      dir.string(), major(st.st_dev), minor(st.st_dev));
}

// ---------------------------------------------------------------------------
// job records

std::shared_ptr<job_rec> engine_state::owned(std::string_view name) const {
  auto it = jobs.find(name);
  return it == jobs.end() ? nullptr : it->second;
}

train_job engine_state::snapshot(const job_rec& j) const {
  detail::job_row row = j.row;
  row.steps.clear();
  for (const auto& s : j.steps) row.steps.push_back(s.row);
  return to_job(row);
}

bool engine_state::owner_alive(const detail::job_row& row) const {
  return process::is_same_process(static_cast<pid_t>(row.owner_pid), row.owner_start);
}

std::optional<detail::job_row> engine_state::load_fresh(const std::string& name) {
  auto row = db->load_job(name);
  if (row && !is_terminal(row->status) && !owned(name) && !owner_alive(*row)) {
    reconcile_row(*row);
    row = db->load_job(name);
  }
  return row;
}

void engine_state::throw_not_found(const std::string& name) const {
  detail::throw_not_found(name, "in " + home.string(), "tjob list");
}

void engine_state::check_writable(const char* what) const {
  if (!read_only.empty()) fail(errc::store_unavailable, std::string("cannot ") + what + ": " + read_only);
}

void engine_state::check_running() const {
  if (stopping) fail(errc::shut_down, "the engine is shutting down");
}

bool engine_state::apply(job_rec& j, step_rec& s, job_event ev, std::string message, std::string reason) {
  auto to = detail::next(s.row.status, ev);
  if (!to) {
    log->debug("job {} step {}: {} rejected in {}", j.row.name, s.row.name, detail::event_reason(ev.kind),
               to_string(s.row.status));
    return false;
  }
  s.row.status = *to;
  const auto t = now_ms();
  if (ev.kind == event_kind::started && j.row.started_ms == 0) j.row.started_ms = t;
  if (is_terminal(*to)) j.row.ended_ms = t;
  // A restart's event carries how the failed attempt ended; the step starts
  // its next attempt afresh (as the fold of the log does).
  std::optional<int> event_code = s.row.exit_code;
  std::string event_detail;
  if (ev.kind == event_kind::restarting) {
    event_code = ev.exit_code;
    event_detail = reason;
    ++s.row.attempt;
    s.row.exit_code.reset();
    s.row.reason.clear();
  } else if (ev.kind == event_kind::exited) {
    s.row.exit_code = event_code = ev.exit_code;
  }
  if (*to == job_status::failed) s.row.reason = event_detail = std::move(reason);
  std::vector<job_status> statuses;
  for (const auto& st : j.steps) statuses.push_back(st.row.status);
  j.row.status = detail::aggregate(statuses);
  if (j.row.reason == detail::queued_reason || j.row.reason == detail::waiting_reason ||
      j.row.reason == detail::restarting_reason)
    j.row.reason.clear();  // any transition ends the wait
  if (j.row.status == job_status::failed && j.row.reason.empty()) j.row.reason = s.row.reason;
  if (is_terminal(j.row.status)) progress.end(j.row.name, std::string(to_string(j.row.status)));
  if (ev.kind == event_kind::restarting && j.row.status == job_status::created)
    j.row.reason = detail::restarting_reason;

  queue_write(
      [name = j.row.name, step = s.row, status = j.row.status, jreason = j.row.reason, t,
       what = detail::log_event_of(ev.kind), message = std::move(message), event_code,
       event_detail = std::move(event_detail)](detail::store& db) {
        db.append_event(name, step.name, t, what, message, event_code, event_detail);
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
  // What it held is free once this commits: a decision queued now shares
  // that commit (its write runs after this one).
  if (is_terminal(j.row.status) && !admission_waiting.empty()) schedule_admission();
  return true;
}

void engine_state::spawn_internal(asio::awaitable<void> op, const char* what) {
  tasks.spawn(std::move(op), what, [self = shared_from_this(), what](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      if (!self->stopping) self->log->error("{}: {}", what, x.what());
    }
  });
}

void engine_state::start_job(std::shared_ptr<job_rec> j) {
  auto slot = j->stop.slot();
  tasks.spawn(
      run_job(j), "job " + j->row.name,
      [self = shared_from_this(), j](std::exception_ptr e) {
        if (!e || self->stopping) return;
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
      },
      slot);
}

// The engine could not supervise a job any more: whatever still runs of it is
// stopped, and the job is recorded as Failed rather than left Running.
void engine_state::fail_unfinished(job_rec& j, const std::string& why) {
  for (auto& s : j.steps) {
    if (is_terminal(s.row.status)) continue;
    s.proc.signal_group(SIGKILL);
    if (s.row.status == job_status::created)
      apply(j, s, {event_kind::start_failed}, "engine error: " + why, "engine error: " + why);
    else
      apply(j, s, {event_kind::lost}, "engine error: " + why, "lost: " + why);
  }
}

std::filesystem::path engine_state::step_log(const std::string& job, const std::string& step) const {
  return log_dir(job) / (step + ".log");
}

std::filesystem::path engine_state::log_dir(const std::string& job) const {
  auto old = jobs_dir / job / "logs";
  std::error_code ec;
  return std::filesystem::is_directory(old, ec) ? old : jobs_dir / job;
}

}  // namespace tjob::local
