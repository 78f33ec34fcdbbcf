#include "adapters/process/cgroup.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace tjob::process {
namespace {

constexpr long period_us = 100000;

// Where the cgroup filesystems are mounted: $TJOB_CGROUP_ROOT (a machine
// that mounts them elsewhere, and the tests' way to see the fallback), else
// /sys/fs/cgroup.
std::string cgroup_root() {
  const char* r = std::getenv("TJOB_CGROUP_ROOT");
  return r && *r ? r : "/sys/fs/cgroup";
}

bool write_file(const std::string& path, const std::string& value, std::string& why_not) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    why_not = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  ssize_t n = ::write(fd, value.data(), value.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    why_not = "cannot write " + path + ": " + std::strerror(err);
    return false;
  }
  return true;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Whether the unified (v2) hierarchy at the root has `controller`.
bool v2_has(const std::string& controller) {
  std::ifstream f(cgroup_root() + "/cgroup.controllers");
  std::string word;
  while (f >> word)
    if (word == controller) return true;
  return false;
}

bool make_dir(const std::string& dir, std::string& why_not) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return true;
  why_not = "cannot create " + dir + ": " + std::strerror(errno);
  return false;
}

struct place {
  std::string dir;  // empty: the controller is not mounted
  bool v2 = false;
};

bool is_v2() { return exists(cgroup_root() + "/cgroup.controllers"); }

place place_for(const std::string& controller, const std::string& name) {
  const auto root = cgroup_root();
  if (v2_has(controller)) return {root + "/tjob/" + name, true};
  if (controller == "pids" && is_v2()) return {root + "/tjob/" + name, true};  // v2 tracks without it
  auto v1 = root + "/" + controller;
  if (exists(v1 + "/cgroup.procs")) return {v1 + "/tjob/" + name, false};
  return {};
}

// Makes `name`'s cgroup for `controller`, lets `configure` set its limits,
// then moves `pid` into it (0: none).
template <class Configure>
std::optional<std::string> make_cgroup(pid_t pid, const std::string& controller, const std::string& name,
                                       std::string& why_not, Configure configure) {
  auto p = place_for(controller, name);
  if (p.dir.empty()) {
    why_not = "no cgroup " + controller + " controller is mounted";
    return std::nullopt;
  }
  std::string parent = p.dir.substr(0, p.dir.rfind('/'));
  if (!make_dir(parent, why_not)) return std::nullopt;
  if (p.v2 && controller != "pids" &&
      !write_file(parent + "/cgroup.subtree_control", "+" + controller, why_not))
    return std::nullopt;
  if (!make_dir(p.dir, why_not)) return std::nullopt;
  if (!configure(p.dir, p.v2) ||
      (pid > 0 && !write_file(p.dir + "/cgroup.procs", std::to_string(pid), why_not))) {
    ::rmdir(p.dir.c_str());
    return std::nullopt;
  }
  return p.dir;
}

// The hierarchy that tracks a tree: v2's, or v1's pids, else its freezer.
std::string tracking_controller() {
  if (is_v2() || exists(cgroup_root() + "/pids/cgroup.procs")) return "pids";
  return "freezer";
}

std::vector<pid_t> members(const std::string& dir) {
  std::vector<pid_t> out;
  std::ifstream f(dir + "/cgroup.procs");
  long pid = 0;
  while (f >> pid)
    if (pid > 0) out.push_back(static_cast<pid_t>(pid));
  return out;
}

}  // namespace

std::vector<std::string> cgroup_dirs_for(const std::string& name) {
  std::vector<std::string> out;
  for (const auto& c : {tracking_controller(), std::string("cpu"), std::string("memory")}) {
    auto p = place_for(c, name);
    if (!p.dir.empty() && std::find(out.begin(), out.end(), p.dir) == out.end()) out.push_back(p.dir);
  }
  return out;
}

std::string tree_cgroup_dir(const std::string& name) { return place_for(tracking_controller(), name).dir; }

