#include "core/job_state.hpp"
#include "core/backoff.hpp"

#include <tjob/types.hpp>

#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <span>
#include <vector>

using namespace tjob;
using tjob::detail::event_kind;
using tjob::detail::next;

TEST_CASE("every (status and event) pair has the specified outcome") {
  using S = job_status;
  using E = event_kind;
  // nullopt: the event is rejected in that status.
  const std::map<std::pair<S, E>, std::optional<S>> expected = {
      {{S::created, E::started}, S::running},
      {{S::created, E::exited}, std::nullopt},
      {{S::created, E::start_failed}, S::failed},
      {{S::created, E::cancelled}, S::failed},
      {{S::created, E::lost}, S::failed},
      {{S::created, E::restarting}, S::created},  // a step the failed attempt never started
      {{S::running, E::started}, std::nullopt},
      {{S::running, E::exited}, S::complete},  // exit code 0
      {{S::running, E::start_failed}, std::nullopt},
      {{S::running, E::cancelled}, S::failed},
      {{S::running, E::lost}, S::failed},
      {{S::running, E::restarting}, S::created},  // the attempt failed; the next is to come
      {{S::complete, E::started}, std::nullopt},
      {{S::complete, E::exited}, std::nullopt},
      {{S::complete, E::start_failed}, std::nullopt},
      {{S::complete, E::cancelled}, std::nullopt},
      {{S::complete, E::lost}, std::nullopt},
      {{S::complete, E::restarting}, std::nullopt},
      {{S::failed, E::started}, std::nullopt},
      {{S::failed, E::exited}, std::nullopt},
      {{S::failed, E::start_failed}, std::nullopt},
      {{S::failed, E::cancelled}, std::nullopt},
      {{S::failed, E::lost}, std::nullopt},
      {{S::failed, E::restarting}, std::nullopt},
  };
  std::size_t checked = 0;
  for (auto s : detail::all_statuses)
    for (auto e : detail::all_event_kinds) {
      CAPTURE(to_string(s));
      CAPTURE(detail::event_reason(e));
      REQUIRE(expected.count({s, e}) == 1);
      CHECK(next(s, {e, 0}) == expected.at({s, e}));
      ++checked;
    }
  CHECK(checked == 24);
}

TEST_CASE("a non-zero exit code fails a running job and whatever the code") {
  for (int code : {1, 2, 127, 137, 255, -1})
    CHECK(next(job_status::running, {event_kind::exited, code}) == job_status::failed);
  CHECK(next(job_status::running, {event_kind::exited, 0}) == job_status::complete);
}

TEST_CASE("terminal statuses are final for every exit code") {
  for (auto s : {job_status::complete, job_status::failed})
    for (int code : {0, 1})
      for (auto e : detail::all_event_kinds) CHECK_FALSE(next(s, {e, code}).has_value());
}

TEST_CASE("statuses carry Kubeflow's strings and parse back exactly") {
  CHECK(to_string(job_status::created) == "Created");
  CHECK(to_string(job_status::running) == "Running");
  CHECK(to_string(job_status::complete) == "Complete");
  CHECK(to_string(job_status::failed) == "Failed");
  for (auto s : detail::all_statuses) CHECK(parse_job_status(to_string(s)) == s);
  CHECK_FALSE(parse_job_status("complete").has_value());
  CHECK_FALSE(parse_job_status("Unknown").has_value());
  CHECK_FALSE(parse_job_status("").has_value());
}

TEST_CASE("event reasons round-trip") {
  for (auto e : detail::all_event_kinds) CHECK(detail::parse_event_reason(detail::event_reason(e)) == e);
  CHECK_FALSE(detail::parse_event_reason("CancelRequested").has_value());
}

TEST_CASE("job status aggregates its steps as Kubeflow does") {
  using S = job_status;
  auto agg = [](std::vector<S> v) { return detail::aggregate(v); };
  CHECK(agg({S::complete, S::complete}) == S::complete);
  CHECK(agg({S::complete, S::running}) == S::running);
  CHECK(agg({S::failed, S::running}) == S::failed);
  CHECK(agg({S::created, S::complete}) == S::created);
  CHECK(agg({}) == S::created);
  CHECK(agg({S::created, S::running}) == S::running);
}

TEST_CASE(
    "the event vocabulary: every stored event has one name, parsed back, transitions by their own names") {
  using namespace tjob::detail;
  std::set<std::string_view> names;
  for (auto e : all_log_events) {
    auto n = to_string(e);
    CHECK(!n.empty());
    CHECK(names.insert(n).second);  // no two events share a name
    CHECK(parse_log_event(n) == e);
  }
  CHECK(names.size() == std::size(all_log_events));
  for (auto k : all_event_kinds) CHECK(to_string(log_event_of(k)) == event_reason(k));
  CHECK_FALSE(parse_log_event("Bogus").has_value());
  CHECK_FALSE(parse_log_event("created").has_value());  // names are exact
}

