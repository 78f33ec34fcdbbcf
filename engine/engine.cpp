// The engine: the layer above the backends. It checks a request, finds its
// runtime and dispatches to the one backend the composition root made; the
// policy every backend shares is here, once: the wait/settle rule, the
// failure message with each failed step's last log lines, the runtime
// look-ups, and $TJOB_HOME's safety checks.
#include <tjob/engine.hpp>
#include <tjob/spec.hpp>

#include "core/driver.hpp"
#include "core/fail.hpp"
#include "core/log_stream_impl.hpp"
#include "core/messages.hpp"
#include "core/names.hpp"
#include "core/trainer_checks.hpp"
#include "engine/snapshot.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <pwd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace tjob {

namespace asio = boost::asio;
using detail::fail;
using detail::quote;
using steady = std::chrono::steady_clock;

namespace {

void raise_open_file_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

std::shared_ptr<spdlog::logger> quiet_logger() {
  auto l = std::make_shared<spdlog::logger>("tjob.engine", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  l->set_level(spdlog::level::warn);
  l->set_pattern("tjob: %l: %v");  // as the CLI's own messages ("tjob: error: ...")
  return l;
}

// A store somebody else owns, or can write into, could be swapped under us
// (a planted directory in shared temp space): refused, as ssh refuses keys,
// before anything is made in it. So is one inside a directory every user can
// write without the sticky bit (any user could rename the store away and put
// another in its place). Then it is made (0700) where it is missing.
void prepare_home(const std::filesystem::path& home) {
  for (auto p = home.lexically_normal().parent_path();; p = p.parent_path()) {
    struct stat ps {};
    if (::stat(p.c_str(), &ps) == 0 && (ps.st_mode & S_IWOTH) && !(ps.st_mode & S_ISVTX))
      fail(errc::store_unavailable,
           "TJOB_HOME " + home.string() + " is inside " + p.string() + ", which every user can write (mode " +
               fmt::format("{:04o}", ps.st_mode & 07777) +
               ", no sticky bit): another user could replace the store; use a directory that only you "
               "can write into, or chmod +t " +
               p.string());
    if (p == p.parent_path()) break;
  }
  struct stat hs {};
  if (::stat(home.c_str(), &hs) == 0) {
    if (hs.st_uid != ::geteuid())
      fail(errc::store_unavailable, "TJOB_HOME " + home.string() + " belongs to uid " +
                                        std::to_string(hs.st_uid) + ", not to this user (uid " +
                                        std::to_string(::geteuid()) +
                                        "); use a directory of your own (TJOB_HOME)");
    if (hs.st_mode & (S_IWGRP | S_IWOTH))
      fail(errc::store_unavailable, "TJOB_HOME " + home.string() + " can be written by other users (mode " +
                                        fmt::format("{:04o}", hs.st_mode & 07777) +
                                        "); chmod 700 it, or use another directory");
  }
}

std::string status_list(const std::set<job_status>& statuses) {
  std::string wanted;
  for (auto s : statuses) wanted += (wanted.empty() ? "" : ", ") + std::string(to_string(s));
  return wanted;
}

}  // namespace

std::filesystem::path default_home() {
  if (const char* h = std::getenv("TJOB_HOME"); h && *h) return h;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) return std::filesystem::path(x) / "tjob";
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

struct engine::impl {
  asio::any_io_executor ex;
  engine_config cfg;
  std::shared_ptr<spdlog::logger> log;
  std::filesystem::path home;
  std::shared_ptr<detail::backend> backend;
  bool stopping = false;
  /// Blocking file work (a working directory's snapshot), made at its first use.
  std::unique_ptr<asio::thread_pool> pool;

  /// Runs `f` on the pool and comes back to the reactor.
  asio::awaitable<void> blocking(std::function<void()> f) {
    if (!pool) pool = std::make_unique<asio::thread_pool>(1);
    co_await asio::post(asio::bind_executor(*pool, asio::use_awaitable));
    std::exception_ptr error;
    try {
      f();
    } catch (...) {
      error = std::current_exception();
    }
    co_await asio::post(ex, asio::use_awaitable);
    if (error) std::rethrow_exception(error);
  }

