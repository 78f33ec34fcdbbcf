// The kubernetes backend against the API stand-in (tests/support/kube_standin.py):
// each test starts its own server (TLS, a token, a controller that runs pods as
// local processes), so faults injected in one test touch no other.
#include "core/job_state.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>
#include <tjob/wire.hpp>

#include <doctest/doctest.h>
#include <boost/json.hpp>

#include <cstdlib>
#include <fstream>
#include <future>
#include <thread>

using namespace tjob;
using namespace std::chrono_literals;
using tjob::test::code_of;
using tjob::test::helper_job;
using tjob::test::message_of;
using tjob::test::tjob_bin;
namespace json = boost::json;

namespace {

struct kube_fixture : tjob::test::home_fixture {
  tjob::test::kube_standin server;
  kube_fixture() = default;
  explicit kube_fixture(const std::vector<std::string>& extra) : server(extra) {}
  engine_config kube_config() const {
    auto c = config();
    c.backend = "kubernetes";
    c.backend_config = server.config();
    return c;
  }
  std::vector<std::string> cli(std::vector<std::string> args) const {
    std::vector<std::string> argv{tjob_bin(), "--backend", "kubernetes", "--kubeconfig", server.kubeconfig()};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  // Requests the server saw: all, and the watch connections.
  std::pair<std::size_t, std::size_t> stats() const {
    auto v = json::parse(server.ctl("stats")).as_object();
    return {v.at("requests").as_array().size(), static_cast<std::size_t>(v.at("watches_opened").as_int64())};
  }
  // Waits (the stand-in answers when it holds, or after 30 s) until the
  // condition `cond` (a JSON object: see await_condition in kube_standin.py) holds.
  bool await_standin(const std::string& cond) const {
    return json::parse(server.ctl("await", cond)).as_object().at("ok").as_bool();
  }
  std::size_t lists_of(const std::string& plural) const {
    auto v = json::parse(server.ctl("stats")).as_object();
    std::size_t n = 0;
    for (const auto& r : v.at("requests").as_array()) {
      auto& a = r.as_array();
      auto path = std::string(a[1].as_string());
      if (a[0].as_string() == "GET" && !a[2].as_bool() && path.ends_with("/" + plural)) ++n;
    }
    return n;
  }
  std::string kubectl(const std::vector<std::string>& args, std::chrono::milliseconds deadline = 60s) const {
    std::vector<std::string> argv{"kubectl", "--kubeconfig", server.kubeconfig()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = tjob::test::run(argv, {}, deadline);
    INFO("kubectl " << args.front() << ": " << r.err);
    CHECK(r.exit_code == 0);
    return r.out;
  }
};

// kubectl is on every machine of this project (the Debian image has it; peers.md §3).
bool have_kubectl() {
  auto r = tjob::test::run({"kubectl", "version", "--client"}, {}, 60s);
  if (r.exit_code != 0) FAIL("kubectl is not installed or does not run: " << r.err);
  return true;
}

train_request sleeper(const std::string& name, const std::string& ms) {
  return helper_job({"print", "up\n", "sleep", ms, "print", "done\n"}, name);
}

}  // namespace

TEST_CASE_FIXTURE(kube_fixture,
                  "pod logs carry the kubelet's times, and since filters by them, as kubectl reads them") {
  have_kubectl();
  trainer_client c(kube_config());
  tjob::test::gate gate;
  auto name =
      c.train(helper_job({"print", "first\n", "read-fifo", gate.path(), "print", "second\n"}, "stamped"));
  auto reader = c.get_job_logs(name, {.follow = true, .timestamps = true});
  auto first = reader.next();
  REQUIRE(first);
  REQUIRE(first->size() > 31);
  auto t0 = parse_time(first->substr(0, 30));
  REQUIRE(t0);
  CHECK(first->substr(30) == " first\n");
  std::this_thread::sleep_until(*t0 + 50ms);  // the second line is written later than the first
  gate.release();
  auto second = reader.next();
  REQUIRE(second);
  CHECK_FALSE(reader.next());
  c.wait_for_job_status(name, {job_status::complete}, 60s);
  auto t1 = parse_time(second->substr(0, 30));
  REQUIRE(t1);
  CHECK(*t0 < *t1);
  CHECK(second->substr(30) == " second\n");
  CHECK(c.get_job_logs(name, {.timestamps = true}).read_all() == *first + *second);
  CHECK(c.get_job_logs(name, {.since = *t1}).read_all() == "second\n");
  CHECK(c.get_job_logs(name, {.since = *t0}).read_all() == "first\nsecond\n");
  CHECK(c.get_job_logs(name, {.tail = 1, .timestamps = true}).read_all() == *second);
  // the real kubectl reads the stand-in's pod log the same way
  auto pod = json::parse(kubectl({"get", "pods", "-o", "json"})).at("items").at(0).at("metadata").at("name");
  auto pod_name = std::string(pod.as_string());
  CHECK(kubectl({"logs", pod_name, "--timestamps"}) == *first + *second);
  // (kubectl sends sinceTime in whole seconds, and the API server passes it on so)
  auto second_start = std::chrono::floor<std::chrono::seconds>(*t1);
  CHECK(kubectl({"logs", pod_name, "--since-time", format_time(*t1)}) ==
        (*t0 >= second_start ? "first\nsecond\n" : "second\n"));
}

TEST_CASE_FIXTURE(kube_fixture,
                  "a command job runs on the cluster: body, status, steps, logs, events, delete") {
  trainer_client c(kube_config());
  auto req =
      helper_job({"print", "hello from the pod\n", "env", "GREETING"}, "hello", {{"GREETING", "hi there"}});
  req.num_nodes = 2;
  req.labels = {{"team", "vision"}};
  req.annotations = {{"note", "it's \"quoted\"; $(not run)"}};
  CHECK(c.train(req) == "hello");
  auto job = c.wait_for_job_status("hello", {job_status::complete}, 60s);
  CHECK(job.status == job_status::complete);
  CHECK(job.num_nodes == 2);
  CHECK(job.runtime == "torch-distributed");
  REQUIRE(job.start_time);  // the containers' startedAt, the Complete condition's time
  REQUIRE(job.end_time);
  CHECK(*job.start_time <= *job.end_time);
  REQUIRE(job.steps.size() == 2);
  CHECK(job.steps[0].name == "node-0");
  CHECK(job.steps[1].name == "node-1");
  CHECK(job.steps[1].status == job_status::complete);
  CHECK(job.steps[1].exit_code == 0);
  auto log = c.get_job_logs("hello", {.step = "node-1"}).read_all();
  CHECK(log.find("hello from the pod\n") != std::string::npos);
  CHECK(log.find("hi there") != std::string::npos);
  CHECK(c.get_job_logs("hello", {.tail = 1}).read_all().find("hello from the pod") == std::string::npos);

  // what the server holds is what Kubeflow's SDK sends
  auto tj = json::parse(kubectl({"get", "trainjob", "hello", "-o", "json"})).as_object();
  auto& spec = tj.at("spec").as_object();
  CHECK(spec.at("runtimeRef").at("name").as_string() == "torch-distributed");
  CHECK(spec.at("trainer").at("numNodes").as_int64() == 2);
  CHECK(spec.at("trainer").at("command").as_array()[0].as_string() == tjob::test::helper_bin());
  CHECK(spec.at("trainer").at("env").as_array()[0].at("name").as_string() == "GREETING");
  CHECK(tj.at("metadata").at("labels").at("team").as_string() == "vision");
  CHECK(tj.at("metadata").at("annotations").at("note").as_string() == "it's \"quoted\"; $(not run)");
  CHECK(kubectl({"get", "trainjobs", "-l", "team=vision", "-o", "name"}) ==
        "trainjob.trainer.kubeflow.org/hello\n");

  auto listed = c.list_jobs();
  REQUIRE(listed.size() == 1);
  CHECK(listed[0].status == job_status::complete);
  CHECK(c.list_jobs("other-runtime").empty());
  auto events = c.get_job_events("hello");
  bool started = false, scheduled = false;
  for (const auto& e : events) {
    started = started || (e.reason == "Started" && e.step == "node-1");
    // the cluster's reason, kept in the message; the reason is the event log's
    scheduled = scheduled || (e.reason == "Setup" && e.message.find(" Scheduled: ") != std::string::npos);
    CHECK_MESSAGE(tjob::detail::parse_log_event(e.reason).has_value(), e.reason);
  }
  CHECK(started);
  CHECK(scheduled);
  CHECK(code_of([&] { c.train(req); }) == errc::duplicate_name);
  CHECK(code_of([&] { c.get_job_logs("hello", {.step = "node-7"}); }) == errc::step_not_found);
  c.delete_job("hello");
  CHECK(code_of([&] { c.get_job("hello"); }) == errc::job_not_found);
  CHECK(message_of([&] { c.delete_job("hello"); }).find("namespace 'default' on https://127.0.0.1") !=
        std::string::npos);
}

TEST_CASE_FIXTURE(kube_fixture, "a failing node fails the wait with its exit code and last log lines") {
  trainer_client c(kube_config());
  c.train(helper_job({"print", "about to fail\n", "exit", "3"}, "bad"));
  auto m = message_of([&] { c.wait_for_job_status("bad", {job_status::complete}, 60s); });
  CHECK(m.find("TrainJob bad is Failed") != std::string::npos);
  CHECK(m.find("exit code 3") != std::string::npos);
  CHECK(m.find("about to fail") != std::string::npos);
  auto job = c.get_job("bad");
  CHECK(job.status == job_status::failed);
  CHECK(job.reason == "exit code 3");
  CHECK(job.steps[0].exit_code == 3);
  CHECK(c.wait_for_job_status("bad", {job_status::failed}, 10s).status == job_status::failed);
}

TEST_CASE_FIXTURE(kube_fixture,
                  "a function job installs its packages from the index with pip inside the pod") {
  tjob::test::package_index index;
  trainer_client c(kube_config());
  train_request r;
  r.name = "fn";
  python_trainer pt;
  pt.source = "def train(greeting):\n    import tinyjob\n    print(greeting, tinyjob.hello())\n";
  pt.function = "train";
  pt.function_args = R"({"greeting": "it says"})";
  pt.packages_to_install = {"tinyjob"};
  pt.pip_index_urls = {index.url};
  pt.python = "/usr/bin/python3";
  r.job_trainer = pt;
  c.train(r);
  auto job = c.wait_for_job_status("fn", {job_status::complete, job_status::failed}, 120s);
  auto log = c.get_job_logs("fn", {}).read_all();
  INFO(log);
  CHECK(job.status == job_status::complete);
  CHECK(log.find("Successfully installed Python packages") != std::string::npos);
  CHECK(log.find("it says hi from tinyjob 1.2.0 on tinydep 0.1.0") != std::string::npos);
}

TEST_CASE_FIXTURE(kube_fixture, "tjob.report can be called in a pod as on every backend") {
  // Issue 42: `import tjob` failed in the pod (ModuleNotFoundError). The
  // helper goes with the plan: without Kubeflow Trainer's progress endpoint
  // (the stand-in has none) a report says so by returning False.
  trainer_client c(kube_config());
  train_request r;
  r.name = "reports";
  python_trainer pt;
  pt.source = "def train():\n    import tjob\n    print('reported:', tjob.report(progress=50, loss=0.1))\n";
  pt.function = "train";
  pt.python = "/usr/bin/python3";
  r.job_trainer = pt;
  c.train(r);
  auto job = c.wait_for_job_status("reports", {job_status::complete, job_status::failed}, 120s);
  auto log = c.get_job_logs("reports", {}).read_all();
  INFO(log);
  CHECK(job.status == job_status::complete);
  CHECK(log.find("reported: False\n") != std::string::npos);
}

TEST_CASE_FIXTURE(kube_fixture, "a wait costs the watch connections, not a request every few seconds") {
  // Kubeflow polls every 2 s: a get_job round of 2+ requests each time. A
  // tjob wait reads the job once when it begins and again when its watches
  // say it changed, and nothing while it does not. The job here stays as it
  // is until the test opens its gate, so the wait is checked over a quiet
  // stretch: no request at all. (Counting the requests of a whole 30 s wait
  // failed on a loaded machine, where the job's status changed in more
  // steps than usual, each read once: events, not an interval.)
  trainer_client c(kube_config());
  tjob::test::gate gate;
  c.train(helper_job({"print", "up\n", "read-fifo", gate.path(), "print", "done\n"}, "quiet"));
  c.wait_for_job_status("quiet", {job_status::running}, 60s);
  auto watches_before = stats().second;
  const auto job_reads = lists_of("trainjobs/quiet"), pod_reads = lists_of("pods");
  auto waiter = std::async(std::launch::async, [&] {
    trainer_client other(kube_config());
    return other.wait_for_job_status("quiet", {job_status::complete}, 120s);
  });
  // Its watches, then its first reads of the job and its pods.
  REQUIRE(await_standin(R"({"watches_at_least": )" + std::to_string(watches_before + 2) + "}"));
  REQUIRE(await_standin(R"({"lists_of": "trainjobs/quiet", "more_than": )" + std::to_string(job_reads) + "}"));
  REQUIRE(await_standin(R"({"lists_of": "pods", "more_than": )" + std::to_string(pod_reads) + "}"));
  const auto settled = stats().first;
  // 15 s in which nothing changes: not one request (a poll every few seconds makes several).
  auto any = await_standin(R"({"requests_more_than": )" + std::to_string(settled) + R"(, "timeout": 15})");
  auto all = json::parse(server.ctl("stats")).as_object().at("requests").as_array();
  std::string made;
  for (std::size_t i = settled; i < all.size(); ++i) made += json::serialize(all[i]) + " ";
  CHECK_MESSAGE(!any, "requests while nothing changed: " << made);
  CHECK(stats().second == watches_before + 2);  // its watches stayed up
  gate.release();
  CHECK(waiter.get().status == job_status::complete);
}

TEST_CASE_FIXTURE(kube_fixture,
                  "a tjob wait survives a cut watch, a 410 and a bad line and reports the right status") {
  trainer_client c(kube_config());
  // The job ends when the test says (after every fault), not after a time a
  // loaded machine could outrun: the waiter must still be waiting for the
  // bad line (CI saw the job end first, and no bad line read).
  tjob::test::gate gate;
  c.train(helper_job({"print", "up\n", "read-fifo", gate.path(), "print", "done\n"}, "cut"));
  auto [r0, w0] = stats();
  tjob::test::background waiter(cli({"wait", "cut", "--status", "Complete", "--timeout", "60"}), env());
  // each fault hits watches that are up: the server says when they are
  auto watches_at_least = [&](std::size_t n) {
    return await_standin(R"({"watches_at_least": )" + std::to_string(n) + "}");
  };
  REQUIRE(watches_at_least(w0 + 2));
  server.ctl("drop-watches");
  REQUIRE(watches_at_least(w0 + 4));  // both came back
  auto lists = lists_of("trainjobs");
  server.ctl("compact");  // the versions they hold are now too old: ERROR 410, relist
  REQUIRE(await_standin(R"({"lists_of": "trainjobs", "more_than": )" + std::to_string(lists) + "}"));
  REQUIRE(watches_at_least(w0 + 6));
  server.ctl("inject-line", R"({"line": "this is not json"})");
  REQUIRE(waiter.wait_for_stderr("a watch line is not JSON", 60s));
  gate.release();
  CHECK(waiter.wait(60s) == 0);
  CHECK(waiter.out() == "Complete\n");
  CHECK(waiter.err().find("a watch line is not JSON") != std::string::npos);  // said once, clearly
  CHECK(c.get_job("cut").status == job_status::complete);
}

TEST_CASE_FIXTURE(kube_fixture, "a watch line over the limit is an error the watch recovers from") {
  trainer_client c(kube_config());
  c.train(sleeper("long", "4000"));
  tjob::test::background waiter(cli({"wait", "long", "--status", "Complete", "--timeout", "60"}), env());
  REQUIRE(await_standin(R"({"watches_at_least": 2})"));
  server.ctl("inject-long-line", R"({"bytes": 17000000})");
  CHECK(waiter.wait(60s) == 0);
  CHECK(waiter.out() == "Complete\n");
  CHECK(waiter.err().find("a line is longer than 16777216 bytes") != std::string::npos);
}

TEST_CASE_FIXTURE(kube_fixture,
                  "500s are retried, a slow server times out with a clear error, Status errors are quoted") {
  trainer_client c(kube_config());
  c.train(helper_job({"print", "x\n"}, "r"));
  server.ctl("fail", R"({"count": 3, "code": 500, "path": "/apis/trainer.kubeflow.org"})");
  CHECK(c.get_job("r").name == "r");  // read again after each 500

  server.ctl(
      "fail",
      R"({"count": 1, "code": 403, "path": "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs"})");
  auto m = message_of([&] { c.get_job("r"); });
  CHECK(m.find("403") != std::string::npos);
  CHECK(m.find("injected fault 403") != std::string::npos);
  CHECK(m.find(server.token) == std::string::npos);

  server.ctl(
      "fail",
      R"({"count": 1, "code": 422, "path": "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs"})");
  auto bad = helper_job({"print", "x\n"}, "rejected");
  m = message_of([&] { c.train(bad); });
  CHECK(m.find("TrainJob 'rejected'") != std::string::npos);
  CHECK(m.find("422") != std::string::npos);

  auto cfg = kube_config();
  cfg.backend_config["request_timeout_ms"] = 500;
  trainer_client impatient(cfg);
  server.ctl("delay", R"({"seconds": 3, "path": "/apis"})");
  m = message_of([&] { impatient.get_job("r"); });
  CHECK(m.find("timed out") != std::string::npos);
  server.ctl("delay", R"({"seconds": 0})");
  CHECK(impatient.get_job("r").name == "r");
}

TEST_CASE_FIXTURE(kube_fixture,
                  "TLS is verified: a wrong CA is refused by name, and the token is never shown") {
  tjob::test::kube_standin other;
  // this server's address with the other server's CA
  auto text = tjob::test::read_file(server.kubeconfig());
  auto wrong = dir.path() / "wrong-ca.kubeconfig";
  auto pos = text.find(server.ca);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, server.ca.size(), other.ca);
  std::ofstream(wrong) << text;
  auto cfg = kube_config();
  cfg.backend_config["config_file"] = wrong.string();
  trainer_client c(cfg);
  auto m = message_of([&] { c.list_jobs(); });
  CHECK(m.find("cannot verify the server certificate") != std::string::npos);
  CHECK(m.find(wrong.string()) != std::string::npos);
  CHECK(m.find(server.token) == std::string::npos);

