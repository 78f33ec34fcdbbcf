// The local job's state machine, driven through every failure path with no
// process, no timer and no store: inputs in, actions out.
#include "adapters/local/job_fsm.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace tjob;
using namespace tjob::local;
using tjob::detail::event_kind;
using A = job_action::kind;

namespace {

job_shape shape(std::size_t nodes, std::size_t setup = 0, bool lease = false, bool cache = false) {
  job_shape s;
  for (std::size_t i = 0; i < nodes; ++i) s.steps.push_back("node-" + std::to_string(i));
  s.setup = setup;
  s.lease = lease;
  s.venv_cache = cache;
  return s;
}

std::vector<A> kinds(const std::vector<job_action>& as) {
  std::vector<A> out;
  for (const auto& a : as) out.push_back(a.k);
  return out;
}

const job_action* find(const std::vector<job_action>& as, A k) {
  auto it = std::find_if(as.begin(), as.end(), [&](const job_action& a) { return a.k == k; });
  return it == as.end() ? nullptr : &*it;
}

// The outcomes of the finish among `as` (which must be there).
std::vector<step_outcome> finished(const std::vector<job_action>& as) {
  auto* f = find(as, A::finish);
  REQUIRE(f != nullptr);
  CHECK(&as.back() == f);  // nothing after the end
  return f->outcomes;
}

job_input exit_of(std::size_t step, int code, const std::string& what = "python") {
  return job_input::exited(step, code, code == 0 ? "exit code 0" : "exit code " + std::to_string(code),
                           100 + static_cast<long>(step), what, 0.5);
}

// Starts the nodes of a job without setup: each spawn answered `spawned`.
void start_nodes(job_fsm& m, std::size_t nodes) {
  auto as = m.on(job_input::begin());
  REQUIRE(as.size() == nodes);
  for (std::size_t i = 0; i < nodes; ++i) {
    CHECK(as[i].k == A::spawn);
    CHECK(as[i].step == i);
    CHECK(as[i].phase == code_phase);
    CHECK(as[i].first);
    CHECK(m.on(job_input::spawned(i)).empty());
  }
}

}  // namespace

TEST_CASE("a one-node job: its code runs, and its exit code is the outcome") {
  job_fsm m(shape(1));
  start_nodes(m, 1);
  auto out = finished(m.on(exit_of(0, 3)));
  REQUIRE(out.size() == 1);
  CHECK(out[0].ev.kind == event_kind::exited);
  CHECK(out[0].ev.exit_code == 3);
  CHECK(out[0].message == "process 100 ended: exit code 3");
  CHECK(out[0].reason == "exit code 3");
  CHECK(m.done());
  CHECK(m.on(job_input::cancel()).empty());  // an ended job takes nothing more
  CHECK(m.on(exit_of(0, 0)).empty());
}

TEST_CASE("setup phases run one after another in node-0, then every node's code at once") {
  job_fsm m(shape(2, 2));
  auto as = m.on(job_input::begin());
  REQUIRE(kinds(as) == std::vector<A>{A::spawn});
  CHECK(as[0].step == 0);
  CHECK(as[0].phase == 0);
  CHECK(as[0].first);  // the step's Started
  CHECK(m.on(job_input::spawned(0)).empty());
  as = m.on(exit_of(0, 0, "venv"));
  REQUIRE(kinds(as) == std::vector<A>{A::note, A::spawn});
  CHECK(as[0].setup_event);
  CHECK(as[0].text == "venv done in 0.50 s");
  CHECK(as[1].phase == 1);
  CHECK_FALSE(as[1].first);  // node-0 is Running already: a Setup event
  m.on(job_input::spawned(0));
  as = m.on(exit_of(0, 0, "pip install"));
  REQUIRE(kinds(as) == std::vector<A>{A::note, A::spawn, A::spawn});
  CHECK(as[1].step == 0);
  CHECK(as[1].phase == code_phase);
  CHECK_FALSE(as[1].first);
  CHECK(as[2].step == 1);
  CHECK(as[2].first);
  m.on(job_input::spawned(0));
  m.on(job_input::spawned(1));
  CHECK(m.on(exit_of(1, 0)).empty());  // node-0 still runs
  auto out = finished(m.on(exit_of(0, 0)));
  CHECK(out[0].ev.kind == event_kind::exited);
  CHECK(out[1].ev.exit_code == 0);
}

