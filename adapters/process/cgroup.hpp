// CPU quotas for a step's process tree through cgroups, where the machine
// lets this process create them (root, a writable cgroup v1 `cpu` hierarchy
// or a cgroup v2 tree with the cpu controller). Nothing here is required:
// where cgroups cannot be used, the caller is told why and goes on.
#pragma once

#include <sys/types.h>
#include <optional>
#include <string>

namespace tjob::process {

/// Puts `pid` (and so what it starts afterwards) in the cgroup `name` (a
/// path-safe string), limited to `cpus` CPUs of CPU time. Returns the
/// cgroup's directory, or nullopt with `why_not` set.
std::optional<std::string> limit_cpu(pid_t pid, const std::string& name, double cpus, std::string& why_not);

/// Removes the cgroup directory made by limit_cpu (once its processes are gone).
void remove_cgroup(const std::string& dir);

/// The cgroup directory limit_cpu would use for `name`, whether or not it exists.
std::string cgroup_dir_for(const std::string& name);

}  // namespace tjob::process