  auto r =
      tjob::test::run({tjob_bin(), "--backend", "kubernetes", "--kubeconfig", wrong.string(), "list"}, env());
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("certificate") != std::string::npos);
  CHECK((r.out + r.err).find(server.token) == std::string::npos);

  // a missing context from the CLI
  r = tjob::test::run(cli({"--context", "nope", "list"}), env());
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("no context 'nope'") != std::string::npos);
}

TEST_CASE_FIXTURE(
    kube_fixture,
    "the token never appears in any output: run, get and list in every format, events, errors") {
  std::string all;
  auto take = [&](const std::vector<std::string>& args) {
    auto r = tjob::test::run(cli(args), env(), 120s);
    all += r.out + r.err;
    return r;
  };
  CHECK(
      take({"run", "--name", "quiet", "--", "sh", "-c", "echo the job does not know the token"}).exit_code ==
      0);
  for (std::string f : {"table", "json", "yaml"}) {
    take({"get", "quiet", "-o", f});
    take({"list", "-o", f});
    take({"events", "quiet", "-o", f});
  }
  take({"logs", "quiet"});
  CHECK(take({"get", "no-such-job"}).exit_code != 0);
  CHECK(take({"run", "--name", "Bad_Name", "--", "true"}).exit_code == 2);
  CHECK(take({"runtimes", "--runtime-dir", "/nonexistent"}).exit_code == 0);
  server.ctl("fail", R"({"count": 2, "code": 403})");  // an error from the server itself
  take({"list"});
  CHECK(all.find("quiet") != std::string::npos);
  CHECK(all.find(server.token) == std::string::npos);
}

