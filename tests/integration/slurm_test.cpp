// The slurm backend against a real Slurm: the slurm_peer fixture's cluster
// (one node; a job's nodes are tasks packed on it), and for the case that
// restarts slurmctld a private cluster of its own. What the conformance
// suite does not cover: nodes that fail, Slurm's pending reasons and
// dependencies, cancels from outside and of whole process trees, a tjob
// started later, a restarted controller, deadlines, array throttles, the
// comment squeue shows, and jobs Slurm forgot.
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>

#include <doctest/doctest.h>

#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <fstream>
#include <sstream>

using namespace tjob;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using tjob::test::code_of;
using tjob::test::message_of;

namespace {

engine_config slurm_config(const tjob::test::home_fixture& fx, const std::string& conf,
                           std::chrono::milliseconds grace = 3s) {
  auto c = fx.config(grace);
  c.backend = "slurm";
  c.backend_config = {{"slurm_conf", conf}, {"pack_nodes", true}};
  return c;
}

train_request shell_job(std::string script, std::string name, int nodes = 1) {
  train_request r;
  r.name = std::move(name);
  r.num_nodes = nodes;
  command_trainer t;
  t.command = {"sh", "-c", std::move(script), "job"};
  r.job_trainer = std::move(t);
  return r;
}

// Waits (on the job's changes, never by sleeping) until `holds` of the job.
train_job wait_until(trainer_client& c, const std::string& name, const std::function<bool(const train_job&)>& holds,
                     std::chrono::seconds limit = 120s) {
  auto j = c.get_job(name);
  auto until = std::chrono::steady_clock::now() + limit;
  while (!holds(j) && std::chrono::steady_clock::now() < until) j = c.wait_for_job_change(name, j, limit);
  return j;
}

// A private cluster of one case (tests/support/slurm_peer DIR), stopped by
// PID when the case ends, however it ends.
struct stopped_at_end {
  std::string dir;
  ~stopped_at_end() {
    tjob::test::run({tjob::test::source_dir() + "/tests/support/slurm_peer", "stop", dir}, {}, 120s);
  }
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("slurm: a node that fails names itself, and the job's other nodes are stopped") {
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  auto name = c.train(shell_job("if [ \"$SLURM_PROCID\" = 1 ]; then echo node one breaks; exit 5; fi; exec sleep 600",
                                "one-fails", 2));
  auto why = message_of([&] { c.wait_for_job_status(name, {job_status::complete}, 120s); });
  CAPTURE(why);
  CHECK(why.find("node-1") != std::string::npos);
  CHECK(why.find("node one breaks") != std::string::npos);
  auto job = c.get_job(name);
  CHECK(job.status == job_status::failed);
  CHECK(job.reason == "exit code 5");
  REQUIRE(job.steps.size() == 2);
  CHECK(job.steps[1].exit_code == 5);
  CHECK(job.steps[0].status == job_status::failed);  // stopped by the step's end, not left running
  CHECK(job.steps[0].reason != "exit code 5");
  c.delete_job(name);
}

TEST_CASE("slurm: a pending job shows Slurm's reason, and dependencies go by Slurm's ids") {
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  tjob::test::gate g1, g2;
  auto first = c.train(tjob::test::helper_job({"read-fifo", g1.path(), "exit", "0"}, "first"));
  auto doomed = c.train(tjob::test::helper_job({"read-fifo", g2.path(), "exit", "4"}, "doomed"));
  auto after = shell_job("echo after", "after");
  after.after_ok = {first};
  c.train(after);
  auto never = shell_job("echo never", "never");
  never.after_ok = {doomed};
  c.train(never);
  auto waiting = wait_until(c, "after", [](const train_job& j) { return j.reason == "Dependency"; });
  CHECK(waiting.status == job_status::created);
  CHECK(waiting.reason == "Dependency");
  auto queued = c.list_jobs();
  CHECK(std::any_of(queued.begin(), queued.end(),
                    [](const train_job& j) { return j.name == "never" && j.status == job_status::created; }));
  g1.release();
  g2.release();
  CHECK(c.wait_for_job_status("after", {job_status::complete}, 120s).status == job_status::complete);
  auto dead = c.wait_for_job_status("never", {job_status::failed}, 120s);
  CHECK(dead.reason == "DependencyNeverSatisfied");
  // on a job that has ended already, tjob decides: Slurm may have forgotten it
  auto late = shell_job("echo late", "late");
  late.after_ok = {doomed};
  c.train(late);
  CHECK(c.wait_for_job_status("late", {job_status::failed}, 60s).reason == "DependencyNeverSatisfied");
  auto unknown = shell_job("true", "orphan");
  unknown.after_any = {"no-such-job"};
  CHECK(code_of([&] { c.train(unknown); }) == errc::invalid_argument);
  CHECK(message_of([&] { c.train(unknown); }).find("'no-such-job'") != std::string::npos);
}

TEST_CASE("slurm: a begin time is sbatch --begin: pending, reason BeginTime, and it starts no earlier") {
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  auto later = shell_job("echo began", "later");
  const auto begin = std::chrono::floor<std::chrono::seconds>(tjob::clock::now()) + 4s;
  later.begin = begin;
  c.train(later);
  auto pending = wait_until(c, "later", [](const train_job& j) { return j.reason == "BeginTime"; });
  CHECK(pending.status == job_status::created);
  CHECK(pending.reason == "BeginTime");
  auto done = c.wait_for_job_status("later", {job_status::complete}, 120s);
  REQUIRE(done.start_time);
  CHECK(*done.start_time >= begin);
  CHECK(c.get_job_logs("later").read_all() == "began\n");
  c.delete_job("later");
}

TEST_CASE("slurm: cancel ends the job's whole process tree, and scancel from outside is told apart") {
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  tjob::test::temp_dir d;
  auto pidfile = d.path() / "child";
  auto name = c.train(shell_job("sleep 600 & echo $! > " + pidfile.string() + "; wait", "tree"));
  c.wait_for_job_status(name, {job_status::running}, 120s);
  REQUIRE(tjob::test::wait_for_file_change(d.path(), [&] { return !read_file(pidfile).empty(); }, 60s));
  pid_t child = std::stoi(read_file(pidfile));
  c.cancel_job(name);
  auto job = c.get_job(name);
  CHECK(job.status == job_status::failed);
  CHECK(job.reason == "cancelled");
  CHECK(tjob::test::wait_gone(child, 60s));  // the background child too, not only the shell

  auto outside = c.train(shell_job("exec sleep 600", "outside"));
  c.wait_for_job_status(outside, {job_status::running}, 120s);
  auto id = read_file(fs::path(fx.home()) / "slurm" / outside / "slurm-id");
  id.erase(id.find_last_not_of("\n") + 1);
  auto scancel = tjob::test::run({"scancel", id}, {{"SLURM_CONF", *conf}});
  REQUIRE_MESSAGE(scancel.exit_code == 0, scancel.err);
  auto ended = c.wait_for_job_status(outside, {job_status::failed}, 120s);
  CHECK(ended.reason.find("cancelled outside tjob") == 0);
  auto events = c.get_job_events(outside);
  CHECK(std::any_of(events.begin(), events.end(), [](const event& e) { return e.reason == "Cancelled"; }));
}

TEST_CASE("slurm: a cancel with checkpoint warns the job first, which saves and ends, a cancel's end") {
  // Issue 37: `tjob cancel --checkpoint` is scancel --signal with the job's own warning signal.
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  auto r = shell_job(
      "trap 'echo \"saving on $TJOB_STOP_SIGNAL\"; exit 0' USR1; echo ready; while :; do sleep 1 & wait $!; "
      "done",
      "slurm-saver");
  r.active_deadline = 600s;
  r.warning = stop_warning{10, 120s};
  auto name = c.train(r);
  c.wait_for_job_status(name, {job_status::running}, 120s);
  const auto log = fs::path(fx.home()) / "slurm" / name / "node-0.log";
  REQUIRE(tjob::test::wait_for_file_change(
      log.parent_path(), [&] { return read_file(log).find("ready\n") != std::string::npos; }, 60s));
  cancel_options checkpoint;
  checkpoint.checkpoint = true;
  c.cancel_job(name, checkpoint);
  auto job = c.get_job(name);
  CAPTURE(job.reason);
  CHECK(job.status == job_status::failed);
  CHECK(job.reason == "cancelled");
  CHECK(job.steps[0].exit_code == 0);  // it saved and ended by itself, well before the 120 s
  CHECK(c.get_job_logs(name).read_all().ends_with("saving on USR1\n"));

  auto plain = c.train(shell_job("exec sleep 600", "slurm-plain"));
  c.wait_for_job_status(plain, {job_status::running}, 120s);
  try {
    c.cancel_job(plain, checkpoint);
    FAIL("a job without a warning signal was cancelled with checkpoint");
  } catch (const error& e) {
    CHECK(e.code() == errc::invalid_argument);
    CHECK(std::string(e.what()).find("submitted without a warning signal") != std::string::npos);
  }
  CHECK(c.get_job(plain).status == job_status::running);
  c.cancel_job(plain);
}

TEST_CASE("slurm: a tjob started later follows the running job, through a slurmctld restart") {
  if (!tjob::test::slurm_conf()) return;
  // A cluster of its own: the restart must not touch the other cases' jobs.
  tjob::test::temp_dir cluster;
  const auto peer = tjob::test::source_dir() + "/tests/support/slurm_peer";
  auto dir = (cluster.path() / "slurm").string();
  auto up = tjob::test::run(std::vector<std::string>{peer, "start", dir}, {}, 120s);
  REQUIRE_MESSAGE(up.exit_code == 0, up.err);
  stopped_at_end stop{dir};
  const auto conf = dir + "/slurm.conf";
  tjob::test::home_fixture fx;
  tjob::test::gate g;
  std::string name;
  {
    trainer_client first(slurm_config(fx, conf));
    name = first.train(tjob::test::helper_job({"print", "before\n", "read-fifo", g.path(), "print", "after\n"}, "kept"));
    first.wait_for_job_status(name, {job_status::running}, 120s);
  }  // the first tjob is gone; nothing of it runs
  auto restarted = tjob::test::run(std::vector<std::string>{peer, "restart-controller", dir}, {}, 120s);
  REQUIRE_MESSAGE(restarted.exit_code == 0, restarted.err);
  trainer_client later(slurm_config(fx, conf));
  CHECK(later.get_job(name).status == job_status::running);
  g.release();
  auto job = later.wait_for_job_status(name, {job_status::complete}, 120s);
  CHECK(job.status == job_status::complete);
  CHECK(later.get_job_logs(name).read_all() == "before\nafter\n");
}

TEST_CASE("slurm: an array's members run at most array_limit at once (Slurm's singleton slots)") {
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  std::vector<std::string> names;
  for (int i = 0; i < 3; ++i) {
    auto r = tjob::test::helper_job({"sleep", "700"}, "member-" + std::to_string(i));
    r.array = "member";
    r.array_limit = 1;
    names.push_back(c.train(r));
  }
  struct span {
    clock::time_point from, to;
  };
  std::vector<span> spans;
  for (const auto& n : names) {
    c.wait_for_job_status(n, {job_status::complete}, 180s);
    span s{};
    for (const auto& e : c.get_job_events(n)) {
      if (e.step == "node-0" && e.reason == "Started") s.from = e.time;
      if (e.step == "node-0" && e.reason == "Exited") s.to = e.time;
    }
    REQUIRE(s.to > s.from);
    spans.push_back(s);
  }
  for (std::size_t a = 0; a < spans.size(); ++a)
    for (std::size_t b = a + 1; b < spans.size(); ++b)
      CHECK_MESSAGE(!(spans[a].from < spans[b].to && spans[b].from < spans[a].to), "members ", a, " and ", b,
                    " ran at the same time");
  CHECK(c.get_job(names[0]).array == "member");
}

TEST_CASE("slurm: squeue shows the job's name, runtime and labels, and a job Slurm forgot ends lost") {
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  auto r = shell_job("true", "labelled");
  r.labels = {{"team", "vision"}};
  auto name = c.train(r);
  c.wait_for_job_status(name, {job_status::complete}, 120s);
  auto id = read_file(fs::path(fx.home()) / "slurm" / name / "slurm-id");
  id.erase(id.find_last_not_of("\n") + 1);
  auto q = tjob::test::run({"squeue", "-h", "-t", "all", "-j", id, "-o", "%j %k"}, {{"SLURM_CONF", *conf}});
  CHECK(q.out.find("labelled {\"tjob\":") == 0);
  CHECK(q.out.find("\"labels\":{\"team\":\"vision\"}") != std::string::npos);
  CHECK(q.out.find("\"runtime\":\"torch-distributed\"") != std::string::npos);
  // A job whose Slurm id the cluster no longer knows, without an end record.
  auto dir = fs::path(fx.home()) / "slurm" / name;
  std::ofstream(dir / "slurm-id") << "99999999\n";
  // submitted an hour ago: any read of the queue now would list it
  fs::last_write_time(dir / "slurm-id", fs::file_time_type::clock::now() - 1h);
  fs::remove(dir / "end");
  auto lost = c.get_job(name);
  CHECK(lost.status == job_status::failed);
  CHECK(lost.reason.find("lost: Slurm no longer knows job 99999999") == 0);
}

TEST_CASE("slurm: a job past its deadline is stopped by Slurm and Failed, DeadlineExceeded") {
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  auto r = shell_job("exec sleep 600", "late-one");
  r.active_deadline = 1s;  // Slurm's limits are whole minutes: one, enforced within its next check
  auto name = c.train(r);
  auto job = c.wait_for_job_status(name, {job_status::failed}, 300s);
  CHECK(job.reason == "DeadlineExceeded");
}

TEST_CASE("slurm: the README's commands start a cluster and train the linear example on two nodes") {
  if (!tjob::test::slurm_conf() || !tjob::test::system_python_has("torch")) return;
  std::ifstream in(tjob::test::source_dir() + "/README.md");
  std::string readme(std::istreambuf_iterator<char>(in), {});
  auto at = readme.find("\n## Slurm\n");
  REQUIRE(at != std::string::npos);
  auto from = readme.find("```sh\n", at);
  REQUIRE(from != std::string::npos);
  from += 6;
  auto script = readme.substr(from, readme.find("```", from) - from);
  // The README's words, with this build's tjob and a directory of the test's own.
  tjob::test::home_fixture fx;
  auto replace_all = [&](const std::string& what, const std::string& with) {
    int n = 0;
    for (auto i = script.find(what); i != std::string::npos; i = script.find(what, i + with.size()), ++n)
      script.replace(i, what.size(), with);
    return n;
  };
  auto cluster = (fx.dir.path() / "tjob-slurm").string();
  CHECK(replace_all("build/tjob ", tjob::test::tjob_bin() + " ") == 1);
  CHECK(replace_all("/tmp/tjob-slurm", cluster) == 5);  // with the comment
  stopped_at_end stop{cluster};
  auto r = tjob::test::run({"bash", "-euo", "pipefail", "-c", "cd \"$1\" && " + script, "readme",
                            tjob::test::source_dir()},
                           fx.env(), 600s);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("Epoch 5/5, Loss: ") != std::string::npos);
  CHECK(r.out.find("Training completed!") != std::string::npos);
  CHECK(r.err.find("Complete") != std::string::npos);
  CHECK(r.out.find(" COMPLETED\n") != std::string::npos);  // squeue's line of the job
  CHECK(!fs::exists(cluster));                              // stopped, and its directory removed
}

TEST_CASE("slurm: the nodes' progress reports reach tjob through the job's directory, while it runs") {
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  tjob::test::gate g;
  // tjob.report from the helper package tjob puts on the nodes' PYTHONPATH;
  // the job fails if a report is not taken.
  auto report = [](const std::string& args) {
    return "python3 -c 'import sys, tjob; sys.exit(0 if tjob.report(" + args + ") else 3)'";
  };
  auto name = c.train(shell_job(report("progress=40, eta=60, loss=0.5") + " && cat " + g.path() + " && " +
                                    report("progress=100, loss=0.25"),
                                "reporting"));
  auto live = wait_until(c, name, [](const train_job& j) { return j.progress_percent || is_terminal(j.status); });
  CHECK(live.status == job_status::running);  // seen while the job waits at the gate
  CHECK(live.progress_percent == 40);
  CHECK(live.estimated_remaining_seconds == 60);
  CHECK(live.metrics == std::vector<std::pair<std::string, std::string>>{{"loss", "0.5"}});
  CHECK(live.progress_updated.has_value());
  g.release();
  auto done = c.wait_for_job_status(name, {job_status::complete, job_status::failed}, 120s);
  REQUIRE_MESSAGE(done.status == job_status::complete, done.reason);
  CHECK(done.progress_percent == 100);
  CHECK(done.metrics == std::vector<std::pair<std::string, std::string>>{{"loss", "0.25"}});
  // the CLI shows it as for any backend
  auto got = tjob::test::run({tjob::test::tjob_bin(), "get", "--backend", "slurm", "--slurm-conf", *conf,
                              "--pack-nodes", name},
                             fx.env());
  CHECK_MESSAGE(got.out.find("100%") != std::string::npos, got.out, got.err);
}

TEST_CASE("slurm: a directory sent with a job is its working directory on every node, importable") {
  // Issue 40: the snapshot is copied into the job's directory in the shared
  // directory, which every node mounts at the same path.
  auto conf = tjob::test::slurm_conf();
  if (!conf || !tjob::test::system_python_has("torch")) return;
  tjob::test::home_fixture fx;
  const auto src = fx.dir.path() / "project";
  fs::create_directories(src / "pkg");
  std::ofstream(src / "pkg" / "__init__.py") << "def double(x):\n    return 2 * x\n";
  std::ofstream(src / "n.txt") << "21\n";
  trainer_client c(slurm_config(fx, *conf));
  python_trainer t;
  t.source =
      "def train():\n"
      "    import os, pkg\n"
      "    print('answer', pkg.double(int(open('n.txt').read())), flush=True)\n";
  t.function = "train";
  t.python = "/usr/bin/python3";
  t.system_site_packages = true;  // Debian's torch: two nodes meet through torchrun
  t.code_dir = src.string();
  train_request r;
  r.name = "slurm-sent-dir";
  r.runtime = "torch-distributed";
  r.num_nodes = 2;
  r.job_trainer = t;
  auto name = c.train(r);
  auto job = c.wait_for_job_status(name, {job_status::complete, job_status::failed}, 300s);
  auto log0 = c.get_job_logs(name, {.step = "node-0"}).read_all();
  auto log1 = c.get_job_logs(name, {.step = "node-1"}).read_all();
  CAPTURE(log0);
  CAPTURE(log1);
  REQUIRE(job.status == job_status::complete);
  CHECK(log0.find("answer 42\n") != std::string::npos);
  CHECK(log1.find("answer 42\n") != std::string::npos);
  // A command's program of that directory runs from the job's copy.
  std::ofstream(src / "run.sh") << "#!/bin/sh\necho ran \"$(cat n.txt)\"\n";
  fs::permissions(src / "run.sh", fs::perms(0755));
  command_trainer ct;
  ct.command = {"./run.sh"};
  ct.code_dir = src.string();
  train_request cr;
  cr.name = "slurm-sent-cmd";
  cr.job_trainer = ct;
  auto second = c.train(cr);
  c.wait_for_job_status(second, {job_status::complete}, 300s);
  CHECK(c.get_job_logs(second).read_all() == "ran 21\n");
  c.delete_job(name);
  c.delete_job(second);
}

TEST_CASE("slurm: every node of a job sees one checkpoint directory, in the shared directory") {
  // Issue 37: TJOB_CHECKPOINT_DIR, the job's own (removed with it).
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  auto name =
      c.train(shell_job("echo \"$SLURM_PROCID\" > \"$TJOB_CHECKPOINT_DIR/node-$SLURM_PROCID\"; "
                        "echo in \"$TJOB_CHECKPOINT_DIR\"",
                        "slurm-checkpoints", 2));
  auto job = c.wait_for_job_status(name, {job_status::complete, job_status::failed}, 300s);
  auto log = c.get_job_logs(name).read_all();
  CAPTURE(log);
  REQUIRE(job.status == job_status::complete);
  const auto dir = fs::path(fx.home()) / "slurm" / name / "checkpoints";
  CHECK(log == "in " + dir.string() + "\n");
  CHECK(read_file(dir / "node-0") == "0\n");
  CHECK(read_file(dir / "node-1") == "1\n");
  c.delete_job(name);
  CHECK_FALSE(fs::exists(dir));
}

TEST_CASE("slurm: a failed job restarts every node, in its allocation, and resumes from its checkpoint") {
  // Retries (issue 36): a gang restart, TJOB_RESTART_COUNT, the attempt in
  // the steps, the Restarting events and each attempt's part of the logs.
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  // node-1 fails on the first two attempts; node-0 would run for ten minutes
  // unless stopped with it.
  auto r = shell_job(
      "d=\"$TJOB_CHECKPOINT_DIR\"; n=\"$TJOB_RESTART_COUNT\"\n"
      "echo \"node $SLURM_PROCID attempt $n\"\n"
      "if [ \"$n\" -lt 2 ]; then\n"
      "  if [ \"$SLURM_PROCID\" = 1 ]; then echo \"$n\" >> \"$d/failures\"; exit 75; fi\n"
      "  exec sleep 600\n"
      "fi\n"
      "echo \"resumed after $(wc -l < \"$d/failures\") failures\"",
      "slurm-flaky", 2);
  r.retry.max_restarts = 3;
  r.retry.backoff = 200ms;
  auto name = c.train(r);
  auto job = c.wait_for_job_status(name, {job_status::complete, job_status::failed}, 300s);
  auto log1 = c.get_job_logs(name, {.step = "node-1"}).read_all();
  CAPTURE(log1);
  CAPTURE(job.reason);
  REQUIRE(job.status == job_status::complete);
  REQUIRE(job.steps.size() == 2);
  CHECK(job.steps[0].attempt == 3);
  CHECK(job.steps[1].attempt == 3);
  CHECK(log1 == "node 1 attempt 0\nnode 1 attempt 1\nnode 1 attempt 2\nresumed after 2 failures\n");
  // node-0's part ends with what Slurm wrote when it stopped the node with node-1.
  CHECK(c.get_job_logs(name, {.step = "node-0", .attempt = 2}).read_all().starts_with("node 0 attempt 1\n"));
  CHECK(c.get_job_logs(name, {.step = "node-1", .attempt = 3}).read_all() ==
        "node 1 attempt 2\nresumed after 2 failures\n");
  CHECK(c.get_job_logs(name, {.step = "node-1", .tail = 1, .attempt = 1}).read_all() == "node 1 attempt 0\n");
  CHECK(message_of([&] { c.get_job_logs(name, {.attempt = 4}).read_all(); }) ==
        "TrainJob 'slurm-flaky' step 'node-0' has no attempt 4; it has had 3; give 1 to 3");
  auto events = c.get_job_events(name);
  std::vector<std::string> restarting;
  for (const auto& e : events)
    if (e.reason == "Restarting") restarting.push_back(e.step + ": " + e.message);
  CHECK(restarting ==
        std::vector<std::string>{
            "node-0: attempt 1 of 4 failed (exit code 75 on node-1); attempt 2 starts in 0.2 s",
            "node-1: attempt 1 of 4 failed (exit code 75 on node-1); attempt 2 starts in 0.2 s",
            "node-0: attempt 2 of 4 failed (exit code 75 on node-1); attempt 3 starts in 0.4 s",
            "node-1: attempt 2 of 4 failed (exit code 75 on node-1); attempt 3 starts in 0.4 s"});
  // One Slurm job for every attempt.
  CHECK(std::count_if(events.begin(), events.end(), [](const event& e) { return e.reason == "Created"; }) ==
        1);
  c.delete_job(name);
}

TEST_CASE(
    "slurm: restarts end with the policy: out of restarts, a code never retried, a cancel in the backoff") {
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  auto out = shell_job("echo \"try $TJOB_RESTART_COUNT\"; exit 3", "slurm-out-of-restarts");
  out.retry.max_restarts = 1;
  out.retry.backoff = 0ms;
  auto never = shell_job("echo once; exit 2", "slurm-never-retried");
  never.retry.max_restarts = 5;
  never.retry.never_retry = {2};
  auto slow = shell_job("exit 4", "slurm-cancel-in-backoff");
  slow.retry.max_restarts = 2;
  slow.retry.backoff = 600s;  // the cancel comes long before
  for (const auto* r : {&out, &never, &slow}) c.train(*r);

  auto a = c.wait_for_job_status(out.name, {job_status::failed}, 300s);
  CHECK(a.reason == "exit code 3");
  CHECK(a.steps[0].attempt == 2);
  CHECK(c.get_job_logs(out.name).read_all() == "try 0\ntry 1\n");
  CHECK(c.get_job_events(out.name).back().message ==
        "exit code 3; not restarted: no restarts left (1 of 1 used)");

  auto b = c.wait_for_job_status(never.name, {job_status::failed}, 300s);
  CHECK(b.steps[0].attempt == 1);
  CHECK(c.get_job_logs(never.name).read_all() == "once\n");
  CHECK(c.get_job_events(never.name).back().message ==
        "exit code 2; not restarted: exit code 2 is never retried");

  auto waiting = wait_until(c, slow.name, [](const train_job& j) { return j.reason == "Restarting"; });
  REQUIRE(waiting.reason == "Restarting");
  CHECK(waiting.status == job_status::created);
  c.cancel_job(slow.name);
  auto cancelled = c.wait_for_job_status(slow.name, {job_status::failed}, 120s);
  CHECK(cancelled.reason == "cancelled");
  CHECK(cancelled.steps[0].attempt == 2);
}

TEST_CASE("slurm: a job that Slurm requeues (a node failed, preemption) counts the attempt and goes on") {
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  auto r =
      shell_job("echo \"attempt $TJOB_RESTART_COUNT\"; [ \"$TJOB_RESTART_COUNT\" -gt 0 ] || exec sleep 600",
                "slurm-requeued");
  r.retry.max_restarts = 1;
  auto name = c.train(r);
  REQUIRE(wait_until(c, name, [](const train_job& j) { return j.status == job_status::running; }).status ==
          job_status::running);
  const auto id = read_file(fs::path(fx.home()) / "slurm" / name / "slurm-id");
  const std::map<std::string, std::string> env{{"SLURM_CONF", *conf}};
  auto run = [&](const std::vector<std::string>& argv) { return tjob::test::run(argv, env, 60s); };
  auto requeued = run({"scontrol", "requeue", id.substr(0, id.find('\n'))});
  REQUIRE_MESSAGE(requeued.exit_code == 0, requeued.err);
  // Slurm holds a requeued job about two minutes (its BeginTime), the time
  // its nodes keep the last run's credential revoked. The test moves its
  // start to 2 s on (a start within the second of the revocation is refused
  // by slurmd, "Job credential revoked") whenever Slurm shows it later than
  // that: an update made while the requeue still completes is overwritten.
  auto pending = wait_until(c, name, [](const train_job& j) { return j.reason == "Restarting"; });
  CHECK(pending.status == job_status::created);
  const auto jobid = id.substr(0, id.find('\n'));
  const std::map<std::string, std::string> seconds{{"SLURM_CONF", *conf}, {"SLURM_TIME_FORMAT", "%s"}};
  for (int i = 0; i < 120; ++i) {
    auto q = tjob::test::run({"squeue", "-h", "-j", jobid, "-o", "%T %S"}, seconds, 60s);
    std::istringstream row(q.out);
    std::string state;
    long long begin = 0;
    row >> state >> begin;
    if (state != "PENDING" && state != "COMPLETING") break;
    const auto now =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    if (state == "PENDING" && begin > now + 5)
      REQUIRE(run({"scontrol", "update", "jobid=" + jobid, "StartTime=now+2"}).exit_code == 0);
    c.wait_for_job_change(name, pending, 1s);  // bounded; the loop ends on Slurm's answer
  }
  auto job = c.wait_for_job_status(name, {job_status::complete, job_status::failed}, 300s);
  CAPTURE(job.reason);
  CHECK(job.status == job_status::complete);
  CHECK(job.steps[0].attempt == 2);
  auto events = c.get_job_events(name);
  CHECK(std::any_of(events.begin(), events.end(), [](const event& e) {
    return e.reason == "Restarting" && e.message.find("Slurm requeued the job") != std::string::npos;
  }));
  CHECK(c.get_job_logs(name, {.attempt = 2}).read_all() == "attempt 1\n");
  c.delete_job(name);
}

TEST_CASE("slurm: a warning before the deadline is Slurm's --signal, to the job's processes") {
  // Issue 37: the job saves and ends by itself, Complete, before its time limit.
  auto conf = tjob::test::slurm_conf();
  if (!conf) return;
  tjob::test::home_fixture fx;
  trainer_client c(slurm_config(fx, *conf));
  auto r = shell_job(
      "trap 'echo \"warned by $TJOB_STOP_SIGNAL\"; exit 0' USR1; while :; do sleep 1 & wait $!; done",
      "slurm-warned");
  r.active_deadline = 60s;
  r.warning = stop_warning{10, 50s};
  auto name = c.train(r);
  auto job = c.wait_for_job_status(name, {job_status::complete, job_status::failed}, 180s);
  CAPTURE(job.reason);
  CHECK(job.status == job_status::complete);
  // (the shell may first say how its sleep ended: the signal reaches every process)
  CHECK(c.get_job_logs(name).read_all().ends_with("warned by USR1\n"));
  c.delete_job(name);
}
