// Progress reports of local jobs: real job processes POST to their engine's
// loopback HTTPS endpoint as Kubeflow's update_trainjob_status does
// (tests/support/progress_probe.py), and tjob.report (the helper tjob puts on
// a job's PYTHONPATH) does the same.
#include "tests/support/fold_check.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>

#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <sstream>

using namespace tjob;
using namespace std::chrono_literals;

namespace {

using fixture = tjob::test::folded_home;

const std::string python = "/usr/bin/python3";

std::string probe() { return tjob::test::source_dir() + "/tests/support/progress_probe.py"; }

train_request command_job(std::string name, std::string exe, std::vector<std::string> args) {
  train_request r;
  r.name = std::move(name);
  command_trainer t;
  t.command = {std::move(exe)};
  t.command.insert(t.command.end(), args.begin(), args.end());
  r.job_trainer = std::move(t);
  return r;
}

// The probe's lines, CASE STATUS BODY, by case.
struct answer {
  int status = 0;
  std::string body;
};
std::map<std::string, answer> answers_of(const std::string& log) {
  std::map<std::string, answer> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string c;
    answer a;
    if (!(l >> c >> a.status)) continue;
    std::getline(l, a.body);
    out[c] = a;
  }
  return out;
}

std::vector<event> progress_events(trainer_client& c, const std::string& job) {
  std::vector<event> out;
  for (auto& e : c.get_job_events(job))
    if (e.reason == "Progress") out.push_back(e);
  return out;
}