TEST_CASE_FIXTURE(kube_fixture,
                  "cancel suspends the TrainJob: its pods stop and it reads Failed (cancelled)") {
  trainer_client c(kube_config());
  c.train(sleeper("stopme", "60000"));
  c.wait_for_job_status("stopme", {job_status::running}, 60s);
  c.cancel_job("stopme");
  auto job = c.get_job("stopme");
  CHECK(job.status == job_status::failed);
  CHECK(job.reason == "cancelled");
  auto tj = json::parse(kubectl({"get", "trainjob", "stopme", "-o", "json"})).as_object();
  CHECK(tj.at("spec").at("suspend").as_bool());
  // the controller deletes the suspended job's pods once they have stopped
  CHECK(await_standin(R"({"no_pods": true})"));
  CHECK(kubectl({"get", "pods", "-o", "name"}).empty());
}

TEST_CASE("logs -f of a pod that is still Pending waits for it to start (Kubeflow's #182)") {
  tjob::test::home_fixture home;
  tjob::test::kube_standin server({"--start-delay", "4"});
  auto cfg = home.config();
  cfg.backend = "kubernetes";
  cfg.backend_config = server.config();
  trainer_client c(cfg);
  c.train(helper_job({"print", "late\n", "sleep", "300", "print", "later\n"}, "pending"));
  CHECK(c.get_job("pending").status == job_status::created);
  CHECK(c.get_job_logs("pending", {}).read_all().empty());  // not following: nothing yet
  auto log = c.get_job_logs("pending", {.follow = true}).read_all();
  CHECK(log == "late\nlater\n");
}

