// Crash safety of the store and the logs: an engine under heavy submission
// and logging (tests/support/stress.cpp) is SIGKILLed at random points, again
// and again, on one $TJOB_HOME; after each kill the next engine must open the
// store, account for every job, keep every byte a follower had been given,
// leave nothing Running and no job process alive.
#include "tests/support/fold_check.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

using namespace tjob;
using namespace std::chrono_literals;

namespace {

std::string expected_log(const std::string& tag, int i) {
  std::string out;
  for (const char* half : {" a", " b"})
    for (int k = 1; k <= 150; ++k) out += tag + " " + std::to_string(i) + half + std::to_string(k) + "\n";
  return out;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Where `got` leaves `want`, with what follows there, for the failure message.
std::string departure(const std::string& want, const std::string& got) {
  std::size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  return "at byte " + std::to_string(i) + " of " + std::to_string(got.size()) + ": got \"" +
         got.substr(i, 160) + "\", wanted \"" + want.substr(i, 80) + "\"";
}

std::string integrity(const std::string& db_path) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_exec(
        db, "PRAGMA integrity_check",
        [](void* o, int, char** v, char**) {
          *static_cast<std::string*>(o) += v[0] ? v[0] : "";
          return 0;
        },
        &out, nullptr);
  }
  sqlite3_close(db);
  return out;
}

// Live processes whose command line holds `tag`.
std::vector<pid_t> processes_with(const std::string& tag) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (auto* e = d ? ::readdir(d) : nullptr) {
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    // (read(2), not a stream: a process that exits mid-read fails it with
    // ESRCH, which a stream reports by throwing)
    std::string cmd;
    int fd = ::open(("/proc/" + std::string(e->d_name) + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
    char buf[4096];
    for (ssize_t n; fd >= 0 && (n = ::read(fd, buf, sizeof buf)) > 0;)
      cmd.append(buf, static_cast<std::size_t>(n));
    if (fd >= 0) ::close(fd);
    if (cmd.find(tag) != std::string::npos && !tjob::test::process_gone(pid)) out.push_back(pid);
  }
  if (d) ::closedir(d);
  return out;
}

}  // namespace

TEST_CASE("an engine SIGKILLed at random points again and again loses no job, no status and no log byte") {
  tjob::test::home_fixture fx;
  auto journal = fx.dir.path() / "journal";
  std::filesystem::create_directories(journal);
  const std::string tag = "stress-" + fx.dir.path().filename().string();
  int loops = 40;
  if (const char* n = std::getenv("TJOB_KILL_LOOPS")) loops = std::atoi(n);
  unsigned seed = static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count());
  if (const char* s = std::getenv("TJOB_KILL_SEED")) seed = static_cast<unsigned>(std::atol(s));
  INFO("seed " << seed << " (TJOB_KILL_SEED reproduces the kill points)");
  std::mt19937 rng(seed);
  std::size_t submitted_total = 0, lost_total = 0, followed_bytes = 0, log_bytes = 0;

  for (int loop = 0; loop < loops; ++loop) {
    CAPTURE(loop);
    std::size_t before = 0;
    {
      std::ifstream in(journal / "submitted");
      for (std::string l; std::getline(in, l);) ++before;
    }
    {
      tjob::test::background stress({tjob::test::stress_bin(), fx.home(), journal.string(),
                                     tjob::test::helper_bin(), tag, std::to_string(before)});
      // Kill it after a random number of submissions (1 to 40): between any
      // two of them jobs start, log, end, are followed and cancelled.
      int k = std::uniform_int_distribution<int>(1, 40)(rng);
      std::string needle = " " + std::to_string(before + static_cast<std::size_t>(k) - 1) + "\n";
      REQUIRE(stress.wait_for_stdout(needle, 60s));
      stress.signal(SIGKILL);
      stress.wait(10s);
    }
    // The next engine: it opens the store and reconciles what the dead one owned.
    REQUIRE(integrity((std::filesystem::path(fx.home()) / "tjob.db").string()) == "ok");
    trainer_client c(fx.config(200ms));
    // What it reconciled, it wrote from the fold of the log: columns and log agree.
    for (const auto& m : tjob::test::fold_mismatches(fx.home()))
      FAIL_CHECK("columns and log disagree: " << m);
    std::map<std::string, train_job> jobs;
    for (auto& j : c.list_jobs()) jobs.emplace(j.name, j);
    std::ifstream in(journal / "submitted");
    std::size_t submitted = 0;
    for (std::string name; in >> name;) {
      int i = -1;
      in >> i;
      ++submitted;
      CAPTURE(name);
      auto it = jobs.find(name);
      REQUIRE(it != jobs.end());  // accounted for
      const auto& job = it->second;
      REQUIRE(job.steps.size() == 1);
      const auto& st = job.steps[0];
      CHECK(is_terminal(job.status));  // nothing left Created or Running
      auto log =
          tjob::test::read_file(std::filesystem::path(fx.home()) / "jobs" / name / "node-0.log");
      auto want = expected_log(tag, i);
      INFO("log " << departure(want, log));
      if (st.reason == "lost" || st.reason == "cancelled") {
        CHECK(job.status == job_status::failed);
        CHECK(starts_with(want, log));  // a prefix: nothing torn, nothing made up
      } else {
        CHECK(st.exit_code == i % 3);
        CHECK(job.status == (i % 3 == 0 ? job_status::complete : job_status::failed));
        CHECK(log == want);
      }
      auto followed = journal / ("followed-" + name);
      if (std::filesystem::exists(followed)) {
        auto given = tjob::test::read_file(followed);
        CHECK(starts_with(log, given));  // what a follower was given is in the log
        if (loop + 1 == loops) followed_bytes += given.size();
      }
      if (loop + 1 == loops) {
        log_bytes += log.size();
        lost_total += st.reason == "lost";
      }
    }
    CHECK(submitted >= before);
    submitted_total = submitted;
    // and none of its processes is alive
    for (pid_t pid : processes_with(tag)) CHECK(tjob::test::wait_gone(pid, 10s));
  }
  // The store still takes new work.
  trainer_client c(fx.config());
  auto name = c.train(tjob::test::helper_job({"lines", "3"}));
  CHECK(c.wait_for_job_status(name, {job_status::complete}, 60s).status == job_status::complete);
  MESSAGE("kill loop: " << loops << " SIGKILLs, " << submitted_total << " jobs submitted, " << lost_total
                        << " lost, " << log_bytes << " log bytes checked, " << followed_bytes
                        << " followed bytes kept");
}