  /// A trainer's code_dir becomes its snapshot under the home (one copy per
  /// content), which the backend copies into the job's own directory. A
  /// backend that forwards leaves it to its server's engine.
  asio::awaitable<void> send_code_dir(train_request& req, const backend_capabilities& caps) {
    std::string* dir = nullptr;
    std::string* working = nullptr;
    if (auto* c = std::get_if<command_trainer>(&req.job_trainer)) {
      dir = &c->code_dir;
      working = &c->working_dir;
    } else {
      auto& p = std::get<python_trainer>(req.job_trainer);
      dir = &p.code_dir;
      working = &p.working_dir;
    }
    if (dir->empty() || caps.forwards) co_return;
    auto who = req.name.empty() ? std::string("TrainJob") : "TrainJob " + quote(req.name);
    if (!caps.takes_code_dir)
      fail(errc::invalid_argument,
           who + ": working_dir " + quote(*dir) + ": the " + caps.id +
               " backend cannot send a directory with a job; bake the code into the job's image");
    if (!working->empty())
      fail(errc::invalid_argument, who + ": working_dir " + quote(*dir) +
                                       " is sent with the job and becomes its "
                                       "working directory; drop --workdir " +
                                       quote(*working));
    detail::snapshot made;
    const std::filesystem::path source = *dir;
    co_await blocking([&] { made = detail::take_snapshot(source, home, who); });
    // A script inside the directory runs as the snapshot's (then the job's copy's) file.
    if (auto* p = std::get_if<python_trainer>(&req.job_trainer); p && !p->source_file.empty()) {
      auto rel = std::filesystem::path(p->source_file).lexically_relative(made.source);
      if (!rel.empty() && *rel.begin() != "..") p->source_file = (made.dir / rel).string();
    }
    log->debug("{}: working_dir {}: snapshot {} ({} files, {} bytes{})", who, source.string(), made.hash,
               made.files, made.bytes, made.reused ? ", unchanged: not copied again" : "");
    *dir = made.dir.string();
  }

  void check_running() const {
    if (stopping) fail(errc::shut_down, "the engine is shutting down");
  }