namespace {

using namespace tjob::detail;

// A random event of a job with steps node-0..node-2 (and a step it lacks).
logged_event random_event(std::mt19937& rng) {
  static const char* steps[] = {"node-0", "node-1", "node-2", "node-9", ""};
  logged_event e;
  e.step = steps[std::uniform_int_distribution<int>(0, 4)(rng)];
  e.what = all_log_events[std::uniform_int_distribution<std::size_t>(0, std::size(all_log_events) - 1)(rng)];
  if (std::uniform_int_distribution<int>(0, 2)(rng) > 0)
    e.exit_code = std::uniform_int_distribution<int>(-1, 3)(rng);
  e.detail = "why " + std::to_string(std::uniform_int_distribution<int>(0, 99)(rng));
  return e;
}

}  // namespace

TEST_CASE("fold: a job's state from its log, step by step, as the engine writes it") {
  using namespace tjob::detail;
  std::vector<std::string> names{"node-0", "node-1"};
  std::vector<logged_event> log{
      {"", log_event::created, std::nullopt, ""},
      {"node-0", log_event::started, std::nullopt, ""},
      {"node-0", log_event::setup, std::nullopt, ""},
      {"node-1", log_event::started, std::nullopt, ""},
      {"node-1", log_event::exited, 1, "exit code 1"},
      {"node-0", log_event::exited, 143, "stopped: node-1 failed (signal 15)"},
      {"node-0", log_event::started, std::nullopt, "late"},  // rejected: node-0 has ended
  };
  auto s = fold(initial_state(names), log);
  CHECK(s.status == job_status::failed);
  CHECK(s.reason == "exit code 1");  // the first step that failed
  REQUIRE(s.steps.size() == 2);
  CHECK(s.steps[0].status == job_status::failed);
  CHECK(s.steps[0].exit_code == 143);
  CHECK(s.steps[0].reason == "stopped: node-1 failed (signal 15)");
  CHECK(s.steps[1].exit_code == 1);
  CHECK_FALSE(s.cancel_requested);

  std::vector<logged_event> cancelled{
      {"node-0", log_event::started, std::nullopt, ""},
      {"", log_event::cancel_requested, std::nullopt, ""},
      {"node-0", log_event::cancelled, -1, "cancelled"},
      {"node-1", log_event::cancelled, std::nullopt, "cancelled"},
  };
  auto c = fold(initial_state(names), cancelled);
  CHECK(c.cancel_requested);
  CHECK(c.status == job_status::failed);
  CHECK(c.reason == "cancelled");
  CHECK(c.steps[0].exit_code == -1);  // the process ended by its signal
  CHECK_FALSE(c.steps[1].exit_code.has_value());
  auto fresh = fold(initial_state(names), std::span<const logged_event>());
  CHECK(fresh.status == job_status::created);
}

TEST_CASE("fold: a restarted job is Created, reason Restarting, between attempts, and counts its attempts") {
  using namespace tjob::detail;
  std::vector<std::string> names{"node-0", "node-1"};
  std::vector<logged_event> log{
      {"node-0", log_event::started, std::nullopt, ""},
      {"node-1", log_event::started, std::nullopt, ""},
      {"node-1", log_event::restarting, 3, "exit code 3"},
  };
  auto s = fold(initial_state(names), log);
  CHECK(s.status == job_status::running);  // node-0 has not been stopped yet
  CHECK(s.reason.empty());
  log.push_back({"node-0", log_event::restarting, 143, "stopped: node-1 failed (exit code 143)"});
  s = fold(initial_state(names), log);
  CHECK(s.status == job_status::created);
  CHECK(s.reason == restarting_reason);
  for (const auto& st : s.steps) {
    CHECK(st.attempt == 2);
    CHECK_FALSE(st.exit_code.has_value());  // the next attempt starts afresh
    CHECK(st.reason.empty());
  }
  log.push_back({"node-0", log_event::started, std::nullopt, ""});
  s = fold(initial_state(names), log);
  CHECK(s.status == job_status::running);
  CHECK(s.reason.empty());  // the next attempt runs
  log.push_back({"node-1", log_event::started, std::nullopt, ""});
  log.push_back({"node-1", log_event::exited, 0, ""});
  log.push_back({"node-0", log_event::exited, 0, ""});
  s = fold(initial_state(names), log);
  CHECK(s.status == job_status::complete);
  CHECK(s.steps[0].attempt == 2);
  CHECK(s.steps[0].exit_code == 0);
  // an ended step takes no restart
  log.push_back({"node-0", log_event::restarting, 1, ""});
  CHECK(fold(initial_state(names), log) == s);
}

