// `tjob list -w`: the list, then each job again as it changes.
#pragma once

#include "cli/render.hpp"

#include <tjob/client.hpp>

#include <set>
#include <string>

namespace tjob::cli {

/// Prints the jobs of `runtime` (all when empty) in `statuses` (all when
/// empty), then each one again whenever it changes, until nobody reads.
void watch_list(trainer_client& client, const std::string& runtime, const std::set<job_status>& statuses,
                output_format fmt);

}  // namespace tjob::cli
