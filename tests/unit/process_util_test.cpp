#include "adapters/process/proc_info.hpp"
#include "adapters/process/process_adapter.hpp"
#include "tests/support/test_support.hpp"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <fstream>
#include <set>

using namespace tjob::process;

TEST_CASE("find_executable searches PATH like execvp and relative paths from cwd") {
  tjob::test::temp_dir dir;
  auto bin = dir.path() / "bin";
  std::filesystem::create_directories(bin);
  auto prog = bin / "prog";
  std::ofstream(prog) << "#!/bin/sh\n";
  ::chmod(prog.c_str(), 0755);
  auto noexec = bin / "noexec";
  std::ofstream(noexec) << "x";
  ::chmod(noexec.c_str(), 0644);

  CHECK(find_executable("prog", "/nonexistent:" + bin.string(), "/") == prog.string());
  CHECK_FALSE(find_executable("noexec", bin.string(), "/").has_value());
  CHECK_FALSE(find_executable("missing", bin.string(), "/").has_value());
  CHECK(find_executable("bin/prog", "", dir.str()) == (dir.path() / "bin/prog").string());
  CHECK(find_executable(prog.string(), "", "/") == prog.string());
  CHECK_FALSE(find_executable("bin", dir.str(), "/").has_value());  // a directory
  CHECK_FALSE(find_executable("", "/bin", "/").has_value());
  // An empty PATH entry is the working directory.
  CHECK(find_executable("prog", ":/nonexistent", bin.string()) == (bin / "prog").string());
}

TEST_CASE("merge_environment lays the overlay over the base") {
  const char* base_c[] = {"A=1", "PATH=/bin", "B=x=y", nullptr};
  const auto overlay = environment_entries({{"A", "2"}, {"C", "$(rm -rf /)"}, {"AB", "3"}});
  auto env = merge_environment(const_cast<char**>(base_c), overlay);
  REQUIRE(!env.empty());
  CHECK(env.back() == nullptr);  // as execve wants it
  env.pop_back();
  std::multiset<std::string> got(env.begin(), env.end());
  CHECK(got == std::multiset<std::string>{"A=2", "AB=3", "PATH=/bin", "B=x=y", "C=$(rm -rf /)"});
  // The base's entries are passed as they are, not copied.
  CHECK(std::count(env.begin(), env.end(), base_c[1]) == 1);
  // No base: the overlay alone.
  auto alone = merge_environment(nullptr, overlay);
  CHECK(alone.size() == overlay.size() + 1);
}

TEST_CASE("exit statuses are described for a person") {
  CHECK(describe({3, 0}) == "exit code 3");
  CHECK(describe({137, 9}) == "killed by signal 9 (SIGKILL)");
  CHECK(describe({143, 15}) == "killed by signal 15 (SIGTERM)");
}

TEST_CASE("process identity survives only while the process lives") {
  auto me = ::getpid();
  auto st = start_time(me);
  REQUIRE(st.has_value());
  CHECK(is_same_process(me, *st));
  CHECK_FALSE(is_same_process(me, *st + 1));
  CHECK_FALSE(start_time(-1).has_value());
  CHECK(count_group_members(::getpgrp()) >= 1);
}

TEST_CASE("find_by_environment finds processes by an entry of their environment") {
  std::string token = "TJOB_TEST_TOKEN=find-" + std::to_string(::getpid());
  tjob::test::background child({tjob::test::helper_bin(), "print", "go\n", "sleep", "60000"},
                               {{"TJOB_TEST_TOKEN", token.substr(token.find('=') + 1)}});
  REQUIRE(child.wait_for_stdout("go"));
  auto found = find_by_environment({token, "TJOB_TEST_TOKEN=nobody"});
  REQUIRE(found.size() == 1);
  CHECK(found[0].first == child.pid());
  CHECK(found[0].second == token);
}
