// The slurm backend's pure parts: squeue's lines, tjob's comment, sbatch's
// argument vector, and the fold of a job's files and its queue row into a
// train_job and its events.
#include "adapters/slurm/slurm_job.hpp"
#include "adapters/slurm/slurm_submit.hpp"
#include "tests/support/test_support.hpp"

#include <doctest/doctest.h>

#include <boost/json/serialize.hpp>

#include <algorithm>

using namespace tjob;
using namespace tjob::slurm;
using namespace std::chrono_literals;

namespace {

clock::time_point at(int seconds) { return clock::time_point(std::chrono::seconds(1'800'000'000 + seconds)); }

job_files files_of(int nodes, std::string id = "42") {
  job_files f;
  f.record.name = "job";
  f.record.runtime = "torch-distributed";
  f.record.num_nodes = nodes;
  f.record.created = at(0);
  f.slurm_id = std::move(id);
  f.nodes.resize(static_cast<std::size_t>(nodes));
  return f;
}

queue_row row(std::string state, std::string reason = "None") {
  queue_row r;
  r.id = "42";
  r.state = std::move(state);
  r.reason = std::move(reason);
  r.submit = at(0);
  if (r.state != "PENDING") r.start = at(2);
  if (is_ended_state(r.state)) r.end = at(9);
  r.nodes = "n1";
  return r;
}

void exited(job_files& f, std::size_t node, int code, int when) {
  f.nodes[node].started = at(2);
  f.nodes[node].exit_code = code;
  f.nodes[node].exited = at(when);
}

bool has(const std::vector<std::string>& argv, const std::string& a) {
  return std::find(argv.begin(), argv.end(), a) != argv.end();
}

}  // namespace

TEST_CASE("squeue's lines are read into rows, the comment whole though it holds the separator") {
  auto rows = parse_queue(
      "17|PENDING|Dependency|N/A|N/A|1800000000||{\"tjob\":{\"dir\":\"/s\",\"name\":\"a|b\"}}\n"
      "not a row\n"
      "18|COMPLETED|None|1800000002|1800000009|1800000000|n[1-2]|(null)\n");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].id == "17");
  CHECK(rows[0].reason == "Dependency");
  CHECK(!rows[0].start);
  CHECK(rows[0].submit == at(0));
  CHECK(rows[0].comment == "{\"tjob\":{\"dir\":\"/s\",\"name\":\"a|b\"}}");
  CHECK(rows[1].start == at(2));
  CHECK(rows[1].end == at(9));
  CHECK(rows[1].nodes == "n[1-2]");
}

TEST_CASE("tjob's comment names the job for its own shared directory only") {
  job_record r;
  r.name = "train-1";
  r.runtime = "torch-distributed";
  r.labels = {{"team", "a\nb|c"}};
  auto c = comment_of(r, "/shared/tjob");
  CHECK(c.find('\n') == std::string::npos);  // one squeue line, whatever the labels hold
  CHECK(name_in_comment(c, "/shared/tjob") == "train-1");
  CHECK(!name_in_comment(c, "/other"));
  CHECK(!name_in_comment("(null)", "/shared/tjob"));
  CHECK(!name_in_comment("{\"tjob\":", "/shared/tjob"));
  auto back = record_from_json(boost::json::serialize(to_json(r)));
  REQUIRE(back);
  CHECK(back->labels == r.labels);
  CHECK(!record_from_json("{\"name\":\"x\",\"num_nodes\":0}"));
  CHECK(!record_from_json("{\"name\":"));
}

TEST_CASE("sbatch gets the job's geometry, policy and the command as arguments, never as script text") {
  slurm_config cfg;
  cfg.partition = "gpu";
  cfg.sbatch_options = {"--constraint=a100"};
  submission s;
  s.job_dir = "/shared/j";
  s.job_name = "j";
  s.comment = "{}";
  s.chdir = "/shared/j/work";
  s.num_nodes = 4;
  s.cpus_per_task = 8;
  s.memory_per_node = (1ull << 30) + 1;
  s.gpus_per_node = 2;
  s.time_limit = 61s;
  s.nice = -5;
  s.dependency = "afterok:17,afterany:18";
  s.begin_after = 90s;
  s.command = {"sh", "-c", "echo $HOME; rm -rf /", "x"};
  auto a = sbatch_argv(cfg, s);
  CHECK(a.front() == "sbatch");
  for (auto want : {"--partition=gpu", "--nodes=4", "--ntasks-per-node=1", "--cpus-per-task=8", "--mem=1025M",
                    "--gpus-per-node=2", "--time=2", "--nice=-5", "--dependency=afterok:17,afterany:18",
                    "--kill-on-invalid-dep=yes", "--constraint=a100", "--job-name=j",
                    "--chdir=/shared/j/work", "--begin=now+90"})
    CHECK_MESSAGE(has(a, want), want);
  auto script = std::find(a.begin(), a.end(), "/shared/j/job.sh");
  REQUIRE(script != a.end());
  CHECK(std::find(a.begin(), a.end(), "--constraint=a100") < script);  // options before the script
  CHECK(std::vector<std::string>(script + 1, a.end()) == s.command);    // the command as it was given
  cfg.pack_nodes = true;
  a = sbatch_argv(cfg, s);
  CHECK(has(a, "--ntasks=4"));
  CHECK(!has(a, "--nodes=4"));
  CHECK(has(a, "--mem=4097M"));  // the machine holds every packed node's memory
  CHECK(has(a, "--gpus-per-task=2"));
  CHECK(time_limit_text(1s) == "1");
  CHECK(time_limit_text(3600s) == "60");
}

TEST_CASE("the slurm backend's config is checked by member") {
  auto name_of = [](std::string_view m) { return std::string(m); };
  CHECK(config_of({{"pack_nodes", true}, {"shared_dir", "/s"}}, name_of).pack_nodes);
  CHECK(tjob::test::message_of([&] { config_of({{"shared_dir", "rel"}}, name_of); }).find("absolute") !=
        std::string::npos);
  CHECK(tjob::test::message_of([&] { config_of({{"sbatch_options", boost::json::array{"x"}}}, name_of); })
            .find("--name=value") != std::string::npos);
  CHECK(tjob::test::message_of([&] { config_of({{"partitions", "x"}}, name_of); }).find("partitions") !=
        std::string::npos);
}

TEST_CASE("a pending job is Created with Slurm's reason, a running one Running with its started nodes") {
  auto f = files_of(2);
  auto j = fold(f, row("PENDING", "Dependency"), true);
  CHECK(j.status == job_status::created);
  CHECK(j.reason == "Dependency");
  CHECK(!j.start_time);
  CHECK(fold(f, row("PENDING", "None"), true).reason == "Queued");
  f.nodes[0].started = at(2);
  j = fold(f, row("RUNNING"), true);
  CHECK(j.status == job_status::running);
  CHECK(j.start_time == at(2));
  CHECK(j.steps[0].status == job_status::running);
  CHECK(j.steps[1].status == job_status::created);
  // Slurm's whole seconds never put the start before the creation tjob saw
  f.record.created = at(2) + 300ms;
  CHECK(fold(f, row("RUNNING"), true).start_time == f.record.created);
  // squeue did not answer: the files say what they can, and nothing ends
  j = fold(f, std::nullopt, false);
  CHECK(j.status == job_status::running);
  CHECK(fold(files_of(1, ""), std::nullopt, true).reason == "Submitting");
}

TEST_CASE("an ended job is Complete, or Failed naming the node that failed first") {
  auto f = files_of(2);
  exited(f, 0, 0, 5);
  exited(f, 1, 0, 6);
  auto j = fold(f, row("COMPLETED"), true);
  CHECK(j.status == job_status::complete);
  CHECK(j.end_time == at(9));
  CHECK(j.steps[1].status == job_status::complete);

  f = files_of(2);
  exited(f, 1, 5, 4);
  exited(f, 0, 137, 5);  // killed after node-1 failed
  j = fold(f, row("FAILED", "NonZeroExitCode"), true);
  CHECK(j.status == job_status::failed);
  CHECK(j.reason == "exit code 5");
  CHECK(j.steps[1].exit_code == 5);
  CHECK(j.steps[0].reason == "killed by signal 9 (SIGKILL)");

  f = files_of(2);
  exited(f, 1, 3, 4);  // node-0 left no exit: stopped by the step's end
  j = fold(f, row("FAILED"), true);
  CHECK(j.steps[0].status == job_status::failed);
  CHECK(j.steps[0].reason == "stopped: node-1 failed");

  f = files_of(1);
  f.end_code = 1;
  f.end_what = "setup";
  j = fold(f, row("FAILED"), true);
  CHECK(j.reason.find("setup failed") == 0);

  // Slurm failed it and nothing of the job's directory was written: the
  // directory is most likely not on the nodes.
  f = files_of(2);
  j = fold(f, row("FAILED", "NonZeroExitCode"), true);
  CHECK(j.status == job_status::failed);
  CHECK(j.reason.find("before any node started (Slurm: FAILED, NonZeroExitCode)") != std::string::npos);
  CHECK(j.reason.find("--shared-dir") != std::string::npos);
}

TEST_CASE("Slurm's own ends: timeout, cancels by tjob and by others, node failure, a dependency never met") {
  auto f = files_of(1);
  f.nodes[0].started = at(2);
  CHECK(fold(f, row("TIMEOUT"), true).reason == "DeadlineExceeded");
  CHECK(fold(f, row("CANCELLED"), true).reason.find("cancelled outside tjob") == 0);
  CHECK(fold(f, row("CANCELLED", "DependencyNeverSatisfied"), true).reason == "DependencyNeverSatisfied");
  CHECK(fold(f, row("NODE_FAIL"), true).reason.find("lost") == 0);
  CHECK(fold(f, row("OUT_OF_MEMORY"), true).reason == "OOMKilled");
  f.cancel_requested = at(3);
  exited(f, 0, 143, 4);
  auto j = fold(f, row("FAILED"), true);
  CHECK(j.reason == "cancelled");
  CHECK(j.steps[0].reason == "cancelled");
  auto never = files_of(1, "");
  never.never = "job 'a' ended Failed, and this job needs it Complete";
  never.never_at = at(1);
  j = fold(never, std::nullopt, true);
  CHECK(j.status == job_status::failed);
  CHECK(j.reason == "DependencyNeverSatisfied");
  CHECK(j.end_time == at(1));
}

TEST_CASE("a job Slurm forgot ends by its end record, or as lost when it left none") {
  auto f = files_of(1);
  exited(f, 0, 0, 5);
  f.end_code = 0;
  f.end_what = "srun";
  f.ended = at(6);
  auto j = fold(f, std::nullopt, true);
  CHECK(j.status == job_status::complete);
  CHECK(j.end_time == at(6));
  f = files_of(1);
  f.nodes[0].started = at(2);
  j = fold(f, std::nullopt, true);
  CHECK(j.status == job_status::failed);
  CHECK(j.reason.find("lost: Slurm no longer knows job 42") == 0);
}

TEST_CASE("a job's events are in time order, numbered, with the end's cause") {
  auto f = files_of(2);
  exited(f, 0, 0, 5);
  exited(f, 1, 0, 6);
  f.cancel_requested = at(4);
  auto evs = events_of(f, row("CANCELLED"), true);
  std::vector<std::string> reasons;
  for (std::size_t i = 0; i < evs.size(); ++i) {
    CHECK(evs[i].seq == static_cast<std::int64_t>(i + 1));
    if (i) CHECK(evs[i].time >= evs[i - 1].time);
    reasons.push_back(evs[i].reason);
  }
  CHECK(reasons.front() == "Created");
  CHECK(evs.front().message == "submitted to Slurm as job 42");
  CHECK(has(reasons, "CancelRequested"));
  CHECK(reasons.back() == "Cancelled");
  CHECK(std::count(reasons.begin(), reasons.end(), "Exited") == 2);
}

TEST_CASE(
    "a job that may restart asks Slurm to requeue it, its restart plan is decide_retry's, and a warning is "
    "--signal") {
  slurm_config cfg;
  submission s;
  s.job_dir = "/shared/j";
  CHECK(has(sbatch_argv(cfg, s), "--no-requeue"));
  for (const auto& arg : sbatch_argv(cfg, s)) CHECK(!arg.starts_with("--begin"));  // none unless asked
  s.requeue = true;
  s.warning = stop_warning{10, 90s};
  CHECK(has(sbatch_argv(cfg, s), "--signal=10@90"));  // the steps' processes, not the batch shell
  CHECK(has(sbatch_argv(cfg, s), "--requeue"));
  CHECK(!has(sbatch_argv(cfg, s), "--no-requeue"));
  retry_policy p;
  p.max_restarts = 3;
  p.backoff = 300ms;
  p.backoff_factor = 2;
  p.max_backoff = 1s;
  p.retry_on = {75, 143};
  p.never_retry = {143};
  CHECK(restart_plan(p) == "75\n0.300\n0.600\n1.000\n");
  p.retry_on.clear();
  p.never_retry = {2};
  auto plan = restart_plan(p);
  CHECK(plan.starts_with("1 3 4 "));  // every code but 2
  CHECK(plan.find(" 137 ") != std::string::npos);
  p.never_retry.clear();
  p.retry_on = {1};
  p.max_restarts = 0;
  CHECK(restart_plan(p) == "\n");  // nothing is retried
}

TEST_CASE(
    "restarts: the batch script's lines, the job Restarting between attempts, and each attempt's events") {
  auto rs = parse_restarts("1 75 node-1 1.000 1800000005000000000\n2 - - 0 1800000010000000000\n3 75 no");
  REQUIRE(rs.size() == 2);  // the last line is still being written
  CHECK(rs[0].attempt == 1);
  CHECK(rs[0].exit_code == 75);
  CHECK(rs[0].node == "node-1");
  CHECK(rs[0].wait == 1000ms);
  CHECK(rs[0].at == at(5));
  CHECK(!rs[1].exit_code);  // Slurm requeued it
  CHECK(rs[1].node.empty());
  CHECK(parse_restarts("2 75 node-0 1 1\n").empty());  // out of order: not ours

  auto f = files_of(2);
  f.record.retry.max_restarts = 2;
  f.record.retry.backoff = 1s;
  f.restarts = {rs[0]};
  auto first_attempt = files_of(2);
  exited(first_attempt, 0, 143, 5);
  exited(first_attempt, 1, 75, 4);
  f.earlier = {first_attempt.nodes};
  // Between the attempts (the backoff, in the allocation) and before its nodes start:
  auto j = fold(f, row("RUNNING"), true);
  CHECK(j.status == job_status::created);
  CHECK(j.reason == "Restarting");
  CHECK(j.steps[0].attempt == 2);
  CHECK(j.steps[1].status == job_status::created);
  f.nodes[0].started = at(7);
  CHECK(fold(f, row("RUNNING"), true).status == job_status::running);
  // The second attempt fails too, and the policy has no restart left for it.
  f.restarts.clear();
  f.earlier.clear();
  for (const auto& r : {rs[0], rs[0]}) {
    f.restarts.push_back(r);
    f.restarts.back().attempt = static_cast<int>(f.restarts.size());
    f.earlier.push_back(f.nodes);
  }
  exited(f, 0, 0, 8);
  exited(f, 1, 75, 9);
  f.end_code = 75;
  f.end_what = "srun";
  j = fold(f, row("FAILED"), true);
  CHECK(j.status == job_status::failed);
  CHECK(j.reason == "exit code 75");
  CHECK(j.steps[1].attempt == 3);
  auto evs = events_of(f, row("FAILED"), true);
  CHECK(evs.front().message ==
        "submitted to Slurm as job 42 (restarts: 2 restarts, backoff 1 s x2 up to 60 s)");
  auto restarting =
      std::count_if(evs.begin(), evs.end(), [](const event& e) { return e.reason == "Restarting"; });
  CHECK(restarting == 4);  // both nodes, both restarts
  auto first = std::find_if(evs.begin(), evs.end(), [](const event& e) { return e.reason == "Restarting"; });
  CHECK(first->message == "attempt 1 of 3 failed (exit code 75 on node-1); attempt 2 starts in 1 s");
  CHECK(evs.back().reason == "Exited");
  CHECK(evs.back().step == "node-1");
  CHECK(evs.back().message == "exit code 75; not restarted: no restarts left (2 of 2 used)");
  // A job Slurm requeued with no restart left is lost.
  f.end_what = "requeued";
  f.end_code = 1;
  CHECK(fold(f, row("FAILED"), true).reason.starts_with("lost: Slurm requeued the job"));
}

TEST_CASE(
    "a job that ends after a cancel is the cancel's, its exit 0 too, and one that ended before is not") {
  // A cancel with checkpoint: the job saves at the warning and returns.
  auto f = files_of(2);
  f.cancel_requested = at(5);
  exited(f, 0, 0, 7);
  exited(f, 1, 0, 4);  // (ended before the cancel)
  auto j = fold(f, row("COMPLETED"), true);
  CHECK(j.status == job_status::failed);
  CHECK(j.reason == "cancelled");
  CHECK(j.steps[0].status == job_status::failed);
  CHECK(j.steps[0].reason == "cancelled");
  CHECK(j.steps[0].exit_code == 0);
  CHECK(j.steps[1].status == job_status::complete);
  // A cancel that came after the whole job ended changes nothing.
  f = files_of(1);
  exited(f, 0, 0, 4);
  f.cancel_requested = at(5);
  CHECK(fold(f, row("COMPLETED"), true).status == job_status::complete);
}

TEST_CASE("a job's record keeps its retry policy and its warning") {
  job_record r;
  r.name = "j";
  r.retry.max_restarts = 2;
  r.retry.retry_on = {75};
  r.warning = stop_warning{12, std::chrono::seconds(90)};
  auto back = record_from_json(boost::json::serialize(to_json(r)));
  REQUIRE(back);
  CHECK(back->retry == r.retry);
  REQUIRE(back->warning);
  CHECK(back->warning->signal == 12);
  CHECK(back->warning->before == std::chrono::seconds(90));
  CHECK(!record_from_json(R"({"name":"j","retry":{"max_restarts":-1}})"));
}
