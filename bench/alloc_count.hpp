// Heap allocations by thread, for tjob-bench: this executable replaces
// malloc and its kin (glibc's documented way), counts each allocation in the
// calling thread's slot, and hands it to glibc's own allocator.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tjob::bench {

/// Allocations (malloc, calloc, a realloc that allocates, the aligned kinds)
/// so far, by thread name (threads of one name summed; one that has exited
/// counts as "exited").
std::map<std::string, std::uint64_t> allocations_by_thread();

}  // namespace tjob::bench
