// The runtimes the local backend knows. Built in for now; loading Kubeflow's
// ClusterTrainingRuntime manifests from runtimes/ replaces this table.
#pragma once

#include <tjob/types.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::detail {

inline constexpr std::string_view default_runtime_name = "torch-distributed";

std::vector<runtime> builtin_runtimes();
std::optional<runtime> find_runtime(std::string_view name);
/// "Runtime 'x' not found. Known runtimes: a, b."
std::string runtime_not_found_message(std::string_view name);

}  // namespace tjob::detail
