#include "adapters/python/python_setup.hpp"
#include "core/secrets.hpp"

#include "tests/support/test_support.hpp"

#include <tjob/error.hpp>

#include <doctest/doctest.h>

#include <map>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace tjob::python;
using strings = std::vector<std::string>;

TEST_CASE("package merge follows Kubeflow's rules (the reference's verified example)") {
  CHECK(merge_packages({"torch==1.9.0", "numpy", "Foo_Bar", "foo.bar"}, {"TORCH==2.0", "scipy"}) ==
        strings{"numpy", "foo.bar", "TORCH==2.0", "scipy"});
}

TEST_CASE("an empty trainer list leaves the runtime's packages as they are") {
  CHECK(merge_packages({"torch", "torch"}, {}) == strings{"torch", "torch"});
  CHECK(merge_packages({}, {}).empty());
  CHECK(merge_packages({}, {"a", "b"}) == strings{"a", "b"});
}

TEST_CASE("a package named twice in the trainer list is an error naming both forms") {
  try {
    merge_packages({"torch"}, {"numpy", "NumPy>=1"});
    FAIL("no error");
  } catch (const tjob::error& e) {
    CHECK(e.code() == make_error_code(tjob::errc::invalid_argument));
    CHECK(std::string(e.what()).find(
              "Duplicate dependency in trainer_packages: 'NumPy>=1' (canonical: 'numpy')") !=
          std::string::npos);
  }
}

TEST_CASE("a requirement without a name is rejected") {
  CHECK_THROWS_AS(merge_packages({}, {"==1.0"}), tjob::error);
  CHECK_THROWS_AS(merge_packages({}, {""}), tjob::error);
  CHECK_THROWS_AS(merge_packages({"-e ."}, {"x"}), tjob::error);
  try {
    merge_packages({}, {">=2"});
  } catch (const tjob::error& e) {
    CHECK(std::string(e.what()).find("Could not parse package name from requirement: '>=2'") !=
          std::string::npos);
  }
}

TEST_CASE("requirement names and PEP 503 canonical forms") {
  CHECK(requirement_name("  numpy>=1.26") == "numpy");
  CHECK(requirement_name("foo.bar_baz-qux[extra]; python_version>'3'") == "foo.bar_baz-qux");
  CHECK(requirement_name("pkg; $(rm -rf /)") == "pkg");
  CHECK_FALSE(requirement_name("").has_value());
  CHECK_FALSE(requirement_name("_x").has_value());
  CHECK(canonical_name("Foo__Bar..baz-Qux") == "foo-bar-baz-qux");
  CHECK(canonical_name("TORCH") == "torch");
}

TEST_CASE("index URLs go to pip in its environment, never its arguments (which ps shows)") {
  CHECK(pip_index_environment({"http://u:pw@one/simple", "http://two/simple", "file:///w"}) ==
        std::map<std::string, std::string>{{"PIP_INDEX_URL", "http://u:pw@one/simple"},
                                           {"PIP_EXTRA_INDEX_URL", "http://two/simple file:///w"}});
  CHECK(pip_index_environment({"http://one/simple"}) ==
        std::map<std::string, std::string>{{"PIP_INDEX_URL", "http://one/simple"}});
  CHECK(pip_index_environment({}).empty());
  CHECK(pip_install_args({"a", "b c"}) ==
        strings{"install", "--no-input", "--disable-pip-version-check", "--no-warn-script-location",
                "--progress-bar", "off", "--retries", "2", "a", "b c"});
  ::unsetenv("DEFAULT_PIP_INDEX_URLS");
  CHECK(index_urls({}) == strings{"https://pypi.org/simple"});
  ::setenv("DEFAULT_PIP_INDEX_URLS", "http://a/simple, http://b/simple", 1);
  CHECK(index_urls({}) == strings{"http://a/simple", "http://b/simple"});
  CHECK(index_urls({"http://mine"}) == strings{"http://mine"});
  ::unsetenv("DEFAULT_PIP_INDEX_URLS");
}

TEST_CASE("a function must be defined at the top level of the source") {
  std::string src =
      "import os\n\ndef helper():\n    pass\n\nasync  def  agen (x):\n    pass\n"
      "class K:\n    def method(self):\n        pass\n"
      "def train_model(lr=0.1):\n    helper()\n";
  CHECK(defines_function(src, "train_model"));
  CHECK(defines_function(src, "helper"));
  CHECK(defines_function(src, "agen"));
  CHECK_FALSE(defines_function(src, "method"));  // not top level
  CHECK_FALSE(defines_function(src, "train"));   // a prefix of another name
  CHECK_FALSE(defines_function(src, "os"));
  CHECK_FALSE(defines_function("# def train_model():\n", "train_model"));
}

