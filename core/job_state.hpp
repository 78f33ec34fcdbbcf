// The job state machine: four statuses, the events that move them, and one
// pure, total transition function. No I/O, no clocks, no logging here; the
// engine does the side effects and records each accepted event in the log.
#pragma once

#include <tjob/status.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::detail {

enum class event_kind : std::uint8_t {
  started,       ///< the process is running
  exited,        ///< the process ended with `exit_code`
  start_failed,  ///< the process could not be started
  cancelled,     ///< the user cancelled (or deleted) the job
  lost,          ///< the owning engine died; nobody saw the end
  /// The attempt failed and the job is tried again (train_request::retry):
  /// the step is Created until the next attempt's process starts.
  restarting,
};

inline constexpr event_kind all_event_kinds[] = {event_kind::started,      event_kind::exited,
                                                 event_kind::start_failed, event_kind::cancelled,
                                                 event_kind::lost,         event_kind::restarting};
inline constexpr job_status all_statuses[] = {job_status::created, job_status::running, job_status::complete,
                                              job_status::failed};

struct job_event {
  event_kind kind;
  int exit_code = 0;  ///< for `exited`
};

/// The status after `ev`, or nullopt when `ev` is illegal in `from` (and must
/// not be applied). Terminal statuses accept nothing.
std::optional<job_status> next(job_status from, const job_event& ev) noexcept;

/// The event log's name for the kind: "Started", "Exited", "StartFailed", …
std::string_view event_reason(event_kind k) noexcept;
std::optional<event_kind> parse_event_reason(std::string_view s) noexcept;

/// Every kind of event the log stores: the transitions (event_kind, by the
/// same names) and the records that change no status. The store keeps the
/// name (to_string); nothing else spells one.
enum class log_event : std::uint8_t {
  created,           ///< "Created": the job was recorded
  started,           ///< "Started"
  exited,            ///< "Exited"
  start_failed,      ///< "StartFailed"
  cancelled,         ///< "Cancelled"
  lost,              ///< "Lost"
  setup,             ///< "Setup": a setup phase (venv, pip) started or ended in a step
  queued,            ///< "Queued": the job waits for admission (its place, what it waits for)
  devices_leased,    ///< "DevicesLeased": its GPUs, node by node
  cancel_requested,  ///< "CancelRequested": a cancel was asked for (changes no status)
  admitted,          ///< "Admitted": a queued job may start (Kueue's word)
  waiting,           ///< "Waiting": the job waits for its dependencies to end
  restarting,        ///< "Restarting": a step's attempt failed and the job is tried again
  /// "DeleteRequested": the job is being deleted (its cancel, then its rows
  /// go); to its dependents it never ended, however its cancel ends it
  delete_requested,
  /// "Progress": what the training code reported (a percentage, the seconds
  /// left, metrics; the event's data is their JSON, detail::progress_json)
  progress,
  /// "Warned": the job's processes were sent its warning signal before its
  /// active deadline (train_request::warning; changes no status)
  warned,
};
inline constexpr log_event all_log_events[] = {log_event::created,        log_event::started,
                                               log_event::exited,         log_event::start_failed,
                                               log_event::cancelled,      log_event::lost,
                                               log_event::setup,          log_event::queued,
                                               log_event::devices_leased, log_event::cancel_requested,
                                               log_event::admitted,       log_event::waiting,
                                               log_event::restarting,     log_event::delete_requested,
                                               log_event::progress,       log_event::warned};

std::string_view to_string(log_event e) noexcept;
std::optional<log_event> parse_log_event(std::string_view s) noexcept;
/// The log's event for a transition.
log_event log_event_of(event_kind k) noexcept;

/// The reason of a Created job while it waits for admission or GPUs (a
/// Queued event; Admitted, DevicesLeased or any transition ends it).
inline constexpr std::string_view queued_reason = "Queued";
/// The reason of a Created job while it waits for its dependencies (a
/// Waiting event; a Queued or Admitted event or any transition ends it).
inline constexpr std::string_view waiting_reason = "Waiting";
/// The reason of a Created job between a failed attempt and the next
/// (Restarting events; the next Started ends it).
inline constexpr std::string_view restarting_reason = "Restarting";

/// One stored event as the fold reads it.
struct logged_event {
  std::string step;  ///< empty: the job's own (Created, Queued, CancelRequested, ...)
  log_event what = log_event::created;
  std::optional<int> exit_code;  ///< the step's exit code, when its process ended
  std::string detail;            ///< the step's reason, when the event fails it
};

struct folded_step {
  std::string name;
  job_status status = job_status::created;
  std::optional<int> exit_code;
  std::string reason;
  int attempt = 1;  ///< 1 + the step's Restarting events
  bool operator==(const folded_step&) const = default;
};

/// A job's state as its event log says: the log is the truth, and the status
/// columns of the store are a cache of this.
struct folded_job {
  job_status status = job_status::created;
  std::string reason;  ///< the reason of the first step that failed
  std::vector<folded_step> steps;
  bool cancel_requested = false;
  bool operator==(const folded_job&) const = default;
};

/// The state before any event: every step Created.
folded_job initial_state(std::span<const std::string> step_names);
/// Folds one more event in. A transition `next` rejects (or of a step the
/// job does not have) changes nothing, as it was never applied when written.
void fold_event(folded_job& state, const logged_event& e);
/// fold(events) = fold_event over them in order, from `state`.
folded_job fold(folded_job state, std::span<const logged_event> events);
/// The transition a stored event is, if it is one.
std::optional<event_kind> transition_of(log_event e) noexcept;

/// A job's status from its steps' statuses, as Kubeflow aggregates them: any
/// Failed → Failed; else any Running → Running; else any Created (or none) →
/// Created; else Complete.
job_status aggregate(std::span<const job_status> steps) noexcept;

}  // namespace tjob::detail
