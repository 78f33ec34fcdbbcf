#include "adapters/local/local_impl.hpp"
#include "adapters/local/log_files.hpp"
#include "adapters/python/python_plan.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <unistd.h>

extern char** environ;

namespace tjob::local {

// Which interpreter a job's python is. A native binary says it itself; a
// script (a pyenv shim) picks one when it runs, so it is asked, as the venv
// phase would run it (same environment and directory).
asio::awaitable<std::optional<std::pair<std::string, std::string>>> engine_state::python_identity(
    job_rec& j) {
  const std::string given = j.venv_inputs->python;
  if (auto n = detail::venv_cache::native_identity(given)) co_return n;
  auto venv_phase =
      std::find_if(j.phases.begin(), j.phases.end(), [](const phase& p) { return p.name == "venv"; });
  const phase& venv = venv_phase != j.phases.end() ? *venv_phase : j.phases.front();
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
  spec.env = process::environment_entries(venv.env);
  spec.inherited_env = inherited_env();
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
asio::awaitable<void> engine_state::wait_for_venv(const std::string& key, detail::wake_signal& w) {
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

// The cached venv `key`, copied into the job under a shared lock (nobody
// rebuilds or removes it meanwhile) when it is there and sound: true. Else
// false, with `fd` holding the exclusive lock when this engine is to build
// it, -1 when another builder has it.
asio::awaitable<bool> engine_state::copy_from_cache(std::shared_ptr<job_rec> j, const std::string& key,
                                                    int& fd) {
  auto& s = j->steps[0];
  fd = venv_store.try_lock(key, false);
  if (fd >= 0) {
    std::optional<std::string> problem;
    const auto& e = *j->venv_entry;
    co_await blocking([&] { problem = venv_store.check(key, e.not_before_ms, e.stale_why); });
    if (!problem) {
      auto t0 = steady::now();
      co_await blocking([&] { venv_store.copy_to(key, j->venv); });
      detail::venv_cache::cache::unlock(fd);
      fd = -1;
      double secs = std::chrono::duration<double>(steady::now() - t0).count();
      auto text = fmt::format("venv from the cache ({}) in {:.3f} s", key, secs);  // (setup_phase_of: a hit)
      log_progress(*j, s, "[tjob] " + text + "\n");
      queue_write([name = j->row.name, t = now_ms(), text](detail::store& db) {
        db.append_event(name, "node-0", t, log_event::setup, text);
      });
      co_return true;
    }
    detail::venv_cache::cache::unlock(fd);
    fd = -1;
    if (problem->starts_with("stale"))
      log_progress(*j, s, "[tjob] the cached venv " + key + " is " + *problem + "; rebuilding it\n");
    else if (*problem != "missing")
      log_progress(*j, s, "[tjob] the cached venv " + key + " is broken (" + *problem + "); rebuilding it\n");
  }
  fd = venv_store.try_lock(key, true);
  co_return false;
}

// Looks the job's venv up in the cache: venv_resolved says what it found. A
// copy is made into the job when the entry is there and sound (`copied`);
// else this job takes the entry's lock to build it (`build`: its setup phases
// then build into the cache's build directory), or somebody else holds it
// (`busy`). `uncached` when the interpreter cannot be told (a cached venv
// could be the wrong one), `failed` when the cache does not work.
asio::awaitable<void> engine_state::resolve_venv(std::shared_ptr<job_rec> j) {
  auto& in = *j->venv_inputs;
  if (!j->venv_entry) j->venv_entry = std::make_unique<job_rec::cache_entry>();
  if (j->venv_entry->key.empty()) {
    auto id = co_await python_identity(*j);
    if (!id) {
      log_progress(*j, j->steps[0],
                   "[tjob] venv cache not used: cannot tell which interpreter " + in.python + " runs\n");
      j->venv_inputs.reset();
      j->post(job_input::venv_resolved(venv_found::uncached));
      co_return;
    }
    in.python = id->first;
    in.python_identity = id->second;
    j->venv_entry->key = detail::venv_cache::key_of(in);
  }
  const std::string key = j->venv_entry->key;
  for (;;) {
    check_running();
    int fd = -1;
    std::optional<std::string> problem;
    try {
      if (co_await copy_from_cache(j, key, fd)) {
        j->phases.clear();
        j->post(job_input::venv_resolved(venv_found::copied));
        co_return;
      }
      if (fd < 0) {
        j->post(job_input::venv_resolved(venv_found::busy));
        co_return;
      }
      const auto& e = *j->venv_entry;
      co_await blocking([&] {
        problem = venv_store.check(key, e.not_before_ms, e.stale_why);
        if (problem) venv_store.remove(key);  // a broken or stale entry, and builds nobody finished
      });
    } catch (const std::exception& e) {
      detail::venv_cache::cache::unlock(fd);
      j->post(job_input::venv_resolved(venv_found::failed, std::string("venv cache: ") + e.what()));
      co_return;
    }
    if (!problem) {  // somebody finished the entry just before: look again
      detail::venv_cache::cache::unlock(fd);
      continue;
    }
    auto build = venv_store.build_dir(key, j->row.name);
    try {
      co_await blocking([&] {
        if (::mkdir(build.c_str(), 0700) != 0)
          throw std::system_error(errno, std::generic_category(), "cannot create " + build.string());
      });
    } catch (const std::exception& e) {
      detail::venv_cache::cache::unlock(fd);
      j->post(job_input::venv_resolved(venv_found::failed, std::string("venv cache: ") + e.what()));
      co_return;
    }
    venv_building[key] = std::make_shared<detail::wake_list>();
    j->venv_entry->lock = fd;
    j->venv_entry->build = build;
    // The venv and pip phases build into the cache instead of the job.
    const std::string from = j->venv.string(), to = (build / "venv").string();
    auto retarget = [&](std::string& p) {
      if (p.rfind(from, 0) == 0) p = to + p.substr(from.size());
    };
    for (auto& ph : j->phases) {
      retarget(ph.executable);
      for (auto& a : ph.argv) retarget(a);
    }
    log_progress(*j, j->steps[0], "[tjob] building the cached venv " + key + "\n");
    j->post(job_input::venv_resolved(venv_found::build));
    co_return;
  }
}

asio::awaitable<void> engine_state::wait_venv(std::shared_ptr<job_rec> j) {
  detail::wake_signal w(ex);
  detail::wake_registration on_shutdown(j->watchers, &w);
  co_await wait_for_venv(j->venv_entry->key, w);
  j->post(job_input::venv_waited());
}

// The entry this job built goes into the cache, and a copy of it into the job.
asio::awaitable<void> engine_state::finalize_venv(std::shared_ptr<job_rec> j) {
  auto t0 = steady::now();
  try {
    co_await blocking([&] {
      venv_store.finalize(j->venv_entry->key, j->venv_entry->build, *j->venv_inputs);
      venv_store.copy_to(j->venv_entry->key, j->venv);
    });
  } catch (const std::exception& e) {
    j->post(job_input::venv_finalized(false, std::string("venv cache: ") + e.what()));
    co_return;
  }
  double secs = std::chrono::duration<double>(steady::now() - t0).count();
  // (a Setup event too: tjob::setup_phase_of reads it, a cache miss, for metrics)
  auto text = fmt::format("venv cached as {}; copied in {:.3f} s", j->venv_entry->key, secs);
  log_progress(*j, j->steps[0], "[tjob] " + text + "\n");
  queue_write([name = j->row.name, t = now_ms(), text](detail::store& db) {
    db.append_event(name, "node-0", t, log_event::setup, text);
  });
  j->post(job_input::venv_finalized(true));
}

// The build of the job's cache entry has ended: a failed one is removed,
// then the entry's lock goes and whoever waits for it looks again.
void engine_state::end_venv_build(const std::shared_ptr<job_rec>& j, bool ok) {
  auto build = std::exchange(j->venv_entry->build, {});
  int fd = std::exchange(j->venv_entry->lock, -1);
  auto release = [self = shared_from_this(), key = j->venv_entry->key, fd] {
    detail::venv_cache::cache::unlock(fd);
    if (auto it = self->venv_building.find(key); it != self->venv_building.end()) {
      it->second->notify_all();
      self->venv_building.erase(it);
    }
  };
  if (ok || build.empty()) {
    release();
    return;
  }
  spawn_internal(
      [](std::shared_ptr<engine_state> self, std::filesystem::path build, std::string job,
         std::function<void()> release) -> asio::awaitable<void> {
        struct on_exit {
          std::function<void()>& f;
          ~on_exit() { f(); }
        } released{release};
        co_await self->remove_tree(build, job);
      }(shared_from_this(), build, j->row.name, release),
      "removing a failed venv build");
}

// ---------------------------------------------------------------------------
// what tjob puts in a job's venv: the line hook, the worker-failure hook

std::filesystem::path engine_state::site_packages(const job_rec& j) const {
  std::error_code ec;
  std::filesystem::path site;
  for (const auto& e : std::filesystem::directory_iterator(j.venv / "lib", ec))
    if (e.path().filename().string().rfind("python", 0) == 0) site = e.path() / "site-packages";
  if (ec || site.empty() || !std::filesystem::is_directory(site, ec)) return {};
  return site;
}

// Every Python process of the job writes each line it prints whole
// (python::line_hook_module): the ranks of a node share its log.
void engine_state::install_line_hook(job_rec& j) {
  j.line_hook = true;
  auto site = site_packages(j);
  if (site.empty() || detail::append_file(site / python::line_hook_file, python::line_hook_module()) ||
      detail::append_file(site / python::line_hook_pth, python::line_hook_pth_text))
    log->warn("job {}: cannot install the line hook in {}: the lines of its processes may interleave",
              j.row.name, j.venv.string());
}

// A worker that raises makes the node fail, but its torchrun may end after
// another node's (whose workers lost their peer) or wait at its exit barrier
// for minutes. The hook records the exception at once; the first record is
// the job's root cause. Two small files: written here, on the reactor.
void engine_state::start_failure_watch(const std::shared_ptr<job_rec>& j) {
  if (j->failure_watch) return;
  j->failure_watch = true;
  std::error_code ec;
  std::filesystem::create_directory(failures_dir(*j), ec);
  auto site = site_packages(*j);
  if (site.empty()) {
    log->debug("job {}: no site-packages in {}; worker failures are not recorded", j->row.name,
               j->venv.string());
    return;
  }
  if (detail::append_file(site / python::failure_hook_file, python::failure_hook_module()) ||
      detail::append_file(site / python::failure_hook_pth, python::failure_hook_pth_text)) {
    log->debug("job {}: cannot install the worker failure hook in {}", j->row.name, site.string());
    return;
  }
  spawn_internal(watch_worker_failures(j), "watching worker failures");
}

asio::awaitable<void> engine_state::watch_worker_failures(std::shared_ptr<job_rec> j) {
  const auto dir = failures_dir(*j);
  detail::wake_signal w(ex);
  detail::wake_registration on_end(j->watchers, &w);  // transitions and shutdown
  int wd = watch.add(dir, &w);
  struct unwatch {
    detail::fs_watch& watch;
    int wd;
    detail::wake_signal* w;
    ~unwatch() { watch.remove(wd, w); }
  } guard{watch, wd, &w};
  while (!stopping && !is_terminal(j->row.status)) {
    // "<time_ns> <GROUP_RANK> <RANK> <what>": the earliest is the root cause.
    std::optional<std::tuple<long long, std::size_t, std::string>> first;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      auto name = e.path().filename().string();
      if (name.rfind("rank-", 0) != 0 || name.ends_with(".tmp")) continue;
      std::ifstream in(e.path());
      long long t = 0;
      std::size_t node = 0;
      std::string rank, what;
      if (!(in >> t >> node >> rank)) continue;
      std::getline(in >> std::ws, what);
      if (node >= j->steps.size()) continue;
      if (!first || t < std::get<0>(*first)) first.emplace(t, node, "rank " + rank + " raised " + what);
    }
    if (first) {
      j->post(job_input::worker_failed(std::get<1>(*first), std::get<2>(*first)));
      co_return;  // the machine takes the first; the rest follow from it
    }
    co_await w.wait_until(steady::time_point::max());
  }
}

// The step's process ending is an input of the job: `exited`. Shutting the
// engine down (the step's stop signal) leaves the process as it is.

}  // namespace tjob::local
