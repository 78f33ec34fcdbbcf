// The decisions of a local job, as a sans-io state machine: it is given what
// happened (an input) and answers with what to do next (actions). It starts
// nothing, waits for nothing and reads no clock; the job's coroutine
// (local_run.cpp) carries out each action and turns what comes back (a process
// exit, a cancel, the grace timer, a lease) into the next input. So every
// failure path is a sequence of inputs a test can give it without a process.
//
// A job: GPUs leased (when it needs them), its venv taken from the cache (when
// it uses the cache), its setup phases (venv, pip) one after another in node-0,
// then every node's code at once. The first node to fail stops the others
// (JobSet's default); a cancel stops whatever runs, gracefully, and the grace
// timer makes it forced. The status of each step is `next(status, event)` of
// job_state, applied by the shell to the outcomes this machine decides.
#pragma once

#include "core/job_state.hpp"

#include <tjob/types.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace tjob::local {

/// How a step ended: the event to apply, its message and (when it fails it)
/// the step's reason; the exit code of a process a cancel ended.
struct step_outcome {
  detail::job_event ev{detail::event_kind::cancelled};
  std::string message, reason;
  std::optional<int> exit_code;
};

/// What the machine needs to know of a job.
struct job_shape {
  std::vector<std::string> steps;  ///< node-0, node-1, ...
  std::size_t setup = 0;           ///< setup phases, run in node-0 before the nodes' code
  bool lease = false;              ///< it waits for admission or GPUs first (request_lease)
  bool queued = false;             ///< what it waits for is admission (a cancel's words say so)
  bool venv_cache = false;         ///< the venv comes from the cache
  /// Restarts when its code fails (train_request::retry); null: none. It
  /// outlives the machine (the job's record holds it).
  const retry_policy* retry = nullptr;
};

/// What looking the venv up in the cache found.
enum class venv_found : std::uint8_t {
  copied,    ///< a copy is in the job: no setup phases run
  build,     ///< this job builds the entry (it holds its lock): the setup phases build into the cache
  busy,      ///< somebody else builds it: wait, then look again
  uncached,  ///< the cache cannot be used: the setup phases build the job's own venv
  failed,    ///< the cache failed: `how` says why
};

struct job_input {
  enum class kind : std::uint8_t {
    begin,
    lease_granted,
    venv_resolved,   ///< `found`, `how`
    venv_waited,     ///< the wait for another builder ended (or was abandoned)
    venv_finalized,  ///< `ok`, `how`
    spawned,         ///< `step`'s process runs
    /// `step`, `phase`, `what` (the phase's name), `how` (the error),
    /// `message`; `transient`: the OS refused the fork for want of processes
    /// (EAGAIN: ulimit -u, a pids limit), which the end of others' gives back
    spawn_failed,
    exited,  ///< `step`, `exit_code`, `how` (describe), `pid`, `what`, `seconds`
    /// `forced`; `recorded`: somebody already logged the request; `deadline`:
    /// the job's active deadline passed (it ends DeadlineExceeded, not
    /// cancelled); `never`: a dependency can never be satisfied, `message`
    /// says which (it ends DependencyNeverSatisfied)
    cancel,
    timer_fired,  ///< the grace period after a graceful stop has passed
    /// A process of `step`'s code failed (a torch worker's uncaught exception,
    /// recorded by the hook tjob puts in the venv), `what` says how. The first
    /// one is the job's root cause, whichever node's torchrun ends first.
    worker_failed,
    backoff_elapsed,  ///< the wait before the next attempt (restart) has passed
    respawn_due,      ///< the wait of a `respawn` of `step`'s `phase` has passed
  };
  kind k = kind::begin;
  std::size_t step = 0;
  std::size_t phase = 0;
  int exit_code = 0;
  venv_found found = venv_found::copied;
  bool ok = false, forced = false, recorded = false, deadline = false, never = false, transient = false;
  /// spawn_failed: other processes of the engine run, whose end frees what
  /// a transient failure lacks (its wait is then not bounded by respawn_limit)
  bool others_running = false;
  std::string what, how, message;
  long pid = 0;
  double seconds = 0;

  static job_input begin() { return {}; }
  static job_input lease_granted() { return {kind::lease_granted}; }
  static job_input venv_resolved(venv_found f, std::string how = {});
  static job_input venv_waited() { return {kind::venv_waited}; }
  static job_input venv_finalized(bool ok, std::string how = {});
  static job_input spawned(std::size_t step);
  static job_input spawn_failed(std::size_t step, std::size_t phase, std::string what, std::string how,
                                std::string message, bool transient = false, bool others_running = false);
  /// `note`: what else the exit's event says (a full disk); empty: nothing.
  static job_input exited(std::size_t step, int code, std::string how, long pid, std::string what,
                          double seconds, std::string note = {});
  static job_input cancel(bool forced = false, bool recorded = false);
  static job_input deadline_passed();
  static job_input dependency_never_satisfied(std::string message);
  static job_input timer_fired() { return {kind::timer_fired}; }
  static job_input worker_failed(std::size_t step, std::string what);
  static job_input backoff_elapsed() { return {kind::backoff_elapsed}; }
  static job_input respawn_due(std::size_t step, std::size_t phase);
};

/// The index of a node's code among a step's phases (the setup phases are 0..).
inline constexpr std::size_t code_phase = static_cast<std::size_t>(-1);

/// How long a step waits in all for the OS to allow its process (a refused
/// fork, EAGAIN; no descriptor, EMFILE) while no other process of the
/// engine runs whose end would free one, before it fails to start. The
/// back-off doubles from 50 ms to 2 s between tries, and an exit of one of
/// the engine's processes ends it at once.
inline constexpr std::chrono::milliseconds respawn_limit{std::chrono::minutes(5)};

