// Admission (budgets, priorities, the shared queue) and active deadlines of
// local jobs, with real processes; docs/scheduling.md has the rules.
#include "tests/support/fold_check.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>

#include <doctest/doctest.h>

#include <csignal>
#include <fstream>
#include <sstream>

using namespace tjob;
using namespace std::chrono_literals;
using tjob::test::gate;
using tjob::test::helper_bin;
using tjob::test::helper_job;
using tjob::test::message_of;

namespace {

using fixture = tjob::test::folded_home;

// An engine whose only budget is `max_running` jobs at once.
engine_config slots(engine_config cfg, int max_running) {
  cfg.admission.max_running = max_running;
  cfg.admission.cpus = 0;
  cfg.admission.memory = 0;
  return cfg;
}

train_request with_priority(train_request r, int priority) {
  r.priority = priority;
  return r;
}

train_request needing(train_request r, int cpus, std::uint64_t memory = 0) {
  auto& t = std::get<command_trainer>(r.job_trainer);
  t.cpus = cpus;
  t.memory = memory;
  return r;
}

std::vector<std::string> reasons_of(trainer_client& c, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& e : c.get_job_events(name)) out.push_back(e.reason);
  return out;
}

std::vector<std::string> lines_of(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Waits (woken by the store's commits) until `name` has left the queue.
void wait_started(trainer_client& c, const std::string& name) {
  auto job = c.get_job(name);
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (job.status == job_status::created && std::chrono::steady_clock::now() < deadline)
    job = c.wait_for_job_change(name, job, 30s);
  REQUIRE(job.status != job_status::created);
}

}  // namespace

TEST_CASE_FIXTURE(fixture,
                  "a job that does not fit waits Created, Queued, with its place, until room is freed") {
  trainer_client c(slots(config(), 1));
  gate g;
  auto a = c.train(helper_job({"read-fifo", g.path()}, "holder"));
  auto b = c.train(helper_job({"print", "b ran\n"}, "waiter"));
  auto job = c.get_job(b);
  CHECK(job.status == job_status::created);
  CHECK(job.reason == "Queued");
  CHECK(job.queue_position == 1);
  CHECK(c.get_job(a).status == job_status::running);
  CHECK_FALSE(c.get_job(a).queue_position);
  auto q = c.get_queue();
  REQUIRE(q.size() == 1);
  CHECK(q[0].name == "waiter");
  CHECK(q[0].position == 1);
  CHECK(q[0].cpus == 1);
  CHECK(q[0].waits_for.find("a running slot (1 of max_running 1 in use)") != std::string::npos);
  bool said = false;
  for (const auto& e : c.get_job_events(b))
    said = said || (e.reason == "Queued" && e.message ==
                                                "waiting for a running slot (1 of max_running 1 in use) "
                                                "(position 1)");
  CHECK(said);
  g.release();
  job = c.wait_for_job_status(b, {job_status::complete}, 30s);
  CHECK(job.reason.empty());
  CHECK_FALSE(job.queue_position);
  CHECK(reasons_of(c, b) == std::vector<std::string>{"Created", "Queued", "Admitted", "Started", "Exited"});
  CHECK(c.get_job_logs(b).read_all() == "b ran\n");  // a command's log is its own bytes, waiting or not
  CHECK(c.get_queue().empty());
}

TEST_CASE_FIXTURE(fixture, "200 jobs with max_running 4 from three processes never run more than 4 at once") {
  // Each job counts itself in and out of a shared counter under a file lock;
  // the counter keeps the most that were ever in at once.
  auto counter = dir.path() / "counter";
  std::vector<std::unique_ptr<tjob::test::background>> procs;
  const int per[] = {67, 67, 66};
  int first = 0;
  for (int p = 0; p < 3; ++p) {
    procs.push_back(std::make_unique<tjob::test::background>(
        std::vector<std::string>{tjob::test::submit_bin(), home(), "p" + std::to_string(p),
                                 std::to_string(first), std::to_string(per[p]), "4", "0", "--", helper_bin(),
                                 "enter", counter.string(), "sleep", "20", "leave", counter.string()}));
    first += per[p];
  }
  for (int p = 0; p < 3; ++p) {
    CHECK(procs[p]->wait_for_stdout("ended " + std::to_string(per[p]) + " 0", 600s));
    CHECK(procs[p]->wait(60s) == 0);
    INFO(procs[p]->err());
  }
  std::istringstream in(tjob::test::read_file(counter));
  int now = -1, most = -1;
  in >> now >> most;
  CHECK(now == 0);
  CHECK(most <= 4);  // never more than the budget ...
  CHECK(most >= 2);  // ... and the processes' jobs did run side by side
  trainer_client c(config());
  auto jobs = c.list_jobs();
  CHECK(jobs.size() == 200);
  for (const auto& j : jobs) CHECK(j.status == job_status::complete);
}

TEST_CASE_FIXTURE(fixture, "higher priority goes first, first submitted first within a priority") {
  trainer_client c(slots(config(), 1));
  gate g;
  auto order = dir.path() / "order";
  c.train(helper_job({"read-fifo", g.path()}, "blocker"));
  for (auto [name, prio] : {std::pair{"low-a", 0}, {"high", 5}, {"low-b", 0}, {"mid", 2}, {"neg", -1}})
    c.train(with_priority(helper_job({"append", order.string(), name}, name), prio));
  std::vector<std::string> queued;
  for (const auto& e : c.get_queue()) queued.push_back(std::to_string(e.position) + " " + e.name);
  CHECK(queued == std::vector<std::string>{"1 high", "2 mid", "3 low-a", "4 low-b", "5 neg"});
  CHECK(c.get_queue()[1].waits_for == "job high ahead of it");
  g.release();
  c.wait_for_job_status("neg", {job_status::complete}, 60s);
  CHECK(lines_of(order) == std::vector<std::string>{"high", "mid", "low-a", "low-b", "neg"});
}

TEST_CASE_FIXTURE(fixture, "CPU and memory budgets hold jobs back, and a job that can never fit is refused") {
  auto cfg = config();
  cfg.admission.cpus = 2;
  cfg.admission.memory = 1ULL << 30;
  trainer_client c(cfg);
  gate g1, g2;
  c.train(needing(helper_job({"read-fifo", g1.path()}, "wide"), 2));
  c.train(needing(helper_job({"print", "x"}, "narrow"), 1));
  auto q = c.get_queue();
  REQUIRE(q.size() == 1);
  CHECK(q[0].waits_for == "1 CPU (2 of 2 in use)");
  g1.release();
  c.wait_for_job_status("narrow", {job_status::complete}, 30s);

  c.train(needing(helper_job({"read-fifo", g2.path()}, "big-memory"), 1, 768ULL << 20));
  c.train(needing(helper_job({"print", "x"}, "more-memory"), 1, 512ULL << 20));
  q = c.get_queue();
  REQUIRE(q.size() == 1);
  CHECK(q[0].waits_for == "512Mi of memory (768Mi of 1Gi in use)");
  CHECK(q[0].memory == 512ULL << 20);
  g2.release();
  c.wait_for_job_status("more-memory", {job_status::complete}, 30s);

  auto msg = message_of([&] { c.train(needing(helper_job({"print", "x"}, "huge"), 3)); });
  CHECK(msg.find("TrainJob 'huge' needs 3 CPUs; the CPU budget is 2") != std::string::npos);
  CHECK(msg.find("config.yaml") != std::string::npos);
  CHECK(tjob::test::code_of([&] { c.get_job("huge"); }) == errc::job_not_found);  // nothing was recorded
}

TEST_CASE_FIXTURE(fixture, "a big job at the head is not passed by small ones that would fit") {
  auto cfg = config();
  cfg.admission.cpus = 2;
  trainer_client c(cfg);
  gate g;
  auto order = dir.path() / "order";
  c.train(needing(helper_job({"read-fifo", g.path()}, "small-running"), 1));
  c.train(needing(helper_job({"append", order.string(), "big"}, "big"), 2));
  c.train(needing(helper_job({"append", order.string(), "small"}, "small"), 1));
  // One CPU is free and "small" needs one, but "big" came first.
  CHECK(c.get_job("small").status == job_status::created);
  auto q = c.get_queue();
  REQUIRE(q.size() == 2);
  CHECK(q[0].waits_for == "2 CPUs (1 of 2 in use)");
  CHECK(q[1].waits_for == "job big ahead of it");
  g.release();
  c.wait_for_job_status("small", {job_status::complete}, 30s);
  CHECK(lines_of(order) == std::vector<std::string>{"big", "small"});
}

TEST_CASE_FIXTURE(fixture, "the queue is one for every process on the store, and survives its submitter") {
  // The budget every process reads: $TJOB_HOME/config.yaml. tjob train's
  // supervisors own the jobs; the submitting shells are gone.
  std::filesystem::create_directories(home());
  std::filesystem::permissions(home(), std::filesystem::perms::owner_all);
  std::ofstream(std::filesystem::path(home()) / "config.yaml") << "admission:\n  max_running: 1\n  cpus: 0\n";
  gate g;
  auto order = dir.path() / "order";
  auto held = tjob::test::run(
      {tjob::test::tjob_bin(), "train", "--name", "first", "--", helper_bin(), "read-fifo", g.path()}, env());
  REQUIRE(held.exit_code == 0);
  for (auto name : {"second", "third"}) {
    auto r = tjob::test::run(
        {tjob::test::tjob_bin(), "train", "--name", name, "--", helper_bin(), "append", order.string(), name},
        env());
    REQUIRE(r.exit_code == 0);
  }
  auto listed = tjob::test::run({tjob::test::tjob_bin(), "queue"}, env());
  CHECK(listed.exit_code == 0);
  CHECK(listed.out.find("1          second") != std::string::npos);
  CHECK(listed.out.find("2          third") != std::string::npos);
  CHECK(listed.out.find("job second ahead of it") != std::string::npos);
  trainer_client c(config());
  CHECK(c.get_job("first").status == job_status::running);
  g.release();
  c.wait_for_job_status("third", {job_status::complete}, 60s);
  CHECK(lines_of(order) == std::vector<std::string>{"second", "third"});
}

TEST_CASE_FIXTURE(fixture,
                  "config.yaml is read again when it changes: a raised max_running admits the waiting "
                  "job, and a bad edit keeps the budgets") {
  std::filesystem::create_directories(home());
  std::filesystem::permissions(home(), std::filesystem::perms::owner_all);
  const auto file = std::filesystem::path(home()) / "config.yaml";
  std::ofstream(file) << "admission:\n  max_running: 1\n  cpus: 0\n";
  gate g;
  trainer_client c(config());
  auto holder = c.train(helper_job({"read-fifo", g.path()}, "holder"));
  wait_started(c, holder);
  auto next = c.train(helper_job({"print", "in\n"}, "next"));
  CHECK(c.get_job(next).reason == "Queued");
  // The edit alone lets it in: the holder still runs.
  std::ofstream(file) << "admission:\n  max_running: 2\n  cpus: 0\n";
  CHECK(c.wait_for_job_status(next, {job_status::complete}, 30s).status == job_status::complete);
  CHECK(c.get_job(holder).status == job_status::running);
  // A bad edit is a warning in the running engine, not a refusal; the last
  // good budgets (2 at once) stay: one more runs beside the holder.
  std::ofstream(file) << "admission:\n  max_running: lots\n";
  auto third = c.train(helper_job({"print", "in\n"}, "third"));
  CHECK(c.wait_for_job_status(third, {job_status::complete}, 30s).status == job_status::complete);
  // A process that opens the store now is refused, naming the file and the field.
  auto other = tjob::test::run({tjob::test::tjob_bin(), "list"}, env());
  CHECK(other.exit_code != 0);
  CHECK(other.err.find("admission.max_running lots") != std::string::npos);
  g.release();
  CHECK(c.wait_for_job_status(holder, {job_status::complete}, 30s).status == job_status::complete);
}

TEST_CASE_FIXTURE(fixture, "a crashed owner frees the queue: its jobs end lost and the next job starts") {
  gate g;
  // Another process owns a running job that holds the only slot.
  tjob::test::background owner({tjob::test::submit_bin(), home(), "held", "0", "1", "1", "0", "--",
                                helper_bin(), "read-fifo", g.path()});
  REQUIRE(owner.wait_for_stdout("submitted"));
  trainer_client c(slots(config(), 1));
  wait_started(c, "held-0");
  auto next = c.train(helper_job({"print", "next ran\n"}, "next"));
  CHECK(c.get_job(next).reason == "Queued");
  owner.signal(SIGKILL);
  owner.wait();
  // Nobody writes the store when the owner dies; this engine's admitter
  // finds it gone, records its job lost, and lets its own job in.
  auto job = c.wait_for_job_status(next, {job_status::complete}, 60s);
  CHECK(c.get_job("held-0").reason == "lost");
  CHECK(c.get_job_logs(next).read_all().find("next ran\n") != std::string::npos);
  CHECK(c.get_queue().empty());
}

TEST_CASE_FIXTURE(fixture, "a queued job whose owner crashed is Failed lost, never Queued forever") {
  gate g;
  tjob::test::background owner(
      {tjob::test::submit_bin(), home(), "q", "0", "2", "1", "0", "--", helper_bin(), "read-fifo", g.path()});
  REQUIRE(owner.wait_for_stdout("submitted"));
  owner.signal(SIGKILL);
  owner.wait();
  trainer_client c(slots(config(), 1));
  for (auto name : {"q-0", "q-1"}) {
    auto job = c.get_job(name);
    CHECK(job.status == job_status::failed);
    CHECK(job.reason == "lost");
  }
  CHECK(c.get_queue().empty());
  c.wait_for_job_status(c.train(helper_job({"print", "x"})), {job_status::complete}, 30s);
}

TEST_CASE_FIXTURE(fixture, "a queued job cancelled by another process ends cancelled and never starts") {
  trainer_client c(slots(config(), 1));
  gate g;
  c.train(helper_job({"read-fifo", g.path()}, "holder"));
  auto waiting = c.train(helper_job({"print", "never\n"}, "waiting"));
  auto r = tjob::test::run({tjob::test::tjob_bin(), "cancel", waiting}, env());
  CHECK(r.exit_code == 0);
  auto job = c.wait_for_job_status(waiting, {job_status::failed}, 30s);
  CHECK(job.reason == "cancelled");
  CHECK(job.steps[0].pid == 0);
  CHECK(c.get_job_logs(waiting).read_all().find("never") == std::string::npos);
  g.release();
}

TEST_CASE_FIXTURE(fixture,
                  "an active deadline stops the job and its process group: Failed, DeadlineExceeded") {
  trainer_client c(config(300ms));
  auto pidfile = dir.path() / "pids";
  auto r = helper_job({"ignore-term", pidfile.string()}, "slow");
  r.active_deadline = 1s;
  auto name = c.train(r);
  auto reader = c.get_job_logs(name, {.follow = true});
  REQUIRE(reader.next() == std::optional<std::string>("ready\n"));
  pid_t child = 0, grandchild = 0;
  std::ifstream(pidfile) >> child >> grandchild;
  REQUIRE(grandchild > 0);
  auto job = c.wait_for_job_status(name, {job_status::failed}, 30s);
  CHECK(job.reason == "DeadlineExceeded");
  CHECK(job.steps[0].reason == "DeadlineExceeded");
  REQUIRE(job.start_time);
  REQUIRE(job.end_time);
  CHECK(*job.end_time - *job.start_time >= 1s);
  CHECK(tjob::test::wait_gone(child, 10s));
  CHECK(tjob::test::wait_gone(grandchild, 10s));  // SIGKILL reached the whole group
  bool said = false;
  for (const auto& e : c.get_job_events(name))
    said =
        said || (e.reason == "CancelRequested" && e.message.find("the active deadline of 1 s passed") == 0);
  CHECK(said);
  CHECK(c.get_job_logs(name).read_all() == "ready\n");  // a command's log is its own bytes: the event says it

  auto quick = helper_job({"print", "in time\n"}, "quick");
  quick.active_deadline = 60s;
  CHECK(c.wait_for_job_status(c.train(quick), {job_status::complete}, 30s).reason.empty());
  auto bad = helper_job({"print", "x"}, "bad");
  bad.active_deadline = -5s;
  CHECK(message_of([&] { c.train(bad); }).find("active_deadline=-5s is out of range") != std::string::npos);
}

TEST_CASE_FIXTURE(fixture, "a job with a dependency and a begin time waits for both, whichever comes last") {
  trainer_client c(config());
  gate g;
  c.train(helper_job({"read-fifo", g.path(), "print", "a\n"}, "a"));
  auto b = helper_job({"print", "b\n"}, "b");
  b.after_ok = {"a"};
  const auto begin = std::chrono::floor<std::chrono::milliseconds>(tjob::clock::now()) + 1500ms;
  b.begin = begin;
  c.train(b);
  CHECK(c.get_job("b").reason == "Waiting");
  CHECK(c.get_job_events("b")[1].message ==
        "waiting for after_ok a, and its begin time " + format_time(begin));
  g.release();  // its dependency ends long before its time
  c.wait_for_job_status("a", {job_status::complete}, 30s);
  auto done = c.wait_for_job_status("b", {job_status::complete}, 30s);
  REQUIRE(done.start_time);
  CHECK(*done.start_time >= begin);
  bool said = false;
  for (const auto& e : c.get_job_events("b"))
    said |= e.message == "its dependencies are met and its begin time has come, and it fits";
  CHECK(said);
}

TEST_CASE_FIXTURE(fixture,
                  "a dependency chain runs in order, each job Waiting until the one before has ended") {
  trainer_client c(config());
  gate g;
  auto order = dir.path() / "order";
  c.train(helper_job({"read-fifo", g.path(), "append", order.string(), "a"}, "a"));
  auto b = helper_job({"append", order.string(), "b"}, "b");
  b.after_ok = {"a"};
  c.train(b);
  auto cj = helper_job({"append", order.string(), "c"}, "c");
  cj.after_ok = {"b"};
  cj.after_any = {"a"};
  c.train(cj);
  for (auto name : {"b", "c"}) {
    auto job = c.get_job(name);
    CHECK(job.status == job_status::created);
    CHECK(job.reason == "Waiting");
  }
  CHECK(c.get_job_events("c")[1].message == "waiting for after_ok b, after_any a");
  CHECK(c.get_queue().empty());  // waiting for dependencies is not waiting in the queue
  g.release();
  c.wait_for_job_status("c", {job_status::complete}, 60s);
  CHECK(lines_of(order) == std::vector<std::string>{"a", "b", "c"});
  CHECK(reasons_of(c, "b") ==
        std::vector<std::string>{"Created", "Waiting", "Admitted", "Started", "Exited"});
}

TEST_CASE_FIXTURE(fixture,
                  "a broken chain fails its dependents with DependencyNeverSatisfied, naming the job") {
  trainer_client c(config());
  gate g;
  c.train(helper_job({"read-fifo", g.path(), "exit", "3"}, "first"));
  auto second = helper_job({"print", "never\n"}, "second");
  second.after_ok = {"first"};
  c.train(second);
  auto third = helper_job({"print", "never\n"}, "third");
  third.after_ok = {"second"};
  c.train(third);
  auto cleanup = helper_job({"print", "cleaning up\n"}, "cleanup");
  cleanup.after_not_ok = {"first"};
  c.train(cleanup);
  g.release();
  auto job = c.wait_for_job_status("third", {job_status::failed}, 60s);
  CHECK(job.reason == "DependencyNeverSatisfied");
  CHECK(job.steps[0].pid == 0);  // it never ran
  job = c.get_job("second");
  CHECK(job.reason == "DependencyNeverSatisfied");
  auto events = c.get_job_events("second");
  CHECK(events.back().message ==
        "dependency never satisfied: job first ended Failed; after_ok needs it Complete");
  CHECK(c.get_job_events("third").back().message.find("job second ended Failed") != std::string::npos);
  CHECK(c.wait_for_job_status("cleanup", {job_status::complete}, 60s).reason.empty());
  CHECK(c.get_job_logs("second").read_all().empty());
}

TEST_CASE_FIXTURE(fixture,
                  "dependencies are checked at submit: unknown names, the job itself, and ended jobs") {
  trainer_client c(config());
  auto r = helper_job({"print", "x"}, "lonely");
  r.after_ok = {"ghost"};
  auto msg = message_of([&] { c.train(r); });
  CHECK(msg.find("TrainJob 'lonely': after_ok 'ghost': no such job in") != std::string::npos);
  CHECK(tjob::test::code_of([&] { c.get_job("lonely"); }) == errc::job_not_found);
  r.after_ok = {};
  r.after_any = {"lonely"};
  CHECK(message_of([&] { c.train(r); }).find("after_any names the job itself") != std::string::npos);
  // A dependency that has already ended decides at once.
  c.wait_for_job_status(c.train(helper_job({"exit", "0"}, "done")), {job_status::complete}, 30s);
  auto ok = helper_job({"print", "after done\n"}, "ok");
  ok.after_ok = {"done"};
  CHECK(c.wait_for_job_status(c.train(ok), {job_status::complete}, 30s).reason.empty());
  auto not_ok = helper_job({"print", "x"}, "not-ok");
  not_ok.after_not_ok = {"done"};
  CHECK(c.wait_for_job_status(c.train(not_ok), {job_status::failed}, 30s).reason ==
        "DependencyNeverSatisfied");
}

TEST_CASE_FIXTURE(
    fixture, "a dependency deleted before it ends fails its dependents, and a dependent can be cancelled") {
  trainer_client c(config(300ms));
  gate g;
  c.train(helper_job({"read-fifo", g.path()}, "doomed"));
  auto waits = helper_job({"print", "x"}, "waits");
  waits.after_any = {"doomed"};
  c.train(waits);
  auto other = helper_job({"print", "x"}, "other");
  other.after_ok = {"waits"};
  c.train(other);
  c.cancel_job("other");
  CHECK(c.get_job("other").reason == "cancelled");
  c.delete_job("doomed");
  auto job = c.wait_for_job_status("waits", {job_status::failed}, 30s);
  // after_any is met by any end, but a job deleted before it ended never ended.
  CHECK(job.reason == "DependencyNeverSatisfied");
  CHECK(c.get_job_events("waits").back().message.find("job doomed was deleted before it ended (after_any)") !=
        std::string::npos);
}

TEST_CASE_FIXTURE(fixture,
                  "a dependency whose delete was asked for reads as deleted, though its cancel ended it") {
  // The window between a delete's cancel ending the job and its rows going,
  // held open: the DeleteRequested event is written as delete_job writes it,
  // the job is cancelled, and its rows stay. An after_any dependent must not
  // take that end for the job's own.
  trainer_client c(config(300ms));
  gate g;
  c.train(helper_job({"read-fifo", g.path()}, "doomed"));
  {
    detail::store db(std::filesystem::path(home()) / "tjob.db", std::chrono::seconds(10));
    db.begin();
    db.append_event("doomed", "", 1, detail::log_event::delete_requested, "delete requested by the test");
    db.commit();
  }
  c.cancel_job("doomed");
  CHECK(c.get_job("doomed").status == job_status::failed);
  auto waits = helper_job({"print", "ran\n"}, "waits");
  waits.after_any = {"doomed"};
  auto job = c.wait_for_job_status(c.train(waits), {job_status::failed}, 30s);
  CHECK(job.reason == "DependencyNeverSatisfied");
  CHECK(c.get_job_events("waits").back().message.find("job doomed was deleted before it ended (after_any)") !=
        std::string::npos);
  CHECK(c.get_job_logs("waits").read_all().empty());
}

TEST_CASE_FIXTURE(fixture,
                  "an array of 100 jobs runs with at most 8 at once, and its limit holds up no other job") {
  auto cfg = config();
  cfg.admission.cpus = 0;
  trainer_client c(cfg);
  auto counter = dir.path() / "counter";
  for (int i = 0; i < 100; ++i) {
    auto r = helper_job({"enter", counter.string(), "sleep", "20", "leave", counter.string()},
                        "sweep-" + std::to_string(i), {{"TJOB_ARRAY_INDEX", std::to_string(i)}});
    r.array = "sweep";
    r.array_limit = 8;
    c.train(r);
  }
  // Another job behind 92 waiting members is not held up by the array's own limit.
  auto other = c.train(helper_job({"print", "other\n"}, "other"));
  c.wait_for_job_status(other, {job_status::complete}, 60s);
  for (int i = 0; i < 100; ++i)
    CHECK(c.wait_for_job_status("sweep-" + std::to_string(i), {job_status::complete}, 120s).array == "sweep");
  std::istringstream in(tjob::test::read_file(counter));
  int now = -1, most = -1;
  in >> now >> most;
  CHECK(now == 0);
  CHECK(most <= 8);
  CHECK(most >= 2);
  CHECK(c.get_job("other").array.empty());
}

// --- retries ---------------------------------------------------------------

namespace {

// The realtime start of each attempt, as the helper's fail-until recorded it.
std::vector<std::chrono::nanoseconds> attempt_starts(const std::filesystem::path& counter) {
  std::vector<std::chrono::nanoseconds> out;
  for (const auto& l : lines_of(counter)) {
    std::istringstream in(l);
    long attempt = 0;
    long long ns = 0;
    in >> attempt >> ns;
    out.emplace_back(ns);
  }
  return out;
}

train_request flaky(const std::filesystem::path& counter, int passes_at, int code, std::string name) {
  return helper_job(
      {"fail-until", counter.string(), std::to_string(passes_at), std::to_string(code), "print", "passed\n"},
      std::move(name));
}

}  // namespace

TEST_CASE_FIXTURE(fixture,
                  "a job that fails twice and then passes ends Complete after 3 attempts, each backoff as "
                  "long as configured at least") {
  trainer_client c(config());
  auto counter = dir.path() / "attempts";
  auto r = flaky(counter, 3, 75, "flaky");
  r.retry.max_restarts = 4;
  r.retry.backoff = 300ms;
  r.retry.backoff_factor = 2;
  r.retry.max_backoff = 10s;
  auto name = c.train(r);
  // A follower opened now reads every attempt, one after another, to the end.
  auto follower = c.get_job_logs(name, {.follow = true});
  auto job = c.wait_for_job_status(name, {job_status::complete}, 60s);
  CHECK(follower.read_all() == "attempt 1\nattempt 2\nattempt 3\npassed\n");
  REQUIRE(job.steps.size() == 1);
  CHECK(job.steps[0].attempt == 3);
  CHECK(job.steps[0].exit_code == 0);
  CHECK(job.reason.empty());
  auto starts = attempt_starts(counter);
  REQUIRE(starts.size() == 3);
  CHECK(starts[1] - starts[0] >= 300ms);  // the first backoff, then twice it
  CHECK(starts[2] - starts[1] >= 600ms);
  CHECK(reasons_of(c, name) == std::vector<std::string>{"Created", "Started", "Restarting", "Started",
                                                        "Restarting", "Started", "Exited"});
  auto events = c.get_job_events(name);
  CHECK(events[0].message.find("(restarts: 4 restarts, backoff 0.3 s x2 up to 10 s)") != std::string::npos);
  CHECK(events[2].message.find("attempt 1 of 5 failed (exit code 75): process ") == 0);
  CHECK(events[2].message.find("attempt 2 starts in 0.3 s") != std::string::npos);
  CHECK(events[4].message.find("attempt 3 starts in 0.6 s") != std::string::npos);
  // Each attempt's log stays readable on its own.
  CHECK(c.get_job_logs(name, {.attempt = 1}).read_all() == "attempt 1\n");
  CHECK(c.get_job_logs(name, {.attempt = 2}).read_all() == "attempt 2\n");
  CHECK(c.get_job_logs(name, {.attempt = 3}).read_all() == "attempt 3\npassed\n");
  CHECK(c.get_job_logs(name, {.tail = 1, .attempt = 2}).read_all() == "attempt 2\n");
  CHECK(c.get_job_logs(name, {.tail = 1}).read_all() == "passed\n");
  CHECK(message_of([&] { c.get_job_logs(name, {.attempt = 4}).read_all(); }) ==
        "TrainJob 'flaky' step 'node-0' has no attempt 4; it has had 3; give 1 to 3");
  CHECK(tjob::test::code_of([&] { c.get_job_logs(name, {.attempt = 0}); }) == errc::invalid_argument);
}

TEST_CASE_FIXTURE(
    fixture, "every attempt sees the job's checkpoint directory and its restart count, and resumes from it") {
  // Issue 37, the checkpoint contract: TJOB_CHECKPOINT_DIR persists across
  // attempts; TJOB_RESTART_COUNT is 0, then 1 (Slurm's SLURM_RESTART_COUNT).
  trainer_client c(config());
  train_request r;
  r.name = "resumes";
  command_trainer t;
  t.command = {
      "sh", "-c",
      "d=\"$TJOB_CHECKPOINT_DIR\"; n=\"$TJOB_RESTART_COUNT\"\n"
      "if [ -f \"$d/epoch\" ]; then echo \"restart $n resumes at epoch $(cat \"$d/epoch\")\"; exit 0; fi\n"
      "echo 3 > \"$d/epoch\"; echo \"restart $n saved epoch 3\"; exit 5\n"};
  r.job_trainer = t;
  r.retry.max_restarts = 1;
  r.retry.backoff = 0ms;
  auto job = c.wait_for_job_status(c.train(r), {job_status::complete, job_status::failed}, 60s);
  auto log = c.get_job_logs("resumes").read_all();
  CAPTURE(log);
  CHECK(job.status == job_status::complete);
  CHECK(log == "restart 0 saved epoch 3\nrestart 1 resumes at epoch 3\n");
  auto checkpoints = std::filesystem::path(c.home()) / "jobs" / "resumes" / "checkpoints";
  CHECK(std::filesystem::exists(checkpoints / "epoch"));
  c.delete_job("resumes");
  CHECK_FALSE(std::filesystem::exists(checkpoints));  // the job's own: removed with it
}

TEST_CASE_FIXTURE(fixture, "an exit code that is never retried is not, and a job out of restarts fails") {
  trainer_client c(config());
  auto once = dir.path() / "once";
  auto r = flaky(once, 3, 3, "never");
  r.retry.max_restarts = 5;
  r.retry.backoff = 0ms;
  r.retry.never_retry = {3};
  auto job = c.wait_for_job_status(c.train(r), {job_status::failed}, 30s);
  CHECK(job.steps[0].attempt == 1);
  CHECK(job.steps[0].exit_code == 3);
  CHECK(job.reason == "exit code 3");
  CHECK(lines_of(once).size() == 1);
  CHECK(c.get_job_events("never").back().message.find("not restarted: exit code 3 is never retried") !=
        std::string::npos);

  auto twice = dir.path() / "twice";
  auto out = flaky(twice, 10, 4, "out-of-restarts");
  out.retry.max_restarts = 1;
  out.retry.backoff = 0ms;
  job = c.wait_for_job_status(c.train(out), {job_status::failed}, 30s);
  CHECK(job.steps[0].attempt == 2);
  CHECK(job.steps[0].exit_code == 4);
  CHECK(lines_of(twice).size() == 2);
  CHECK(c.get_job_events("out-of-restarts").back().message.find("no restarts left (1 of 1 used)") !=
        std::string::npos);

  auto bad = flaky(twice, 1, 1, "bad");
  bad.retry.max_restarts = 2;
  bad.retry.backoff_factor = 0;
  CHECK(message_of([&] { c.train(bad); }) ==
        "TrainJob 'bad': backoff_factor=0 is out of range; give 1 (a constant backoff) to 100");
}

TEST_CASE_FIXTURE(fixture, "a cancel during the backoff stops the retry loop, from this process or another") {
  trainer_client c(config());
  for (bool foreign : {false, true}) {
    CAPTURE(foreign);
    const std::string name = foreign ? "cancelled-elsewhere" : "cancelled-here";
    auto counter = dir.path() / name;
    auto r = flaky(counter, 10, 1, name);
    r.retry.max_restarts = 3;
    r.retry.backoff = 1h;  // only a cancel ends this wait
    r.retry.max_backoff = 1h;
    c.train(r);
    auto job = c.get_job(name);
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (job.reason != "Restarting" && std::chrono::steady_clock::now() < deadline)
      job = c.wait_for_job_change(name, job, 30s);
    REQUIRE(job.reason == "Restarting");
    CHECK(job.status == job_status::created);
    CHECK(job.steps[0].attempt == 2);
    if (foreign) {
      auto cancelled = tjob::test::run({tjob::test::tjob_bin(), "cancel", name}, env());
      CHECK(cancelled.exit_code == 0);
    } else {
      c.cancel_job(name);
    }
    job = c.wait_for_job_status(name, {job_status::failed}, 30s);
    CHECK(job.reason == "cancelled");
    CHECK(job.steps[0].reason == "cancelled");
    CHECK(c.get_job_events(name).back().message == "cancelled while waiting to restart");
    CHECK(lines_of(counter).size() == 1);  // no second attempt ran
  }
}
