// Many jobs at once on one reactor.
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>

#include <doctest/doctest.h>

using namespace tjob;
using namespace std::chrono_literals;

TEST_CASE("1000 concurrent command jobs each end with the right status and exit code and log") {
  tjob::test::temp_dir dir;
  engine_config cfg;
  cfg.home = dir.path() / "home";
  cfg.admission.cpus = 0;  // all at once: what is under test is the engine's load, not admission
  trainer_client c(cfg);
  constexpr int n = 1000;
  std::vector<std::string> names;
  names.reserve(n);
  for (int i = 0; i < n; ++i) {
    train_request r;
    command_trainer t;
    t.command = {"sh", "-c", "echo line $I; exit $((I % 2))"};
    t.env = {{"I", std::to_string(i)}};
    r.job_trainer = t;
    names.push_back(c.train(r));
  }
  int complete = 0, failed = 0;
  for (int i = 0; i < n; ++i) {
    auto job = c.wait_for_job_status(names[i], {job_status::complete, job_status::failed}, 300s);
    CAPTURE(names[i]);
    CHECK(job.status == (i % 2 == 0 ? job_status::complete : job_status::failed));
    REQUIRE(job.steps.size() == 1);
    CHECK(job.steps[0].exit_code == i % 2);
    CHECK(c.get_job_logs(names[i]).read_all() == "line " + std::to_string(i) + "\n");
    (job.status == job_status::complete ? complete : failed)++;
  }
  CHECK(complete == n / 2);
  CHECK(failed == n / 2);
  auto listed = c.list_jobs();
  CHECK(listed.size() == static_cast<std::size_t>(n));
  // Another engine on the same store (as another process would) sees the same.
  trainer_client other(cfg);
  int other_failed = 0;
  for (const auto& j : other.list_jobs()) other_failed += j.status == job_status::failed;
  CHECK(other_failed == n / 2);
}