TEST_CASE_FIXTURE(kube_fixture,
                  "logs -f right after train waits for the pod, though the watch has not shown the job yet") {
  // (tjob serve follows as soon as the POST has answered: absent from the
  // watch then meant "gone", and the follow ended empty)
  trainer_client c(kube_config());
  c.wait_for_jobs_change(c.list_jobs(), {}, 10ms);  // the watches run from here on, as under tjob serve
  for (int i = 0; i < 3; ++i) {
    auto name = c.train(helper_job({"print", "at once\n"}, "quick-" + std::to_string(i)));
    CHECK(c.get_job_logs(name, {.follow = true}).read_all() == "at once\n");
  }
}

TEST_CASE_FIXTURE(kube_fixture, "kubectl reads, watches, follows and creates TrainJobs on the stand-in") {
  if (!have_kubectl()) return;
  trainer_client c(kube_config());
  c.train(helper_job({"print", "from tjob\n"}, "made-by-tjob"));
  c.wait_for_job_status("made-by-tjob", {job_status::complete}, 60s);
  auto table = kubectl({"get", "trainjobs"});
  CHECK(table.find("STATE") != std::string::npos);
  CHECK(table.find("made-by-tjob") != std::string::npos);
  CHECK(table.find("Complete") != std::string::npos);

  tjob::test::background watcher({"kubectl", "--kubeconfig", server.kubeconfig(), "get", "trainjobs", "-w"});
  CHECK(watcher.wait_for_stdout("made-by-tjob"));
  auto yaml = dir.path() / "tj.yaml";
  std::ofstream(yaml) << "apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata:\n"
                         "  name: made-by-kubectl\nspec:\n  runtimeRef:\n    name: torch-distributed\n"
                         "  trainer:\n    numNodes: 1\n    command: [\""
                      << tjob::test::helper_bin() << "\", print, \"from kubectl\\n\", sleep, \"500\"]\n";
  CHECK(kubectl({"create", "-f", yaml.string()}).find("created") != std::string::npos);
  CHECK(watcher.wait_for_stdout("made-by-kubectl"));
  auto pods = kubectl({"get", "pods", "-l", "jobset.sigs.k8s.io/jobset-name=made-by-kubectl", "-o", "name"});
  REQUIRE_FALSE(pods.empty());
  auto pod = pods.substr(0, pods.find('\n'));
  // kubectl logs refuses a Pending pod: wait (through the watches) until it has started
  c.wait_for_job_status("made-by-kubectl", {job_status::running, job_status::complete}, 60s);
  auto logs = tjob::test::run({"kubectl", "--kubeconfig", server.kubeconfig(), "logs", "-f", pod}, {}, 60s);
  CHECK(logs.exit_code == 0);
  CHECK(logs.out == "from kubectl\n");
  // tjob sees what kubectl made
  auto job = c.wait_for_job_status("made-by-kubectl", {job_status::complete}, 60s);
  CHECK(job.num_nodes == 1);
  CHECK(c.get_job_logs("made-by-kubectl", {}).read_all() == "from kubectl\n");
  CHECK(watcher.wait_for_stdout("Complete"));
  // kubectl's DELETE carries DeleteOptions in its body: read, not left for the next request
  auto del = tjob::test::run(
      {"kubectl", "--kubeconfig", server.kubeconfig(), "delete", "trainjob", "made-by-kubectl"}, {}, 60s);
  CHECK(del.exit_code == 0);
  CHECK(del.out.find("deleted") != std::string::npos);
  CHECK(del.err.find("Unsolicited") == std::string::npos);
  CHECK(code_of([&] { c.get_job("made-by-kubectl"); }) == errc::job_not_found);
}

