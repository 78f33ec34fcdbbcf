// Opt-in long tests (build/tests/long_tests; not run by scripts/test): 10,000
// jobs running at once, and a job writing 1 GiB with a stalled follower. The
// engine's memory stays bounded and every status and log is right.
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>

#include <doctest/doctest.h>

#include <unistd.h>
#include <csignal>
#include <fstream>

using namespace tjob;
using namespace std::chrono_literals;

namespace {

long rss_bytes() {
  long pages = 0, rss = 0;
  std::ifstream("/proc/self/statm") >> pages >> rss;
  return rss * ::sysconf(_SC_PAGESIZE);
}

}  // namespace

TEST_CASE("10,000 jobs run at once within the open-file limit and a few KiB each, and all end right") {
  tjob::test::home_fixture fx;
  trainer_client c(fx.config(1s));
  constexpr int n = 10000;
  auto warm = c.train(tjob::test::helper_job({"print", "warm\n"}));
  c.wait_for_job_status(warm, {job_status::complete}, 60s);
  long before = rss_bytes();
  auto fds_before = tjob::test::open_fds();
  std::vector<std::string> names;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    auto r = tjob::test::helper_job({"print", "job " + std::to_string(i) + "\n", "sleep", "600000"});
    std::get<command_trainer>(r.job_trainer).working_dir = ".";
    names.push_back(c.train(r));
  }
  for (int i = 0; i < n; ++i) {
    // Running, and its first line is out: the process really runs.
    auto log = c.get_job_logs(names[i], {.follow = true});
    REQUIRE(log.next() == "job " + std::to_string(i) + "\n");
  }
  double launch = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long per_job = (rss_bytes() - before) / n;
  auto fds = tjob::test::open_fds();
  MESSAGE(n << " jobs running after " << launch << " s; engine memory " << per_job << " B/job; " << fds
            << " descriptors open");
  CHECK(fds - fds_before <= static_cast<std::size_t>(n) + 16);
  CHECK(fds < 20000u);
  if (!tjob::test::under_sanitizer())
    CHECK(per_job < 8192);  // this process holds the test's own bookkeeping too
  for (const auto& name : names) {
    auto job = c.get_job(name);
    REQUIRE(job.status == job_status::running);
    ::killpg(static_cast<pid_t>(job.steps[0].pid), SIGKILL);
  }
  for (const auto& name : names) {
    auto job = c.wait_for_job_status(name, {job_status::failed}, 600s);
    CHECK(job.steps[0].exit_code == 137);
  }
  CHECK(tjob::test::open_fds() <= fds_before + 16);
}

TEST_CASE("a job writing 1 GiB with a stalled follower: memory stays flat and nothing is lost") {
  tjob::test::home_fixture fx;
  trainer_client c(fx.config());
  constexpr long long size = 1ll << 30;
  auto name = c.train(tjob::test::helper_job({"flood", std::to_string(size)}));
  auto stalled = c.get_job_logs(name, {.follow = true});
  REQUIRE(stalled.next().has_value());  // one line, then it stops reading
  long before = rss_bytes();
  auto job = c.wait_for_job_status(name, {job_status::complete}, 1200s);
  CHECK(job.status == job_status::complete);
  long during = rss_bytes() - before;
  MESSAGE("1 GiB written with a stalled follower; engine memory grew by " << during / 1024 << " KiB");
  if (!tjob::test::under_sanitizer()) CHECK(during < (16l << 20));
  CHECK(std::filesystem::file_size(c.home() / "jobs" / name / "node-0.log") ==
        static_cast<std::uintmax_t>(size));
  long long total = 100;
  while (auto chunk = stalled.read_some()) total += static_cast<long long>(chunk->size());
  CHECK(total == size);
}
