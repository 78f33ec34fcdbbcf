// The e2e suites' fixture: a home, and with --tjob-via-server a `tjob serve`
// on it that every tjob of the case is a client of.
#pragma once

#include "tests/support/test_support.hpp"

#include <doctest/doctest.h>

#include <csignal>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tjob::test::e2e {

using tjob::test::run;
using tjob::test::tjob_bin;

// The suite runs two ways: every tjob on this machine's store, and (with
// --tjob-via-server) every tjob a client of a `tjob serve` on that store,
// which owns the jobs. The output and exit codes must be the same; the cases
// of the local store itself say they do not apply to the second way.
struct fixture : tjob::test::home_fixture {
  std::unique_ptr<tjob::test::background> server;

  fixture() {
    if (!tjob::test::via_server()) return;
    // pip reads no user configuration, as in the cases that set it for their own tjob
    server = std::make_unique<tjob::test::background>(
        std::vector<std::string>{tjob_bin(), "serve", "--listen", "unix://" + socket()},
        std::map<std::string, std::string>{{"TJOB_HOME", home()}, {"PIP_CONFIG_FILE", "/dev/null"}});
    REQUIRE_MESSAGE(server->wait_for_stderr("msg=listening"), server->err());
  }
  ~fixture() {
    if (!server) return;
    server->signal(SIGTERM);
    server->wait();
    // The jobs the server still owned are lost: the next engine on the store
    // marks them so and stops their processes, as after any owner's end.
    run({tjob_bin(), "list"}, home_fixture::env());
  }
  std::string socket() const { return (dir.path() / "tjob.sock").string(); }
  /// A client's TJOB_HOME is not the server's store: a tjob that ran its
  /// jobs here instead of asking the server would find none of them.
  std::map<std::string, std::string> env() const {
    auto e = home_fixture::env();
    if (server) {
      e["TJOB_SERVER"] = "unix://" + socket();
      e["TJOB_HOME"] = (dir.path() / "client-home").string();
    }
    return e;
  }
  /// For the cases of the local store itself: skipped when tjob is a client.
  bool local_only(const std::string& why) const {
    return !server || tjob::test::not_applicable("through tjob serve: " + why);
  }

  tjob::test::result tjob(std::vector<std::string> args) const {
    args.insert(args.begin(), tjob_bin());
    return run(args, env());
  }
  /// Whether strace can run here; in CI its absence fails the test (scripts/setup installs it).
  static bool have_strace() {
    if (tjob::test::run({"strace", "-V"}).exit_code == 0) return true;
    return tjob::test::skip("strace is not installed");
  }
  /// env() for tjob under strace: LeakSanitizer cannot run under ptrace, and
  /// leaks are the other tests' business.
  std::map<std::string, std::string> traced_env() const {
    auto e = env();
    const char* asan = std::getenv("ASAN_OPTIONS");
    e["ASAN_OPTIONS"] = std::string(asan ? asan : "") + ":detect_leaks=0";
    return e;
  }
};

}  // namespace tjob::test::e2e