TEST_CASE("a setup phase that fails ends node-0 with it, and the other nodes never start") {
  job_fsm m(shape(3, 2));
  m.on(job_input::begin());
  m.on(job_input::spawned(0));
  auto as = m.on(exit_of(0, 1, "venv"));
  REQUIRE(kinds(as) == std::vector<A>{A::note, A::finish});
  CHECK(as[0].text == "venv failed after 0.50 s: exit code 1");
  CHECK_FALSE(as[0].setup_event);
  auto out = finished(as);
  CHECK(out[0].ev.kind == event_kind::exited);
  CHECK(out[0].ev.exit_code == 1);
  CHECK(out[0].reason == "setup failed: venv exit code 1");
  for (std::size_t i : {1u, 2u}) {
    CHECK(out[i].ev.kind == event_kind::start_failed);
    CHECK(out[i].reason == "setup failed in node-0");
  }
}

TEST_CASE(
    "a program that cannot be started fails its step: Created steps StartFailed, Running ones exit 127") {
  SUBCASE("the first process") {
    job_fsm m(shape(1));
    m.on(job_input::begin());
    auto out = finished(
        m.on(job_input::spawn_failed(0, code_phase, "command", "No such file or directory", "cannot start")));
    CHECK(out[0].ev.kind == event_kind::start_failed);
    CHECK(out[0].reason == "start failed: No such file or directory");
  }
  SUBCASE("a later phase") {
    job_fsm m(shape(1, 1));
    m.on(job_input::begin());
    m.on(job_input::spawned(0));
    m.on(exit_of(0, 0, "venv"));
    auto as = m.on(job_input::spawn_failed(0, code_phase, "python", "Permission denied", "cannot start x"));
    REQUIRE(kinds(as) == std::vector<A>{A::note, A::finish});
    CHECK(as[0].text == "cannot start x");
    auto out = finished(as);
    CHECK(out[0].ev.kind == event_kind::exited);
    CHECK(out[0].ev.exit_code == 127);
    CHECK(out[0].reason == "setup failed: python: Permission denied");
  }
  SUBCASE("one node of several: the others are stopped") {
    job_fsm m(shape(2));
    auto as = m.on(job_input::begin());
    REQUIRE(as.size() == 2);
    m.on(job_input::spawned(0));
    as = m.on(job_input::spawn_failed(1, code_phase, "torchrun", "No such file or directory",
                                      "cannot start torchrun"));
    REQUIRE(kinds(as) == std::vector<A>{A::signal, A::arm_timer});
    CHECK(as[0].steps == std::vector<std::size_t>{0});
    CHECK_FALSE(as[0].forced);
    auto out = finished(m.on(exit_of(0, 143)));
    CHECK(out[1].ev.kind == event_kind::start_failed);
    CHECK(out[0].reason == "stopped: node-1 failed (exit code 143)");
  }
}

TEST_CASE("the first node to fail is the one blamed, the others are stopped, then killed after the grace") {
  job_fsm m(shape(3));
  start_nodes(m, 3);
  auto as = m.on(exit_of(1, 2));
  REQUIRE(kinds(as) == std::vector<A>{A::signal, A::arm_timer});
  CHECK(as[0].steps == std::vector<std::size_t>{0, 2});
  CHECK_FALSE(as[0].forced);
  CHECK(m.on(exit_of(2, 143)).empty());  // node-0 still runs
  as = m.on(job_input::timer_fired());
  REQUIRE(kinds(as) == std::vector<A>{A::signal});
  CHECK(as[0].forced);
  CHECK(as[0].steps == std::vector<std::size_t>{0});  // only what still runs
  auto out = finished(m.on(exit_of(0, -1)));
  CHECK(out[1].reason == "exit code 2");
  CHECK(out[2].reason == "stopped: node-1 failed (exit code 143)");
  CHECK(out[0].ev.kind == event_kind::exited);
  CHECK(out[0].reason.rfind("stopped: node-1 failed", 0) == 0);
}