std::optional<std::string> make_tree_cgroup(const std::string& name, std::string& why_not) {
  return make_cgroup(0, tracking_controller(), name, why_not, [](const std::string&, bool) { return true; });
}

std::size_t signal_all(const std::string& dir, int sig) {
  std::set<pid_t> sent;
  // Bounded: a tree that forks faster than it is killed is still caught by
  // the caller's next call (the step's end, the reconciler).
  for (int round = 0; round < 100; ++round) {
    bool fresh = false;
    for (pid_t pid : members(dir)) {
      if (!sent.insert(pid).second) continue;
      fresh = true;
      ::kill(pid, sig);
    }
    if (!fresh || sig != SIGKILL) break;
  }
  return sent.size();
}

std::optional<std::string> limit_cpu(pid_t pid, const std::string& name, double cpus, std::string& why_not) {
  auto quota = static_cast<long>(cpus * period_us);
  return make_cgroup(pid, "cpu", name, why_not, [&](const std::string& dir, bool v2) {
    return v2 ? write_file(dir + "/cpu.max", std::to_string(quota) + " " + std::to_string(period_us), why_not)
              : write_file(dir + "/cpu.cfs_period_us", std::to_string(period_us), why_not) &&
                    write_file(dir + "/cpu.cfs_quota_us", std::to_string(quota), why_not);
  });
}

std::optional<std::string> limit_memory(pid_t pid, const std::string& name, std::uint64_t bytes,
                                        std::string& why_not) {
  const auto value = std::to_string(bytes);
  return make_cgroup(pid, "memory", name, why_not, [&](const std::string& dir, bool v2) {
    if (v2) {
      if (!write_file(dir + "/memory.max", value, why_not)) return false;
      std::string ignored;  // no swap controller: nothing to limit there
      if (exists(dir + "/memory.swap.max")) write_file(dir + "/memory.swap.max", "0", ignored);
      return true;
    }
    if (!write_file(dir + "/memory.limit_in_bytes", value, why_not)) return false;
    // What the process allocated before it was moved in (it runs from exec)
    // moves with it: anonymous and file pages (bits 0 and 1). Newer kernels
    // refuse this (deprecated): there, and on v2, that window's memory stays
    // charged to tjob's own cgroup.
    std::string ignored_move;
    if (exists(dir + "/memory.move_charge_at_immigrate"))
      write_file(dir + "/memory.move_charge_at_immigrate", "3", ignored_move);
    // memory+swap: no swap beyond the limit (set after, it may not be below it)
    std::string ignored;
    if (exists(dir + "/memory.memsw.limit_in_bytes"))
      write_file(dir + "/memory.memsw.limit_in_bytes", value, ignored);
    return true;
  });
}

std::uint64_t oom_kills(const std::string& dir) {
  for (const char* file : {"/memory.events", "/memory.oom_control"}) {
    std::ifstream f(dir + file);
    std::string key;
    std::uint64_t value = 0;
    while (f >> key >> value)
      if (key == "oom_kill") return value;
  }
  return 0;
}

std::vector<std::string> remove_when_empty(const std::vector<std::string>& dirs,
                                           std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  std::vector<std::string> busy = dirs;
  for (auto pause = std::chrono::milliseconds(1);;
       pause = std::min(pause * 2, std::chrono::milliseconds(100))) {
    std::erase_if(busy, [](const std::string& dir) { return remove_cgroup(dir); });
    if (busy.empty() || std::chrono::steady_clock::now() + pause > until) return busy;
    // The kernel says nothing when a cgroup empties (v1 has no event a
    // process can wait on): a short, bounded retry.
    std::this_thread::sleep_for(pause);
  }
}

bool remove_cgroup(const std::string& dir) {
  return dir.empty() || ::rmdir(dir.c_str()) == 0 || errno != EBUSY;
}

}  // namespace tjob::process