// The first line of a running job's log (it prints its endpoint's URL first).
std::string first_line(trainer_client& c, const std::string& job) {
  log_options o;
  o.follow = true;
  auto reader = c.get_job_logs(job, o);
  auto line = reader.next();
  REQUIRE(line);
  auto s = *line;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

TEST_CASE_FIXTURE(fixture,
                  "a job's reports reach get_job and its events, and bad ones are refused and never stored") {
  trainer_client c(config());
  // B waits; A reports, also with B's token and to B's URL.
  c.train(command_job("job-b", "/bin/sh", {"-c", "echo \"$KUBEFLOW_TRAINER_SERVER_URL\"; exec sleep 300"}));
  const auto url_b = first_line(c, "job-b");
  CHECK(url_b.starts_with("https://127.0.0.1:"));
  CHECK(url_b.ends_with("/v1/jobs/job-b/progress"));
  const auto token_b = (std::filesystem::path(home()) / "jobs" / "job-b" / "progress-token").string();
  c.train(command_job("job-a", python, {probe(), "battery", url_b, token_b}));
  auto a = c.wait_for_job_status("job-a", {job_status::complete}, 60s);
  const auto log = c.get_job_logs("job-a").read_all();
  CAPTURE(log);
  auto got = answers_of(log);
  CHECK(got["good"].status == 200);
  CHECK(got["no-token"].status == 401);
  CHECK(got["wrong-token"].status == 401);
  // A stranger learns nothing (a job that is not here is 401 too), and is
  // answered from the header, before a byte of its body or a 100 Continue.
  CHECK(got["unknown-job"].status == 401);
  CHECK(got["unknown-job"].body.find("no-such-job") == std::string::npos);
  CHECK(got["body-before-token"].status == 401);
  CHECK(got["not-json"].status == 400);
  CHECK(got["not-json"].body.find("not JSON") != std::string::npos);
  CHECK(got["no-trainerStatus"].status == 400);
  CHECK(got["percent-not-number"].status == 400);
  CHECK(got["percent-not-number"].body.find("progressPercentage") != std::string::npos);
  CHECK(got["control-name"].status == 400);
  CHECK(got["control-name"].body.find("metrics[0].name") != std::string::npos);
  CHECK(got["control-name"].body.find("control character") != std::string::npos);
  CHECK(got["long-name"].status == 400);
  CHECK(got["value-not-text"].status == 400);
  CHECK(got["token-of-other-job"].status == 403);  // A's token cannot update B
  CHECK(got["token-of-other-job"].body.find("job-a") != std::string::npos);
  CHECK(got["other-token-here"].status == 403);
  CHECK(got["clamped"].status == 200);
  CHECK(got["ten-thousand-metrics"].status == 200);
  CHECK(got["ten-thousand-metrics"].body.find("\"dropped_metrics\":9744") != std::string::npos);
  CHECK(got["last"].status == 200);

  // The latest report is the job's; each taken report is one event, in order.
  CHECK(a.progress_percent == 70);
  CHECK(a.estimated_remaining_seconds == 30);
  CHECK(a.metrics == std::vector<std::pair<std::string, std::string>>{{"loss", "0.2"}, {"accuracy", "0.8"}});
  REQUIRE(a.progress_updated);
  REQUIRE(a.end_time);
  CHECK(*a.progress_updated <= *a.end_time);
  auto events = progress_events(c, "job-a");
  REQUIRE(events.size() == 4);
  CHECK(events[0].progress_percent == 10);
  CHECK(events[0].message == "10%, 1m 30s left: loss=0.9");
  CHECK(events[1].progress_percent == 100);  // 250, clamped as Kubeflow's client clamps
  CHECK(events[1].estimated_remaining_seconds == 0);
  CHECK(events[2].progress_percent == 60);
  REQUIRE(events[2].metrics.size() == 256);  // Kubeflow's bound
  CHECK(events[2].metrics.front().first == "m00000");
  CHECK(events[2].metrics.back().first == "m00255");
  CHECK(events[3].metrics == a.metrics);
  // get_jobs shows the same as get_job.
  for (const auto& j : c.list_jobs())
    if (j.name == "job-a") CHECK(j.progress_percent == 70);

  // Nothing reached B.
  auto b = c.get_job("job-b");
  CHECK(b.status == job_status::running);
  CHECK_FALSE(b.progress_percent);
  CHECK(b.metrics.empty());
  CHECK(progress_events(c, "job-b").empty());

  // An ended job takes no report: 409, and its record stays as it was.
  c.cancel_job("job-b");
  c.wait_for_job_status("job-b", {job_status::failed}, 30s);
  c.train(command_job("job-c", python,
                      {probe(), "post", url_b, token_b, R"({"trainerStatus": {"progressPercentage": 5}})"}));
  c.wait_for_job_status("job-c", {job_status::complete}, 60s);
  auto late = answers_of(c.get_job_logs("job-c").read_all());
  CHECK(late["posted"].status == 409);
  CHECK(late["posted"].body.find("has ended") != std::string::npos);
  CHECK_FALSE(c.get_job("job-b").progress_percent);
  CHECK(progress_events(c, "job-b").empty());
}

TEST_CASE_FIXTURE(fixture,
                  "reports past the rate bound are refused with 429 and only the taken ones are kept") {
  trainer_client c(config());
  // 60 reports reach the server at once, far faster than the bucket refills
  c.train(command_job("burst", python, {probe(), "burst", "60"}));
  auto job = c.wait_for_job_status("burst", {job_status::complete}, 120s);
  auto log = c.get_job_logs("burst").read_all();
  std::istringstream in(log);
  std::string line;
  std::vector<std::string> taken;
  int refused = 0;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string name;
    int status = 0;
    l >> name >> status;
    if (status == 200) taken.push_back(name.substr(6));  // burst-<i>
    if (status == 429) ++refused;
    if (status == 429) CHECK(line.find("at most 5 reports a second") != std::string::npos);
  }
  CAPTURE(log);
  CHECK(refused > 0);
  REQUIRE(taken.size() >= 20);  // the bucket's burst at least
  auto events = progress_events(c, "burst");
  REQUIRE(events.size() == taken.size());
  for (std::size_t i = 0; i < taken.size(); ++i) {
    REQUIRE(events[i].metrics.size() == 1);
    CHECK(events[i].metrics[0].second == taken[i]);
  }
  REQUIRE(job.metrics.size() == 1);
  CHECK(job.metrics[0].second == taken.back());
}

