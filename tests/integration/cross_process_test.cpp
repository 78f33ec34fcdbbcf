// Several processes on one store: readers, followers, and an owner that dies.
#include "tests/support/fold_check.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>
#include <tjob/spec.hpp>

#include <doctest/doctest.h>
#include <boost/json.hpp>

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <csignal>
#include <fstream>
#include <set>

using namespace tjob;
using namespace std::chrono_literals;
using tjob::test::helper_bin;
using tjob::test::helper_job;
using tjob::test::tjob_bin;

namespace {

using fixture = tjob::test::folded_home;  // each case ends with the columns checked against the log

}  // namespace

TEST_CASE_FIXTURE(fixture, "another process lists and gets a job while it runs") {
  trainer_client c(config());
  auto name = c.train(helper_job({"print", "up\n", "sleep", "60000"}, "seen"));
  c.wait_for_job_status(name, {job_status::running}, 30s);
  auto listed = tjob::test::run({tjob_bin(), "list", "-o", "json"}, env());
  REQUIRE(listed.exit_code == 0);
  auto arr = boost::json::parse(listed.out).as_array();
  REQUIRE(arr.size() == 1);
  CHECK(arr[0].at("name").as_string() == "seen");
  CHECK(arr[0].at("status").as_string() == "Running");
  auto got = tjob::test::run({tjob_bin(), "get", "seen", "-o", "json"}, env());
  REQUIRE(got.exit_code == 0);
  auto obj = boost::json::parse(got.out).as_object();
  CHECK(obj.at("steps").as_array()[0].at("status").as_string() == "Running");
  CHECK(obj.at("steps").as_array()[0].at("exit_code").is_null());
  CHECK(obj.at("start_time").is_string());  // read from the log by another process
  CHECK(obj.at("end_time").is_null());      // not ended yet
  c.cancel_job(name);
}

TEST_CASE_FIXTURE(fixture,
                  "tjob logs -f in another process follows a running job live and returns when it ends") {
  trainer_client c(config());
  auto name = c.train(helper_job({"print", "first\n", "sleep", "500", "print", "second\n", "exit", "4"}));
  tjob::test::background follower({tjob_bin(), "logs", "-f", name}, env());
  CHECK(follower.wait_for_stdout("first\n"));
  CHECK(follower.wait(30s) == 0);
  CHECK(follower.out() == "first\nsecond\n");
  CHECK(c.get_job(name).steps[0].exit_code == 4);
}

TEST_CASE_FIXTURE(
    fixture, "a job whose owner is SIGKILLed is Failed (lost) at the next start and its processes killed") {
  auto pidfile = dir.path() / "pids";
  tjob::test::background owner(
      {tjob_bin(), "run", "--name", "orphan", "--", helper_bin(), "ignore-term", pidfile.string()}, env());
  REQUIRE(owner.wait_for_stdout("ready\n"));
  pid_t child = 0, grandchild = 0;
  std::ifstream(pidfile) >> child >> grandchild;
  REQUIRE(child > 0);
  owner.signal(SIGKILL);
  owner.wait();
  CHECK_FALSE(tjob::test::process_gone(child));  // it outlived its owner ...
  trainer_client c(config());                    // ... until an engine opens the store
  auto job = c.get_job("orphan");
  CHECK(job.status == job_status::failed);
  CHECK(job.reason == "lost");
  CHECK(job.steps[0].reason == "lost");
  CHECK(c.get_job_events("orphan").back().reason == "Lost");
  CHECK(tjob::test::wait_gone(child, 10s));
  CHECK(tjob::test::wait_gone(grandchild, 10s));
  for (const auto& j : c.list_jobs()) CHECK(j.status != job_status::running);
}

TEST_CASE_FIXTURE(fixture, "a waiter in another process is woken by the owner's death and without polling") {
  tjob::test::background owner(
      {tjob_bin(), "run", "--name", "doomed", "--", helper_bin(), "print", "ready\n", "sleep", "60000"},
      env());
  REQUIRE(owner.wait_for_stdout("ready\n"));
  trainer_client c(config());
  auto job = c.get_job("doomed");
  REQUIRE(job.status == job_status::running);
  owner.signal(SIGKILL);
  // Nobody writes the store when the owner dies: only the pidfd on the owner
  // can wake this wait before its timeout (which would throw).
  auto ended = c.wait_for_job_status("doomed", {job_status::failed}, 30s);
  CHECK(ended.reason == "lost");
  owner.wait();
}

TEST_CASE_FIXTURE(fixture,
                  "a job submitted with tjob train outlives the submitter and is waited for elsewhere") {
  auto submitted = tjob::test::run(
      {tjob_bin(), "train", "--name", "detached", "--", helper_bin(), "sleep", "300", "print", "done\n"},
      env());
  REQUIRE(submitted.exit_code == 0);
  CHECK(submitted.out == "detached\n");
  trainer_client c(config());
  auto job = c.wait_for_job_status("detached", {job_status::complete}, 30s);
  CHECK(job.steps[0].exit_code == 0);
  CHECK(c.get_job_logs("detached").read_all() == "done\n");
}

