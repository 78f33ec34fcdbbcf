#include "adapters/process/proc_info.hpp"
#include "adapters/process/process_adapter.hpp"
#include "adapters/process/run.hpp"
#include "tests/support/test_support.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <signal.h>

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

namespace {

run_result run_to_end(std::vector<std::string> argv, std::chrono::milliseconds timeout,
                      std::size_t max_bytes = 64u << 20) {
  boost::asio::io_context io;
  auto done = boost::asio::co_spawn(io, run(io.get_executor(), std::move(argv), {"TJOB_RUN_TEST=yes"}, timeout, max_bytes),
                                    boost::asio::use_future);
  io.run();
  auto r = done.get();
  REQUIRE_MESSAGE(r.has_value(), r.error().message);
  return *r;
}

}  // namespace

TEST_CASE("run keeps a command's stdout and stderr apart and says how it ended") {
  auto r = run_to_end({"sh", "-c", "echo out; echo err >&2; echo \"$TJOB_RUN_TEST\"; exit 3", "ignored"},
                      std::chrono::seconds(60));
  CHECK(r.out == "out\nyes\n");
  CHECK(r.err == "err\n");
  CHECK(r.status.code == 3);
  CHECK_FALSE(r.timed_out);
  // More than a pipe holds on both streams at once: neither stalls the other.
  r = run_to_end({"sh", "-c", "head -c 300000 /dev/zero >&2; head -c 300000 /dev/zero"}, std::chrono::seconds(60));
  CHECK(r.out.size() == 300000);
  CHECK(r.err.size() == 300000);
  CHECK(r.status.code == 0);
  r = run_to_end({"sh", "-c", "head -c 300000 /dev/zero; head -c 300000 /dev/zero >&2"}, std::chrono::seconds(60), 1000);
  CHECK(r.out.size() == 1000);
  CHECK(r.err.size() == 1000);
}

TEST_CASE("run kills a command at its time limit, children included, and refuses a missing program") {
  // The grandchild holds stdout open: the run ends only if the whole group dies.
  auto r = run_to_end({"sh", "-c", "sleep 300 & echo started; wait"}, std::chrono::milliseconds(300));
  CHECK(r.timed_out);
  CHECK(r.out == "started\n");
  CHECK(r.status.signal == SIGKILL);

  boost::asio::io_context io;
  auto done = boost::asio::co_spawn(
      io, run(io.get_executor(), {"tjob-no-such-program"}, {}, std::chrono::seconds(5)), boost::asio::use_future);
  io.run();
  auto missing = done.get();
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().message.find("tjob-no-such-program: no such program on PATH") != std::string::npos);
}
