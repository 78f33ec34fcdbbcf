#include "adapters/python/python_setup.hpp"

#include <tjob/error.hpp>

#include <doctest/doctest.h>

#include <cstdlib>

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

TEST_CASE("index URLs: the first is --index-url and the rest --extra-index-url") {
  CHECK(pip_install_args({"a", "b c"}, {"http://one/simple", "http://two/simple"}) ==
        strings{"install", "--no-input", "--disable-pip-version-check", "--no-warn-script-location",
                "--progress-bar", "off", "--retries", "2", "--index-url", "http://one/simple",
                "--extra-index-url", "http://two/simple", "a", "b c"});
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

TEST_CASE("the training file calls the function, unpacking keyword arguments from JSON beside it") {
  auto with = training_file("def f(a, b):\n    print(a, b)", "f", true);
  CHECK(with.rfind("def f(a, b):\n    print(a, b)\n", 0) == 0);
  CHECK(with.find("f(**_tjob_kwargs)\n") != std::string::npos);
  CHECK(with.find(".kwargs.json") != std::string::npos);
  auto without = training_file("def f():\n    pass\n", "f", false);
  CHECK(without.size() > 4);
  CHECK(without.substr(without.size() - 4) == "f()\n");
}