TEST_CASE("a worker failure recorded first is blamed, though another node's torchrun ends first") {
  job_fsm m(shape(3));
  start_nodes(m, 3);
  // node-2's worker raised: every node is stopped at once, node-2 too (its
  // torchrun would wait at its exit barrier)
  auto as = m.on(job_input::worker_failed(2, "rank 2 raised ValueError: bad"));
  REQUIRE(kinds(as) == std::vector<A>{A::signal, A::arm_timer, A::signal});
  CHECK(as[0].steps == std::vector<std::size_t>{0, 1});
  CHECK(as[2].steps == std::vector<std::size_t>{2});
  CHECK(m.on(job_input::worker_failed(0, "rank 0 raised RuntimeError: peer gone")).empty());  // not the first
  CHECK(m.on(exit_of(0, 1)).empty());  // node-0 ends first, of its peer's death
  CHECK(m.on(exit_of(2, 143)).empty());
  auto f = m.on(exit_of(1, 143));
  auto out = finished(f);
  CHECK(find(f, A::finish)->blamed == 2);
  CHECK(out[2].reason == "rank 2 raised ValueError: bad (exit code 143)");
  CHECK(out[0].reason == "stopped: node-2 failed (exit code 1)");
  CHECK(out[1].reason == "stopped: node-2 failed (exit code 143)");

  // the record may come after a node has already ended failed: the blame moves to it
  job_fsm late(shape(2));
  start_nodes(late, 2);
  late.on(exit_of(0, 1));  // node-0 ends first and is taken for the failure
  CHECK(late.on(job_input::worker_failed(1, "rank 1 raised KeyError: 'x'")).empty());
  auto lf = late.on(exit_of(1, 1));
  auto lout = finished(lf);
  CHECK(find(lf, A::finish)->blamed == 1);
  CHECK(lout[1].reason == "rank 1 raised KeyError: 'x' (exit code 1)");
  CHECK(lout[0].reason == "exit code 1 after node-1 failed");
}

TEST_CASE("a stopped node that still exits 0 is Complete, and a second failure blames nobody new") {
  job_fsm m(shape(3));
  start_nodes(m, 3);
  m.on(exit_of(2, 1));
  CHECK(m.on(exit_of(0, 0)).empty());
  auto out = finished(m.on(exit_of(1, 5)));
  CHECK(out[0].ev.exit_code == 0);
  CHECK(out[0].reason == "exit code 0");
  CHECK(out[1].reason == "stopped: node-2 failed (exit code 5)");
  CHECK(out[2].reason == "exit code 1");
}

TEST_CASE("the grace timer after the job has ended, or after a forced stop, does nothing") {
  job_fsm m(shape(2));
  start_nodes(m, 2);
  m.on(exit_of(0, 1));
  finished(m.on(exit_of(1, 143)));
  CHECK(m.on(job_input::timer_fired()).empty());
  job_fsm idle(shape(1));
  start_nodes(idle, 1);
  CHECK(idle.on(job_input::timer_fired()).empty());  // never armed
}

TEST_CASE("cancel while the code runs: recorded once, SIGTERM, SIGKILL when the grace passes") {
  job_fsm m(shape(2));
  start_nodes(m, 2);
  auto as = m.on(job_input::cancel());
  REQUIRE(kinds(as) == std::vector<A>{A::record_cancel, A::signal, A::arm_timer});
  CHECK(as[1].steps == std::vector<std::size_t>{0, 1});
  CHECK_FALSE(as[1].forced);
  CHECK(m.cancelled());
  CHECK(m.on(job_input::cancel()).empty());  // asked again: under way
  CHECK(m.on(exit_of(0, -15)).empty());
  as = m.on(job_input::timer_fired());
  REQUIRE(kinds(as) == std::vector<A>{A::signal});
  CHECK(as[0].forced);
  CHECK(as[0].steps == std::vector<std::size_t>{1});
  auto out = finished(m.on(exit_of(1, -9)));
  for (std::size_t i : {0u, 1u}) {
    CHECK(out[i].ev.kind == event_kind::cancelled);
    CHECK(out[i].reason == "cancelled");
  }
  CHECK(out[0].exit_code == -15);  // how the process ended is kept
  CHECK(out[1].message == "cancelled; the process ended: exit code -9");
}

TEST_CASE("a cancel another process recorded is not recorded again, and a forced cancel kills at once") {
  job_fsm m(shape(1));
  start_nodes(m, 1);
  auto as = m.on(job_input::cancel(false, true));
  CHECK(kinds(as) == std::vector<A>{A::signal, A::arm_timer});
  as = m.on(job_input::cancel(true));
  REQUIRE(kinds(as) == std::vector<A>{A::signal});
  CHECK(as[0].forced);
  job_fsm f(shape(1));
  start_nodes(f, 1);
  as = f.on(job_input::cancel(true));
  REQUIRE(kinds(as) == std::vector<A>{A::record_cancel, A::signal});
  CHECK(as[1].forced);
}

TEST_CASE("cancel during setup stops the setup phase: no node starts, every step is cancelled") {
  job_fsm m(shape(2, 2));
  m.on(job_input::begin());
  m.on(job_input::spawned(0));
  auto as = m.on(job_input::cancel());
  REQUIRE(kinds(as) == std::vector<A>{A::record_cancel, A::signal, A::arm_timer});
  CHECK(as[1].steps == std::vector<std::size_t>{0});
  // the phase ends with exit code 0 just as the cancel comes: nothing more starts
  auto out = finished(m.on(exit_of(0, 0, "venv")));
  CHECK(out[0].ev.kind == event_kind::cancelled);
  CHECK(out[1].ev.kind == event_kind::cancelled);
  CHECK(out[1].message == "cancelled before it started");
}