  /// Kubeflow's "TrainJob <n> is Failed" with each failed step's last lines,
  /// read through the backend as `tjob logs --tail N` reads them.
  asio::awaitable<std::string> failure_message(const train_job& job) {
    std::map<std::string, std::string> last_logs;
    for (const auto& s : job.steps) {
      if (s.status != job_status::failed) continue;
      auto& text = last_logs[s.name];
      try {
        log_options o;
        o.step = s.name;
        o.tail = cfg.failure_log_lines;
        auto stream = co_await backend->get_job_logs(job.name, std::move(o));
        while (auto chunk = co_await stream.read_some()) {
          if (text.size() < (1u << 20)) text += *chunk;
        }
      } catch (const std::exception& e) {
        text = std::string("(its log cannot be read: ") + e.what() + ")\n";
      }
    }
    co_return detail::failure_message(job, last_logs);
  }
};

engine::engine(asio::any_io_executor ex, engine_config config) : impl_(std::make_shared<impl>()) {
  auto& e = *impl_;
  e.ex = ex;
  e.cfg = std::move(config);
  e.log = e.cfg.logger ? e.cfg.logger : quiet_logger();
  e.cfg.logger = e.log;
  e.home = std::filesystem::absolute(e.cfg.home.empty() ? default_home() : e.cfg.home);
  e.cfg.home = e.home;
  prepare_home(e.home);
  raise_open_file_limit();
  detail::backend_context ctx;
  ctx.ex = ex;
  ctx.cfg = e.cfg;
  ctx.home = e.home;
  ctx.log = e.log;
  auto runtime_dirs = e.cfg.runtime_dirs;
  if (runtime_dirs.empty()) runtime_dirs.push_back(e.home / "runtimes");
  ctx.runtimes = [dirs = std::move(runtime_dirs), log = e.log,
                  cache = std::make_shared<detail::runtime_cache>()](bool report) {
    auto cat = cache->load(dirs);
    if (report)
      for (const auto& p : cat->problems) log->warn("runtime skipped: {}", p);
    return cat;
  };
  e.backend = detail::make_backend(std::move(ctx));
}

engine::~engine() = default;

asio::any_io_executor engine::get_executor() const { return impl_->ex; }
const std::filesystem::path& engine::home() const { return impl_->home; }

namespace {

// "the kubernetes backend": the registered backends that keep labels, for a refusal.
// "the local and kubernetes backends": those that have a capability.
std::string backends_with(bool backend_capabilities::*has) {
  std::vector<std::string> ids;
  for (const auto& b : registered_backends())
    if (b.capabilities.*has) ids.push_back(b.id);
  std::string out = "the ";
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i == 0 ? "" : i + 1 == ids.size() ? " and " : ", ") + ids[i];
  return out + (ids.size() == 1 ? " backend" : " backends");
}

// A warning before the deadline (train_request::warning) needs a backend
// that gives it (a server checks its own) and a deadline longer than it.
void check_warning(const train_request& req, const backend_capabilities& caps) {
  if (!req.warning || caps.forwards) return;
  const auto who = req.name.empty() ? std::string("TrainJob") : "TrainJob " + quote(req.name);
  const auto what = who + ": warning " + stop_warning_text(*req.warning) + ": ";
  if (!caps.stop_warning)
    fail(errc::invalid_argument,
         what + "the " + caps.id + " backend cannot warn a job before its deadline; " +
             backends_with(&backend_capabilities::stop_warning) + " can, or drop the warning");
  if (req.active_deadline.count() == 0)
    fail(errc::invalid_argument,
         what + "the job has no active deadline to warn of; give it one (--deadline, ActiveDeadlineSeconds)");
  if (req.warning->before >= req.active_deadline)
    fail(errc::invalid_argument, what + "its active deadline is " +
                                     std::to_string(req.active_deadline.count()) +
                                     " s, no later than the warning; warn less long before it");
}

// A start time (train_request::begin) needs a backend that holds a job back
// until then (a server checks its own).
void check_begin(const train_request& req, const backend_capabilities& caps) {
  if (!req.begin || caps.begin_time || caps.forwards) return;
  const auto who = req.name.empty() ? std::string("TrainJob") : "TrainJob " + quote(req.name);
  fail(errc::invalid_argument, who + ": begin " + format_time(*req.begin) + ": the " + caps.id +
                                   " backend cannot hold a job back until a time; " +
                                   backends_with(&backend_capabilities::begin_time) +
                                   " can, or submit it at that time");
}

// A cancel that warns the job first (cancel_options::checkpoint) needs a
// backend that signals jobs (a server checks its own), and leaves it time.
void check_checkpoint_cancel(const std::string& name, const cancel_options& o,
                             const backend_capabilities& caps) {
  const auto what = "TrainJob " + quote(name) + ": cancel with checkpoint: ";
  if (o.force)
    fail(errc::invalid_argument,
         what + "force stops the job at once and leaves it no time to save; give one or the other");
  if (!caps.stop_warning && !caps.forwards)
    fail(errc::invalid_argument, what + "the " + caps.id + " backend cannot send a job its warning signal; " +
                                     backends_with(&backend_capabilities::stop_warning) +
                                     " can; cancel it without checkpoint");
}

// The local backend's interpreter and its system packages, when the request
// leaves them: $TJOB_PYTHON and $TJOB_SYSTEM_SITE_PACKAGES=1, for every
// front end alike (an unchanged Kubeflow program can then run offline
// against a system torch, which the torch runtime would otherwise fetch).
void local_python_defaults(train_request& req) {
  auto* p = std::get_if<python_trainer>(&req.job_trainer);
  if (!p) return;
  if (p->python.empty())
    if (const char* v = std::getenv("TJOB_PYTHON"); v && *v) p->python = v;
  if (!p->system_site_packages)
    if (const char* v = std::getenv("TJOB_SYSTEM_SITE_PACKAGES"); v && std::string_view(v) == "1")
      p->system_site_packages = true;
}

}  // namespace

