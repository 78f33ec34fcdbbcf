// Sweeps (tjob optimize) as a user runs them: trials, their limit, failures,
// cancel, the owner's death and a resume, and bad input.
#include "tests/e2e/cli_fixture.hpp"
#include "tests/support/test_support.hpp"

#include <doctest/doctest.h>
#include <boost/json.hpp>

#include <csignal>
#include <fstream>
#include <set>
#include <sstream>

using namespace std::chrono_literals;
using tjob::test::helper_bin;

namespace {

namespace json = boost::json;
using fixture = tjob::test::e2e::fixture;

json::object sweep_json(const fixture& f, const std::string& name) {
  auto r = f.tjob({"get", name, "-o", "json"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  return json::parse(r.out).as_object();
}

std::string sweep_home(const fixture& f) { return f.env().at("TJOB_HOME"); }

// The status of each trial's job, by name.
std::map<std::string, std::string> job_statuses(const fixture& f) {
  std::map<std::string, std::string> out;
  auto r = f.tjob({"list", "-o", "json"});
  REQUIRE(r.exit_code == 0);
  const auto jobs = json::parse(r.out);
  for (const auto& j : jobs.as_array())
    out[std::string(j.at("name").as_string())] = std::string(j.at("status").as_string());
  return out;
}

std::string str(const json::value& v) {
  return v.is_string() ? std::string(v.as_string()) : json::serialize(v);
}

// A file the test writes "0 1" into to let trials waiting on it (wait-most FILE 1) go on.
void release(const std::filesystem::path& gate) { std::ofstream(gate) << "0 1\n"; }

}  // namespace

TEST_CASE_FIXTURE(fixture,
                  "tjob optimize runs each trial with its parameters, at most --parallel at once, and keeps "
                  "the best") {
  const auto counter = dir.path() / "running";
  // Each trial counts itself in and waits (a while at most) until two have
  // run at once: the limit is proven by <most> never passing 2, and the
  // parallelism by its reaching 2.
  auto trial = [&](const std::string& name) {
    return std::vector<std::string>{"optimize",
                                    "--name",
                                    name,
                                    "--param",
                                    "lr=loguniform:0.001:0.1",
                                    "--param",
                                    "epochs=choice:5,10",
                                    "--trials",
                                    "5",
                                    "--parallel",
                                    "2",
                                    "--seed",
                                    "11",
                                    "--wait",
                                    "--",
                                    helper_bin(),
                                    "enter",
                                    counter.string(),
                                    "wait-most",
                                    counter.string(),
                                    "2",
                                    "20000",
                                    "print",
                                    "epoch=${trialParameters.epochs} loss=${trialParameters.lr}\n",
                                    "leave",
                                    counter.string()};
  };
  auto r = tjob(trial("sw"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  int now = -1, most = -1;
  std::istringstream(tjob::test::read_file(counter)) >> now >> most;
  CHECK(now == 0);
  CHECK(most == 2);
  auto s = sweep_json(*this, "sw");
  CHECK(str(s.at("status")) == "Complete");
  const auto& trials = s.at("trials").as_array();
  REQUIRE(trials.size() == 5);
  double lowest = 1;
  int lowest_at = -1;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const auto& t = trials[i].as_object();
    CAPTURE(json::serialize(t));
    CHECK(str(t.at("name")) == "sw-" + std::to_string(i));
    CHECK(str(t.at("status")) == "Complete");
    const double lr = t.at("parameters").at("lr").as_double();
    CHECK(lr >= 0.001);
    CHECK(lr <= 0.1);
    const auto epochs = t.at("parameters").at("epochs").as_int64();
    CHECK((epochs == 5 || epochs == 10));
    // the objective is what the trial printed: its parameter, through its argv
    CHECK(t.at("objective").as_double() == doctest::Approx(lr).epsilon(1e-9));
    if (lr < lowest) lowest = lr, lowest_at = static_cast<int>(i);
  }
  CHECK(s.at("best").as_int64() == lowest_at);
  // the table: best first; logs: the best trial's, or the one asked for
  const auto best = "sw-" + std::to_string(lowest_at);
  CHECK(r.out.find("Best: " + best + " loss=") != std::string::npos);
  CHECK(r.out.find("\n" + best + " ") != std::string::npos);
  CHECK(r.out.find("TRIAL") < r.out.find("\n" + best + " "));
  auto logs = tjob({"logs", "sw"});
  const auto at = logs.out.find(" loss=");
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(logs.out.substr(at + 6)) == doctest::Approx(lowest).epsilon(1e-12));
  auto first = tjob({"logs", "sw", "--trial", "0"});
  CHECK(first.out.find("loss=") != std::string::npos);
  CHECK(tjob({"logs", "sw", "--trial", "9"}).err.find("the sweep has no such trial (it has 0 to 4)") !=
        std::string::npos);
  // the trials are jobs of their own, of the sweep's array
  auto listed = job_statuses(*this);
  for (int i = 0; i < 5; ++i) CHECK(listed["sw-" + std::to_string(i)] == "Complete");
  CHECK(tjob({"sweeps"}).out.find("sw     Complete   random      5/5") != std::string::npos);

  // The same seed, the same trials.
  std::filesystem::remove(counter);
  REQUIRE(tjob(trial("again")).exit_code == 0);
  auto again = sweep_json(*this, "again");
  for (std::size_t i = 0; i < 5; ++i)
    CHECK(json::serialize(again.at("trials").as_array()[i].at("parameters")) ==
          json::serialize(trials[i].at("parameters")));
}

TEST_CASE_FIXTURE(fixture,
                  "a sweep ends Failed past max_failed_trials, naming the trials, and stops the rest") {
  const auto gate = dir.path() / "gate";
  // Trials 0 and 1 fail; the others would wait for ever.
  auto r = tjob({"optimize", "--name", "sm", "--param", "x=uniform:0:1", "--trials", "5", "--parallel", "1",
                 "--max-failed", "1", "--wait", "--", "sh", "-c",
                 "[ \"$TJOB_TRIAL_INDEX\" -ge 2 ] || exit 3; exec \"$0\" wait-most \"$1\" 1 60000",
                 helper_bin(), gate.string()});
  CHECK(r.exit_code == 1);
  auto s = sweep_json(*this, "sm");
  CHECK(str(s.at("status")) == "Failed");
  CHECK(str(s.at("reason")) ==
        "2 trials failed, more than max_failed_trials 1: sm-0 (exit code 3); sm-1 (exit code 3)");
  // none of the others is left running or waiting
  for (const auto& job : job_statuses(*this)) {  // (clang 14: no capture of a structured binding)
    CAPTURE(job.first);
    CHECK(job.second == "Failed");
  }
}

TEST_CASE_FIXTURE(fixture, "a trial that never reports the objective fails with a reason that says how to") {
  auto r = tjob({"optimize", "--name", "quiet", "--param", "x=uniform:0:1", "--trials", "1", "--wait", "--",
                 helper_bin(), "print", "accuracy=0.5\n"});
  CHECK(r.exit_code == 1);
  auto t = sweep_json(*this, "quiet").at("trials").as_array().at(0).as_object();
  CHECK(str(t.at("status")) == "Failed");
  CHECK(std::string(t.at("reason").as_string())
            .find("MetricsUnavailable: it never reported the objective 'loss' "
                  "(tjob.report(loss=...) or a line 'loss=<number>'") == 0);
  // --maximize --objective accuracy: that line is the objective
  auto m =
      tjob({"optimize", "--name", "acc", "--objective", "accuracy", "--maximize", "--param", "x=uniform:0:1",
            "--trials", "1", "--wait", "--", helper_bin(), "print", "accuracy=0.5\nnoise = here\n"});
  CHECK_MESSAGE(m.exit_code == 0, m.err);
  CHECK(sweep_json(*this, "acc").at("trials").as_array().at(0).at("objective").as_double() == 0.5);
}

TEST_CASE_FIXTURE(fixture,
                  "tjob cancel of a sweep stops every trial, and delete removes it with its trials") {
  const auto gate = dir.path() / "gate";
  auto r = tjob({"optimize", "--name", "sc", "--param", "x=uniform:0:1", "--trials", "6", "--parallel", "2",
                 "--", helper_bin(), "wait-most", gate.string(), "1", "60000"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out == "sc\n");
  CHECK(tjob({"wait", "sc-0", "sc-1", "--status", "Running"}).exit_code == 0);
  auto c = tjob({"cancel", "sc"});
  CHECK_MESSAGE(c.exit_code == 0, c.err);
  CHECK(c.out == "sc Failed\n");
  auto w = tjob({"wait", "sc", "--status", "Failed"});
  CHECK(w.out == "Failed\n");
  auto s = sweep_json(*this, "sc");
  CHECK(str(s.at("reason")) == "cancelled");
  CHECK(s.at("owned") == false);
  for (const auto& t : s.at("trials").as_array()) {
    CAPTURE(json::serialize(t));
    CHECK(str(t.at("status")) == "Failed");
  }
  for (const auto& job : job_statuses(*this)) {  // (clang 14: no capture of a structured binding)
    CAPTURE(job.first);
    CHECK(job.second == "Failed");
  }
  CHECK(tjob({"cancel", "sc"}).out == "sc Failed\n");  // a no-op once it has ended
  auto d = tjob({"delete", "sc"});
  CHECK(d.out == "deleted sc\n");
  CHECK(tjob({"list", "-o", "name"}).out.empty());
  CHECK(tjob({"sweeps", "-o", "name"}).out.empty());
  CHECK(tjob({"get", "sc"}).exit_code != 0);
}

TEST_CASE_FIXTURE(
    fixture, "a sweep whose owner is killed goes on with tjob optimize --resume, and no trial runs twice") {
  const auto gate = dir.path() / "gate";
  const auto ran = dir.path() / "ran";
  // TPE: the next trials are made from the results, two at a time, so the
  // owner has trials still to make when it dies.
  auto r = tjob({"optimize",
                 "--name",
                 "sk",
                 "--algorithm",
                 "tpe",
                 "--param",
                 "x=uniform:0:1",
                 "--trials",
                 "4",
                 "--parallel",
                 "2",
                 "--seed",
                 "5",
                 "--",
                 helper_bin(),
                 "wait-most",
                 gate.string(),
                 "1",
                 "60000",
                 "append",
                 ran.string(),
                 "${trialParameters.x}",
                 "print",
                 "loss=${trialParameters.x}\n"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  CHECK(tjob({"wait", "sk-0", "sk-1", "--status", "Running"}).exit_code == 0);
  const auto owner_file = std::filesystem::path(sweep_home(*this)) / "sweeps" / "sk" / "owner";
  pid_t owner = 0;
  std::ifstream(owner_file) >> owner;
  REQUIRE(owner > 0);
  REQUIRE(::kill(owner, SIGKILL) == 0);
  REQUIRE(tjob::test::wait_gone(owner, 30s));
  // Its threads may still be closing its files once its pid is a zombie:
  // the owner's lock is free when flock(1) can take it (waiting, not polling).
  REQUIRE(tjob::test::run({"flock", "-s", "-w", "30", owner_file.string(), "true"}).exit_code == 0);
  auto orphan = tjob({"get", "sk"});
  CAPTURE(orphan.out);
  CAPTURE(orphan.err);
  CHECK(orphan.out.find("Owner: none (it died): tjob optimize --resume sk goes on") != std::string::npos);
  CHECK(tjob({"wait", "sk"}).err.find("has no owner") != std::string::npos);
  // Its trials are their own supervisor's: they run on and end.
  release(gate);
  CHECK(tjob({"wait", "sk-0", "sk-1"}).exit_code == 0);
  auto resumed = tjob({"optimize", "--resume", "sk", "--wait"});
  CHECK_MESSAGE(resumed.exit_code == 0, resumed.err);
  auto s = sweep_json(*this, "sk");
  CHECK(str(s.at("status")) == "Complete");
  std::multiset<std::string> made, done;
  for (const auto& t : s.at("trials").as_array()) {
    CHECK(str(t.at("status")) == "Complete");
    made.insert(json::serialize(t.at("parameters").at("x")));
  }
  REQUIRE(made.size() == 4);
  std::istringstream lines(tjob::test::read_file(ran));
  for (std::string line; std::getline(lines, line);) done.insert(line);
  CHECK(done.size() == 4);  // each trial once
  CHECK(std::set<std::string>(done.begin(), done.end()).size() == 4);
  auto again = tjob({"optimize", "--resume", "sk"});
  CHECK(again.exit_code != 0);
  CHECK(again.err.find("has ended (Complete); nothing to resume") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture,
                  "bad sweep input is refused before anything is made, naming the field and the fix") {
  auto refused = [&](std::vector<std::string> args, const std::string& says) {
    std::vector<std::string> argv{"optimize", "--name", "bad"};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const auto& a : {"--", "true"}) argv.push_back(a);
    auto r = tjob(argv);
    CAPTURE(r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(says) != std::string::npos);
  };
  refused({}, "sweep bad: search_space: it is empty");
  refused({"--param", "x=uniform:1:0"},
          "sweep bad: search_space.x: min 1.0 is not below max 0.0; give min < max");
  refused({"--param", "lr=loguniform:0:1"}, "search_space.lr: a loguniform range must be above 0");
  refused({"--param", "x=normal:0:1"}, "--param x=normal:0:1: 'normal' is not a distribution");
  refused({"--param", "x=uniform:0"}, "a uniform range is MIN:MAX, two numbers");
  refused({"--param", "x=uniform:0:1", "--algorithm", "bayes"},
          "sweep bad: algorithm: 'bayes' is not an algorithm; use random, grid or tpe");
  refused({"--param", "x=uniform:0:1", "--trials", "0"}, "trial_config.num_trials: 0 is not from 1 to 10000");
  refused({"--param", "x=uniform:0:1", "--parallel", "0"}, "trial_config.parallel_trials");
  refused({"--param", "x=uniform:0:1", "--runtime", "nope"}, "sweep bad: trial_template: ");
  refused({"--param", "x=uniform:0:1", "--median-stop-start-step", "0"},
          "sweep bad: early_stopping.start_step: 0 must be 1 or more");
  auto none = tjob({"optimize", "--param", "x=uniform:0:1"});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("give the trial's training file (FILE.py) or a command after --") != std::string::npos);
  CHECK(tjob({"sweeps", "-o", "name"}).out.empty());
  CHECK(tjob({"list", "-o", "name"}).out.empty());
  // a name is one sweep's
  REQUIRE(tjob({"optimize", "--name", "once", "--param", "x=uniform:0:1", "--trials", "1", "--wait", "--",
                helper_bin(), "print", "loss=1\n"})
              .exit_code == 0);
  auto twice = tjob({"optimize", "--name", "once", "--param", "x=uniform:0:1", "--", "true"});
  CHECK(twice.exit_code != 0);
  CHECK(twice.err.find("sweep once: name: a sweep of that name exists") != std::string::npos);
}
