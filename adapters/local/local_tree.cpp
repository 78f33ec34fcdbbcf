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

#include <spdlog/spdlog.h>
#include <boost/asio/steady_timer.hpp>

#include <fcntl.h>
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
  if (dir) {
    fd = ::open((*dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) why_not = "cannot open " + *dir + "/cgroup.procs: " + std::strerror(errno);
    if (std::find(s.cgroups.begin(), s.cgroups.end(), *dir) == s.cgroups.end()) s.cgroups.push_back(*dir);
  }
  if (fd < 0) {
    s.tree_cgroup.clear();
    if (!tree_fallback_said) {  // once per engine: it holds for every job
      tree_fallback_said = true;
      log->info(
          "job {}: processes that leave a job's process group are found by the job's token in their "
          "environment, not by a cgroup: {}",
          j.row.name, why_not);
    }
    return -1;
  }
  s.tree_cgroup = *dir;
  return fd;
}

void engine_state::end_tree(job_rec& j, step_rec& s) {
  std::size_t killed = 0;
  if (!s.tree_cgroup.empty()) {
    killed = process::signal_all(s.tree_cgroup, SIGKILL);
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
  s.memory_cgroup.clear();
  s.tree_cgroup.clear();
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

}  // namespace tjob::local
