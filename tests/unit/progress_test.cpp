// Reading progress reports (Kubeflow's update_trainjob_status body), their
// bounds, how they are kept, and the rate gate.
#include "core/progress.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

using namespace tjob;
using namespace tjob::detail;
using namespace std::chrono_literals;
using metrics_t = std::vector<std::pair<std::string, std::string>>;

TEST_CASE("a body as Kubeflow's client sends it reads, and null or missing fields are left unset") {
  auto p = parse_progress_body(R"({"trainerStatus": {"lastUpdatedTime": "2026-01-01T00:00:00+00:00",
    "progressPercentage": 42, "estimatedRemainingSeconds": 300,
    "metrics": [{"name": "loss", "value": "0.31"}, {"name": "accuracy", "value": 0.9}, {"name": "loss", "value": "0.3"}]}})");
  REQUIRE(p.report);
  CHECK(p.error.empty());
  CHECK(p.report->percent == 42);
  CHECK(p.report->remaining == 300);
  CHECK(p.report->metrics ==
        metrics_t{{"loss", "0.3"}, {"accuracy", "0.9"}});  // a name twice: its last value
  auto empty = parse_progress_body(R"({"trainerStatus": {"progressPercentage": null, "metrics": null}})");
  REQUIRE(empty.report);
  CHECK_FALSE(empty.report->percent);
  CHECK_FALSE(empty.report->remaining);
  CHECK(empty.report->metrics.empty());
}

TEST_CASE("values past Kubeflow's bounds are clamped and metrics past 256 dropped, as its client does") {
  auto p = parse_progress_body(
      R"({"trainerStatus": {"progressPercentage": 250, "estimatedRemainingSeconds": -5}})");
  REQUIRE(p.report);
  CHECK(p.report->percent == 100);
  CHECK(p.report->remaining == 0);
  CHECK(parse_progress_body(R"({"trainerStatus": {"progressPercentage": -3}})").report->percent == 0);
  CHECK(parse_progress_body(R"({"trainerStatus": {"progressPercentage": 37.9}})").report->percent == 37);
  std::string many = R"({"trainerStatus": {"metrics": [)";
  for (int i = 0; i < 10000; ++i)
    many += fmt::format("{}{{\"name\": \"m{}\", \"value\": \"{}\"}}", i ? "," : "", i, i);
  many += "]}}";
  auto m = parse_progress_body(many);
  REQUIRE(m.report);
  CHECK(m.report->metrics.size() == 256);
  CHECK(m.dropped == 9744);
  CHECK(m.report->metrics.back() == std::pair<std::string, std::string>{"m255", "255"});
}

TEST_CASE("a body that is not a report is refused, naming the field and the fix") {
  struct bad {
    const char* body;
    const char* says;
  };
  // (a loop variable, not a structured binding: clang 14's CAPTURE cannot name one)
  for (
      const auto& b : {
          bad{"{not json", "not JSON"},
          bad{"[1]", "not a JSON object"},
          bad{R"({"progressPercentage": 5})", "no trainerStatus"},
          bad{R"({"trainerStatus": 5})", "no trainerStatus"},
          bad{R"({"trainerStatus": {"progressPercentage": "half"}})", "progressPercentage is not a number"},
          bad{R"({"trainerStatus": {"estimatedRemainingSeconds": true}})", "estimatedRemainingSeconds"},
          bad{R"({"trainerStatus": {"metrics": {"loss": 1}}})", "metrics is not a list"},
          bad{R"({"trainerStatus": {"metrics": [5]}})", "metrics[0] is not an object"},
          bad{R"({"trainerStatus": {"metrics": [{"value": "1"}]}})", "metrics[0].name is missing"},
          bad{R"({"trainerStatus": {"metrics": [{"name": "", "value": "1"}]}})", "metrics[0].name is empty"},
          bad{R"({"trainerStatus": {"metrics": [{"name": "a", "value": "1"}, {"name": "lo\u0007ss", "value": "1"}]}})",
              "metrics[1].name has a control character (byte 2: 0x07)"},
          bad{R"({"trainerStatus": {"metrics": [{"name": "x\u0085", "value": "1"}]}})", "control character"},
          bad{R"({"trainerStatus": {"metrics": [{"name": "loss", "value": "a\nb"}]}})",
              "metrics[0].value (metric loss) has a control character"},
          bad{R"({"trainerStatus": {"metrics": [{"name": "loss", "value": [1]}]}})",
              "not a string or number"},
          bad{R"({"trainerStatus": {"metrics": [{"name": "loss"}]}})", "missing"},
      }) {
    CAPTURE(b.body);
    auto p = parse_progress_body(b.body);
    CHECK_FALSE(p.report);
    CHECK_MESSAGE(p.error.find(b.says) != std::string::npos, (p.error));
  }
  std::string long_name(65, 'x');
  auto p = parse_progress_body(R"({"trainerStatus": {"metrics": [{"name": ")" + long_name +
                               R"(", "value": "1"}]}})");
  CHECK_FALSE(p.report);
  CHECK(p.error.find("65 bytes; Kubeflow allows at most 64") != std::string::npos);
  std::string deep(20, '[');
  CHECK_FALSE(parse_progress_body(deep).report);
}

