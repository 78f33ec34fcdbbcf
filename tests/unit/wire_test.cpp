// The wire form of a job spec (tjob/wire.hpp) as tjob serve reads it.
#include <tjob/error.hpp>
#include <tjob/spec.hpp>
#include <tjob/wire.hpp>

#include <doctest/doctest.h>
#include <boost/json.hpp>

#include <chrono>
#include <csignal>
#include <string>
#include <variant>
#include <vector>

namespace json = boost::json;

namespace {

json::value python_spec(const std::string& args) {
  return json::parse(R"({"trainer":{"kind":"python","source":"def f(a):\n  print(a)\n","function":"f",)"
                     R"("function_args":)" +
                     args + "}}");
}

}  // namespace

TEST_CASE("a spec's function arguments encode to the same spec again, also a number longer than a double") {
  // Found by fuzz_api_spec: Boost.JSON reads a number of more than 17 digits
  // to within an ulp, so the first text written for it read back as another.
  std::vector<std::string> cases{R"({"lr":0.1,"n":3})",
                                 R"({"x":1.7976931348623157e308,"y":-0.0,"z":1e-320})"};
  for (std::size_t n = 100; n < 140; ++n)  // the input it found had 128 sixes
    cases.push_back(R"({"a":[1)" + std::string(n, '6') + ",2]}");
  for (const auto& args : cases) {
    CAPTURE(args);
    auto req = tjob::request_from_json(python_spec(args));
    const auto once = json::serialize(tjob::to_json(req));
    auto again = tjob::request_from_json(tjob::to_json(req));
    CHECK(json::serialize(tjob::to_json(again)) == once);
    // what the function gets is still the arguments given
    auto got = json::parse(std::get<tjob::python_trainer>(req.job_trainer).function_args);
    CHECK(got.as_object().size() == json::parse(args).as_object().size());
  }
}

TEST_CASE("a function argument beyond a double's range is refused by name, not a crash") {
  // Found by fuzz_api_spec: Boost.JSON reads 1e400 as infinity and writes it
  // as `Infinity`, which no JSON reader takes back.
  const std::vector<std::string> cases{R"({"a":1e400})", R"({"a":[-1e999,2]})",
                                       R"({"a":{"b":[1)" + std::string(340, '6') + "]}}"};
  for (const auto& args : cases) {
    CAPTURE(args);
    try {
      (void)tjob::request_from_json(python_spec(args));
      FAIL("accepted");
    } catch (const tjob::spec_error& e) {
      CHECK(e.field() == "trainer.function_args");
      CHECK(std::string(e.what()).find("pass it as a string") != std::string::npos);
    }
  }
  // the largest double is still a number
  CHECK_NOTHROW((void)tjob::request_from_json(python_spec(R"({"a":1.7976931348623157e308})")));
}