TEST_CASE("cancel during the escalation after a node failed: the job is cancelled, nobody new is blamed") {
  job_fsm m(shape(3));
  start_nodes(m, 3);
  m.on(exit_of(0, 1));  // node-0 failed: node-1 and node-2 are being stopped, the timer armed
  auto as = m.on(job_input::cancel());
  REQUIRE(kinds(as) == std::vector<A>{A::record_cancel, A::signal});  // the timer is armed already
  CHECK(as[1].steps == std::vector<std::size_t>{1, 2});
  as = m.on(job_input::timer_fired());
  REQUIRE(kinds(as) == std::vector<A>{A::signal});
  CHECK(as[0].forced);
  m.on(exit_of(1, -9));
  auto out = finished(m.on(exit_of(2, -9)));
  CHECK(out[0].reason == "exit code 1");  // it ended before the cancel
  CHECK(out[1].ev.kind == event_kind::cancelled);
  CHECK(out[2].ev.kind == event_kind::cancelled);
}

TEST_CASE("a lease wait that is cancelled is abandoned, and nothing of the job ever starts") {
  job_fsm m(shape(2, 1, /*lease=*/true));
  auto as = m.on(job_input::begin());
  REQUIRE(kinds(as) == std::vector<A>{A::request_lease});
  as = m.on(job_input::cancel());
  REQUIRE(kinds(as) == std::vector<A>{A::record_cancel, A::abandon_lease, A::finish});
  auto out = finished(as);
  for (const auto& o : out) {
    CHECK(o.ev.kind == event_kind::cancelled);
    CHECK(o.message == "cancelled while waiting for GPUs");
  }
  CHECK(m.on(job_input::lease_granted()).empty());  // granted just too late: the end releases it
}

TEST_CASE("a granted lease starts the job") {
  job_fsm m(shape(1, 0, true));
  m.on(job_input::begin());
  auto as = m.on(job_input::lease_granted());
  REQUIRE(kinds(as) == std::vector<A>{A::spawn});
  CHECK(m.on(job_input::lease_granted()).empty());  // once
}

TEST_CASE("the venv cache: a copy skips setup, a build runs setup into the cache, then finalizes") {
  SUBCASE("copied") {
    job_fsm m(shape(1, 2, false, true));
    REQUIRE(kinds(m.on(job_input::begin())) == std::vector<A>{A::resolve_venv});
    auto as = m.on(job_input::venv_resolved(venv_found::copied));
    REQUIRE(kinds(as) == std::vector<A>{A::spawn});
    CHECK(as[0].phase == code_phase);
    CHECK(as[0].first);
  }
  SUBCASE("built here") {
    job_fsm m(shape(2, 1, false, true));
    m.on(job_input::begin());
    auto as = m.on(job_input::venv_resolved(venv_found::build));
    REQUIRE(kinds(as) == std::vector<A>{A::spawn});
    CHECK(as[0].phase == 0);
    m.on(job_input::spawned(0));
    as = m.on(exit_of(0, 0, "venv"));
    REQUIRE(kinds(as) == std::vector<A>{A::note, A::finalize_venv});
    as = m.on(job_input::venv_finalized(true));
    REQUIRE(kinds(as) == std::vector<A>{A::end_venv_build, A::spawn, A::spawn});
    CHECK(as[0].ok);
    CHECK_FALSE(as[1].first);
    CHECK(as[2].first);
  }
  SUBCASE("a build whose pip fails: the lock goes, what was built is removed") {
    job_fsm m(shape(1, 2, false, true));
    m.on(job_input::begin());
    m.on(job_input::venv_resolved(venv_found::build));
    m.on(job_input::spawned(0));
    m.on(exit_of(0, 0, "venv"));
    m.on(job_input::spawned(0));
    auto as = m.on(exit_of(0, 1, "pip install"));
    REQUIRE(kinds(as) == std::vector<A>{A::note, A::end_venv_build, A::finish});
    CHECK_FALSE(as[1].ok);
    CHECK(finished(as)[0].reason == "setup failed: pip install exit code 1");
  }
  SUBCASE("the cache fails before anything ran") {
    job_fsm m(shape(2, 2, false, true));
    m.on(job_input::begin());
    auto as = m.on(job_input::venv_resolved(venv_found::failed, "venv cache: disk full"));
    REQUIRE(kinds(as) == std::vector<A>{A::note, A::finish});
    auto out = finished(as);
    CHECK(out[0].ev.kind == event_kind::start_failed);
    CHECK(out[0].reason == "setup failed: venv cache: disk full");
    CHECK(out[1].reason == "setup failed in node-0");
  }
  SUBCASE("finalizing fails after setup ran: node-0 exits 1") {
    job_fsm m(shape(1, 1, false, true));
    m.on(job_input::begin());
    m.on(job_input::venv_resolved(venv_found::build));
    m.on(job_input::spawned(0));
    m.on(exit_of(0, 0, "venv"));
    auto as = m.on(job_input::venv_finalized(false, "venv cache: cannot rename"));
    REQUIRE(kinds(as) == std::vector<A>{A::end_venv_build, A::note, A::finish});
    CHECK_FALSE(as[0].ok);
    auto out = finished(as);
    CHECK(out[0].ev.kind == event_kind::exited);
    CHECK(out[0].ev.exit_code == 1);
  }
}

