// The wire form of a job spec (tjob/wire.hpp) as tjob serve reads it.
#include <tjob/spec.hpp>
#include <tjob/wire.hpp>

#include <doctest/doctest.h>
#include <boost/json.hpp>

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
