#include <tjob/status.hpp>

namespace tjob {

std::string_view to_string(job_status s) noexcept {
  switch (s) {
    case job_status::created:
      return "Created";
    case job_status::running:
      return "Running";
    case job_status::complete:
      return "Complete";
    case job_status::failed:
      return "Failed";
  }
  return "Unknown";
}

std::optional<job_status> parse_job_status(std::string_view s) noexcept {
  for (auto st : {job_status::created, job_status::running, job_status::complete, job_status::failed})
    if (to_string(st) == s) return st;
  return std::nullopt;
}

}  // namespace tjob