TEST_CASE("the venv cache busy elsewhere: wait, look again, and a cancel abandons the wait") {
  job_fsm m(shape(1, 2, false, true));
  m.on(job_input::begin());
  REQUIRE(kinds(m.on(job_input::venv_resolved(venv_found::busy))) == std::vector<A>{A::wait_venv});
  REQUIRE(kinds(m.on(job_input::venv_waited())) == std::vector<A>{A::resolve_venv});
  m.on(job_input::venv_resolved(venv_found::busy));
  auto as = m.on(job_input::cancel());
  REQUIRE(kinds(as) == std::vector<A>{A::record_cancel, A::abandon_venv_wait});
  auto out = finished(m.on(job_input::venv_waited()));
  CHECK(out[0].ev.kind == event_kind::cancelled);
  CHECK(out[0].message == "cancelled before it started");
}

TEST_CASE("a cancel while the cache is looked up ends the job when the answer comes, giving back a lock") {
  job_fsm m(shape(1, 2, false, true));
  m.on(job_input::begin());
  auto as = m.on(job_input::cancel());
  REQUIRE(kinds(as) == std::vector<A>{A::record_cancel});  // nothing runs yet
  as = m.on(job_input::venv_resolved(venv_found::build));
  REQUIRE(kinds(as) == std::vector<A>{A::end_venv_build, A::finish});
  CHECK_FALSE(as[0].ok);
  CHECK(finished(as)[0].ev.kind == event_kind::cancelled);
}

TEST_CASE("a cancel before the job begins ends it at once") {
  job_fsm m(shape(2, 1, true));
  CHECK(kinds(m.on(job_input::cancel())) == std::vector<A>{A::record_cancel});
  auto out = finished(m.on(job_input::begin()));
  CHECK(out.size() == 2);
  CHECK(out[0].ev.kind == event_kind::cancelled);
}

TEST_CASE("inputs that do not fit the state change nothing") {
  job_fsm m(shape(2));
  CHECK(m.on(job_input::lease_granted()).empty());
  CHECK(m.on(job_input::venv_waited()).empty());
  CHECK(m.on(exit_of(0, 0)).empty());  // nothing runs
  start_nodes(m, 2);
  CHECK(m.on(exit_of(7, 0)).empty());       // no such step
  CHECK(m.on(job_input::begin()).empty());  // once
  CHECK(m.on(exit_of(0, 0)).empty());
  CHECK(m.on(exit_of(0, 0)).empty());  // an exit twice: once
  CHECK_FALSE(m.done());
  finished(m.on(exit_of(1, 0)));
}

TEST_CASE("the active deadline stops the nodes gracefully, then by force, and they end DeadlineExceeded") {
  job_fsm m(shape(2));
  start_nodes(m, 2);
  auto as = m.on(job_input::deadline_passed());
  REQUIRE(find(as, A::record_cancel));
  CHECK(find(as, A::record_cancel)->deadline);
  auto* sig = find(as, A::signal);
  REQUIRE(sig);
  CHECK_FALSE(sig->forced);
  CHECK(sig->steps == std::vector<std::size_t>{0, 1});
  REQUIRE(find(as, A::arm_timer));
  as = m.on(job_input::timer_fired());
  REQUIRE(find(as, A::signal));
  CHECK(find(as, A::signal)->forced);
  CHECK(m.on(exit_of(0, 137)).empty());
  auto out = finished(m.on(exit_of(1, 137)));
  for (const auto& o : out) {
    CHECK(o.ev.kind == event_kind::cancelled);
    CHECK(o.reason == "DeadlineExceeded");
    CHECK(o.message.find("active deadline exceeded; the process ended") == 0);
  }
  // A user's cancel after it changes nothing of the words.
  CHECK(m.on(job_input::cancel()).empty());
}

