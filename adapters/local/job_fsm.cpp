#include "adapters/local/job_fsm.hpp"

#include "core/retry.hpp"

#include <fmt/format.h>

namespace tjob::local {

using detail::event_kind;
using detail::job_event;

job_input job_input::venv_resolved(venv_found f, std::string how) {
  job_input in{kind::venv_resolved};
  in.found = f;
  in.how = std::move(how);
  return in;
}

job_input job_input::venv_finalized(bool ok, std::string how) {
  job_input in{kind::venv_finalized};
  in.ok = ok;
  in.how = std::move(how);
  return in;
}

job_input job_input::spawned(std::size_t step) {
  job_input in{kind::spawned};
  in.step = step;
  return in;
}

job_input job_input::spawn_failed(std::size_t step, std::size_t phase, std::string what, std::string how,
                                  std::string message, bool transient, bool others_running) {
  job_input in{kind::spawn_failed};
  in.others_running = others_running;
  in.step = step;
  in.phase = phase;
  in.what = std::move(what);
  in.how = std::move(how);
  in.message = std::move(message);
  in.transient = transient;
  return in;
}

job_input job_input::respawn_due(std::size_t step, std::size_t phase) {
  job_input in{kind::respawn_due};
  in.step = step;
  in.phase = phase;
  return in;
}

job_input job_input::exited(std::size_t step, int code, std::string how, long pid, std::string what,
                            double seconds, std::string note) {
  job_input in{kind::exited};
  in.message = std::move(note);
  in.step = step;
  in.exit_code = code;
  in.how = std::move(how);
  in.pid = pid;
  in.what = std::move(what);
  in.seconds = seconds;
  return in;
}

job_input job_input::worker_failed(std::size_t step, std::string what) {
  job_input in{kind::worker_failed};
  in.step = step;
  in.what = std::move(what);
  return in;
}

job_input job_input::cancel(bool forced, bool recorded) {
  job_input in{kind::cancel};
  in.forced = forced;
  in.recorded = recorded;
  return in;
}

job_input job_input::deadline_passed() {
  job_input in{kind::cancel};
  in.deadline = true;
  return in;
}

job_input job_input::dependency_never_satisfied(std::string message) {
  job_input in{kind::cancel};
  in.never = true;
  in.recorded = true;  // its Cancelled events say why; nobody asked for a cancel
  in.message = std::move(message);
  return in;
}

job_fsm::job_fsm(job_shape shape) : shape_(std::move(shape)), steps_(shape_.steps.size()) {}

std::vector<job_action> job_fsm::on(const job_input& in) {
  out_.clear();
  if (stage_ == stage::done) return {};
  using K = job_input::kind;
  switch (in.k) {
    case K::begin:
      on_begin();
      break;
    case K::lease_granted:
      if (stage_ == stage::leasing) after_lease();
      break;
    case K::venv_resolved:
      on_venv_resolved(in);
      break;
    case K::venv_waited:
      on_venv_waited();
      break;
    case K::venv_finalized:
      on_venv_finalized(in);
      break;
    case K::spawned:
      if (in.step >= steps_.size()) break;
      steps_[in.step].started = true;
      steps_[in.step].running = true;
      break;
    case K::spawn_failed:
      on_spawn_failed(in);
      break;
    case K::exited:
      on_exited(in);
      break;
    case K::worker_failed:
      on_worker_failed(in);
      break;
    case K::cancel:
      on_cancel(in);
      break;
    case K::timer_fired:
      if (!timer_armed_) break;
      timer_armed_ = false;
      stop_running(std::nullopt, true);
      break;
    case K::backoff_elapsed:
      if (stage_ != stage::backoff) break;
      ++attempt_;
      start_nodes();  // the venv and its packages are there: no setup again
      break;
    case K::respawn_due:
      on_respawn_due(in);
      break;
  }
  return std::move(out_);
}

void job_fsm::on_begin() {
  if (stage_ != stage::idle) return;
  if (stopping()) {
    finish_all("cancelled before it started");
  } else if (shape_.lease) {
    stage_ = stage::leasing;
    emit({job_action::kind::request_lease});
  } else {
    after_lease();
  }
}

void job_fsm::on_venv_resolved(const job_input& in) {
  if (stage_ != stage::resolving) return;
  if (stopping()) {
    if (in.found == venv_found::build) emit({job_action::kind::end_venv_build});
    finish_all("cancelled before it started");
    return;
  }
  switch (in.found) {
    case venv_found::copied:
      next_setup_ = shape_.setup;  // nothing to set up
      start_setup();
      break;
    case venv_found::build:
      building_ = true;
      start_setup();
      break;
    case venv_found::uncached:
      start_setup();
      break;
    case venv_found::busy:
      stage_ = stage::waiting_venv;
      emit({job_action::kind::wait_venv});
      break;
    case venv_found::failed:
      setup_failure(in.how);
      break;
  }
}

void job_fsm::on_venv_waited() {
  if (stage_ != stage::waiting_venv) return;
  if (stopping()) {
    finish_all("cancelled before it started");
  } else {
    stage_ = stage::resolving;
    emit({job_action::kind::resolve_venv});
  }
}

void job_fsm::on_venv_finalized(const job_input& in) {
  if (stage_ != stage::finalizing) return;
  building_ = false;
  job_action end{job_action::kind::end_venv_build};
  end.ok = in.ok;
  emit(std::move(end));
  if (!in.ok) {
    setup_failure(in.how);
  } else if (stopping()) {
    finish_all("cancelled before it started");
  } else {
    start_nodes();
  }
}

void job_fsm::on_spawn_failed(const job_input& in) {
  if (in.step >= steps_.size() || respawn(in)) return;
  auto& s = steps_[in.step];
  step_outcome out;
  out.message = in.message;
  if (!s.started) {
    out.ev = {event_kind::start_failed};
    out.reason = "start failed: " + in.how;
  } else {
    // a later phase of a step that runs: it ends as a process would that failed
    out.ev = {event_kind::exited, 127};
    out.reason = "setup failed: " + in.what + ": " + in.how;
    job_action note{job_action::kind::note, in.step};
    note.text = in.message;
    emit(std::move(note));
  }
  if (stage_ == stage::setup)
    setup_ended(std::move(out));
  else if (stage_ == stage::running)
    node_ended(in.step, std::move(out), true);
}

void job_fsm::on_exited(const job_input& in) {
  if (in.step >= steps_.size() || !steps_[in.step].running) return;
  steps_[in.step].running = false;
  if (stopping()) {
    step_outcome out{
        {event_kind::cancelled}, stop_word() + "; the process ended: " + in.how, stop_reason(), in.exit_code};
    if (stage_ == stage::setup)
      setup_ended(std::move(out));
    else
      node_ended(in.step, std::move(out), false);
  } else if (stage_ == stage::setup) {
    setup_phase_exited(in);
  } else if (stage_ == stage::running) {
    step_outcome out{{event_kind::exited, in.exit_code},
                     "process " + std::to_string(in.pid) + " ended: " + in.how +
                         (in.message.empty() ? "" : "; " + in.message),
                     in.how,
                     std::nullopt};
    steps_[in.step].how = in.how;  // the reason is written at the end, once the blame is known
    node_ended(in.step, std::move(out), in.exit_code != 0);
  }
}

// A setup phase of node-0 ended: the next phase, or node-0 fails with it.
void job_fsm::setup_phase_exited(const job_input& in) {
  job_action note{job_action::kind::note, 0};
  if (in.exit_code != 0) {
    note.text = fmt::format("{} failed after {:.2f} s: {}", in.what, in.seconds, in.how);
    emit(std::move(note));
    setup_ended({{event_kind::exited, in.exit_code},
                 in.what + " failed: " + in.how + " (its output is in the step's log)",
                 "setup failed: " + in.what + " " + in.how,
                 std::nullopt});
    return;
  }
  note.text = fmt::format("{} done in {:.2f} s", in.what, in.seconds);  // (tjob::setup_phase_of reads it)
  note.setup_event = true;
  emit(std::move(note));
  ++next_setup_;
  start_setup();
}

void job_fsm::on_worker_failed(const job_input& in) {
  if (in.step >= steps_.size() || root_) return;
  root_.emplace(in.step, in.what);
  // Its torchrun may wait minutes at its exit barrier for the other nodes,
  // which may not notice for as long: every node is stopped now.
  if (stage_ != stage::running || failed_node_ || stopping()) return;
  failed_node_ = in.step;
  stop_running(in.step, false);
  if (!steps_[in.step].running) return;
  job_action sig{job_action::kind::signal};
  sig.steps.push_back(in.step);
  emit(std::move(sig));
  if (!timer_armed_) {
    timer_armed_ = true;
    emit({job_action::kind::arm_timer});
  }
}

void job_fsm::on_cancel(const job_input& in) {
  if (!stopping()) {
    stop_ = in.deadline ? stop_cause::deadline : in.never ? stop_cause::dependency : stop_cause::cancel;
    never_how_ = in.message;
    if (!in.recorded) {
      job_action rec{job_action::kind::record_cancel};
      rec.deadline = stop_ == stop_cause::deadline;
      emit(std::move(rec));
    }
  } else if (!in.forced) {
    return;  // asked again: it is under way
  }
  switch (stage_) {
    case stage::idle:
      break;  // begin ends it
    case stage::leasing:
      emit({job_action::kind::abandon_lease});
      finish_all(stop_ == stop_cause::dependency ? never_how_
                 : shape_.queued                 ? "cancelled while waiting in the queue"
                                                 : "cancelled while waiting for GPUs");
      break;
    case stage::waiting_venv:
      emit({job_action::kind::abandon_venv_wait});
      break;
    case stage::resolving:
    case stage::finalizing:
      break;  // no process runs: it ends when the answer comes
    case stage::setup:
    case stage::running:
      stop_running(std::nullopt, in.forced);
      end_respawning(std::nullopt);
      break;
    case stage::backoff:
      finish_all(stop_word() + " while waiting to restart");
      break;
    case stage::done:
      break;
  }
}

void job_fsm::on_respawn_due(const job_input& in) {
  if (in.step >= steps_.size() || !steps_[in.step].respawning) return;  // ended meanwhile
  steps_[in.step].respawning = false;
  job_action a{job_action::kind::spawn, in.step, in.phase};
  a.first = !steps_[in.step].started;
  emit(std::move(a));
}

void job_fsm::after_lease() {
  if (shape_.venv_cache) {
    stage_ = stage::resolving;
    emit({job_action::kind::resolve_venv});
  } else {
    start_setup();
  }
}

void job_fsm::start_setup() {
  if (next_setup_ < shape_.setup) {
    stage_ = stage::setup;
    job_action a{job_action::kind::spawn, 0, next_setup_};
    a.first = !steps_[0].started;
    emit(std::move(a));
  } else if (building_) {
    stage_ = stage::finalizing;
    emit({job_action::kind::finalize_venv});
  } else {
    start_nodes();
  }
}

void job_fsm::start_nodes() {
  stage_ = stage::running;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    job_action a{job_action::kind::spawn, i, code_phase};
    a.first = !steps_[i].started;
    emit(std::move(a));
  }
}

