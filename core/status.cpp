#include <tjob/status.hpp>
#include <tjob/types.hpp>

#include <algorithm>
#include <cstdlib>
#include <string>

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
    return x.name == y.name && x.status == y.status && x.exit_code == y.exit_code && x.reason == y.reason &&
           x.attempt == y.attempt;
  };
  return a.name == b.name && a.status == b.status && a.reason == b.reason && a.start_time == b.start_time &&
         a.end_time == b.end_time &&
         std::equal(a.steps.begin(), a.steps.end(), b.steps.begin(), b.steps.end(), same_step) &&
         a.progress_updated == b.progress_updated && a.progress_percent == b.progress_percent &&
         a.estimated_remaining_seconds == b.estimated_remaining_seconds && a.metrics == b.metrics;
}

namespace {

// The seconds of "... in 1.23 s" at the end of `text`, and what is before " in ".
std::optional<std::pair<std::string_view, double>> timed(std::string_view text) {
  if (!text.ends_with(" s")) return std::nullopt;
  auto in = text.rfind(" in ");
  if (in == std::string_view::npos) return std::nullopt;
  auto number = text.substr(in + 4, text.size() - 2 - (in + 4));
  if (number.empty() || number.find_first_not_of("0123456789.") != std::string_view::npos)
    return std::nullopt;
  return std::pair{text.substr(0, in), std::strtod(std::string(number).c_str(), nullptr)};
}

}  // namespace

std::optional<setup_phase> setup_phase_of(const event& e) {
  if (e.reason != "Setup") return std::nullopt;
  std::string_view m = e.message;
  setup_phase out;
  // (the local backend writes these: adapters/local/job_fsm.cpp and local_venv.cpp)
  if (m.starts_with("venv cached as ")) {
    auto copied = m.find("; copied in ");
    if (copied == std::string_view::npos) return std::nullopt;
    auto t = timed(m.substr(copied + 2));
    if (!t) return std::nullopt;
    out.phase = "cache copy";
    out.seconds = t->second;
    out.cache_hit = false;
    return out;
  }
  auto t = timed(m);
  if (!t) return std::nullopt;
  if (m.starts_with("venv from the cache (")) {
    out.phase = "cache copy";
    out.cache_hit = true;
  } else if (t->first.ends_with(" done")) {
    out.phase = std::string(t->first.substr(0, t->first.size() - 5));
  } else {
    return std::nullopt;
  }
  out.seconds = t->second;
  return out;
}

}  // namespace tjob