TEST_CASE("a report is kept as JSON that reads back the same, and says itself in one line") {
  progress_report r{37, 120, {{"loss", "0.31"}, {"accuracy", "0.9"}}};
  CHECK(progress_from_json(progress_json(r)) == r);
  CHECK(progress_message(r) == "37%, 2m 0s left: loss=0.31 accuracy=0.9");
  CHECK(progress_message(progress_report{std::nullopt, 7300, {}}) == "2h 1m left");
  CHECK(progress_message(progress_report{}) == "progress reported (no fields)");
  progress_report wide;
  for (int i = 0; i < 100; ++i) wide.metrics.emplace_back(fmt::format("metric{}", i), "0.123456");
  auto line = progress_message(wide);
  CHECK(line.size() < 260);
  CHECK(line.find("more metrics)") != std::string::npos);
  // What a body gives, sent again, is the same report.
  CHECK(parse_progress_body(progress_body(r)).report == r);
  // Stored data that does not read is left out, never a failure.
  CHECK(progress_from_json("garbage") == progress_report{});
  CHECK(progress_from_json(R"({"progress_percent": "x", "metrics": {"a": 1, "b": "2"}})").metrics ==
        metrics_t{{"b", "2"}});
}

TEST_CASE("the gate takes a burst, then the refill rate, and thins events past its cap") {
  progress_gate g;
  auto t = std::chrono::steady_clock::time_point{} + 1h;
  int taken = 0;
  for (int i = 0; i < 100; ++i) taken += g.take(t);
  CHECK(taken == 20);
  CHECK(g.retry_after() == 1);
  CHECK_FALSE(g.take(t + 100ms));  // half a report refilled
  CHECK(g.take(t + 200ms));        // one
  CHECK_FALSE(g.take(t + 200ms));
  CHECK(g.take(t + 10s));  // (refilled to the burst, not past it)
  int later = 0;
  for (int i = 0; i < 100; ++i) later += g.take(t + 10s);
  CHECK(later == 19);

  progress_gate e;
  for (std::size_t i = 0; i < progress_gate::events; ++i) REQUIRE(e.record(t));
  CHECK_FALSE(e.record(t + 1s));
  CHECK(e.record(t + 10s));
  CHECK_FALSE(e.record(t + 15s));
  CHECK(e.record(t + 20s));
  // The interval doubles after each 1,000 more: what a job keeps grows with
  // the log of its time, and stops at 64 MiB of reports.
  auto at = t + 20s;
  for (std::size_t i = 2; i < progress_gate::per_step; ++i) REQUIRE(e.record(at += 10s));
  CHECK_FALSE(e.record(at + 10s));
  CHECK(e.record(at += 20s));
  std::size_t kept = progress_gate::events + progress_gate::per_step + 1;
  auto end = t + 24h * 365 * 10;
  for (auto now = at; now < end; now += 1s * 60)
    if (e.record(now)) ++kept;
  CHECK(kept < 30'000);  // ten years at one report a minute
  progress_gate big;
  CHECK(big.record(t, progress_gate::most_bytes - 10));
  CHECK_FALSE(big.record(t, 11));
}
