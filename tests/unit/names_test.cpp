#include "core/names.hpp"
#include "core/strings.hpp"
#include "core/trainer_checks.hpp"
#include "tests/support/test_support.hpp"

#include "core/spec_json.hpp"

#include <tjob/error.hpp>
#include <tjob/spec.hpp>

#include <doctest/doctest.h>
#include <boost/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

using namespace tjob::detail;

TEST_CASE("generated names are a letter and 11 hex characters and valid") {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    auto n = generate_job_name();
    REQUIRE(n.size() == 12);
    CHECK(n[0] >= 'a');
    CHECK(n[0] <= 'z');
    for (std::size_t k = 1; k < n.size(); ++k)
      CHECK(std::string("0123456789abcdef").find(n[k]) != std::string::npos);
    CHECK_FALSE(name_problem(n).has_value());
    seen.insert(n);
  }
  CHECK(seen.size() == 1000);
}

TEST_CASE("names are RFC 1035 labels of at most 63 characters") {
  for (std::string ok :
       std::vector<std::string>{"a", "my-train-job", "a1b2c3d4e5f6", std::string(63, 'a'), "x-1"})
    CHECK_MESSAGE(!name_problem(ok).has_value(), ok);
  for (std::string bad :
       {std::string(), std::string(64, 'a'), std::string("1abc"), std::string("-abc"), std::string("abc-"),
        std::string("ABC"), std::string("a_b"), std::string("a.b"), std::string("../x"), std::string("a/b"),
        std::string("experiment\\run"), std::string("."), std::string(".."), std::string("a\0b", 3),
        std::string("a b"), std::string("caf\xc3\xa9")})
    CHECK_MESSAGE(name_problem(bad).has_value(), printable(bad));
}

TEST_CASE("the length problem says the limit") {
  auto p = name_problem(std::string(64, 'a'));
  REQUIRE(p);
  CHECK(p->find("63") != std::string::npos);
}

TEST_CASE("printable escapes control bytes and cuts long text") {
  CHECK(printable("ab") == "ab");
  CHECK(printable(std::string("a\nb\0", 4)) == "a\\x0ab\\x00");
  CHECK(printable(std::string(100, 'x'), 10) == std::string(10, 'x') + "...");
}

TEST_CASE("comma lists are split, trimmed and empty items dropped") {
  using v = std::vector<std::string>;
  CHECK(split_list("a, b,,c ") == v{"a", "b", "c"});
  CHECK(split_list(" http://a/simple ,http://b/simple") == v{"http://a/simple", "http://b/simple"});
  CHECK(split_list("").empty());
  CHECK(split_list(" , ,").empty());
  CHECK(split_list("torch") == v{"torch"});
}

// doctest_discover_tests hands names to CMake, where ';' splits a list: a
// test named with one is registered cut short and its filter matches nothing,
// so it "passes" without running.
TEST_CASE("no test case name holds a semicolon (ctest would run nothing for it)") {
  namespace fs = std::filesystem;
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(tjob::test::source_dir()) / "tests")) {
    if (e.path().extension() != ".cpp") continue;
    ++files;
    auto text = tjob::test::read_file(e.path());
    for (std::size_t pos = 0; (pos = text.find("\nTEST_CASE", pos)) != std::string::npos; ++pos) {
      auto open = text.find('"', pos);
      auto close = open == std::string::npos ? open : text.find('"', open + 1);
      if (close == std::string::npos) break;
      auto name = text.substr(open + 1, close - open - 1);
      CHECK_MESSAGE(name.find(';') == std::string::npos, e.path().filename().string() << ": " << name);
    }
  }
  CHECK(files > 5);
}

TEST_CASE("a job spec with a field of the wrong type is one invalid_argument error") {
  // fuzz_spec found the JSON library's own exception escaping trainer_from_json.
  auto spec =
      boost::json::parse(R"({"kind": "command", "command": [{"A": "b"}], "env": {}, "working_dir": ""})");
  try {
    tjob::detail::trainer_from_json(spec.as_object());
    FAIL("accepted");
  } catch (const tjob::error& e) {
    CHECK(e.code() == make_error_code(tjob::errc::invalid_argument));
    CHECK(std::string(e.what()).find("job spec") != std::string::npos);
  }
  auto missing = boost::json::parse(R"({"kind": "python"})");
  CHECK_THROWS_AS(tjob::detail::trainer_from_json(missing.as_object()), tjob::error);
}

