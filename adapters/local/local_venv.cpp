#include "adapters/local/local_impl.hpp"

#include "adapters/local/log_files.hpp"

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

// How a job ends when its venv could not be set up.
step_outcome engine_state::setup_failure(job_rec& j, const std::string& why) {
  log_progress(j, j.steps[0], "[tjob] " + why + "\n");
  step_outcome out;
  out.ev = j.setup_started ? job_event{event_kind::exited, 1} : job_event{event_kind::start_failed};
  out.message = why;
  out.reason = "setup failed: " + why;
  out.started = j.setup_started;
  return out;
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
    co_await blocking([&] { problem = venv_store.check(key); });
    if (!problem) {
      auto t0 = steady::now();
      co_await blocking([&] { venv_store.copy_to(key, j->venv); });
      detail::venv_cache::cache::unlock(fd);
      fd = -1;
      double secs = std::chrono::duration<double>(steady::now() - t0).count();
      auto text = fmt::format("venv from the cache ({}) in {:.3f} s", key, secs);
      log_progress(*j, s, "[tjob] " + text + "\n");
      queue_write([name = j->row.name, t = now_ms(), text](detail::store& db) {
        db.append_event(name, "node-0", t, log_event::setup, text);
      });
      co_return true;
    }
    detail::venv_cache::cache::unlock(fd);
    fd = -1;
    if (*problem != "missing")
      log_progress(*j, s, "[tjob] the cached venv " + key + " is broken (" + *problem + "); rebuilding it\n");
  }
  fd = venv_store.try_lock(key, true);
  co_return false;
}

// Builds the venv `key` in the cache, under the exclusive lock `fd` (which
// it releases), by running the job's venv and pip phases there, then copies
// it into the job. nullopt when the venv is ready; `raced` when somebody
// finished the entry just before (nothing built: look again); else the
// outcome that ends the job.
asio::awaitable<std::optional<step_outcome>> engine_state::build_cached_venv(std::shared_ptr<job_rec> j,
                                                                             const std::string& key, int fd,
                                                                             bool& raced) {
  std::optional<std::string> problem;
  auto build = venv_store.build_dir(key, j->row.name);
  try {
    co_await blocking([&] {
      problem = venv_store.check(key);
      if (problem) venv_store.remove(key);  // a broken entry, and builds nobody finished
    });
  } catch (const std::exception& e) {
    detail::venv_cache::cache::unlock(fd);
    co_return setup_failure(*j, std::string("venv cache: ") + e.what());
  }
  raced = !problem;
  if (raced) {
    detail::venv_cache::cache::unlock(fd);
    co_return std::nullopt;
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
  log_progress(*j, j->steps[0], "[tjob] building the cached venv " + key + "\n");
  std::optional<step_outcome> ended;
  try {
    ended = co_await run_cache_build(j, key, build, setup);
  } catch (const std::exception& e) {
    ended = setup_failure(*j, std::string("venv cache: ") + e.what());
  }
  detail::venv_cache::cache::unlock(fd);
  if (auto it = venv_building.find(key); it != venv_building.end()) {
    it->second->notify_all();
    venv_building.erase(it);
  }
  co_return ended;
}

// The setup phases into the cache entry's build directory, then the entry
// finalized and copied into the job; a failed build is removed.
asio::awaitable<std::optional<step_outcome>> engine_state::run_cache_build(std::shared_ptr<job_rec> j,
                                                                           const std::string& key,
                                                                           std::filesystem::path build,
                                                                           std::vector<phase*> setup) {
  co_await blocking([&] {
    if (::mkdir(build.c_str(), 0700) != 0)
      throw std::system_error(errno, std::generic_category(), "cannot create " + build.string());
  });
  auto out = co_await run_phases(j, 0, setup, false);
  j->setup_started = out.started;
  if (out.ev.kind == event_kind::exited && out.ev.exit_code == 0 && !j->cancel_requested) {
    auto t0 = steady::now();
    co_await blocking([&] {
      venv_store.finalize(key, build, *j->venv_inputs);
      venv_store.copy_to(key, j->venv);
    });
    double secs = std::chrono::duration<double>(steady::now() - t0).count();
    log_progress(*j, j->steps[0], fmt::format("[tjob] venv cached as {}; copied in {:.3f} s\n", key, secs));
    co_return std::nullopt;
  }
  co_await blocking([&] {
    std::error_code ec;
    std::filesystem::remove_all(build, ec);
  });
  co_return out;
}

asio::awaitable<std::optional<step_outcome>> engine_state::prepare_venv(std::shared_ptr<job_rec> j) {
  auto& in = *j->venv_inputs;
  auto id = co_await python_identity(*j);
  if (!id) {
    // Without knowing the interpreter a cached venv could be the wrong one:
    // this job builds its own, as without the cache.
    log_progress(*j, j->steps[0],
                 "[tjob] venv cache not used: cannot tell which interpreter " + in.python + " runs\n");
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
      co_return step_outcome{
          {event_kind::cancelled}, "cancelled before it started", "cancelled", j->setup_started};
    check_running();
    int fd = -1;
    bool copied = false;
    try {
      copied = co_await copy_from_cache(j, key, fd);
    } catch (const std::exception& e) {
      detail::venv_cache::cache::unlock(fd);
      co_return setup_failure(*j, std::string("venv cache: ") + e.what());
    }
    if (copied) {
      j->phases.clear();
      co_return std::nullopt;
    }
    if (fd < 0) {
      co_await wait_for_venv(key, w);
      continue;
    }
    bool raced = false;
    auto ended = co_await build_cached_venv(j, key, fd, raced);
    if (raced) continue;
    if (ended) co_return ended;
    j->phases.clear();
    co_return std::nullopt;
  }
}

}  // namespace tjob::local