TEST_CASE("a cancel before the deadline keeps the words of a cancel") {
  job_fsm m(shape(1));
  start_nodes(m, 1);
  auto as = m.on(job_input::cancel());
  CHECK_FALSE(find(as, A::record_cancel)->deadline);
  m.on(job_input::deadline_passed());  // the timer fired meanwhile: a cancel is under way already
  auto out = finished(m.on(exit_of(0, 143)));
  CHECK(out[0].reason == "cancelled");
}

TEST_CASE("a queued job cancelled before admission never starts, and says it waited in the queue") {
  auto s = shape(1, 0, true);
  s.queued = true;
  job_fsm m(s);
  CHECK(kinds(m.on(job_input::begin())) == std::vector<A>{A::request_lease});
  auto as = m.on(job_input::cancel());
  REQUIRE(find(as, A::abandon_lease));
  auto out = finished(as);
  CHECK(out[0].reason == "cancelled");
  CHECK(out[0].message == "cancelled while waiting in the queue");
}

// --- retries (train_request::retry) ----------------------------------------

namespace {

retry_policy restarts(int n, std::vector<int> never = {}) {
  retry_policy p;
  p.max_restarts = n;
  p.backoff = std::chrono::milliseconds(100);
  p.backoff_factor = 3;
  p.max_backoff = std::chrono::milliseconds(500);
  p.never_retry = std::move(never);
  return p;
}

// The restart among `as`, the last action (a copy: `as` is often a temporary).
job_action restarted(const std::vector<job_action>& as) {
  REQUIRE(!as.empty());
  REQUIRE(as.back().k == A::restart);
  return as.back();
}

}  // namespace

TEST_CASE(
    "a failing job with restarts is tried again after each backoff, and completes on its third attempt") {
  auto policy = restarts(3);
  auto sh = shape(1);
  sh.retry = &policy;
  job_fsm m(sh);
  start_nodes(m, 1);
  std::vector<long> delays;
  for (int attempt = 1; attempt <= 2; ++attempt) {
    CAPTURE(attempt);
    const auto r = restarted(m.on(exit_of(0, 7)));
    CHECK(r.attempt == attempt + 1);
    delays.push_back(static_cast<long>(r.delay.count()));
    REQUIRE(r.outcomes.size() == 1);
    CHECK(r.outcomes[0].ev.kind == event_kind::restarting);
    CHECK(r.outcomes[0].ev.exit_code == 7);
    CHECK(r.outcomes[0].reason == "exit code 7");
    CHECK(r.outcomes[0].message.find("attempt " + std::to_string(attempt) + " of 4 failed") == 0);
    CHECK_FALSE(m.done());
    // nothing starts until the backoff has passed; a stray exit changes nothing
    CHECK(m.on(exit_of(0, 1)).empty());
    CHECK(m.on(job_input::timer_fired()).empty());
    auto as = m.on(job_input::backoff_elapsed());
    REQUIRE(kinds(as) == std::vector<A>{A::spawn});
    CHECK(as[0].first);  // the step's first process of this attempt: Started again
    CHECK(as[0].phase == code_phase);
    CHECK(m.on(job_input::spawned(0)).empty());
    CHECK(m.attempt() == attempt + 1);
  }
  CHECK(delays == std::vector<long>{100, 300});
  auto out = finished(m.on(exit_of(0, 0)));
  CHECK(out[0].ev.kind == event_kind::exited);
  CHECK(out[0].ev.exit_code == 0);
  CHECK(m.done());
  CHECK(m.on(job_input::backoff_elapsed()).empty());
}

TEST_CASE("the restarts run out: the last failure is the job's, and says why it was not restarted") {
  auto policy = restarts(1);
  auto sh = shape(1);
  sh.retry = &policy;
  job_fsm m(sh);
  start_nodes(m, 1);
  restarted(m.on(exit_of(0, 2)));
  REQUIRE(kinds(m.on(job_input::backoff_elapsed())) == std::vector<A>{A::spawn});
  m.on(job_input::spawned(0));
  auto out = finished(m.on(exit_of(0, 2)));
  CHECK(out[0].ev.kind == event_kind::exited);
  CHECK(out[0].message == "process 100 ended: exit code 2; not restarted: no restarts left (1 of 1 used)");
  CHECK(out[0].reason == "exit code 2");
}