TEST_CASE("the public trainer JSON round-trips and refuses text that is not a spec") {
  tjob::python_trainer pt;
  pt.source = "def f(x):\n    print(x)\n";
  pt.function = "f";
  pt.function_args = R"({"x": 1})";
  pt.packages_to_install = {"numpy>=1"};
  pt.env = {{"K", "V"}};
  pt.image = "localhost/py:1";  // a container job's, handed to a supervisor
  auto back = tjob::trainer_from_json(tjob::trainer_to_json(pt));
  REQUIRE(std::holds_alternative<tjob::python_trainer>(back));
  CHECK(tjob::trainer_to_json(back) == tjob::trainer_to_json(pt));
  CHECK(std::get<tjob::python_trainer>(back).image == "localhost/py:1");
  tjob::command_trainer ct;
  ct.command = {"echo", "a b"};
  ct.image = "localhost/bb:1";
  CHECK(std::get<tjob::command_trainer>(tjob::trainer_from_json(tjob::trainer_to_json(ct))).image ==
        "localhost/bb:1");
  CHECK(tjob::trainer_to_json(tjob::trainer_from_json(tjob::trainer_to_json(ct))) ==
        tjob::trainer_to_json(ct));
  CHECK(tjob::test::code_of([] { tjob::trainer_from_json("not json"); }) == tjob::errc::invalid_argument);
  CHECK(tjob::test::code_of([] { tjob::trainer_from_json("[1, 2]"); }) == tjob::errc::invalid_argument);
  CHECK(tjob::test::code_of([] { tjob::trainer_from_json(R"({"kind": "python"})"); }) ==
        tjob::errc::invalid_argument);
}

TEST_CASE(
    "array_members: NAME-i with the index in the environment and in a function's ARRAY_INDEX arguments") {
  tjob::train_request req;
  req.name = "sweep";
  tjob::python_trainer p;
  p.source = "def f(lr, trial): pass\n";
  p.function = "f";
  p.function_args = R"({"lr":0.1,"trial":{"__tjob__":"array_index"},"nest":[{"__tjob__":"array_index"}]})";
  req.job_trainer = p;
  auto members = tjob::array_members(req, "3,7-8%2");
  REQUIRE(members.size() == 3);
  CHECK(members[1].name == "sweep-7");
  CHECK(members[1].array == "sweep");
  CHECK(members[1].array_limit == 2);
  const auto& t = std::get<tjob::python_trainer>(members[1].job_trainer);
  CHECK(t.env.at("TJOB_ARRAY_INDEX") == "7");
  auto args = boost::json::parse(t.function_args);
  CHECK(args.at("trial") == 7);
  CHECK(args.at("nest").at(0) == 7);
  CHECK(args.at("lr") == 0.1);
  // Without the marker the arguments are left as they were given.
  p.function_args = R"({"trial":{"__tjob__":"other"}})";
  req.job_trainer = p;
  CHECK(std::get<tjob::python_trainer>(tjob::array_members(req, "0").front().job_trainer).function_args ==
        p.function_args);
  // A number beyond a double's range cannot be written again with the index
  // (Boost.JSON would write `Infinity`): refused, naming the array and the field.
  p.function_args = R"({"lr":1e400,"trial":{"__tjob__":"array_index"}})";
  req.job_trainer = p;
  auto why = tjob::test::message_of([&] { tjob::array_members(req, "0-1"); });
  CHECK(why.find("job array 'sweep': function_args") != std::string::npos);
  CHECK(why.find("pass it as a string") != std::string::npos);
  // without the marker the text goes to the function as given (Python reads it as inf)
  p.function_args = R"({"lr":1e400})";
  req.job_trainer = p;
  CHECK(std::get<tjob::python_trainer>(tjob::array_members(req, "0").front().job_trainer).function_args ==
        p.function_args);
}

TEST_CASE("array_members refuses a bad spec, a missing name and a member name too long, before any member") {
  tjob::train_request req;
  req.job_trainer = tjob::command_trainer{.command = {"true"}};
  CHECK(tjob::test::message_of([&] { tjob::array_members(req, "0-3"); }).find("needs a name") !=
        std::string::npos);
  req.name = "a";
  for (auto [bad, why] : {std::pair{"9-1", "runs backwards"},
                          {"0-3%0", "must be 1 or more"},
                          {"1,1", "given twice"},
                          {"0-10000", "more than 10000 members"},
                          {"", "'' is not an index"},
                          {"x", "'x' is not an index"}}) {
    const std::string spec = bad;  // (clang 14: a lambda cannot capture a structured binding)
    auto msg = tjob::test::message_of([&] { tjob::array_members(req, spec); });
    CHECK_MESSAGE(msg.find(why) != std::string::npos, msg);
    CHECK(msg.rfind("array ", 0) == 0);
  }
  req.name = std::string(61, 'a');  // NAME-99 is 64 characters, one too many
  auto msg = tjob::test::message_of([&] { tjob::array_members(req, "0-99"); });
  CHECK(msg.find("member '" + req.name + "-99'") != std::string::npos);
  CHECK(msg.find("shorter name") != std::string::npos);
}

TEST_CASE("a torch rendezvous port is outside the kernel's ephemeral range and free to bind") {
  int lo = 0, hi = 0;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  REQUIRE(static_cast<bool>(range >> lo >> hi));
  auto [from, to] = rendezvous_port_range();
  if (from == 0) {
    tjob::test::not_applicable("this machine's ephemeral range leaves no room around it");
    return;
  }
  CHECK((to < lo || from > hi));
  std::set<int> seen;
  for (int i = 0; i < 50; ++i) {
    int port = free_port();
    CHECK(port >= from);
    CHECK(port <= to);
    CHECK((port < lo || port > hi));
    seen.insert(port);
  }
  CHECK(seen.size() > 10);  // drawn at random, so concurrent jobs rarely meet
}
