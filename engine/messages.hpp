// Messages every backend words the same way.
#pragma once

#include <tjob/types.hpp>

#include <map>
#include <string>

namespace tjob::detail {

/// Kubeflow's "TrainJob <n> is Failed" with each failed step's status, exit
/// code and reason, then "Last logs:" with `last_logs[step]` (the step's last
/// lines), each line indented and cut at 500 bytes.
std::string failure_message(const train_job& job, const std::map<std::string, std::string>& last_logs);

}  // namespace tjob::detail