TEST_CASE("fold property: every status is one next() allows, and folding in parts equals folding at once") {
  using namespace tjob::detail;
  const char* fixed = std::getenv("TJOB_TEST_SEED");  // to replay a failure
  unsigned seed = fixed != nullptr ? static_cast<unsigned>(std::stoul(fixed)) : std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::vector<std::string> names{"node-0", "node-1", "node-2"};
  for (int round = 0; round < 2000; ++round) {
    std::vector<logged_event> log;
    int n = std::uniform_int_distribution<int>(0, 24)(rng);
    for (int i = 0; i < n; ++i) log.push_back(random_event(rng));
    // step by step: each change of a step is the transition next() gives
    auto state = initial_state(names);
    for (const auto& e : log) {
      auto before = state;
      fold_event(state, e);
      std::vector<job_status> statuses;
      for (std::size_t i = 0; i < names.size(); ++i) {
        statuses.push_back(state.steps[i].status);
        if (state.steps[i].status == before.steps[i].status) continue;
        auto kind = transition_of(e.what);
        REQUIRE(kind.has_value());
        CHECK(e.step == names[i]);
        CHECK(next(before.steps[i].status, job_event{*kind, e.exit_code.value_or(0)}) ==
              state.steps[i].status);
      }
      CHECK(state.status == aggregate(statuses));
      if (before.status == job_status::failed) {  // Failed stays Failed, for the first failure's reason
        CHECK(state.status == job_status::failed);
        CHECK(state.reason == before.reason);
      }
    }
    CHECK(state == fold(initial_state(names), log));
    // a prefix, then the rest, from the prefix's state
    auto cut = std::uniform_int_distribution<std::size_t>(0, log.size())(rng);
    std::span<const logged_event> all(log);
    auto head = fold(initial_state(names), all.first(cut));
    CHECK(fold(head, all.subspan(cut)) == state);
  }
}

TEST_CASE("backoff: the delay doubles up to its cap and starts over after a success") {
  using std::chrono::milliseconds;
  tjob::detail::backoff b(milliseconds(200), milliseconds(1000));
  CHECK(b.next() == milliseconds(200));
  CHECK(b.next() == milliseconds(400));
  CHECK(b.next() == milliseconds(800));
  CHECK(b.next() == milliseconds(1000));  // capped
  CHECK(b.next() == milliseconds(1000));
  b.reset();
  CHECK(b.peek() == milliseconds(200));
  CHECK(b.next() == milliseconds(200));
  tjob::detail::backoff odd(milliseconds(500), milliseconds(100));  // a cap below the first is the first
  CHECK(odd.next() == milliseconds(500));
  CHECK(odd.next() == milliseconds(500));
}

TEST_CASE("setup_phase_of reads the local backend's Setup events and nothing else") {
  auto of = [](std::string reason, std::string message) {
    tjob::event e;
    e.reason = std::move(reason);
    e.message = std::move(message);
    return tjob::setup_phase_of(e);
  };
  auto venv = of("Setup", "venv done in 0.04 s");
  REQUIRE(venv);
  CHECK(venv->phase == "venv");
  CHECK(venv->seconds == doctest::Approx(0.04));
  CHECK(!venv->cache_hit);
  auto pip = of("Setup", "pip install done in 12.50 s");
  REQUIRE(pip);
  CHECK(pip->phase == "pip install");
  CHECK(pip->seconds == doctest::Approx(12.5));
  auto hit = of("Setup", "venv from the cache (02af3085ef69e4d889b270deeb833596) in 0.002 s");
  REQUIRE(hit);
  CHECK(hit->phase == "cache copy");
  CHECK(hit->cache_hit == std::optional<bool>(true));
  auto miss = of("Setup", "venv cached as 02af3085ef69e4d889b270deeb833596; copied in 0.003 s");
  REQUIRE(miss);
  CHECK(miss->phase == "cache copy");
  CHECK(miss->cache_hit == std::optional<bool>(false));
  CHECK(miss->seconds == doctest::Approx(0.003));
  // not a phase's end: a start, another reason, a malformed time
  CHECK(!of("Setup", "process 9317 started (venv): /usr/bin/python3 -m venv x"));
  CHECK(!of("Started", "venv done in 0.04 s"));
  CHECK(!of("Setup", "venv done in fast s"));
  CHECK(!of("Setup", "venv done in 0.04"));
  CHECK(!of("Setup", ""));
}