TEST_CASE(
    "the function launcher loads the code as __tjob_main__ and calls the function with its JSON kwargs") {
  REQUIRE(std::filesystem::exists("/usr/bin/python3"));  // scripts/setup installs it
  tjob::test::temp_dir dir;
  auto code = dir.path() / "sub dir" / "train.py";
  std::filesystem::create_directories(code.parent_path());
  std::ofstream(code) << "import helper\nimport sys\n"
                         "def f(a, b):\n    print('f', a, b, helper.twice(a), __name__, __file__)\n"
                         "def g():\n    raise ValueError('boom')\n"
                         "if __name__ == '__main__':\n    print('the guard fired')\n";
  std::ofstream(code.parent_path() / "helper.py") << "def twice(n):\n    return 2 * n\n";
  auto launcher = dir.path() / "launch.py";
  std::ofstream(launcher) << function_launcher(code.string(), "f", true);
  std::ofstream(dir.path() / "launch.kwargs.json") << R"({"a": 3, "b": "x\"y"})";
  auto r = tjob::test::run({"/usr/bin/python3", launcher.string()});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "f 3 x\"y 6 __tjob_main__ " + code.string() + "\n");
  // relative to the launcher, and no arguments; a traceback names the code's own file
  std::ofstream(dir.path() / "rel.py") << function_launcher("sub dir/train.py", "g", false);
  auto rel = tjob::test::run({"/usr/bin/python3", (dir.path() / "rel.py").string()});
  CHECK(rel.exit_code == 1);
  CHECK(rel.err.find("File \"" + code.string() + "\", line 6, in g") != std::string::npos);
  CHECK(rel.err.find("ValueError: boom") != std::string::npos);
  CHECK(rel.out.empty());
}

TEST_CASE("what tjob records of an index URL and a command line hides their secrets") {
  using tjob::detail::mask_url;
  using tjob::detail::masked_args;
  CHECK(mask_url("https://user:pw@host:8080/simple") == "https://user:***@host:8080/simple");
  CHECK(mask_url("https://token@host/simple") == "https://***@host/simple");
  CHECK(mask_url("https://host/simple?x=a@b") == "https://host/simple?x=a@b");  // no user info
  CHECK(mask_url("file:///srv/wheels") == "file:///srv/wheels");
  CHECK(mask_url("not a url") == "not a url");
  CHECK(masked_args({"train.py", "--password=hunter2", "--hf-token", "abc", "--wandb-api-key", "k", "--lr", "0.1",
                     "--max-tokens", "64", "--key", "k2", "--secret-key=s", "https://u:p@h/x"}) ==
        strings{"train.py", "--password=***", "--hf-token", "***", "--wandb-api-key", "***", "--lr", "0.1",
                "--max-tokens", "64", "--key", "k2", "--secret-key=***", "https://u:***@h/x"});
  // a secret option followed by another option: that one is not its value
  CHECK(masked_args({"--password", "--hf-token", "x"}) == strings{"--password", "--hf-token", "***"});
  CHECK(masked_args({"--token"}) == strings{"--token"});
}

TEST_CASE("keyword_parameters reads what a call by keyword can name from a def's text") {
  auto names = [](std::string_view src, std::string_view fn = "f") {
    std::string out;
    auto ps = keyword_parameters(src, fn);
    if (!ps) return std::string("any");
    for (const auto& p : *ps) out += p.name + (p.has_default ? "=" : "") + " ";
    return out;
  };
  CHECK(names("def f(a, b=1):\n  pass\n") == "a b= ");
  CHECK(names("def f():\n  pass\n") == "");
  CHECK(names("async def f(x: int = 3, *, y, z: dict[str, int] = {'a': (1, 2)}):\n  pass\n") == "x= y z= ");
  CHECK(names("def f(a, /, b, *args, c=2, **kw):\n  pass\n") == "any");
  CHECK(names("def f(a, /, b, *args, c=2):\n  pass\n") == "b c= ");
  CHECK(names("def f(\n    lr=0.1,  # the rate, (a comment with a ')')\n    name=')(,',\n    epochs: int = "
              "5,\n):\n"
              "  pass\n") == "lr= name= epochs= ");
  CHECK(names("def g(a):\n  pass\ndef f(b):\n  pass\n") == "b ");
  CHECK(names("def f(a, b", "f") == "any");       // unclosed: left to Python
  CHECK(names("def fx(a):\n  pass\n") == "any");  // no such function
}
