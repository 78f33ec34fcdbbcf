// tjob/status.hpp — the four TrainJob statuses, with Kubeflow's strings.
//
// Threading: plain values and pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tjob {

/// Status of a job or of one of its steps. The strings are Kubeflow's:
/// "Created", "Running", "Complete", "Failed".
enum class job_status : std::uint8_t { created, running, complete, failed };

/// Kubeflow's string for a status.
std::string_view to_string(job_status s) noexcept;

/// Parses Kubeflow's string (exact, case-sensitive); nullopt for anything else.
std::optional<job_status> parse_job_status(std::string_view s) noexcept;

/// Complete and Failed are final: nothing leaves them.
constexpr bool is_terminal(job_status s) noexcept {
  return s == job_status::complete || s == job_status::failed;
}

}  // namespace tjob