TEST_CASE_FIXTURE(kube_fixture,
                  "the official Kubernetes Python client reads, watches and deletes on the stand-in") {
  // Its generated models check the fields a real API server always sets
  // (a pod's imageID, containerID, ...): every answer must deserialize.
  if (!tjob::test::system_python_has("kubernetes")) return;
  auto r =
      tjob::test::run({"/usr/bin/python3", tjob::test::source_dir() + "/tests/support/kube_client_check.py",
                       server.kubeconfig(), tjob::test::helper_bin()},
                      {}, 120s);
  INFO(r.out);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("watched to Complete") != std::string::npos);
  CHECK(r.out.find("deleted with propagationPolicy Foreground") != std::string::npos);
}

TEST_CASE("the README's kubernetes commands start the stand-in and train the linear example") {
  if (!tjob::test::system_python_has("torch")) return;
  tjob::test::home_fixture home;
  auto standin = tjob::test::source_dir() + "/tests/support/kube_standin.py";
  auto dir = (home.dir.path() / "tjob-kube").string();
  auto kubeconfig = dir + "/kubeconfig";
  auto started = tjob::test::run({standin, "start", dir}, {}, 60s);
  REQUIRE_MESSAGE(started.exit_code == 0, started.err);
  struct stop_at_end {
    std::string standin, dir;
    ~stop_at_end() { tjob::test::run({standin, "stop", dir}, {}, 30s); }
  } stop{standin, dir};
  auto r = tjob::test::run({tjob_bin(), "run", "--backend", "kubernetes", "--kubeconfig", kubeconfig,
                            "--func", "train_model", tjob::test::source_dir() + "/examples/train_linear.py"},
                           home.env(), 300s);
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out.find("Epoch 5/5") != std::string::npos);
  CHECK(r.out.find("Training completed!") != std::string::npos);
  CHECK(r.err.find("Complete") != std::string::npos);
  auto got = tjob::test::run({"kubectl", "--kubeconfig", kubeconfig, "get", "trainjobs"}, {}, 60s);
  CHECK(got.exit_code == 0);
  CHECK(got.out.find("Complete") != std::string::npos);
}