// node-0's setup ended without success: node-0 ends with `out`, and the
// other nodes never start.
void job_fsm::setup_ended(step_outcome out) {
  if (building_) {
    building_ = false;
    emit({job_action::kind::end_venv_build});  // not ok: what was built goes
  }
  steps_[0].ended = true;
  steps_[0].out = std::move(out);
  for (std::size_t i = 1; i < steps_.size(); ++i) {
    auto& s = steps_[i];
    s.ended = true;
    s.out = stopping()
                ? step_outcome{{event_kind::cancelled}, stop_word() + " before it started", stop_reason(), {}}
                : step_outcome{{event_kind::start_failed},
                               "not started: node-0's setup did not succeed",
                               "setup failed in node-0",
                               {}};
  }
  finish();
}

// The venv could not be had (the cache failed, or building it did): node-0
// says why in its log and ends; Running (exit 1) when it had started.
void job_fsm::setup_failure(const std::string& why) {
  job_action note{job_action::kind::note, 0};
  note.text = why;
  emit(std::move(note));
  step_outcome out;
  out.ev = steps_[0].started ? job_event{event_kind::exited, 1} : job_event{event_kind::start_failed};
  out.message = why;
  out.reason = "setup failed: " + why;
  setup_ended(std::move(out));
}

void job_fsm::node_ended(std::size_t i, step_outcome out, bool failed) {
  steps_[i].ended = true;
  steps_[i].running = false;
  steps_[i].out = std::move(out);
  if (failed && !failed_node_ && !stopping()) {
    failed_node_ = i;
    stop_running(i, false);
    end_respawning(i);
    if (stage_ == stage::done) return;  // (the last of them finished the job)
  }
  for (const auto& s : steps_)
    if (!s.ended) return;
  finish();
}