TEST_CASE("an exit code that is never retried, a start failure and a setup failure end the job at once") {
  SUBCASE("never_retry") {
    auto policy = restarts(5, {3});
    auto sh = shape(1);
    sh.retry = &policy;
    job_fsm m(sh);
    start_nodes(m, 1);
    auto out = finished(m.on(exit_of(0, 3)));
    CHECK(out[0].message == "process 100 ended: exit code 3; not restarted: exit code 3 is never retried");
  }
  SUBCASE("retry_on names other codes") {
    auto policy = restarts(5);
    policy.retry_on = {75};
    auto sh = shape(1);
    sh.retry = &policy;
    job_fsm m(sh);
    start_nodes(m, 1);
    auto out = finished(m.on(exit_of(0, 3)));
    CHECK(out[0].message.find("not restarted: exit code 3 is not one that is retried (75)") !=
          std::string::npos);
  }
  SUBCASE("the program cannot be started") {
    auto policy = restarts(5);
    auto sh = shape(1);
    sh.retry = &policy;
    job_fsm m(sh);
    m.on(job_input::begin());
    auto out = finished(m.on(job_input::spawn_failed(0, code_phase, "command", "not found", "cannot start")));
    CHECK(out[0].ev.kind == event_kind::start_failed);
  }
  SUBCASE("a setup phase fails") {
    auto policy = restarts(5);
    auto sh = shape(1, 1);
    sh.retry = &policy;
    job_fsm m(sh);
    m.on(job_input::begin());
    m.on(job_input::spawned(0));
    auto out = finished(m.on(exit_of(0, 1, "pip install")));
    CHECK(out[0].reason.rfind("setup failed", 0) == 0);
  }
}

TEST_CASE("every node restarts when one fails, and the restarted attempt needs no setup") {
  auto policy = restarts(2);
  auto sh = shape(2, 1);
  sh.retry = &policy;
  job_fsm m(sh);
  REQUIRE(kinds(m.on(job_input::begin())) == std::vector<A>{A::spawn});  // the setup phase
  m.on(job_input::spawned(0));
  auto as = m.on(exit_of(0, 0, "pip install"));
  REQUIRE(kinds(as) == std::vector<A>{A::note, A::spawn, A::spawn});
  m.on(job_input::spawned(0));
  m.on(job_input::spawned(1));
  as = m.on(exit_of(1, 9));  // node-1 fails: node-0 is stopped
  REQUIRE(kinds(as) == std::vector<A>{A::signal, A::arm_timer});
  const auto r = restarted(m.on(exit_of(0, 143)));
  REQUIRE(r.outcomes.size() == 2);
  CHECK(r.blamed == 1);
  CHECK(r.outcomes[0].ev.kind == event_kind::restarting);
  CHECK(r.outcomes[0].reason == "stopped: node-1 failed (exit code 143)");
  CHECK(r.outcomes[1].reason == "exit code 9");
  as = m.on(job_input::backoff_elapsed());
  REQUIRE(kinds(as) == std::vector<A>{A::spawn, A::spawn});
  CHECK(as[0].phase == code_phase);
  CHECK(as[0].first);
  CHECK(as[1].first);
}

TEST_CASE("a cancel or the deadline during the backoff ends the job: the retry loop stops") {
  auto policy = restarts(3);
  auto sh = shape(1);
  sh.retry = &policy;
  SUBCASE("cancel") {
    job_fsm m(sh);
    start_nodes(m, 1);
    restarted(m.on(exit_of(0, 1)));
    auto as = m.on(job_input::cancel());
    REQUIRE(kinds(as) == std::vector<A>{A::record_cancel, A::finish});
    auto out = finished(as);
    CHECK(out[0].ev.kind == event_kind::cancelled);
    CHECK(out[0].message == "cancelled while waiting to restart");
    CHECK(m.on(job_input::backoff_elapsed()).empty());  // the timer that still fires starts nothing
  }
  SUBCASE("deadline") {
    job_fsm m(sh);
    start_nodes(m, 1);
    restarted(m.on(exit_of(0, 1)));
    auto out = finished(m.on(job_input::deadline_passed()));
    CHECK(out[0].message == "active deadline exceeded while waiting to restart");
    CHECK(out[0].reason == "DeadlineExceeded");
  }
  SUBCASE("a cancel while the attempt runs is not retried") {
    job_fsm m(sh);
    start_nodes(m, 1);
    m.on(job_input::cancel());
    auto out = finished(m.on(exit_of(0, 143)));
    CHECK(out[0].ev.kind == event_kind::cancelled);
  }
}

namespace {

job_input refused_fork(std::size_t step) {
  return job_input::spawn_failed(step, code_phase, "command", "clone: Resource temporarily unavailable",
                                 "cannot start x", true);
}

}  // namespace