TEST_CASE_FIXTURE(fixture, "tjob delete from another process cancels a supervised job and removes it") {
  auto pidfile = dir.path() / "pids";
  auto submitted = tjob::test::run(
      {tjob_bin(), "train", "--name", "victim", "--", helper_bin(), "ignore-term", pidfile.string()}, env());
  REQUIRE(submitted.exit_code == 0);
  trainer_client c(config());
  auto reader = c.get_job_logs("victim", {.follow = true});
  REQUIRE(reader.next() == std::optional<std::string>("ready\n"));
  pid_t child = 0, grandchild = 0;
  std::ifstream(pidfile) >> child >> grandchild;
  auto deleted = tjob::test::run({tjob_bin(), "delete", "victim", "--grace", "0.3"}, env());
  CHECK(deleted.exit_code == 0);
  CHECK(tjob::test::wait_gone(child, 10s));
  CHECK(tjob::test::wait_gone(grandchild, 10s));
  CHECK(c.list_jobs().empty());
}

TEST_CASE_FIXTURE(fixture,
                  "a cancel from another process reaches the owner's state machine: Failed, cancelled") {
  auto submitted = tjob::test::run({tjob_bin(), "train", "--name", "remote-cancel", "--", helper_bin(),
                                    "print", "ready\n", "sleep", "600000"},
                                   env());
  REQUIRE(submitted.exit_code == 0);
  trainer_client c(config());
  auto reader = c.get_job_logs("remote-cancel", {.follow = true});
  REQUIRE(reader.next() == std::optional<std::string>("ready\n"));
  c.cancel_job("remote-cancel");  // this process does not own it: the supervisor does
  auto job = c.get_job("remote-cancel");
  CHECK(job.status == job_status::failed);
  CHECK(job.reason == "cancelled");
  REQUIRE(job.steps.size() == 1);
  CHECK(job.steps[0].reason == "cancelled");
  // The owner took the cancel from the log when the process ended: its end
  // is a Cancelled event, not an Exited one, and the request is logged once.
  int requested = 0;
  std::string last;
  for (const auto& e : c.get_job_events("remote-cancel")) {
    requested += e.reason == "CancelRequested";
    if (e.step == "node-0") last = e.reason;
  }
  CHECK(requested == 1);
  CHECK(last == "Cancelled");
}

TEST_CASE_FIXTURE(fixture,
                  "two engines of one process both see the jobs of processes that come and go on the store") {
  // SQLite's locks are POSIX record locks, which belong to the process, and
  // closing any descriptor of the file drops them all. The second engine's
  // open did that; the next process to leave then found the store unused,
  // deleted its WAL under the first engine, which no longer saw new jobs
  // (a Python program with an OptimizerClient and a TrainerClient).
  trainer_client first(config());
  CHECK(first.list_jobs().empty());
  trainer_client second(config());
  auto ran = tjob::test::run({tjob_bin(), "run", "--name", "left", "--", helper_bin(), "exit", "0"}, env());
  REQUIRE(ran.exit_code == 0);
  // one that stays: the WAL made now lives on
  tjob::test::background holder(
      {tjob_bin(), "run", "--name", "holder", "--", helper_bin(), "print", "up\n", "sleep", "60000"}, env());
  REQUIRE(holder.wait_for_stdout("up\n"));
  for (int i = 0; i < 3; ++i) {
    const auto name = "next-" + std::to_string(i);
    ran = tjob::test::run({tjob_bin(), "run", "--name", name, "--", helper_bin(), "exit", "0"}, env());
    REQUIRE(ran.exit_code == 0);
    for (auto* c : {&first, &second}) {
      auto listed = c->list_jobs();
      CHECK(std::any_of(listed.begin(), listed.end(), [&](const train_job& j) { return j.name == name; }));
      CHECK(c->get_job(name).status == job_status::complete);
    }
  }
  CHECK(first.get_job("left").status == job_status::complete);
  CHECK(first.get_job("holder").status == job_status::running);
  first.cancel_job("holder");
  CHECK(holder.wait() != 0);
  CHECK(second.get_job("holder").status == job_status::failed);
}

TEST_CASE_FIXTURE(fixture, "train_detached: the job outlives the client that submitted it") {
  auto fifo = dir.path() / "go";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string name;
  {
    trainer_client c(config());
    name = c.train_detached(
        helper_job({"print", "up\n", "read-fifo", fifo.string(), "print", "done\n"}, "kept"));
    CHECK(name == "kept");
    c.wait_for_job_status(name, {job_status::running}, 30s);
  }  // the submitter's engine is gone; with train() the job would now be lost
  trainer_client other(config());
  auto job = other.get_job(name);
  REQUIRE(job.status == job_status::running);
  // Its owner is a supervisor in a session of its own, not this process.
  auto parent_of = [](long pid) {
    auto stat = tjob::test::read_file("/proc/" + std::to_string(pid) + "/stat");
    return std::stol(stat.substr(stat.rfind(')') + 4));  // after the state: the ppid
  };
  auto supervisor = parent_of(job.steps[0].pid);
  CHECK(supervisor != ::getpid());
  // nor our child: nothing of it can be left here as a zombie
  CHECK(parent_of(supervisor) != ::getpid());
  { std::ofstream(fifo) << "go"; }
  auto ended = other.wait_for_job_status(name, {job_status::complete}, 30s);
  CHECK(ended.steps[0].exit_code == 0);
  CHECK(other.get_job_logs(name).read_all() == "up\ndone\n");
}