// Stops the steps that run (all but `except`): SIGTERM now and, for a
// graceful stop, SIGKILL when the grace timer fires with some still running.
void job_fsm::stop_running(std::optional<std::size_t> except, bool forced) {
  job_action sig{job_action::kind::signal};
  sig.forced = forced;
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    if (i == except || !steps_[i].running) continue;
    if (except) steps_[i].stopped = true;
    sig.steps.push_back(i);
  }
  if (sig.steps.empty()) return;
  emit(std::move(sig));
  if (!forced && !timer_armed_) {
    timer_armed_ = true;
    emit({job_action::kind::arm_timer});
  }
}

void job_fsm::finish() {
  job_action a{job_action::kind::finish};
  // The blame: the first worker failure recorded, else the first node to end
  // failed. Its reason says what failed; the others', that they went with it.
  auto blamed = root_ ? std::optional(root_->first) : failed_node_;
  if (blamed && !stopping()) {
    a.blamed = *blamed;
    const auto& name = shape_.steps[*blamed];
    for (std::size_t i = 0; i < steps_.size(); ++i) {
      auto& s = steps_[i];
      if (s.how.empty() || s.out.ev.kind != event_kind::exited || s.out.ev.exit_code == 0) continue;
      if (i == *blamed)
        s.out.reason = root_ ? root_->second + " (" + s.how + ")" : s.how;
      else if (s.stopped)
        s.out.reason = "stopped: " + name + " failed (" + s.how + ")";
      else if (root_)
        s.out.reason = s.how + " after " + name + " failed";
    }
    if (restart(*blamed)) return;
  }
  stage_ = stage::done;
  for (auto& s : steps_) {
    // a step the cancel caught before its first process
    if (stopping() && !s.started && s.out.ev.kind != event_kind::cancelled)
      s.out = {{event_kind::cancelled}, stop_word() + " before it started", stop_reason(), {}};
    a.outcomes.push_back(std::move(s.out));
  }
  emit(std::move(a));
}