TEST_CASE_FIXTURE(kube_fixture, "tjob run streams a pod's log while the job runs and exits with its status") {
  tjob::test::background run(cli({"run", "--name", "live", "--", tjob::test::helper_bin(), "print", "first\n",
                                  "sleep", "3000", "print", "second\n", "exit", "2"}),
                             env());
  REQUIRE(run.wait_for_stdout("first\n"));
  trainer_client c(kube_config());
  CHECK(c.get_job("live").status == job_status::running);  // the line came while it ran
  CHECK(run.wait(60s) == 2);                               // the pod's exit code, as `docker run` exits
  CHECK(run.out() == "first\nsecond\n");
  CHECK(run.err().find("exit code 2") != std::string::npos);
}

TEST_CASE_FIXTURE(kube_fixture,
                  "labels and annotations are the kubernetes backend's and the others refuse them") {
  trainer_client local(config());
  auto r = helper_job({"print", "x\n"}, "labelled");
  r.labels = {{"team", "a"}};
  auto m = message_of([&] { local.train(r); });
  CHECK(m.find("Labels option is not compatible with the local backend") != std::string::npos);
  CHECK(local.list_jobs().empty());
  auto cli_r = tjob::test::run({tjob_bin(), "run", "--label", "team=a", "--", "true"}, env());
  CHECK(cli_r.exit_code == 2);
  // the backends that keep labels, from their registrations
  CHECK(cli_r.err.find("--label and --annotation are for the kubernetes and slurm backends; add --backend "
                       "kubernetes or --backend slurm") != std::string::npos);
  cli_r = tjob::test::run(cli({"train", "--name", "lab", "--label", "team=b", "--annotation", "a=b=c", "--",
                               tjob::test::helper_bin(), "print", "x\n"}),
                          env());
  CHECK(cli_r.exit_code == 0);
  auto tj = json::parse(kubectl({"get", "trainjob", "lab", "-o", "json"})).as_object();
  CHECK(tj.at("metadata").at("labels").at("team").as_string() == "b");
  CHECK(tj.at("metadata").at("annotations").at("a").as_string() == "b=c");
}

TEST_CASE_FIXTURE(kube_fixture,
                  "runtimes come from the cluster and a namespaced TrainingRuntime wins its name") {
  trainer_client c(kube_config());
  auto rts = c.list_runtimes();
  REQUIRE(rts.size() == 1);
  CHECK(rts[0].name == "torch-distributed");
  CHECK(rts[0].kind == "ClusterTrainingRuntime");
  CHECK(rts[0].trainer.framework == "torch");
  auto yaml = dir.path() / "rt.yaml";
  std::ofstream(yaml) << R"(apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata:
  name: torch-distributed
  labels: {trainer.kubeflow.org/framework: torch}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata:
            labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
          spec:
            template:
              spec:
                containers: [{name: node, image: "example.invalid/team-torch:1"}]
---
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainingRuntime
metadata:
  name: unlabelled
spec:
  mlPolicy: {numNodes: 1}
  template: {spec: {replicatedJobs: [{name: node, template: {spec: {template: {spec: {containers: [{name: node, image: x}]}}}}}]}}
)";
  kubectl({"create", "-f", yaml.string()});
  rts = c.list_runtimes();
  REQUIRE(rts.size() == 1);  // the unlabelled one is skipped, as Kubeflow skips it
  auto problems = c.runtime_problems();
  REQUIRE(problems.size() == 1);
  CHECK(problems[0].find("unlabelled") != std::string::npos);
  CHECK(rts[0].kind == "TrainingRuntime");
  CHECK(rts[0].trainer.image == "example.invalid/team-torch:1");
  CHECK(c.get_runtime("torch-distributed").kind == "TrainingRuntime");
  CHECK(code_of([&] { c.get_runtime("nope"); }) == errc::runtime_not_found);
  auto r = helper_job({"print", "x\n"}, "wrongrt");
  r.runtime = "nope";
  auto m = message_of([&] { c.train(r); });
  CHECK(m.find("nope") != std::string::npos);
  CHECK(m.find("torch-distributed") != std::string::npos);  // the known ones are listed
  CHECK(m.find("create a TrainingRuntime in namespace 'default'") != std::string::npos);
  // a job names the namespaced runtime by kind
  c.train(helper_job({"print", "x\n"}, "nsrt"));
  auto tj = json::parse(kubectl({"get", "trainjob", "nsrt", "-o", "json"})).as_object();
  CHECK(tj.at("spec").at("runtimeRef").at("kind").as_string() == "TrainingRuntime");
  CHECK(c.wait_for_job_status("nsrt", {job_status::complete}, 60s).status == job_status::complete);
}

