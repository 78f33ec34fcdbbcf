// Facts about processes read from /proc: identity across pid reuse.
#pragma once

#include <sys/types.h>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tjob::process {

/// The process's start time in clock ticks since boot (field 22 of
/// /proc/<pid>/stat); with the pid it names one process for the life of the
/// machine. nullopt when the process does not exist (or is a zombie).
std::optional<std::uint64_t> start_time(pid_t pid);

/// True when `pid` runs and started at `start` (so it is the process we recorded).
bool is_same_process(pid_t pid, std::uint64_t start);

/// The number of live (non-zombie) processes whose process group is `pgid`.
std::size_t count_group_members(pid_t pgid);

/// The descriptors this process has open (entries of /proc/self/fd, less
/// the one the count itself opens); 0 when they cannot be read.
std::size_t open_descriptors();

/// The live processes whose environment holds one of `entries` ("KEY=VALUE"),
/// with the entry each holds. One pass over /proc, however many entries.
std::vector<std::pair<pid_t, std::string>> find_by_environment(const std::set<std::string>& entries);

}  // namespace tjob::process