// The attempt failed because `blamed`'s code did; the retry policy decides
// whether it is tried again. Only the code's failure is: a step that could
// not start or set up would fail the same way again. Every node restarts, as
// JobSet restarts a whole job: the nodes of a torch job meet again.
bool job_fsm::restart(std::size_t blamed) {
  if (!shape_.retry || shape_.retry->max_restarts <= 0) return false;
  auto& b = steps_[blamed];
  if (b.how.empty() || b.out.ev.kind != event_kind::exited || b.out.ev.exit_code == 0) return false;
  auto d = detail::decide_retry(*shape_.retry, attempt_, b.out.ev.exit_code);
  if (!d.delay) {
    b.out.message += "; not restarted: " + d.why_not;
    return false;
  }
  job_action a{job_action::kind::restart};
  a.blamed = blamed;
  a.delay = *d.delay;
  a.attempt = attempt_ + 1;
  const int attempts = shape_.retry->max_restarts + 1;
  for (auto& s : steps_) {
    step_outcome o;
    o.ev = {event_kind::restarting, s.out.ev.exit_code};
    o.exit_code = s.out.ev.exit_code;
    o.reason = s.out.reason;
    o.message = fmt::format("attempt {} of {} failed ({}): {}; attempt {} starts in {:g} s", attempt_,
                            attempts, s.out.reason.empty() ? "it went with the others" : s.out.reason,
                            s.out.message, attempt_ + 1, static_cast<double>(a.delay.count()) / 1000);
    a.outcomes.push_back(std::move(o));
    s = step_state{};
  }
  failed_node_.reset();
  root_.reset();
  timer_armed_ = false;
  stage_ = stage::backoff;
  emit(std::move(a));
  return true;
}

