// Limits on a step's whole process tree through cgroups, where the machine
// lets this process create them (root, a writable cgroup v1 hierarchy of the
// controller, or a cgroup v2 tree with it enabled): CPU time (`cpu`) and
// resident memory (`memory`). Nothing here is required: where cgroups cannot
// be used, the caller is told why and decides what to do instead.
//
// Layout: v1 `/sys/fs/cgroup/<controller>/tjob/<name>`, one directory per
// controller; v2 `/sys/fs/cgroup/tjob/<name>`, one for both. $TJOB_CGROUP_ROOT
// replaces /sys/fs/cgroup.
#pragma once

#include <sys/types.h>
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

/// How many processes the OOM killer ended in the memory cgroup `dir`
/// (v1 memory.oom_control, v2 memory.events); 0 when it cannot tell.
std::uint64_t oom_kills(const std::string& dir);

/// Removes a cgroup directory made above (once its processes are gone).
void remove_cgroup(const std::string& dir);

/// Every directory limit_cpu and limit_memory would use for `name`, whether
/// or not they exist (what crash recovery removes).
std::vector<std::string> cgroup_dirs_for(const std::string& name);

}  // namespace tjob::process