namespace {
// A kubeconfig for `server` with the given cluster and user fields.
std::string write_kubeconfig(const std::filesystem::path& file, const std::string& url, json::object cluster,
                             json::object user) {
  cluster["server"] = url;
  json::object cfg{
      {"apiVersion", "v1"},
      {"kind", "Config"},
      {"current-context", "c"},
      {"clusters", json::array{json::object{{"name", "k"}, {"cluster", cluster}}}},
      {"users", json::array{json::object{{"name", "u"}, {"user", user}}}},
      {"contexts",
       json::array{json::object{{"name", "c"}, {"context", json::object{{"cluster", "k"}, {"user", "u"}}}}}}};
  std::ofstream(file) << json::serialize(cfg);
  return file.string();
}
}  // namespace

TEST_CASE_FIXTURE(kube_fixture, "a client certificate, insecure-skip-tls-verify and no credentials at all") {
  auto info = json::parse(tjob::test::read_file(server.dir.path() / "ready.json")).as_object();
  auto cert = std::string(info.at("client_cert").as_string());
  auto key = std::string(info.at("client_key").as_string());
  auto cfg = kube_config();
  // the client certificate instead of the token, the key given as data
  auto key_pem = tjob::test::read_file(key);
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string key_data;
  for (std::size_t i = 0; i < key_pem.size(); i += 3) {
    unsigned v = static_cast<unsigned char>(key_pem[i]) << 16;
    if (i + 1 < key_pem.size()) v |= static_cast<unsigned char>(key_pem[i + 1]) << 8;
    if (i + 2 < key_pem.size()) v |= static_cast<unsigned char>(key_pem[i + 2]);
    key_data += b64[(v >> 18) & 63];
    key_data += b64[(v >> 12) & 63];
    key_data += i + 1 < key_pem.size() ? b64[(v >> 6) & 63] : '=';
    key_data += i + 2 < key_pem.size() ? b64[v & 63] : '=';
  }
  cfg.backend_config["config_file"] =
      write_kubeconfig(dir.path() / "cert.kubeconfig", server.url, {{"certificate-authority", server.ca}},
                       {{"client-certificate", cert}, {"client-key-data", key_data}});
  {
    trainer_client c(cfg);
    c.train(helper_job({"print", "by certificate\n"}, "certified"));
    CHECK(c.wait_for_job_status("certified", {job_status::complete}, 60s).status == job_status::complete);
  }
  // a certificate the server does not know, but verification off as the kubeconfig says
  tjob::test::kube_standin other;
  cfg.backend_config["config_file"] = write_kubeconfig(
      dir.path() / "insecure.kubeconfig", server.url,
      {{"certificate-authority", other.ca}, {"insecure-skip-tls-verify", true}}, {{"token", server.token}});
  {
    trainer_client c(cfg);
    CHECK(c.get_job("certified").status == job_status::complete);
  }
  // neither a token nor a certificate: the server's 401, quoted
  cfg.backend_config["config_file"] = write_kubeconfig(dir.path() / "anonymous.kubeconfig", server.url,
                                                {{"certificate-authority", server.ca}}, {});
  trainer_client c(cfg);
  auto m = message_of([&] { c.list_jobs(); });
  CHECK(m.find("401 Unauthorized") != std::string::npos);
  // a key that does not match the certificate is refused before any request
  cfg.backend_config["config_file"] = write_kubeconfig(
      dir.path() / "mismatch.kubeconfig", server.url, {{"certificate-authority", server.ca}},
      {{"client-certificate", cert}, {"client-key", (server.dir.path() / "server.key").string()}});
  m = message_of([&] { trainer_client bad(cfg); });
  CHECK(m.find("client key") != std::string::npos);
  CHECK(m.find("BEGIN") == std::string::npos);  // no key material in the message
}

TEST_CASE_FIXTURE(kube_fixture, "inside a pod the service account reaches the API server") {
  auto sa = dir.path() / "serviceaccount";
  std::filesystem::create_directories(sa);
  std::ofstream(sa / "token") << server.token << "\n";
  std::filesystem::copy_file(server.ca, sa / "ca.crt");
  std::ofstream(sa / "namespace") << "default\n";
  ::setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", server.url.substr(server.url.rfind(':') + 1).c_str(), 1);
  auto cfg = kube_config();
  cfg.backend_config.erase("config_file");
  cfg.backend_config["in_cluster_dir"] = sa.string();
  trainer_client c(cfg);
  c.train(helper_job({"print", "in a pod\n"}, "incluster"));
  CHECK(c.wait_for_job_status("incluster", {job_status::complete}, 60s).status == job_status::complete);
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
}

TEST_CASE_FIXTURE(kube_fixture, "many jobs waited for at once share one watch per kind") {
  trainer_client c(kube_config());
  std::vector<std::string> names;
  for (int i = 0; i < 6; ++i)
    names.push_back(c.train(sleeper("many-" + std::to_string(i), std::to_string(500 + 200 * i))));
  std::vector<std::future<job_status>> waits;
  for (const auto& n : names)
    waits.push_back(std::async(std::launch::async, [&c, n] {
      return c.wait_for_job_status(n, {job_status::complete}, 60s).status;
    }));
  for (auto& w : waits) CHECK(w.get() == job_status::complete);
  CHECK(stats().second == 2);
}

