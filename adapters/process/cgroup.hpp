// Limits on a step's whole process tree through cgroups, where the machine
// lets this process create them (root, a writable cgroup v1 hierarchy of the
// controller, or a cgroup v2 tree with it enabled): CPU time (`cpu`) and
// resident memory (`memory`). Nothing here is required: where cgroups cannot
// be used, the caller is told why and decides what to do instead.
//
// Beside the limits, a cgroup holds a step's whole process tree, whatever
// sessions or process groups its processes make (`setsid`, a double-forked
// daemon): `make_tree_cgroup` is where the step starts, with no limit, and `signal_all` ends
// every process in it. A process cannot leave it without the rights to write
// the cgroup file system (root).
//
// Layout: v1 `/sys/fs/cgroup/<controller>/tjob/<name>`, one directory per
// controller (tracking uses `pids`, else `freezer`: neither limits anything
// unless told to); v2 `/sys/fs/cgroup/tjob/<name>`, one for all.
// $TJOB_CGROUP_ROOT replaces /sys/fs/cgroup.
#pragma once

#include <sys/types.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tjob::process {

/// Puts `pid` (and so what it starts afterwards) in the cgroup `name` (a
/// path-safe string), limited to `cpus` CPUs of CPU time. Returns the
/// cgroup's directory, or nullopt with `why_not` set.
std::optional<std::string> limit_cpu(pid_t pid, const std::string& name, double cpus, std::string& why_not);

/// The same for memory: `bytes` of memory for the whole tree (what it has
/// resident, page cache included, as Kubernetes and Docker count it), with no
/// swap beyond it where the kernel accounts swap. Past it the kernel's OOM
/// killer ends a process of the tree.
std::optional<std::string> limit_memory(pid_t pid, const std::string& name, std::uint64_t bytes,
                                        std::string& why_not);

/// Makes the cgroup `name` that holds a process tree together (no limit): a
/// child spawned into it (spawn_spec::cgroup_procs_fd, its cgroup.procs) and
/// all it starts are found there by signal_all. Returns the cgroup's
/// directory, or nullopt with `why_not` set.
std::optional<std::string> make_tree_cgroup(const std::string& name, std::string& why_not);

/// Sends `sig` to every process in the cgroup `dir`; how many it signalled.
/// With SIGKILL it reads the cgroup again until it finds none it has not
/// signalled (a process forking meanwhile is caught on the next read).
std::size_t signal_all(const std::string& dir, int sig);

/// How many processes the OOM killer ended in the memory cgroup `dir`
/// (v1 memory.oom_control, v2 memory.events); 0 when it cannot tell.
std::uint64_t oom_kills(const std::string& dir);

/// Removes a cgroup directory made above (once its processes are gone).
/// False only when it still holds processes (EBUSY): try again later.
bool remove_cgroup(const std::string& dir);

/// Removes each of `dirs` once the kernel has emptied it, waiting at most
/// `limit` in all (blocking: the processes in them were killed and are
/// exiting). Returns those still busy.
std::vector<std::string> remove_when_empty(const std::vector<std::string>& dirs,
                                           std::chrono::milliseconds limit);

/// The directory make_tree_cgroup uses for `name`, whether or not it exists;
/// empty where no cgroup hierarchy is mounted.
std::string tree_cgroup_dir(const std::string& name);

/// Every directory make_tree_cgroup, limit_cpu and limit_memory would use for `name`, whether
/// or not they exist (what crash recovery removes).
std::vector<std::string> cgroup_dirs_for(const std::string& name);

}  // namespace tjob::process
