#include "core/job_state.hpp"

namespace tjob::detail {

std::optional<job_status> next(job_status from, const job_event& ev) noexcept {
  switch (from) {
    case job_status::created:
      switch (ev.kind) {
        case event_kind::started:
          return job_status::running;
        case event_kind::start_failed:
        case event_kind::cancelled:
        case event_kind::lost:
          return job_status::failed;
        case event_kind::restarting:
          return job_status::created;  // a step the failed attempt never started
        case event_kind::exited:
          return std::nullopt;  // never started
      }
      break;
    case job_status::running:
      switch (ev.kind) {
        case event_kind::exited:
          return ev.exit_code == 0 ? job_status::complete : job_status::failed;
        case event_kind::cancelled:
        case event_kind::lost:
          return job_status::failed;
        case event_kind::restarting:
          return job_status::created;
        case event_kind::started:
        case event_kind::start_failed:
          return std::nullopt;  // already started
      }
      break;
    case job_status::complete:
    case job_status::failed:
      return std::nullopt;  // terminal statuses are final
  }
  return std::nullopt;
}

std::string_view event_reason(event_kind k) noexcept {
  switch (k) {
    case event_kind::started:
      return "Started";
    case event_kind::exited:
      return "Exited";
    case event_kind::start_failed:
      return "StartFailed";
    case event_kind::cancelled:
      return "Cancelled";
    case event_kind::lost:
      return "Lost";
    case event_kind::restarting:
      return "Restarting";
  }
  return "Unknown";
}

std::optional<event_kind> parse_event_reason(std::string_view s) noexcept {
  for (auto k : all_event_kinds)
    if (event_reason(k) == s) return k;
  return std::nullopt;
}

std::string_view to_string(log_event e) noexcept {
  switch (e) {
    case log_event::created:
      return "Created";
    case log_event::started:
      return event_reason(event_kind::started);
    case log_event::exited:
      return event_reason(event_kind::exited);
    case log_event::start_failed:
      return event_reason(event_kind::start_failed);
    case log_event::cancelled:
      return event_reason(event_kind::cancelled);
    case log_event::lost:
      return event_reason(event_kind::lost);
    case log_event::setup:
      return "Setup";
    case log_event::queued:
      return "Queued";
    case log_event::devices_leased:
      return "DevicesLeased";
    case log_event::cancel_requested:
      return "CancelRequested";
    case log_event::admitted:
      return "Admitted";
    case log_event::waiting:
      return "Waiting";
    case log_event::restarting:
      return event_reason(event_kind::restarting);
    case log_event::delete_requested:
      return "DeleteRequested";
    case log_event::progress:
      return "Progress";
    case log_event::warned:
      return "Warned";
  }
  return "Created";
}

std::optional<log_event> parse_log_event(std::string_view s) noexcept {
  for (auto e : all_log_events)
    if (to_string(e) == s) return e;
  return std::nullopt;
}

log_event log_event_of(event_kind k) noexcept {
  switch (k) {
    case event_kind::started:
      return log_event::started;
    case event_kind::exited:
      return log_event::exited;
    case event_kind::start_failed:
      return log_event::start_failed;
    case event_kind::cancelled:
      return log_event::cancelled;
    case event_kind::lost:
      return log_event::lost;
    case event_kind::restarting:
      return log_event::restarting;
  }
  return log_event::lost;
}

std::optional<event_kind> transition_of(log_event e) noexcept {
  // the inverse of log_event_of: one mapping, read both ways
  for (auto k : all_event_kinds)
    if (log_event_of(k) == e) return k;
  return std::nullopt;
}

folded_job initial_state(std::span<const std::string> step_names) {
  folded_job j;
  for (const auto& n : step_names) j.steps.push_back(folded_step{n, job_status::created, std::nullopt, {}});
  return j;
}

void fold_event(folded_job& j, const logged_event& e) {
  if (e.what == log_event::cancel_requested) j.cancel_requested = true;
  // Queued is the reason of a job that waits (for admission, for GPUs) until
  // it is let go or anything else happens to it.
  auto kind = transition_of(e.what);
  const bool waits = j.reason == queued_reason || j.reason == waiting_reason || j.reason == restarting_reason;
  if (waits && (kind || e.what == log_event::queued || e.what == log_event::waiting ||
                e.what == log_event::admitted || e.what == log_event::devices_leased))
    j.reason.clear();
  if ((e.what == log_event::queued || e.what == log_event::waiting) && e.step.empty() &&
      j.status == job_status::created && j.reason.empty())
    j.reason = std::string(e.what == log_event::queued ? queued_reason : waiting_reason);
  if (!kind) return;
  folded_step* s = nullptr;
  for (auto& st : j.steps)
    if (st.name == e.step) s = &st;
  if (!s) return;
  auto to = next(s->status, job_event{*kind, e.exit_code.value_or(0)});
  if (!to) return;
  s->status = *to;
  if (*kind == event_kind::restarting) {
    // the next attempt starts afresh: what the failed one ended with is in its event
    ++s->attempt;
    s->exit_code.reset();
    s->reason.clear();
  } else if (e.exit_code) {
    s->exit_code = e.exit_code;
  }
  if (*to == job_status::failed) s->reason = e.detail;
  std::vector<job_status> statuses;
  statuses.reserve(j.steps.size());
  for (const auto& st : j.steps) statuses.push_back(st.status);
  j.status = aggregate(statuses);
  if (j.status == job_status::failed && j.reason.empty()) j.reason = s->reason;
  if (*kind == event_kind::restarting && j.status == job_status::created) j.reason = restarting_reason;
}

folded_job fold(folded_job state, std::span<const logged_event> events) {
  for (const auto& e : events) fold_event(state, e);
  return state;
}

job_status aggregate(std::span<const job_status> steps) noexcept {
  bool running = false, created = steps.empty();
  for (auto s : steps) {
    if (s == job_status::failed) return job_status::failed;
    if (s == job_status::running) running = true;
    if (s == job_status::created) created = true;
  }
  if (running) return job_status::running;
  if (created) return job_status::created;
  return job_status::complete;
}

}  // namespace tjob::detail