TEST_CASE_FIXTURE(fixture,
                  "tjob.report works in a job whose Python has no tjob, and defers to an installed tjob") {
  trainer_client c(config());
  const std::string code =
      "import tjob, time\n"
      "print(tjob.__file__)\n"
      "assert tjob.report(progress=40, eta=12, loss=0.5, step=4)\n"
      "tjob.report(progress=80, eta=3, loss=0.25)  # within the interval: kept back, sent at exit\n";
  auto helper = command_job("helper", python, {"-c", code});
  std::get<command_trainer>(helper.job_trainer).env = {{"PYTHONPATH", "/nonexistent"}};
  c.train(helper);
  auto job = c.wait_for_job_status("helper", {job_status::complete}, 60s);
  auto log = c.get_job_logs("helper").read_all();
  CAPTURE(log);
  CHECK(log.find((std::filesystem::path(home()) / "progress" / "python" / "tjob" / "__init__.py").string()) !=
        std::string::npos);
  CHECK(job.progress_percent == 80);
  CHECK(job.estimated_remaining_seconds == 3);
  // (a report replaces the one before, as Kubeflow's status does)
  CHECK(job.metrics == std::vector<std::pair<std::string, std::string>>{{"loss", "0.25"}});
  auto events = progress_events(c, "helper");
  REQUIRE(events.size() == 2);
  CHECK(events[0].metrics ==
        std::vector<std::pair<std::string, std::string>>{{"loss", "0.5"}, {"step", "4"}});

  // With a tjob package on the job's own path, `import tjob` is that package.
  const auto package = (dir.path() / "site").string();
  std::filesystem::create_directories(package + "/tjob");
  std::filesystem::copy_file(tjob::test::source_dir() + "/python/tjob/report.py",
                             package + "/tjob/report.py");
  {
    std::ofstream init(package + "/tjob/__init__.py");
    init << "from .report import flush, report\n";
  }
  auto real = command_job("real", python, {"-c", code});
  std::get<command_trainer>(real.job_trainer).env = {{"PYTHONPATH", package}};
  c.train(real);
  auto r = c.wait_for_job_status("real", {job_status::complete}, 60s);
  auto rlog = c.get_job_logs("real").read_all();
  CAPTURE(rlog);
  CHECK(rlog.find(package + "/tjob/__init__.py") != std::string::npos);
  CHECK(r.progress_percent == 80);
}

TEST_CASE_FIXTURE(fixture,
                  "the home's CA is made once and verifies the endpoint, and a job's token file is its own") {
  trainer_client c(config());
  c.train(command_job("one", "/bin/true", {}));
  c.wait_for_job_status("one", {job_status::complete}, 30s);
  const std::filesystem::path dir = std::filesystem::path(home()) / "progress";
  auto ca = tjob::test::read_file(dir / "ca.crt");
  CHECK(ca.starts_with("-----BEGIN CERTIFICATE-----"));
  CHECK((std::filesystem::status(dir / "server.key").permissions() & std::filesystem::perms::group_all) ==
        std::filesystem::perms::none);
  CHECK((std::filesystem::status(dir / "server.key").permissions() & std::filesystem::perms::others_all) ==
        std::filesystem::perms::none);
  CHECK_FALSE(std::filesystem::exists(dir / "ca.key"));  // the CA's key signed once and was dropped
  auto token = std::filesystem::path(home()) / "jobs" / "one" / "progress-token";
  CHECK(tjob::test::read_file(token).size() == 64);
  CHECK((std::filesystem::status(token).permissions() & std::filesystem::perms::others_all) ==
        std::filesystem::perms::none);
  // The token file costs the job no work dir: a command job run in a directory it names has none.
  auto elsewhere = command_job("elsewhere", "/bin/true", {});
  std::get<command_trainer>(elsewhere.job_trainer).working_dir = "/";
  c.train(elsewhere);
  c.wait_for_job_status("elsewhere", {job_status::complete}, 30s);
  const auto job_dir = std::filesystem::path(home()) / "jobs" / "elsewhere";
  CHECK(std::filesystem::exists(job_dir / "progress-token"));
  CHECK_FALSE(std::filesystem::exists(job_dir / "work"));
  // A second engine on the home uses the same CA.
  trainer_client c2(config());
  c2.train(command_job("two", "/bin/true", {}));
  c2.wait_for_job_status("two", {job_status::complete}, 30s);
  CHECK(tjob::test::read_file(dir / "ca.crt") == ca);
  CHECK(tjob::test::read_file(std::filesystem::path(home()) / "jobs" / "two" / "progress-token") !=
        tjob::test::read_file(token));
}