bool job_fsm::respawn(const job_input& in) {
  auto& s = steps_[in.step];
  if (!in.transient || stopping() || failed_node_ ||
      (s.respawn_waited >= respawn_limit && !in.others_running))
    return false;
  using std::chrono::milliseconds;
  const milliseconds delay = std::min(milliseconds(50 << std::min(s.respawns, 6)), milliseconds(2000));
  job_action a{job_action::kind::respawn, in.step, in.phase};
  a.first = !s.started;
  a.delay = delay;
  if (s.respawns == 0)
    a.text = fmt::format(
        "cannot start {} yet: {}; trying again as other processes end (at once when one of "
        "tjob's ends, else after a back-off from {} ms to 2 s; for at most {} min while none of "
        "tjob's runs)",
        in.what, in.how, delay.count(), respawn_limit.count() / 60000);
  ++s.respawns;
  s.respawn_waited += delay;
  s.respawning = true;
  emit(std::move(a));
  return true;
}

void job_fsm::end_respawning(std::optional<std::size_t> failed) {
  for (std::size_t i = 0; i < steps_.size() && stage_ != stage::done; ++i) {
    auto& s = steps_[i];
    if (!s.respawning) continue;
    s.respawning = false;
    step_outcome out;
    if (failed) {
      out = s.started ? step_outcome{{event_kind::exited, 127},
                                     "stopped: " + shape_.steps[*failed] +
                                         " failed while this step waited for "
                                         "the OS to allow its process",
                                     "stopped: " + shape_.steps[*failed] + " failed",
                                     std::nullopt}
                      : step_outcome{{event_kind::start_failed},
                                     "not started: " + shape_.steps[*failed] + " failed",
                                     "not started: " + shape_.steps[*failed] + " failed",
                                     std::nullopt};
      s.stopped = true;
    } else {
      out = {
          {event_kind::cancelled},
          stop_word() + (s.started ? " while waiting for the OS to allow its process" : " before it started"),
          stop_reason(),
          {}};
    }
    if (stage_ == stage::setup)
      setup_ended(std::move(out));
    else
      node_ended(i, std::move(out), false);
  }
}

// Every step ends cancelled with `message` (nothing of the job ran).
void job_fsm::finish_all(const std::string& message) {
  for (auto& s : steps_) {
    s.ended = true;
    s.out = {
        {event_kind::cancelled}, s.started ? stop_word() + " after its setup" : message, stop_reason(), {}};
  }
  finish();
}

std::string job_fsm::stop_word() const {
  switch (stop_) {
    case stop_cause::deadline:
      return "active deadline exceeded";
    case stop_cause::dependency:
      return "dependency never satisfied";
    default:
      return "cancelled";
  }
}

std::string job_fsm::stop_reason() const {
  switch (stop_) {
    case stop_cause::deadline:
      return "DeadlineExceeded";
    case stop_cause::dependency:
      return "DependencyNeverSatisfied";
    default:
      return "cancelled";
  }
}

}  // namespace tjob::local