asio::awaitable<std::string> engine::train(train_request req) {
  auto& e = *impl_;
  // (this engine's backend runs the job here; a server's applies its own defaults)
  if (e.backend->capabilities().runs_here) local_python_defaults(req);
  if (!req.labels.empty() || !req.annotations.empty()) {
    const auto runs = co_await e.backend->job_backend();
    if (!runs.keeps_labels)
      fail(errc::invalid_argument, std::string(req.labels.empty() ? "Annotations" : "Labels") +
                                       " option is not compatible with the " + runs.id +
                                       " backend (TrainJob " + quote(req.name) + "); only " +
                                       backends_with(&backend_capabilities::keeps_labels) +
                                       " keeps labels and annotations");
  }
  e.check_running();
  detail::checked_request checked;
  checked.generated_name = req.name.empty();
  auto catalog = co_await e.backend->runtimes(true);
  checked.rt = detail::check_request(req, *catalog);
  const auto caps = e.backend->capabilities();
  check_warning(req, caps);
  check_begin(req, caps);
  co_await e.send_code_dir(req, caps);
  checked.request = std::move(req);
  co_return co_await e.backend->train(std::move(checked));
}

asio::awaitable<train_job> engine::get_job(std::string name) {
  co_return co_await impl_->backend->get_job(std::move(name));
}

asio::awaitable<std::vector<train_job>> engine::list_jobs(std::optional<std::string> runtime) {
  co_return co_await impl_->backend->list_jobs(std::move(runtime));
}

namespace {

// What a watcher of the list sees change: a job added or gone, or one not in the same_state.
bool same_view(const std::vector<train_job>& a, const std::vector<train_job>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), same_state);
}

}  // namespace

asio::awaitable<std::vector<train_job>> engine::wait_for_jobs_change(std::vector<train_job> known,
                                                                     std::optional<std::string> runtime,
                                                                     std::chrono::milliseconds timeout) {
  auto& e = *impl_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto watch = co_await e.backend->watch_all();  // before the first read: no change is missed
  for (;;) {
    std::optional<std::string> which = runtime;
    auto now = co_await e.backend->list_jobs(std::move(which));
    if (!same_view(now, known) || std::chrono::steady_clock::now() >= deadline) co_return now;
    co_await watch->changed(deadline);
  }
}

asio::awaitable<log_stream> engine::get_job_logs(std::string name, log_options options) {
  if (options.attempt) {
    if (*options.attempt < 1)
      fail(errc::invalid_argument, "the log of TrainJob " + quote(name) + ": attempt=" +
                                       std::to_string(*options.attempt) + "; attempts are counted from 1");
    // Attempts are tjob's restarts: a backend whose peer restarts (a
    // container's restart policy) or never restarts has one log.
    const auto runs = co_await impl_->backend->job_backend();
    if (*options.attempt > 1 && !runs.restarts)
      fail(errc::invalid_argument,
           "TrainJob " + quote(name) + " has no attempt " + std::to_string(*options.attempt) + ": jobs on the " +
               runs.id + " backend are not restarted by tjob, so each has one (docs/scheduling.md)");
    if (*options.attempt == 1 && !runs.restarts) options.attempt.reset();
  }
  co_return co_await impl_->backend->get_job_logs(std::move(name), std::move(options));
}

