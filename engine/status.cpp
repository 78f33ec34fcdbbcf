#include <tjob/status.hpp>
#include <tjob/types.hpp>

#include <algorithm>

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

bool same_state(const train_job& a, const train_job& b) {
  auto same_step = [](const step& x, const step& y) {
    return x.name == y.name && x.status == y.status && x.exit_code == y.exit_code && x.reason == y.reason;
  };
  return a.name == b.name && a.status == b.status && a.reason == b.reason && a.start_time == b.start_time &&
         a.end_time == b.end_time &&
         std::equal(a.steps.begin(), a.steps.end(), b.steps.begin(), b.steps.end(), same_step);
}

}  // namespace tjob
