// A step's processes: its whole tree, its limits, and its end.
//
// A step is the whole process tree it started, not only its process group
// (issue 43): a `setsid` child or a double-forked daemon left the group and
// outlived cancel, delete and the deadline. Each process of a step goes into
// a cgroup of its own that tracks its tree (process::make_tree_cgroup; the
// child joins it before exec); when the step's main process ends, or the job
// is stopped, every process still in it is signalled. The step ends with its main process, as a container
// does (and as Kubernetes and Slurm's proctrack/cgroup end a step): the job is Complete or Failed by that
// exit, and what it left behind is killed before the exit is recorded.
//
// Where no cgroup can be made (no rights to the cgroup file system, none
// mounted), the job's token in the environment is what finds its processes,
// as the lost-job reconciler finds them: when the job's last step ends, every
// process carrying the token is killed. A process that leaves its session
// and execs with an empty environment escapes that fallback;
// docs/reliability.md says so.
#include "adapters/local/local_impl.hpp"

#include "adapters/process/cgroup.hpp"
#include "adapters/process/proc_info.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <boost/asio/steady_timer.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>

namespace tjob::local {

namespace asio = boost::asio;

int engine_state::open_tree(job_rec& j, step_rec& s, const std::string& cgroup_name) {
  std::string why_not;
  auto dir = process::make_tree_cgroup(cgroup_name, why_not);
  int fd = -1;
  std::int8_t at = -1;
  if (dir) {
    fd = ::open((*dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) why_not = "cannot open " + *dir + "/cgroup.procs: " + std::strerror(errno);
    at = keep_cgroup(s, *dir);
  }
  if (fd < 0) {
    s.tree_at = -1;
    if (!tree_fallback_said) {  // once per engine: it holds for every job
      tree_fallback_said = true;
      log->info(
          "job {}: processes that leave a job's process group are found by the job's token in their "
          "environment, not by a cgroup: {}",
          j.row.name, why_not);
    }
    return -1;
  }
  s.tree_at = at;
  return fd;
}

std::int8_t engine_state::keep_cgroup(step_rec& s, const std::string& dir) {
  auto it = std::find(s.cgroups.begin(), s.cgroups.end(), dir);
  if (it == s.cgroups.end()) it = s.cgroups.insert(it, dir);  // (three at most: tree, memory, CPU)
  return static_cast<std::int8_t>(it - s.cgroups.begin());
}

// The node's limits, on its code's process just after exec (a memory and a
// CPU cgroup are other hierarchies than the tree's on v1, and the spawn
// joins one): what it starts later (torchrun's workers) is inside.
void engine_state::limit_step(job_rec& j, step_rec& s, const phase& ph, const std::string& cgroup_name) {
  if (ph.memory_limit) {
    // The node's memory as Kubernetes and Docker mean it: what its whole
    // process tree has resident, in a memory cgroup.
    std::string why_not;
    const auto mib = ph.memory_limit >> 20;
    if (auto dir = process::limit_memory(s.row.pid, cgroup_name, ph.memory_limit, why_not)) {
      s.memory_at = keep_cgroup(s, *dir);
      say_limit(j, s, fmt::format("memory limited to {} MiB for the node ({})", mib, *dir));
    } else {
      // Without a cgroup, an address-space limit per process is all there is;
      // it is not the same thing, and the log says so.
      rlimit lim{ph.memory_limit, ph.memory_limit};
      if (::prlimit(s.row.pid, RLIMIT_AS, &lim, nullptr) != 0)
        say_limit(j, s,
                  fmt::format("memory not limited: {}; and no address-space limit either: {}", why_not,
                              std::strerror(errno)));
      else
        say_limit(j, s,
                  fmt::format("warning: memory limited as address space, not resident memory: {}. "
                              "Each process may map at most {} MiB (RLIMIT_AS), which large imports such "
                              "as torch can exceed while using far less; raise memory= or run where "
                              "cgroups are writable",
                              why_not, mib));
    }
  }
  if (ph.cpu_limit > 0) {
    std::string why_not;
    auto dir = process::limit_cpu(s.row.pid, cgroup_name, ph.cpu_limit, why_not);
    if (dir) {
      keep_cgroup(s, *dir);
      say_limit(j, s, "CPU time limited to " + std::to_string(ph.cpu_limit) + " CPU(s) (" + *dir + ")");
    } else {
      say_limit(j, s, "CPU time not limited: " + why_not);
    }
  }
}

void engine_state::end_tree(job_rec& j, step_rec& s) {
  std::size_t killed = 0;
  if (const auto* tree = s.tree_cgroup()) {
    killed = process::signal_all(*tree, SIGKILL);
  } else {
    // The token is the job's, not the step's: only once no other step runs.
    for (const auto& other : j.steps)
      if (&other != &s && other.proc.pid() > 0) return;
    const std::set<std::string> token{std::string(token_variable) + "=" + job_token(j.row)};
    for (const auto& [pid, entry] : process::find_by_environment(token)) {
      if (pid == self_pid) continue;
      ::kill(pid, SIGKILL);
      ++killed;
    }
  }
  if (killed > 0)
    log->info("job {} step {}: killed {} process(es) it left behind outside its process group", j.row.name,
              s.row.name, killed);
}

// A cgroup is removed once the kernel has emptied it: the processes killed
// above take a moment to exit, so an rmdir that finds it busy is tried again
// on the reactor a little later (never a wait on the pool, which makes the
// next jobs' directories), and given up after a few seconds.
void engine_state::remove_cgroups(step_rec& s) {
  auto dirs = std::move(s.cgroups);
  s.cgroups.clear();
  s.memory_at = -1;
  s.tree_at = -1;
  remove_cgroups_later(std::move(dirs), 0);
}

void engine_state::remove_cgroups_later(std::vector<std::string> dirs, int round) {
  std::vector<std::string> busy;
  for (auto& dir : dirs) {
    if (process::remove_cgroup(dir)) {
      busy_cgroups.erase(dir);
    } else {
      busy_cgroups.insert(dir);
      busy.push_back(std::move(dir));
    }
  }
  if (busy.empty() || round >= 8) return;  // (what is left, shutdown tries again)
  auto timer = std::make_shared<asio::steady_timer>(ex, std::chrono::milliseconds(5 << round));
  timer->async_wait(
      [w = weak_from_this(), timer, busy = std::move(busy), round](boost::system::error_code ec) {
        if (auto self = w.lock(); self && !ec && !self->stopping) self->remove_cgroups_later(busy, round + 1);
      });
}

asio::awaitable<void> engine_state::remove_busy_cgroups() {
  if (busy_cgroups.empty()) co_return;
  std::vector<std::string> dirs(busy_cgroups.begin(), busy_cgroups.end());
  busy_cgroups.clear();
  std::vector<std::string> left;
  co_await blocking([&] { left = process::remove_when_empty(dirs, std::chrono::seconds(2)); });
  for (const auto& dir : left) log->warn("cannot remove cgroup {}: it still holds processes", dir);
}

// The step's process has exited: what it left behind is ended, its cgroups
// go, and its exit (with what the engine knows of why) is the job's input.
void engine_state::step_exited(const std::shared_ptr<job_rec>& j, std::size_t index, process::exit_status st,
                               const std::string& what, steady::duration ran) {
  auto& s = j->steps[index];
  // The step ends with its main process, as a container does: whatever it
  // left behind goes with it, in its process group or out of it.
  s.proc.signal_group(SIGKILL);
  s.proc = process::child();  // its pidfd: the one descriptor a running job holds
  s.code_runs = false;
  --live_children;
  if (!respawn_waiters.empty()) wake_respawns();
  end_tree(*j, s);
  auto why = describe(st);
  if (const auto* memory = s.memory_cgroup(); memory && process::oom_kills(*memory) > 0) {
    why = "OOMKilled";  // Kubernetes' and Docker's word
    say_limit(*j, s,
              "the kernel's OOM killer ended a process of " + s.row.name +
                  ": it used the node's whole memory limit (" + *memory + ")");
  }
  remove_cgroups(s);
  // A process that failed on a full disk (ENOSPC) rarely says so where
  // anyone reads it: its log is on that disk too (issue 43).
  std::string note;
  if (st.code != 0 && st.signal == 0 && why != "OOMKilled") {
    if (auto full = full_file_system(s.log_path)) {
      why = "DiskFull";
      note = *full;
    }
  }
  s.ended_how = why;
  const double secs = std::chrono::duration<double>(ran).count();
  // A cancel asked by another process (cancel_foreign) is in the log, and it
  // signalled the process itself: it is an input here too. (A handler must
  // not throw: a store that cannot be read now costs the cancel's wording,
  // not the exit.)
  try {
    if (db->has_event(j->row.name, log_event::cancel_requested)) j->post(job_input::cancel(false, true));
  } catch (const std::exception& e) {
    log->warn("job {}: cannot read its event log at the exit of {}: {}", j->row.name, s.row.name, e.what());
  }
  j->post(job_input::exited(index, st.code, std::move(why), s.row.pid, what, secs, std::move(note)));
}

// What tjob says of a node's limits: a line of the log of a Python job (as
// its setup's lines are); a command's log stays its own bytes, so there it is
// a Setup event (tjob get, the events) and a line of the engine's log.
void engine_state::say_limit(job_rec& j, step_rec& s, const std::string& text) {
  if (!j.venv.empty()) {
    log_progress(j, s, "[tjob] " + text + "\n");
    return;
  }
  log->info("job {} {}: {}", j.row.name, s.row.name, text);
  queue_write([name = j.row.name, step = s.row.name, t = now_ms(), text](detail::store& db) {
    db.append_event(name, step, t, log_event::setup, text);
  });
}

// ---------------------------------------------------------------------------
// starts the OS refuses (ulimit -u, ulimit -n): the step waits

// The OS refused a step's process for want of processes (issue 43: a job
// array under ulimit -u lost its members): the step waits and tries again,
// as others' processes end. Its first wait is said in a Waiting event.
void engine_state::respawn_later(const std::shared_ptr<job_rec>& j, const job_action& a) {
  if (!j->respawns) j->respawns = std::make_unique<job_rec::respawn_timers>();
  auto& timers = j->respawns->by_step;
  if (timers.size() < j->steps.size()) timers.resize(j->steps.size());
  auto& timer = timers[a.step];
  if (!timer) timer = std::make_unique<asio::steady_timer>(ex);
  timer->expires_after(a.delay);
  // Cancelled (an exit woke it, see wake_respawns), it is due at once; a
  // job that has ended ignores it.
  timer->async_wait([w = std::weak_ptr<job_rec>(j), step = a.step, phase = a.phase](error_code) {
    if (auto jr = w.lock()) jr->post(job_input::respawn_due(step, phase));
  });
  respawn_waiters.push_back(j);
  if (a.text.empty()) return;
  std::string text = a.text;
  log->log(std::exchange(said_fork_refused, true) ? spdlog::level::info : spdlog::level::warn,
           "job {} step {}: {}", j->row.name, j->steps[a.step].row.name, text);
  queue_write([name = j->row.name, step = j->steps[a.step].row.name, t = now_ms(), text = std::move(text)](
                  detail::store& db) { db.append_event(name, step, t, log_event::waiting, text); });
}

// A process ended: what it held (a process slot, its pidfd) may be what a
// refused start waits for. Each waiting step tries again now.
void engine_state::wake_respawns() {
  for (auto& w : std::exchange(respawn_waiters, {}))
    if (auto j = w.lock(); j && j->respawns)
      for (auto& t : j->respawns->by_step)
        if (t) t->cancel();
}

std::string refused_limit(const error_code& code) {
  rlimit lim{};
  const int which = code == process::process_errc::no_processes     ? RLIMIT_NPROC
                    : code == process::process_errc::no_descriptors ? RLIMIT_NOFILE
                                                                    : -1;
  if (which < 0 || ::getrlimit(which, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return {};
  return which == RLIMIT_NPROC
             ? fmt::format(" (this user may have {} processes and threads: ulimit -u)", lim.rlim_cur)
             : fmt::format(" (this process may have {} files open: ulimit -n)", lim.rlim_cur);
}

std::string engine_state::descriptors_short() const {
  rlimit lim{};
  if (live_children == 0 || ::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return {};
  if (live_children + base_descriptors + descriptor_reserve < lim.rlim_cur) return {};
  return fmt::format(
      "too many open files (jobs' processes hold {}, the engine {}, and {} are kept for its own work, of this "
      "process's limit of {}: ulimit -n)",
      live_children, base_descriptors, descriptor_reserve, lim.rlim_cur);
}

}  // namespace tjob::local