// The wait/settle rule of every backend: a status asked for ends the wait;
// Failed, when not asked for, raises job_failed with the failed steps' last
// log lines; any other end raises unreachable_status; the deadline raises
// timeout. Woken by the backend's watch, never by polling here.
asio::awaitable<train_job> engine::wait_for_job_status(std::string name, std::set<job_status> statuses,
                                                       std::chrono::milliseconds timeout) {
  if (timeout <= std::chrono::milliseconds::zero())
    fail(errc::invalid_argument,
         "Timeout must be a positive number, got timeout=" + std::to_string(timeout.count()) +
             "ms (waiting for TrainJob " + quote(name) + ")");
  if (statuses.empty())
    fail(errc::invalid_argument, "waiting for TrainJob " + quote(name) +
                                     ": the set of statuses to wait for is empty; give at "
                                     "least one of Created, Running, Complete, Failed");
  auto& e = *impl_;
  auto deadline = steady::now() + timeout;
  auto watch = co_await e.backend->watch_job(name);
  for (;;) {
    auto job = co_await watch->current();
    if (job) {
      if (statuses.count(job->status)) co_return std::move(*job);
      if (job->status == job_status::failed) {
        auto message = co_await e.failure_message(*job);
        fail(errc::job_failed, std::move(message));
      }
      if (is_terminal(job->status))
        fail(errc::unreachable_status, "TrainJob " + job->name + " is " +
                                           std::string(to_string(job->status)) +
                                           " and will not reach status: " + status_list(statuses));
    }
    e.check_running();
    if (!co_await watch->changed(deadline) && steady::now() >= deadline)
      fail(errc::timeout, "Timeout waiting for TrainJob " + name +
                              " to reach status: " + status_list(statuses) + watch->trouble());
  }
}

asio::awaitable<train_job> engine::wait_for_job_change(std::string name, train_job known,
                                                       std::chrono::milliseconds timeout) {
  auto& e = *impl_;
  auto deadline = steady::now() + timeout;
  auto watch = co_await e.backend->watch_job(name);
  for (;;) {
    auto job = co_await watch->current();
    if (!job) {
      auto read = co_await e.backend->get_job(name);  // says not found, as get_job does
      job = std::move(read);
    }
    if (!same_state(*job, known)) co_return std::move(*job);
    e.check_running();
    if (!co_await watch->changed(deadline) && steady::now() >= deadline) co_return std::move(*job);
  }
}

asio::awaitable<void> engine::cancel_job(std::string name) {
  cancel_options graceful;
  co_await cancel_job(std::move(name), graceful);
}

asio::awaitable<void> engine::cancel_job(std::string name, cancel_options options) {
  impl_->check_running();
  if (options.checkpoint) check_checkpoint_cancel(name, options, impl_->backend->capabilities());
  co_await impl_->backend->cancel_job(std::move(name), options);
}

asio::awaitable<void> engine::delete_job(std::string name) {
  impl_->check_running();
  co_await impl_->backend->delete_job(std::move(name));
}

asio::awaitable<std::vector<event>> engine::get_job_events(std::string name) {
  co_return co_await impl_->backend->get_job_events(std::move(name));
}

asio::awaitable<std::vector<runtime>> engine::list_runtimes() {
  auto cat = co_await impl_->backend->runtimes(true);
  co_return cat->runtimes;
}

asio::awaitable<std::vector<std::string>> engine::runtime_problems() {
  auto cat = co_await impl_->backend->runtimes(false);
  co_return cat->problems;
}

asio::awaitable<runtime> engine::get_runtime(std::string name) {
  auto cat = co_await impl_->backend->runtimes(true);
  auto* r = cat->find(name);
  if (!r) fail(errc::runtime_not_found, cat->not_found_message(name));
  co_return *r;
}

asio::awaitable<std::vector<venv_cache_entry>> engine::list_venv_cache() {
  co_return co_await impl_->backend->list_venv_cache();
}

asio::awaitable<std::vector<venv_cache_entry>> engine::prune_venv_cache(std::chrono::seconds unused_for) {
  co_return co_await impl_->backend->prune_venv_cache(unused_for);
}

asio::awaitable<store_check> engine::check_store(bool repair) {
  co_return co_await impl_->backend->check_store(repair);
}

asio::awaitable<std::vector<queue_entry>> engine::get_queue() { co_return co_await impl_->backend->queue(); }

asio::awaitable<backend_capabilities> engine::job_backend() {
  co_return co_await impl_->backend->job_backend();
}

asio::awaitable<void> engine::shutdown() {
  auto self = impl_;
  self->stopping = true;
  co_await self->backend->shutdown();
}

}  // namespace tjob