struct job_action {
  enum class kind : std::uint8_t {
    request_lease,  ///< wait for the GPUs; lease_granted follows
    abandon_lease,  ///< stop waiting for them
    resolve_venv,   ///< look the venv up in the cache; venv_resolved follows
    wait_venv,      ///< wait for another builder; venv_waited follows
    abandon_venv_wait,
    finalize_venv,   ///< the built entry into the cache, a copy into the job; venv_finalized follows
    end_venv_build,  ///< let go of the entry's lock; `ok` false: remove what was built
    spawn,           ///< start `phase` of `step` (`first`: the step's first process); spawned or
                     ///< spawn_failed follows
    signal,          ///< stop the processes of `steps`: gracefully, or `forced`
    arm_timer,       ///< the grace period; timer_fired follows unless the job ends first
    note,            ///< `text` as a "[tjob] " line in `step`'s log; `setup_event`: also a Setup event
    record_cancel,   ///< log the cancel request (`deadline`: the active deadline's)
    finish,          ///< apply `outcomes`, one per step, `blamed`'s first; the job has ended
    /// The attempt failed and is tried again: apply `outcomes` (Restarting,
    /// one per step), then wait `delay`; backoff_elapsed follows, and attempt
    /// `attempt` starts. A cancel meanwhile ends the job (finish).
    restart,
    /// The OS refused `step`'s process for want of processes (a transient
    /// spawn_failed): start `phase` again after `delay`; respawn_due follows
    /// unless the job ends first. `first` as for spawn; `text`: why, on the
    /// first wait of the step (empty on the next ones).
    respawn,
  };
  kind k;
  std::size_t step = 0;
  std::size_t phase = 0;
  std::size_t blamed = 0;  ///< finish: the step whose failure is the job's
  bool first = false, forced = false, ok = false, setup_event = false, deadline = false;
  std::vector<std::size_t> steps;
  std::string text;
  std::vector<step_outcome> outcomes;
  std::chrono::milliseconds delay{0};  ///< restart, respawn
  int attempt = 1;                     ///< restart: the attempt that follows
};

class job_fsm {
 public:
  explicit job_fsm(job_shape shape);

  /// The actions `in` calls for, in order. After `finish`, nothing.
  std::vector<job_action> on(const job_input& in);

  bool done() const noexcept { return stage_ == stage::done; }
  bool cancelled() const noexcept { return stopping(); }
  int attempt() const noexcept { return attempt_; }

 private:
  enum class stage : std::uint8_t {
    idle,
    leasing,
    resolving,
    waiting_venv,
    setup,
    finalizing,
    running,
    backoff,  ///< between a failed attempt and the next
    done
  };
  struct step_state {
    bool started = false;  ///< it has had a process (its Started event)
    bool running = false;
    bool ended = false;
    bool stopped = false;  ///< stopped because another node failed
    /// Waiting to try a refused fork again (respawn): neither running nor
    /// ended; a cancel or another node's failure ends it at once.
    bool respawning = false;
    int respawns = 0;  ///< refused forks in a row
    std::chrono::milliseconds respawn_waited{0};
    std::string how;  ///< how its process ended (a node's code)
    step_outcome out;
  };

  // One handler per input kind (`on` dispatches).
  void on_begin();
  void on_venv_resolved(const job_input& in);
  void on_venv_waited();
  void on_venv_finalized(const job_input& in);
  void on_spawn_failed(const job_input& in);
  void on_exited(const job_input& in);
  void setup_phase_exited(const job_input& in);
  void on_worker_failed(const job_input& in);
  void on_cancel(const job_input& in);
  void on_respawn_due(const job_input& in);

  void after_lease();
  void start_setup();
  void start_nodes();
  void setup_ended(step_outcome out);
  void setup_failure(const std::string& why);
  void node_ended(std::size_t i, step_outcome out, bool failed);
  void stop_running(std::optional<std::size_t> except, bool forced);
  void finish();
  /// Whether the blamed failure is retried; if so, emits restart and returns true.
  bool restart(std::size_t blamed);
  void finish_all(const std::string& message);
  /// A refused fork of `in.step`: a respawn after a back-off, or (past
  /// respawn_limit, or once cancelled) the failure it is.
  bool respawn(const job_input& in);
  /// Ends the steps that wait to respawn, as the cancel or another node's
  /// failure (`failed`) ends the running ones.
  void end_respawning(std::optional<std::size_t> failed);
  /// How a stopped step's message and reason put it: cancelled, or DeadlineExceeded.
  std::string stop_word() const;
  std::string stop_reason() const;
  void emit(job_action a) { out_.push_back(std::move(a)); }

  job_shape shape_;
  stage stage_ = stage::idle;
  std::size_t next_setup_ = 0;
  bool building_ = false;  ///< the setup phases build the cache entry: end_venv_build is owed
  /// Why the job is being stopped: not at all, a cancel, its active
  /// deadline, or a dependency that can never be satisfied (the first asked).
  enum class stop_cause : std::uint8_t { none, cancel, deadline, dependency };
  bool stopping() const noexcept { return stop_ != stop_cause::none; }
  stop_cause stop_ = stop_cause::none;
  std::string never_how_;  ///< the dependency's: which, and how it ended
  bool timer_armed_ = false;
  std::optional<std::size_t> failed_node_;
  /// The first worker failure recorded (worker_failed): the node to blame,
  /// even when another node's torchrun ended first.
  std::optional<std::pair<std::size_t, std::string>> root_;
  std::vector<step_state> steps_;
  int attempt_ = 1;
  std::vector<job_action> out_;
};

}  // namespace tjob::local
