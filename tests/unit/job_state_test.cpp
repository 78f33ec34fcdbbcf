#include "engine/job_state.hpp"

#include <doctest/doctest.h>

#include <map>
#include <set>
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
      {{S::running, E::started}, std::nullopt},
      {{S::running, E::exited}, S::complete},  // exit code 0
      {{S::running, E::start_failed}, std::nullopt},
      {{S::running, E::cancelled}, S::failed},
      {{S::running, E::lost}, S::failed},
      {{S::complete, E::started}, std::nullopt},
      {{S::complete, E::exited}, std::nullopt},
      {{S::complete, E::start_failed}, std::nullopt},
      {{S::complete, E::cancelled}, std::nullopt},
      {{S::complete, E::lost}, std::nullopt},
      {{S::failed, E::started}, std::nullopt},
      {{S::failed, E::exited}, std::nullopt},
      {{S::failed, E::start_failed}, std::nullopt},
      {{S::failed, E::cancelled}, std::nullopt},
      {{S::failed, E::lost}, std::nullopt},
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
  CHECK(checked == 20);
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