TEST_CASE(
    "a fork the OS refuses (EAGAIN) waits with a growing back-off and tries again, then the step runs") {
  job_fsm m(shape(1));
  m.on(job_input::begin());
  auto as = m.on(refused_fork(0));
  REQUIRE(kinds(as) == std::vector<A>{A::respawn});
  CHECK(as[0].step == 0);
  CHECK(as[0].phase == code_phase);
  CHECK(as[0].first);
  CHECK(as[0].delay == std::chrono::milliseconds(50));
  CHECK(as[0].text.find("clone: Resource temporarily unavailable") != std::string::npos);
  as = m.on(job_input::respawn_due(0, code_phase));
  REQUIRE(kinds(as) == std::vector<A>{A::spawn});
  CHECK(as[0].first);
  as = m.on(refused_fork(0));
  REQUIRE(kinds(as) == std::vector<A>{A::respawn});
  CHECK(as[0].delay == std::chrono::milliseconds(100));
  CHECK(as[0].text.empty());  // said once
  REQUIRE(kinds(m.on(job_input::respawn_due(0, code_phase))) == std::vector<A>{A::spawn});
  CHECK(m.on(job_input::spawned(0)).empty());
  auto out = finished(m.on(exit_of(0, 0)));
  CHECK(out[0].ev.kind == event_kind::exited);
  CHECK(out[0].ev.exit_code == 0);
}

TEST_CASE("a cancel ends a step that waits to be forked at once, and its late respawn_due does nothing") {
  job_fsm m(shape(2));
  auto as = m.on(job_input::begin());
  REQUIRE(as.size() == 2);
  m.on(job_input::spawned(0));
  REQUIRE(kinds(m.on(refused_fork(1))) == std::vector<A>{A::respawn});
  as = m.on(job_input::cancel());
  REQUIRE(kinds(as) == std::vector<A>{A::record_cancel, A::signal, A::arm_timer});
  CHECK(as[1].steps == std::vector<std::size_t>{0});
  CHECK(m.on(job_input::respawn_due(1, code_phase)).empty());  // no spawn for a cancelled job
  auto out = finished(m.on(exit_of(0, 143)));
  CHECK(out[1].ev.kind == event_kind::cancelled);
  CHECK(out[1].message == "cancelled before it started");
  CHECK(m.on(job_input::respawn_due(1, code_phase)).empty());
}

TEST_CASE("a node that fails while another waits to be forked ends the job: the waiting one never starts") {
  job_fsm m(shape(2));
  m.on(job_input::begin());
  m.on(job_input::spawned(0));
  REQUIRE(kinds(m.on(refused_fork(1))) == std::vector<A>{A::respawn});
  auto out = finished(m.on(exit_of(0, 2)));
  CHECK(out[0].reason == "exit code 2");
  CHECK(out[1].ev.kind == event_kind::start_failed);
  CHECK(out[1].reason == "not started: node-0 failed");
}

TEST_CASE("a fork refused for longer than respawn_limit fails the step's start, saying why") {
  job_fsm m(shape(1));
  m.on(job_input::begin());
  std::chrono::milliseconds waited{0};
  std::vector<job_action> as;
  for (int i = 0; i < 10'000; ++i) {
    as = m.on(refused_fork(0));
    if (kinds(as) != std::vector<A>{A::respawn}) break;
    CHECK(as[0].delay <= std::chrono::seconds(2));
    waited += as[0].delay;
    REQUIRE(kinds(m.on(job_input::respawn_due(0, code_phase))) == std::vector<A>{A::spawn});
  }
  CHECK(waited >= respawn_limit);
  CHECK(waited < respawn_limit + std::chrono::seconds(2));
  auto out = finished(as);
  CHECK(out[0].ev.kind == event_kind::start_failed);
  CHECK(out[0].reason == "start failed: clone: Resource temporarily unavailable");
}

TEST_CASE("a step waits for a refused fork past respawn_limit while other processes of the engine run") {
  job_fsm m(shape(1));
  m.on(job_input::begin());
  std::chrono::milliseconds waited{0};
  while (waited < respawn_limit + std::chrono::seconds(10)) {
    auto as = m.on(job_input::spawn_failed(0, code_phase, "command", "too many open files", "x", true, true));
    REQUIRE(kinds(as) == std::vector<A>{A::respawn});
    waited += as[0].delay;
    REQUIRE(kinds(m.on(job_input::respawn_due(0, code_phase))) == std::vector<A>{A::spawn});
  }
  CHECK(m.on(job_input::spawned(0)).empty());
  CHECK(finished(m.on(exit_of(0, 0)))[0].ev.exit_code == 0);
}