TEST_CASE("a warning before the deadline reads as Slurm's --signal writes it, and crosses the wire") {
  auto w = tjob::parse_stop_warning("USR1@90");
  CHECK(w.signal == SIGUSR1);
  CHECK(w.before == std::chrono::seconds(90));
  CHECK(tjob::parse_stop_warning("SIGUSR2@1h30m").before == std::chrono::seconds(5400));
  CHECK(tjob::parse_stop_warning("TERM").before == std::chrono::seconds(60));  // Slurm's default
  CHECK(tjob::parse_stop_warning("12@10s").signal == 12);
  CHECK(tjob::stop_warning_text(tjob::parse_stop_warning("USR1@2m")) == "USR1@120s");
  auto refusal = [](const char* spec) {
    try {
      (void)tjob::parse_stop_warning(spec);
    } catch (const tjob::error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(refusal("KILL@5").starts_with("signal KILL@5: 'KILL' is not a signal a job can handle"));
  CHECK(refusal("STOP").find("'STOP' is not a signal") != std::string::npos);
  CHECK(refusal("19").find("'19' is not a signal") != std::string::npos);  // SIGSTOP by number
  CHECK(refusal("USR1@").find("'' is not a time before the stop") != std::string::npos);
  CHECK(refusal("USR1@0").find("at least 1 s") != std::string::npos);
  CHECK(refusal("USR1@5x").find("'5x' is not a time") != std::string::npos);
  CHECK(refusal("@5").find("'' is not a signal") != std::string::npos);
  CHECK(tjob::parse_seconds("90s1") == std::chrono::seconds(91));  // a bare run of seconds last
  CHECK(tjob::parse_seconds("90s-1") == std::nullopt);
  CHECK(tjob::parse_seconds("") == std::nullopt);
  CHECK(tjob::parse_seconds("1h30m") == std::chrono::seconds(5400));

  auto req = tjob::request_from_json(json::parse(
      R"({"active_deadline":600,"warning":{"signal":"SIGUSR2","before":30},"trainer":{"kind":"command","command":["true"]}})"));
  REQUIRE(req.warning);
  CHECK(req.warning->signal == SIGUSR2);
  CHECK(req.warning->before == std::chrono::seconds(30));
  auto back = tjob::request_from_json(tjob::to_json(req));
  REQUIRE(back.warning);
  CHECK(back.warning->signal == SIGUSR2);
  CHECK(json::serialize(tjob::to_json(back)).find(R"("warning":{"signal":"USR2","before":30})") !=
        std::string::npos);
  CHECK_FALSE(tjob::request_from_json(tjob::to_json(tjob::request_from_json(python_spec("{}")))).warning);
  auto bad = [](const std::string& warning) {
    try {
      (void)tjob::request_from_json(
          json::parse(R"({"warning":)" + warning + R"(,"trainer":{"kind":"command","command":["true"]}})"));
    } catch (const tjob::error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(bad(R"({"signal":"KILL"})").find("warning.signal: 'KILL' is not a signal a job can handle") !=
        std::string::npos);
  CHECK(bad(R"({"before":5})").find("warning.signal: missing") != std::string::npos);
  CHECK(bad(R"({"signal":"USR1","after":5})").find("warning.after: unknown field") != std::string::npos);
}

TEST_CASE(
    "a begin time reads in Slurm's --begin forms, local time where no zone is given, and crosses the wire") {
  using namespace std::chrono;
  ::setenv("TZ", "CET-1", 1);  // UTC+1 (a POSIX zone: no tzdata needed): local forms are not UTC
  ::tzset();
  // 2026-12-07 20:30:15 UTC = 21:30:15 there
  const auto now = tjob::clock::from_time_t(1796675415);
  REQUIRE(tjob::format_time(now) == "2026-12-07T20:30:15.000000000Z");
  auto at = [&](const char* text) {
    auto t = tjob::parse_begin_time(text, now);
    return t ? tjob::format_time(*t) : std::string("(none)");
  };
  CHECK(at("now") == "2026-12-07T20:30:15.000000000Z");
  CHECK(at("now+90") == "2026-12-07T20:31:45.000000000Z");
  CHECK(at("now+30m") == "2026-12-07T21:00:15.000000000Z");
  CHECK(at("now+2hours") == "2026-12-07T22:30:15.000000000Z");
  CHECK(at("now+1d") == "2026-12-08T20:30:15.000000000Z");
  CHECK(at("22:00") == "2026-12-07T21:00:00.000000000Z");     // later today, local
  CHECK(at("21:30:20") == "2026-12-07T20:30:20.000000000Z");  // five seconds on
  CHECK(at("09:15") == "2026-12-08T08:15:00.000000000Z");     // passed today: tomorrow
  CHECK(at("2026-12-24") == "2026-12-23T23:00:00.000000000Z");
  CHECK(at("2026-12-24T18:00") == "2026-12-24T17:00:00.000000000Z");
  CHECK(at("2026-12-24T18:00:30") == "2026-12-24T17:00:30.000000000Z");
  CHECK(at("2026-12-24T18:00:00Z") == "2026-12-24T18:00:00.000000000Z");
  CHECK(at("2026-12-24T18:00:00+02:00") == "2026-12-24T16:00:00.000000000Z");
  for (const char* bad :
       {"", "tomorrow", "now+", "now+5x", "now-5", "now+99999999", "25:00", "12:60", "12", "2026-02-30",
        "2026-13-01", "2026-12-24T18", "2026-12-24X18:00", "12:00 ", "1969-12-31"})
    CHECK_MESSAGE(at(bad) == "(none)", bad);
  CHECK(std::string(tjob::begin_time_forms).find("now+N") != std::string::npos);
  ::unsetenv("TZ");
  ::tzset();

  auto req = tjob::request_from_json(
      json::parse(R"({"begin":"2026-12-24T18:00:00Z","trainer":{"kind":"command","command":["true"]}})"));
  REQUIRE(req.begin);
  CHECK(tjob::format_time(*req.begin) == "2026-12-24T18:00:00.000000000Z");
  auto back = tjob::request_from_json(tjob::to_json(req));
  REQUIRE(back.begin);
  CHECK(*back.begin == *req.begin);
  CHECK_FALSE(tjob::request_from_json(tjob::to_json(tjob::request_from_json(python_spec("{}")))).begin);
  try {
    (void)tjob::request_from_json(
        json::parse(R"({"begin":"soon","trainer":{"kind":"command","command":["true"]}})"));
    FAIL("a begin of 'soon' was taken");
  } catch (const tjob::spec_error& e) {
    CHECK(e.field() == "begin");
    CHECK(std::string(e.what()).find("\"soon\" is not a time; give now+N") != std::string::npos);
  }
}