TEST_CASE_FIXTURE(fixture,
                  "train_detached refuses bad input as train does, and says when it has no supervisor") {
  trainer_client c(config());
  auto bad = helper_job({"exit", "0"}, "Not_A_Name");
  try {
    c.train_detached(bad);
    FAIL("a bad name was accepted");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_name);
    CHECK(std::string(e.what()).find("Not_A_Name") != std::string::npos);
  }
  CHECK(c.list_jobs().empty());
  auto cfg = config();
  cfg.supervisor = dir.path() / "no-such-tjob";
  try {
    train_detached(helper_job({"exit", "0"}), cfg);
    FAIL("a missing supervisor went unnoticed");
  } catch (const error& e) {
    CHECK(e.code() == errc::spawn_failed);
    CHECK(std::string(e.what()).find("no-such-tjob") != std::string::npos);
    CHECK(std::string(e.what()).find("engine_config::supervisor") != std::string::npos);
  }
}

TEST_CASE_FIXTURE(fixture,
                  "train_detached of a job array: one supervisor owns every member, and a signal to it "
                  "cancels them all") {
  trainer_client c(config());
  // Each member prints its parent, the process that owns it.
  auto names = c.train_detached(array_members(helper_job({"ppid"}, "own"), "0-5"));
  REQUIRE(names.size() == 6);
  std::set<std::string> owners;
  for (const auto& n : names) {
    CHECK(c.wait_for_job_status(n, {job_status::complete}, 60s).array == "own");
    owners.insert(c.get_job_logs(n).read_all());
  }
  REQUIRE(owners.size() == 1);
  CHECK(*owners.begin() != std::to_string(::getpid()) + "\n");

  // Members that wait: SIGTERM to their one supervisor cancels every one.
  tjob::test::gate g;
  auto waiter = helper_job({"read-fifo", g.path()}, "held");
  std::get<command_trainer>(waiter.job_trainer).cpus = 0;  // all three run at once on any CPU budget
  auto held = c.train_detached(array_members(waiter, "0-2"));
  pid_t supervisor = 0;
  for (const auto& n : held) {
    auto job = c.wait_for_job_status(n, {job_status::running}, 60s);
    auto stat = tjob::test::read_file("/proc/" + std::to_string(job.steps[0].pid) + "/stat");
    pid_t parent = std::stoi(stat.substr(stat.rfind(')') + 4));
    if (supervisor == 0) supervisor = parent;
    CHECK(parent == supervisor);
  }
  REQUIRE(supervisor > 0);
  REQUIRE(::kill(supervisor, SIGTERM) == 0);
  for (const auto& n : held) {
    auto job = c.wait_for_job_status(n, {job_status::failed}, 60s);
    CHECK(job.reason == "cancelled");
  }
  CHECK(tjob::test::wait_gone(supervisor, 30s));
}

TEST_CASE_FIXTURE(fixture, "train_detached of several jobs is all or nothing: one refused submits none") {
  trainer_client c(config());
  auto first = c.train(helper_job({"print", "mine\n"}, "dup-2"));
  c.wait_for_job_status(first, {job_status::complete}, 60s);
  auto reqs = array_members(helper_job({"exit", "0"}, "dup"), "0-3");
  auto msg = tjob::test::message_of([&] { c.train_detached(reqs); });
  CHECK(msg.find("dup-2") != std::string::npos);
  std::vector<std::string> left;
  for (const auto& j : c.list_jobs()) left.push_back(j.name);
  CHECK(left == std::vector<std::string>{"dup-2"});       // the members submitted before it are gone
  CHECK(c.get_job_logs("dup-2").read_all() == "mine\n");  // and what was there is untouched
}

TEST_CASE_FIXTURE(fixture, "cancel_jobs cancels several jobs side by side and skips one that is gone") {
  trainer_client c(config());
  tjob::test::gate g;
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    auto r = helper_job({"read-fifo", g.path()}, "side-" + std::to_string(i));
    std::get<command_trainer>(r.job_trainer).cpus = 0;
    names.push_back(c.train(r));
  }
  for (const auto& n : names) c.wait_for_job_status(n, {job_status::running}, 60s);
  auto with_gone = names;
  with_gone.push_back("never-was");
  c.cancel_jobs(with_gone);
  for (const auto& n : names) {  // each has ended by the time cancel_jobs returns
    auto job = c.get_job(n);
    CHECK(job.status == job_status::failed);
    CHECK(job.reason == "cancelled");
  }
}