TEST_CASE_FIXTURE(kube_fixture, "the kubernetes backend never opens the local store") {
  {
    trainer_client c(kube_config());
    c.train(helper_job({"print", "x\n"}, "nostore"));
    CHECK(c.wait_for_job_status("nostore", {job_status::complete}, 60s).status == job_status::complete);
    CHECK(c.list_jobs().size() == 1);
  }
  auto r = tjob::test::run(cli({"list", "-o", "json"}), env());
  CHECK(r.exit_code == 0);
  // The cluster keeps the jobs: nothing of the local backend is made in $TJOB_HOME.
  CHECK(!std::filesystem::exists(std::filesystem::path(home()) / "tjob.db"));
  CHECK(!std::filesystem::exists(std::filesystem::path(home()) / "jobs"));
}

TEST_CASE_FIXTURE(kube_fixture, "wait_for_jobs_change is woken by the cluster's watch events") {
  trainer_client c(kube_config());
  auto empty = c.list_jobs();
  REQUIRE(empty.empty());
  // A waiter that starts before the job exists sees it appear.
  auto appeared = std::async(std::launch::async, [&] { return c.wait_for_jobs_change(empty, {}, 60s); });
  auto name = c.train(helper_job({"print", "hi\n"}, "watched"));
  auto seen = appeared.get();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].name == "watched");
  // From what it saw, the next change is the job moving on, until it is Complete.
  for (int turns = 0; seen[0].status != job_status::complete && turns < 10; ++turns) {
    auto next = c.wait_for_jobs_change(seen, {}, 60s);
    REQUIRE(next.size() == 1);
    CHECK_FALSE(same_state(next[0], seen[0]));  // woken by a change, not by the timeout
    seen = next;
  }
  CHECK(seen[0].status == job_status::complete);
  c.delete_job(name);
  CHECK(c.wait_for_jobs_change(seen, {}, 60s).empty());
}

TEST_CASE_FIXTURE(kube_fixture,
                  "the controller's status.trainerStatus is the job's progress, in get, -o json and list") {
  if (!have_kubectl()) return;
  trainer_client c(kube_config());
  auto name = c.train(helper_job({"print", "trained\n"}, "reports"));
  c.wait_for_job_status(name, {job_status::complete}, 60s);
  auto before = c.get_job(name);
  CHECK(!before.progress_percent);  // nothing reported yet
  // A watcher of the job is woken by a report (progress is part of its state).
  // (Other changes of the finished job, its pods', may come first: each wakes it too.)
  // A wait that runs to its own timeout was not woken by the report: that
  // fails the case (the timeout is far beyond any wake-up).
  bool timed_out = false;
  auto changed = std::async(std::launch::async, [&] {
    auto seen = before;
    while (!seen.progress_percent && !timed_out) {
      auto asked = std::chrono::steady_clock::now();
      seen = c.wait_for_job_change(name, seen, 60s);
      timed_out = std::chrono::steady_clock::now() - asked >= 60s;
    }
    return seen;
  });
  // What the real controller writes when the training code calls Kubeflow's
  // update_trainjob_status (the percentage past 100 is clamped, as Kubeflow
  // clamps; a metric over the API's 64 bytes is left out).
  // `tjob list -w` prints a job again when it changes: a report is a change.
  tjob::test::background watching(cli({"list", "-w"}), env());
  REQUIRE(watching.wait_for_stdout(name));
  const std::string long_name(65, 'x');
  kubectl({"patch", "trainjob", name, "--subresource=status", "--type=merge", "-p",
           R"({"status":{"trainerStatus":{"progressPercentage":250,"estimatedRemainingSeconds":75,)"
           R"("metrics":[{"name":"loss","value":"0.125"},{"name":"accuracy","value":"0.9"},)"
           R"({"name":")" +
               long_name + R"(","value":"1"}],"lastUpdatedTime":"2026-12-04T10:00:00Z"}}})"});
  CHECK(watching.wait_for_stdout("100%"));
  auto woken = changed.get();
  CHECK_FALSE(timed_out);
  CHECK(woken.progress_percent == 100);
  auto j = c.get_job(name);
  REQUIRE(j.progress_percent);
  CHECK(*j.progress_percent == 100);
  CHECK(j.estimated_remaining_seconds == 75);
  REQUIRE(j.metrics.size() == 2);
  CHECK(j.metrics[0] == std::pair<std::string, std::string>{"loss", "0.125"});
  CHECK(j.metrics[1] == std::pair<std::string, std::string>{"accuracy", "0.9"});
  REQUIRE(j.progress_updated);
  auto got = tjob::test::run(cli({"get", name, "-o", "json"}), env());
  REQUIRE(got.exit_code == 0);
  auto o = json::parse(got.out).as_object();
  CHECK(o.at("progress_percent") == 100);
  CHECK(o.at("estimated_remaining_seconds") == 75);
  CHECK(o.at("metrics").at("loss") == "0.125");
  CHECK(o.at("updated") == "2026-12-04T10:00:00.000Z");
  auto back = job_from_json(o);  // the wire form reads back the same
  CHECK(back.metrics == j.metrics);
  CHECK(back.progress_percent == j.progress_percent);
  auto table = tjob::test::run(cli({"list"}), env()).out;
  CHECK(table.find("PROGRESS") != std::string::npos);
  CHECK(table.find("100%") != std::string::npos);
  auto shown = tjob::test::run(cli({"get", name}), env()).out;
  CHECK(shown.find("loss=0.125 accuracy=0.9") != std::string::npos);
  // The job has ended: its last estimate is kept (-o json above) but not shown as time left.
  CHECK(shown.find("1m15s") == std::string::npos);
}
