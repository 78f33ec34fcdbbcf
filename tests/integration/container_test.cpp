// The container backend against the real daemons: Docker (dockerd) and Podman
// (its API service), started for the suite by tests/support/container_peers
// (a ctest fixture). Containers use host or none networking only.
#include "core/job_state.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>
#include <tjob/spec.hpp>

#include <doctest/doctest.h>

#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <boost/json/parse.hpp>
#include <boost/json/value_from.hpp>

#include <chrono>
#include <csignal>
#include <fstream>
#include <future>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

using namespace tjob;
using namespace std::chrono_literals;
using tjob::test::code_of;
using tjob::test::message_of;
namespace fs = std::filesystem;

namespace {

struct docker_daemon {
  static constexpr const char* name = "docker";
};
struct podman_daemon {
  static constexpr const char* name = "podman";
};

fs::path peers_dir() {
  const char* d = std::getenv("TJOB_TEST_PEERS");
  return d ? fs::path(d) : fs::path("/nonexistent");
}

// The daemon's socket, or empty when it is not running here (the test is then
// skipped on a developer machine; in CI, which installs both, it fails).
std::string socket_of(const std::string& daemon) {
  auto s = peers_dir() / (daemon + ".sock");
  struct stat st {};
  if (::stat(s.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return s.string();
  tjob::test::skip(daemon + " is not running at " + s.string() + " (the container_peers fixture starts it)");
  return {};
}

// The host's Python (and torch) inside localhost/tjob-host (a merged-/usr skeleton).
const std::vector<std::string> host_volumes = {"/usr:/usr:ro", "/etc/alternatives:/etc/alternatives:ro",
                                               "/etc/ld.so.cache:/etc/ld.so.cache:ro"};

struct fixture : tjob::test::home_fixture {
  engine_config config(const std::string& socket, const std::string& net = "none") const {
    auto c = home_fixture::config(3s);
    c.backend = "container";
    c.backend_config = {{"container_host", "unix://" + socket}, {"network", net}};
    return c;
  }
};

train_request shell_job(const std::string& script, std::string name = {}) {
  train_request r;
  r.name = std::move(name);
  command_trainer t;
  t.command = {"sh", "-c", script};
  t.image = "localhost/tjob-bb:latest";
  r.job_trainer = t;
  return r;
}

std::string docker_cli(const std::string& socket, std::vector<std::string> args) {
  std::vector<std::string> argv = {"docker", "-H", "unix://" + socket};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = tjob::test::run(argv, {}, 60s);
  REQUIRE_MESSAGE(r.exit_code == 0, "docker CLI failed: " << r.err);
  return r.out;
}

std::string all_of(log_reader reader) { return reader.read_all(); }

// A job that runs until stopped, once it is Running.
std::string started_sleeper(trainer_client& client) {
  auto name = client.train(shell_job("sleep 600"));
  client.wait_for_job_status(name, {job_status::running}, 60s);
  return name;
}

python_trainer linear_trainer() {
  python_trainer t;
  t.source_file = tjob::test::source_dir() + "/examples/train_linear.py";
  t.function = "train_model";
  t.python = "/usr/bin/python3";
  return t;
}

}  // namespace

#define TJOB_DAEMONS docker_daemon, podman_daemon

TEST_CASE_TEMPLATE("a command job runs in a container with its output, Kubeflow's labels and its exit code",
                   D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  auto name = client.train(shell_job("echo err1 >&2; echo out1; sleep 0.5; echo \"$0\" done", "cmd-ok"));
  auto job = client.wait_for_job_status(name, {job_status::complete}, 60s);
  REQUIRE(job.steps.size() == 1);
  CHECK(job.steps[0].name == "node-0");
  CHECK(job.steps[0].status == job_status::complete);
  CHECK(job.steps[0].exit_code == 0);
  CHECK(job.runtime == "torch-distributed");  // its image came from that runtime
  REQUIRE(job.start_time);                    // State.StartedAt and FinishedAt
  REQUIRE(job.end_time);
  CHECK(*job.end_time - *job.start_time >= 400ms);  // it slept 0.5 s between them
  auto log = all_of(client.get_job_logs(name, {.step = "node-0"}));
  CHECK(log.find("out1\n") != std::string::npos);
  CHECK(log.find("err1\n") != std::string::npos);
  CHECK(log.find("sh done\n") != std::string::npos);
  CHECK(all_of(client.get_job_logs(name, {.step = "node-0", .tail = 1})) == "sh done\n");
  // Kubeflow's labels, as docker's own CLI filters them
  auto names = docker_cli(sock, {"ps", "-a", "--filter", "label=trainer.kubeflow.org/trainjob-name=cmd-ok",
                                 "--format", "{{.Names}} {{.Label \"trainer.kubeflow.org/step\"}}"});
  CHECK(names == "cmd-ok-node-0 node-0\n");
  // The job network is there in every mode, as Kubeflow reads a job's runtime
  // from it; with none (or host) networking it is internal and nobody joins it.
  auto nets = docker_cli(sock, {"network", "ls", "--filter",
                                "label=trainer.kubeflow.org/trainjob-name=cmd-ok", "--format", "{{.Name}}"});
  CHECK(nets == "cmd-ok-net\n");
  CHECK(docker_cli(
            sock,
            {"network", "inspect", "cmd-ok-net", "--format",
             "{{.Internal}} {{index .Labels \"trainer.kubeflow.org/runtime-name\"}} {{len .Containers}}"}) ==
        "true torch-distributed 0\n");
  auto events = client.get_job_events(name);
  std::vector<std::string> reasons;
  for (const auto& e : events) reasons.push_back(e.reason);
  // The daemon's actions in the event log's vocabulary, the action kept in the message.
  for (const auto& r : reasons) CHECK_MESSAGE(tjob::detail::parse_log_event(r).has_value(), r);
  CHECK(std::find(reasons.begin(), reasons.end(), "Created") != reasons.end());
  CHECK(std::find(reasons.begin(), reasons.end(), "Started") != reasons.end());
  bool died = false;
  for (const auto& e : events)
    died = died || (e.reason == "Exited" && e.message.find("die (exit code 0)") != std::string::npos);
  CHECK(died);
  client.delete_job(name);
  CHECK(code_of([&] { client.get_job(name); }) == errc::job_not_found);
  CHECK(docker_cli(sock, {"network", "ls", "--filter", "label=trainer.kubeflow.org/trainjob-name=cmd-ok",
                          "--format", "{{.Name}}"}) == "");
  CHECK_FALSE(fs::exists(fs::path(fx.home()) / "containers" / name));
}

TEST_CASE_TEMPLATE(
    "a followed container log is whole and byte-exact: to its last line without a newline, "
    "whether the follow ends at the container's death or it had ended before",
    D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  // The engine's own log, to see which way each follow ended.
  auto lines = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
  auto config = fx.config(sock);
  config.logger = std::make_shared<spdlog::logger>("container-follow", lines);
  config.logger->set_level(spdlog::level::debug);
  trainer_client client(config);
  // stdout and stderr interleaved, lines of many lengths, a last line with no
  // newline; the follower comes while the job sleeps (3 s: the follow must
  // begin before the container ends, even on a slow sanitizer build).
  const std::string script =
      "i=0; while [ $i -lt 300 ]; do echo \"out $i $(printf %0$((i+1))d 0)\"; echo \"err $i\" >&2; "
      "i=$((i+1)); done; "
      "sleep 3; echo last; printf 'no newline'";
  auto name = client.train(shell_job(script));
  client.wait_for_job_status(name, {job_status::running}, 60s);
  auto followed =
      std::async(std::launch::async, [&] { return all_of(client.get_job_logs(name, {.follow = true})); });
  REQUIRE(followed.wait_for(60s) == std::future_status::ready);
  auto live = followed.get();
  client.wait_for_job_status(name, {job_status::complete}, 60s);
  auto whole = all_of(client.get_job_logs(name, {}));
  CHECK(whole.size() > 300 * 100);
  CHECK(whole.ends_with("last\nno newline"));
  CHECK(live == whole);
  // A follow of the ended container: the same bytes.
  CHECK(all_of(client.get_job_logs(name, {.follow = true})) == whole);
  auto said = lines->last_formatted();
  auto told = [&](const std::string& what) {
    return std::count_if(said.begin(), said.end(),
                         [&](const std::string& l) { return l.find(what) != std::string::npos; });
  };
  // The first follow ended, and the rest was read again with what was handed
  // out skipped: on Podman at the container's death (its own follow ends
  // only after its cleanup), on Docker when its follow ended (before the last
  // line without a newline, which `docker logs -f` loses). The second follow
  // found the container ended and did not follow.
  CHECK(told("the rest of its log is read without following") == 1);
  if (std::string(D::name) == "podman")
    CHECK(told("died; the rest of its log") == 1);
  else
    CHECK(told("the follow ended; the rest of its log") == 1);
  client.delete_job(name);
}

TEST_CASE_TEMPLATE(
    "container logs carry the daemon's times, written with nine digits, and since filters by them", D,
    TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  // more than a second apart: Podman stamps whole seconds
  auto name = client.train(shell_job("echo first; sleep 1.2; echo second", "cmd-times"));
  client.wait_for_job_status(name, {job_status::complete}, 60s);
  auto stamped = all_of(client.get_job_logs(name, {.timestamps = true}));
  INFO(stamped);
  std::vector<std::string> lines;
  for (std::size_t at = 0, nl; (nl = stamped.find('\n', at)) != std::string::npos; at = nl + 1)
    lines.push_back(stamped.substr(at, nl + 1 - at));
  REQUIRE(lines.size() == 2);
  std::vector<clock::time_point> at;
  for (const auto& l : lines) {
    REQUIRE(l.size() > 31);
    CHECK(l[29] == 'Z');  // "2026-12-03T19:31:20.672427912Z "
    CHECK(l[30] == ' ');
    auto t = parse_time(l.substr(0, 30));
    REQUIRE(t);
    at.push_back(*t);
  }
  CHECK(lines[0].substr(31) == "first\n");
  CHECK(lines[1].substr(31) == "second\n");
  CHECK(at[1] - at[0] >= 1s);
  CHECK(all_of(client.get_job_logs(name, {.since = at[0]})) == "first\nsecond\n");
  CHECK(all_of(client.get_job_logs(name, {.since = at[1]})) == "second\n");
  CHECK(all_of(client.get_job_logs(name, {.timestamps = true, .since = at[1]})) == lines[1]);
  CHECK(all_of(client.get_job_logs(name, {.since = at[1] + 10s})) == "");
  CHECK(all_of(client.get_job_logs(name, {.tail = 1, .timestamps = true})) == lines[1]);
}

TEST_CASE_TEMPLATE("a failing container job raises with each step's exit code and last log lines", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  auto name = client.train(shell_job("echo about to fail; exit 3"));
  auto msg = message_of([&] { client.wait_for_job_status(name, {job_status::complete}, 60s); });
  CHECK(msg.find("TrainJob " + name + " is Failed") != std::string::npos);
  CHECK(msg.find("node-0: status=Failed, exit_code=3") != std::string::npos);
  CHECK(msg.find("Last logs:\n    about to fail") != std::string::npos);
  auto job = client.get_job(name);
  CHECK(job.status == job_status::failed);
  CHECK(job.reason == "exit code 3");
  // auto_remove off (--keep-workdir): delete keeps the work dir, not the containers
  auto cfg = fx.config(sock);
  cfg.backend_config["auto_remove"] = false;
  trainer_client keeping(cfg);
  keeping.delete_job(name);
  CHECK(code_of([&] { keeping.get_job(name); }) == errc::job_not_found);
  CHECK(fs::is_directory(fs::path(fx.home()) / "containers" / name));
}

TEST_CASE_TEMPLATE("another process sees the container jobs of the first, with the same status", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  auto name = started_sleeper(client);
  auto env = fx.env();
  env["TJOB_BACKEND"] = "container";  // the CLI's default backend
  auto r = tjob::test::run(
      {tjob::test::tjob_bin(), "list", "--container-host", "unix://" + sock, "-o", "json"}, env);
  REQUIRE(r.exit_code == 0);
  auto v = boost::json::parse(r.out);
  bool seen = false;
  for (const auto& j : v.as_array())
    if (j.at("name").as_string() == name) seen = j.at("status") == "Running";
  CHECK(seen);
  // a cancel from that other process stops it; this one's waiter sees it
  auto c = tjob::test::run({tjob::test::tjob_bin(), "cancel", name, "--backend", "container",
                            "--container-host", "unix://" + sock, "--grace", "3"},
                           env);
  CHECK(c.exit_code == 0);
  auto job = client.wait_for_job_status(name, {job_status::failed}, 60s);
  CHECK(job.reason == "cancelled");
  client.delete_job(name);
}

TEST_CASE_TEMPLATE("a forced cancel kills the containers at once instead of waiting out the grace period", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  auto cfg = fx.config(sock);
  // `sh -c 'sleep 600'` is the container's PID 1, which SIGTERM does not
  // end: a graceful cancel would wait the ten minutes out in docker stop.
  cfg.grace_period = std::chrono::minutes(10);
  trainer_client client(cfg);
  auto name = started_sleeper(client);
  client.cancel_job(name, {.force = true});
  auto job = client.wait_for_job_status(name, {job_status::failed}, 60s);
  CHECK(job.reason == "cancelled");
  client.delete_job(name);
}

TEST_CASE_TEMPLATE(
    "an active deadline stops a container job, which ends Failed DeadlineExceeded, also when it "
    "was submitted detached",
    D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  auto cfg = fx.config(sock);
  cfg.grace_period = 1s;
  trainer_client client(cfg);
  auto req = shell_job("echo up; sleep 600", "late");
  req.active_deadline = 2s;
  auto name = client.train(req);
  auto job = client.wait_for_job_status(name, {job_status::failed}, 60s);
  CHECK(job.reason == "DeadlineExceeded");
  REQUIRE(job.steps.size() == 1);
  CHECK(job.steps[0].reason == "DeadlineExceeded");
  REQUIRE(job.start_time);
  REQUIRE(job.end_time);
  CHECK(*job.end_time - *job.start_time >= 2s);  // not before its deadline
  CHECK(all_of(client.get_job_logs(name)) == "up\n");
  client.delete_job(name);

  // Detached: the supervisor's engine enforces it, after this one has gone.
  cfg.supervisor = tjob::test::tjob_bin();
  req.name = "late-detached";
  auto detached = train_detached(req, cfg);
  trainer_client other(fx.config(sock));
  job = other.wait_for_job_status(detached, {job_status::failed}, 60s);
  CHECK(job.reason == "DeadlineExceeded");
  other.delete_job(detached);

  // A job that ends first is left alone.
  req.name = "early";
  req.active_deadline = 60s;
  std::get<command_trainer>(req.job_trainer).command = {"sh", "-c", "echo quick"};
  CHECK(client.wait_for_job_status(client.train(req), {job_status::complete}, 60s).reason.empty());
  client.delete_job("early");
}

TEST_CASE_TEMPLATE(
    "retries of a container job are the daemon's restart policy: it passes on its third "
    "attempt, a cancel stops them, and what the daemon cannot do is refused",
    D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  auto cfg = fx.config(sock);
  cfg.grace_period = 1s;
  trainer_client client(cfg);
  // The work dir (/workspace) outlives each attempt: a counter there.
  auto req = shell_job(
      "n=$(cat /workspace/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /workspace/n; echo attempt $n; "
      "[ $n -ge 3 ] || exit 75",
      "flaky");
  req.retry.max_restarts = 3;
  auto name = client.train(req);
  auto job = client.wait_for_job_status(name, {job_status::complete}, 120s);
  REQUIRE(job.steps.size() == 1);
  CHECK(job.steps[0].attempt == 3);
  CHECK(job.steps[0].exit_code == 0);
  CHECK(all_of(client.get_job_logs(name)) == "attempt 1\nattempt 2\nattempt 3\n");
  client.delete_job(name);

  // Restarts run out: Failed with the last exit code, after 1 + 2 attempts.
  req.name = "always";
  std::get<command_trainer>(req.job_trainer).command = {"sh", "-c", "echo try; exit 4"};
  req.retry.max_restarts = 2;
  job = client.wait_for_job_status(client.train(req), {job_status::failed}, 120s);
  CHECK(job.reason == "exit code 4");
  CHECK(job.steps[0].attempt == 3);
  CHECK(all_of(client.get_job_logs("always")) == "try\ntry\ntry\n");
  client.delete_job("always");

  // A cancel is a stop: the daemon does not restart it, and it reads cancelled.
  req.name = "stopped";
  std::get<command_trainer>(req.job_trainer).command = {"sh", "-c", "sleep 600"};
  req.retry.max_restarts = 5;
  client.train(req);
  client.wait_for_job_status("stopped", {job_status::running}, 60s);
  client.cancel_job("stopped", {.force = true});
  job = client.wait_for_job_status("stopped", {job_status::failed}, 60s);
  CHECK(job.reason == "cancelled");
  CHECK(job.steps[0].attempt == 1);
  client.delete_job("stopped");

  // What the daemon's policy cannot do is refused by name, before anything is made.
  auto bad = req;
  bad.name = "bad";
  bad.retry.retry_on = {75};
  CHECK(message_of([&] { client.train(bad); }).find("retry_on and never_retry cannot be given") !=
        std::string::npos);
  bad.retry.retry_on.clear();
  bad.retry.backoff = 5s;
  CHECK(message_of([&] { client.train(bad); }).find("the backoff cannot be set") != std::string::npos);
  bad.retry.backoff = 1s;
  bad.num_nodes = 2;
  CHECK(message_of([&] { client.train(bad); }).find("a job of 2 nodes cannot be restarted") !=
        std::string::npos);
  CHECK(code_of([&] { client.get_job("bad"); }) == errc::job_not_found);
}

TEST_CASE_TEMPLATE("a container job in a home whose parents do not exist yet makes them, private", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  auto cfg = fx.config(sock);
  // As ~/.local/state/tjob on a fresh machine, where ~/.local is not there yet.
  cfg.home = fx.dir.path() / "fresh" / ".local" / "state" / "tjob";
  trainer_client client(cfg);
  auto name = client.train(shell_job("echo made", "fresh-home"));
  CHECK(client.wait_for_job_status(name, {job_status::complete}, 60s).status == job_status::complete);
  for (const auto& p : {fx.dir.path() / "fresh", cfg.home, cfg.home / "containers" / name}) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0700);
  }
  client.delete_job(name);
}

TEST_CASE_TEMPLATE("a job Kubeflow's container backend made shows the runtime its network names", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  // As Kubeflow lays a job out: the runtime on the job network (internal
  // here, and nothing attached to it), the containers pointing at it by id.
  auto net = docker_cli(
      sock, {"network", "create", "--internal", "--label", "trainer.kubeflow.org/trainjob-name=kf-made",
             "--label", "trainer.kubeflow.org/runtime-name=torch-distributed", "kf-made-net"});
  while (!net.empty() && net.back() == '\n') net.pop_back();
  docker_cli(sock,
             {"create", "--name", "kf-made-node-0", "--network", "none", "--label",
              "trainer.kubeflow.org/trainjob-name=kf-made", "--label", "trainer.kubeflow.org/step=node-0",
              "--label", "trainer.kubeflow.org/network-id=" + net, "localhost/tjob-bb:latest", "true"});
  trainer_client client(fx.config(sock));
  CHECK(client.get_job("kf-made").runtime == "torch-distributed");
  bool listed = false;
  for (const auto& j : client.list_jobs("torch-distributed")) listed = listed || j.name == "kf-made";
  CHECK(listed);
  client.delete_job("kf-made");  // its containers and its labelled network
  CHECK(docker_cli(sock, {"network", "ls", "--filter", "name=kf-made-net", "--format", "{{.Name}}"}) == "");
}

TEST_CASE_TEMPLATE("a container removed behind the engine's back ends a waiter with a clear error", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  auto name = started_sleeper(client);
  auto waiter = std::async(std::launch::async, [&] {
    return code_of([&] { client.wait_for_job_status(name, {job_status::complete}, 120s); });
  });
  docker_cli(sock, {"rm", "-f", name + "-node-0"});
  REQUIRE(waiter.wait_for(60s) == std::future_status::ready);
  // killed and then gone: the waiter sees it fail (exit 137) or vanish
  auto how = waiter.get();
  CHECK((how == errc::job_not_found || how == errc::job_failed));
  // Its network is left (made in every mode, as Kubeflow does): delete takes
  // it and the work dir that was left on the host; then nothing is there.
  client.delete_job(name);
  CHECK(docker_cli(sock, {"network", "ls", "--filter", "name=" + name + "-net", "--format", "{{.Name}}"}) ==
        "");
  CHECK_FALSE(fs::exists(fs::path(fx.home()) / "containers" / name));
  CHECK(code_of([&] { client.delete_job(name); }) == errc::job_not_found);
}

TEST_CASE_TEMPLATE("an image missing under pull policy Never is refused and nothing is left behind", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  auto cfg = fx.config(sock);
  cfg.backend_config["pull_policy"] = "Never";
  trainer_client client(cfg);
  auto req = shell_job("true", "no-image");
  std::get<command_trainer>(req.job_trainer).image = "localhost/does-not-exist:1";
  auto msg = message_of([&] { client.train(req); });
  CHECK(msg.find("localhost/does-not-exist:1") != std::string::npos);
  CHECK(msg.find("pull policy is Never") != std::string::npos);
  CHECK(msg.find("no-image") != std::string::npos);
  CHECK(code_of([&] { client.get_job("no-image"); }) == errc::job_not_found);
  // a daemon refusal at create (an unknown network mode) cleans up too
  cfg.backend_config["pull_policy"] = "IfNotPresent";
  trainer_client c2(cfg);
  auto bad = shell_job("true", "bad-start");
  std::get<command_trainer>(bad.job_trainer).command = {"/no/such/program"};
  auto m2 = message_of([&] { c2.train(bad); });
  if (!m2.empty()) {  // Docker refuses at start; Podman starts and the job fails
    CHECK(m2.find("bad-start-node-0") != std::string::npos);
    CHECK(code_of([&] { c2.get_job("bad-start"); }) == errc::job_not_found);
    CHECK(docker_cli(sock, {"network", "ls", "--filter", "name=bad-start-net", "--format", "{{.Name}}"}) ==
          "");
  } else {
    CHECK(c2.wait_for_job_status("bad-start", {job_status::failed}, 60s).status == job_status::failed);
    c2.delete_job("bad-start");
  }
}

TEST_CASE_TEMPLATE("a 2-node container job makes one process group: node-0 and node-1 Complete", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty() || !tjob::test::system_python_has("torch.distributed")) return;
  auto cfg = fx.config(sock, "host");
  cfg.backend_config["volumes"] = boost::json::value_from(host_volumes);
  cfg.backend_config["image"] = "localhost/tjob-host:bookworm";
  trainer_client client(cfg);
  // Issue 42: a job that never made a process group passed where a real one hung.
  python_trainer t;
  t.source = tjob::test::allreduce_source;
  t.function = "allreduce";
  t.python = "/usr/bin/python3";
  train_request r;
  r.runtime = "torch-distributed";
  r.job_trainer = t;
  r.num_nodes = 2;
  auto name = client.train(r);
  auto job = client.wait_for_job_status(name, {job_status::complete, job_status::failed}, 300s);
  auto log0 = all_of(client.get_job_logs(name, {.step = "node-0"}));
  auto log1 = all_of(client.get_job_logs(name, {.step = "node-1"}));
  CAPTURE(log0);
  CAPTURE(log1);
  REQUIRE(job.steps.size() == 2);
  CHECK(job.num_nodes == 2);
  CHECK(job.steps[0].name == "node-0");
  CHECK(job.steps[1].name == "node-1");
  CHECK(job.steps[0].status == job_status::complete);
  CHECK(job.steps[1].status == job_status::complete);
  CHECK(log0.find("node=0 rank=0 world=2 sum=3.0") != std::string::npos);
  CHECK(log1.find("node=1 rank=1 world=2 sum=3.0") != std::string::npos);
  client.delete_job(name);
}

TEST_CASE_TEMPLATE("on the job network every node resolves node-0's name to node-0's address without DNS", D,
                   TJOB_DAEMONS) {
  // Issue 42: torch's agent on node-0 hands the other nodes its name as
  // MASTER_ADDR, and a Podman network may have no DNS. Only files are read
  // here (/etc/hostname, /etc/hosts through getent): nothing crosses the bridge.
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  auto cfg = fx.config(sock, "job");
  cfg.backend_config["volumes"] = boost::json::value_from(host_volumes);
  trainer_client client(cfg);
  // (a name of this run's: a failed run leaves its containers for a look)
  const std::string named = "hosts-" + std::to_string(::getpid());
  // node-0 stays up until node-1 has looked (a file in the workspace they
  // share), as a real node-0 does: its address is read while it runs.
  auto r =
      shell_job("echo name=$(cat /etc/hostname); getent hosts " + named +
                    "-node-0; case $(cat /etc/hostname) in *-node-0) "
                    "until [ -f /workspace/looked ]; do sleep 0.05; done;; *) touch /workspace/looked;; esac",
                named);
  std::get<command_trainer>(r.job_trainer).image = "localhost/tjob-host:bookworm";
  r.num_nodes = 2;
  auto name = client.train(r);
  auto job = client.wait_for_job_status(name, {job_status::complete, job_status::failed}, 120s);
  auto log0 = all_of(client.get_job_logs(name, {.step = "node-0"}));
  auto log1 = all_of(client.get_job_logs(name, {.step = "node-1"}));
  CAPTURE(log0);
  CAPTURE(log1);
  REQUIRE(job.status == job_status::complete);
  CHECK(log0.find("name=" + named + "-node-0\n") != std::string::npos);
  CHECK(log1.find("name=" + named + "-node-1\n") != std::string::npos);
  // `getent hosts` prints "ADDRESS  NAME...": the same address on both nodes.
  auto address_in = [](const std::string& log) {
    auto at = log.find('\n');
    auto line = at == std::string::npos ? std::string() : log.substr(at + 1);
    return line.substr(0, line.find(' '));
  };
  auto a0 = address_in(log0);
  CHECK(!a0.empty());
  CHECK(a0.rfind("127.", 0) != 0);
  CHECK(address_in(log1) == a0);
  client.delete_job(name);
}

TEST_CASE_TEMPLATE("a named volume outlives its job for the next, and the backend's env sits under the job's",
                   D, TJOB_DAEMONS) {
  // Issue 40 (kubeflow/sdk #624, #636): ContainerBackendConfig(volumes=..., env=...).
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  const std::string vol = "tjob-test-" + std::to_string(::getpid());
  auto cfg = fx.config(sock);
  cfg.backend_config["volumes"] = boost::json::array{vol + ":/data"};
  cfg.backend_config["env"] = boost::json::array{"FROM=backend", "KEPT=yes"};
  trainer_client client(cfg);
  auto writer = client.train(shell_job("echo \"$FROM $KEPT\" > /data/said"));
  CHECK(client.wait_for_job_status(writer, {job_status::complete, job_status::failed}, 60s).status ==
        job_status::complete);
  client.delete_job(writer);  // its containers, not the named volume
  auto r = shell_job("cat /data/said; echo \"$FROM $KEPT\"");
  std::get<command_trainer>(r.job_trainer).env = {{"FROM", "job"}};
  auto reader = client.train(r);
  auto job = client.wait_for_job_status(reader, {job_status::complete, job_status::failed}, 60s);
  auto log = all_of(client.get_job_logs(reader, {}));
  CHECK_MESSAGE(job.status == job_status::complete, log);
  CHECK(log == "backend yes\njob yes\n");
  client.delete_job(reader);
  docker_cli(sock, {"volume", "rm", vol});
  // A source that is neither a path nor a name is refused at once, naming it.
  auto bad = fx.config(sock);
  bad.backend_config["volumes"] = boost::json::array{"./data:/data"};
  CHECK(message_of([&] { trainer_client c(bad); }).find("'./data:/data': the source must be") !=
        std::string::npos);
}

TEST_CASE_TEMPLATE("a directory sent with a container job is its /workspace, importable, a copy per job", D,
                   TJOB_DAEMONS) {
  // Issue 40: the same project as on the local backend, in a container.
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  const auto src = fx.dir.path() / "project";
  fs::create_directories(src / "pkg");
  fs::create_directories(src / "outputs");
  std::ofstream(src / "pkg" / "__init__.py") << "def double(x):\n    return 2 * x\n";
  std::ofstream(src / "n.txt") << "21\n";
  std::ofstream(src / "outputs" / "old.ckpt") << "not sent\n";
  std::ofstream(src / ".tjobignore") << "outputs/\n";
  auto cfg = fx.config(sock);
  cfg.backend_config["volumes"] = boost::json::value_from(host_volumes);
  cfg.backend_config["image"] = "localhost/tjob-host:bookworm";
  trainer_client client(cfg);
  python_trainer t;
  t.source =
      "def train():\n"
      "    import os, pkg\n"
      "    print('answer', pkg.double(int(open('n.txt').read())), 'in', os.getcwd(), flush=True)\n"
      "    print('outputs sent:', os.path.exists('outputs'), flush=True)\n";
  t.function = "train";
  t.python = "/usr/bin/python3";
  t.code_dir = src.string();
  train_request r;
  r.runtime = "python";
  r.job_trainer = t;
  auto name = client.train(r);
  auto job = client.wait_for_job_status(name, {job_status::complete, job_status::failed}, 120s);
  auto log = all_of(client.get_job_logs(name, {}));
  CAPTURE(log);
  REQUIRE(job.status == job_status::complete);
  CHECK(log.find("answer 42 in /workspace\n") != std::string::npos);
  CHECK(log.find("outputs sent: False\n") != std::string::npos);
  // A command runs in it too.
  auto cmd = shell_job("cat n.txt");
  std::get<command_trainer>(cmd.job_trainer).code_dir = src.string();
  auto second = client.train(cmd);
  client.wait_for_job_status(second, {job_status::complete}, 60s);
  CHECK(all_of(client.get_job_logs(second, {})) == "21\n");
  client.delete_job(name);
  client.delete_job(second);
}

TEST_CASE_TEMPLATE("a container job's checkpoint directory outlives a restart of its node, on the host", D,
                   TJOB_DAEMONS) {
  // Issue 37: TJOB_CHECKPOINT_DIR, bound from the job's directory, so the
  // restart the daemon makes (max_restarts) finds what the first run saved.
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  auto r = shell_job(
      "d=$TJOB_CHECKPOINT_DIR; if [ -f $d/epoch ]; then echo resumed at $(cat $d/epoch) in $d; exit 0; fi; "
      "echo 3 > $d/epoch; exit 5");
  r.retry.max_restarts = 1;
  auto name = client.train(r);
  auto job = client.wait_for_job_status(name, {job_status::complete, job_status::failed}, 120s);
  auto log = all_of(client.get_job_logs(name, {}));
  CAPTURE(log);
  CHECK(job.status == job_status::complete);
  CHECK(log.find("resumed at 3 in /tjob/checkpoints\n") != std::string::npos);
  const auto host = fs::path(fx.home()) / "containers" / name / "checkpoints";
  CHECK(fs::exists(host / "epoch"));
  client.delete_job(name);
  CHECK_FALSE(fs::exists(host));
}

TEST_CASE_TEMPLATE("packages are installed in the container with pip from the index", D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  tjob::test::package_index index;
  auto cfg = fx.config(sock, "host");
  cfg.backend_config["volumes"] = boost::json::value_from(host_volumes);
  cfg.backend_config["image"] = "localhost/tjob-host:bookworm";
  trainer_client client(cfg);
  python_trainer t;
  t.source = "def main(who):\n    import tinyjob\n    print('hello', who, tinyjob.__name__)\n";
  t.function = "main";
  t.function_args = R"J({"who": "it's; $(x)"})J";
  t.packages_to_install = {"tinyjob==1.2.0"};
  t.pip_index_urls = {index.url};
  t.python = "/usr/bin/python3";
  train_request r;
  r.runtime = "python";
  r.job_trainer = t;
  auto name = client.train(r);
  auto job = client.wait_for_job_status(name, {job_status::complete, job_status::failed}, 300s);
  auto log = all_of(client.get_job_logs(name, {}));
  CHECK_MESSAGE(job.status == job_status::complete, log);
  CHECK(log.find("Successfully installed Python packages (user): tinyjob==1.2.0") != std::string::npos);
  CHECK(log.find("hello it's; $(x) tinyjob\n") != std::string::npos);
  client.delete_job(name);
}

TEST_CASE(
    "one spec, three backends: the linear example and a command job have the same statuses, steps and "
    "lines") {
  auto sock = socket_of("docker");
  if (sock.empty() || !tjob::test::system_python_has("torch")) return;
  auto lines_of = [](const std::string& log, const std::string& first) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start < log.size()) {
      auto nl = log.find('\n', start);
      auto line = log.substr(start, nl - start);
      // The training code's lines: setup output differs by design (the local
      // backend pip-installs the runtime's packages, as Kubeflow's local backend
      // does; a container or a pod has them in its image).
      if (line.starts_with(first) || !out.empty()) out.push_back(line);
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
    return out;
  };
  struct seen {
    std::string backend;
    job_status status;
    std::vector<std::pair<std::string, job_status>> steps;
    std::vector<std::optional<int>> exit_codes;
    std::vector<std::string> lines;
  };
  for (bool python : {true, false}) {
    std::vector<seen> results;
    for (std::string backend : {"local", "container", "kubernetes"}) {
      fixture fx;
      std::optional<tjob::test::kube_standin> cluster;
      auto cfg = fx.config(sock, "host");
      cfg.backend = backend;
      cfg.backend_config["volumes"] = boost::json::value_from(host_volumes);
      cfg.backend_config["image"] = "localhost/tjob-host:bookworm";
      if (backend == "local") cfg.backend_config = {};
      if (backend == "kubernetes") {
        cluster.emplace();
        cfg.backend_config = cluster->config();
      }
      trainer_client client(cfg);
      train_request r;
      if (python) {
        auto t = linear_trainer();
        t.system_site_packages = true;
        r.job_trainer = t;
      } else {
        command_trainer t;
        t.command = {"sh", "-c", "echo one; echo two >&2; exit 5"};
        r.job_trainer = t;
      }
      auto name = client.train(r);
      auto job = client.wait_for_job_status(name, {job_status::complete, job_status::failed}, 300s);
      // A container's stdout and stderr are two pipes the daemon reads apart, so
      // their relative order is not kept (Docker writes "two" first now and
      // then); the lines of the command job are compared as a set.
      auto lines = python ? lines_of(all_of(client.get_job_logs(name, {})), "Epoch 1/")
                          : lines_of(all_of(client.get_job_logs(name, {})), "");
      if (!python) std::sort(lines.begin(), lines.end());
      seen s{backend, job.status, {}, {}, lines};
      for (const auto& st : job.steps) {
        s.steps.emplace_back(st.name, st.status);
        s.exit_codes.push_back(st.exit_code);
      }
      results.push_back(s);
      client.delete_job(name);
    }
    CAPTURE(python);
    CHECK(results[0].status == (python ? job_status::complete : job_status::failed));
    for (std::size_t i = 1; i < results.size(); ++i) {
      CAPTURE(results[i].backend);
      CHECK(results[0].status == results[i].status);
      CHECK(results[0].steps == results[i].steps);
      CHECK(results[0].exit_codes == results[i].exit_codes);
      std::string a, b;
      for (const auto& l : results[0].lines) a += l + "\n";
      for (const auto& l : results[i].lines) b += l + "\n";
      CHECK(a == b);
    }
    auto& last = results.back().lines;
    CHECK(std::find(last.begin(), last.end(), python ? "Training completed!" : "two") != last.end());
  }
}

// ---------------------------------------------------------------------------
// daemons that are not there or misbehave

namespace {
struct fake_daemon {
  tjob::test::temp_dir dir;
  std::string socket = (dir.path() / "fake.sock").string();
  std::unique_ptr<tjob::test::background> proc;
  explicit fake_daemon(const std::string& mode) {
    proc = std::make_unique<tjob::test::background>(std::vector<std::string>{
        "python3", "-u", tjob::test::source_dir() + "/tests/support/fake_daemon.py", socket, mode});
    REQUIRE(proc->wait_for_stdout("ready"));
  }
};
}  // namespace

TEST_CASE("no daemon answering gives one error listing every place tried and how to name one") {
  fixture fx;
  tjob::test::temp_dir d;
  std::ofstream(d.path() / "plain-file") << "not a socket";
  ::setenv("DOCKER_HOST", ("unix://" + (d.path() / "plain-file").string()).c_str(), 1);
  ::setenv("CONTAINER_HOST", ("unix://" + (d.path() / "missing.sock").string()).c_str(), 1);
  auto cfg = fx.home_fixture::config();
  cfg.backend = "container";
  trainer_client client(cfg);
  auto msg = message_of([&] { client.list_jobs(); });
  ::unsetenv("DOCKER_HOST");
  ::unsetenv("CONTAINER_HOST");
  CHECK(msg.find("Could not connect to Docker or Podman") != std::string::npos);
  CHECK(msg.find("plain-file (DOCKER_HOST): not a socket") != std::string::npos);
  CHECK(msg.find("missing.sock (CONTAINER_HOST): no such socket") != std::string::npos);
  CHECK(msg.find("/var/run/docker.sock") != std::string::npos);
  CHECK(msg.find("/run/podman/podman.sock") != std::string::npos);
  CHECK(msg.find("--container-host unix:///path/to/socket") != std::string::npos);
}

TEST_CASE("a daemon over TCP is reached with TLS as the docker CLI is told to, and never in clear off this machine") {
  // Issue 41: DOCKER_TLS_VERIFY and DOCKER_CERT_PATH were ignored, and
  // DOCKER_HOST=tcp:// was spoken to over plain HTTP wherever it was.
  fixture fx;
  tjob::test::temp_dir certs;
  const auto d = certs.path();
  auto openssl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "openssl");
    auto r = tjob::test::run(args, {}, 60s);
    REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  };
  // A CA, the daemon's certificate for 127.0.0.1 and a client's, as a dockerd --tlsverify setup has them.
  openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=tjob test CA", "-keyout",
           (d / "ca-key.pem").string(), "-out", (d / "ca.pem").string()});
  for (const std::string who : {"server", "client"}) {
    openssl({"req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + who, "-keyout",
             (d / (who + "-key.pem")).string(), "-out", (d / (who + ".csr")).string()});
    std::ofstream(d / (who + ".ext")) << (who == "server" ? "subjectAltName=IP:127.0.0.1\n"
                                                          : "extendedKeyUsage=clientAuth\n");
    openssl({"x509", "-req", "-in", (d / (who + ".csr")).string(), "-CA", (d / "ca.pem").string(), "-CAkey",
             (d / "ca-key.pem").string(), "-CAcreateserial", "-days", "1", "-extfile", (d / (who + ".ext")).string(),
             "-out", (d / (who + ".pem")).string()});
  }
  fs::copy_file(d / "client.pem", d / "cert.pem");
  fs::copy_file(d / "client-key.pem", d / "key.pem");
  fs::permissions(d / "key.pem", fs::perms::owner_read | fs::perms::owner_write);
  tjob::test::background daemon(
      {"python3", "-u", tjob::test::source_dir() + "/tests/support/fake_daemon.py", "-", "tls:" + d.string()});
  REQUIRE(daemon.wait_for_stdout("\n"));
  auto port = daemon.out().substr(daemon.out().find(' ') + 1);
  port.erase(port.find('\n'));
  struct env_guard {
    ~env_guard() {
      for (const char* v : {"DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"}) ::unsetenv(v);
    }
  } restore;
  auto cfg = fx.home_fixture::config();
  cfg.backend = "container";
  cfg.backend_config = {{"container_runtime", "docker"}};
  ::setenv("DOCKER_HOST", ("tcp://127.0.0.1:" + port).c_str(), 1);
  ::setenv("DOCKER_TLS_VERIFY", "1", 1);
  ::setenv("DOCKER_CERT_PATH", d.c_str(), 1);
  {
    trainer_client client(cfg);
    CHECK(client.list_jobs().empty());  // over TLS, with the client's certificate
  }
  // A key others may read is refused, as ssh refuses one.
  fs::permissions(d / "key.pem", fs::perms::group_read | fs::perms::others_read, fs::perm_options::add);
  {
    trainer_client client(cfg);
    auto why = message_of([&] { client.list_jobs(); });
    CHECK(why.find("key.pem is readable by others") != std::string::npos);
  }
  // Without DOCKER_TLS_VERIFY: plain HTTP only to this machine; a daemon elsewhere is refused unasked.
  ::unsetenv("DOCKER_TLS_VERIFY");
  ::setenv("DOCKER_HOST", "tcp://docker-remote.invalid:2375", 1);
  {
    trainer_client client(cfg);
    auto why = message_of([&] { client.list_jobs(); });
    CHECK(why.find("tcp://docker-remote.invalid:2375 (DOCKER_HOST): plain HTTP to a daemon that is not on this "
                   "machine") != std::string::npos);
    CHECK(why.find("set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH") != std::string::npos);
  }
}

TEST_CASE("the daemon is known by its ping's headers, and /version is asked only when they do not say") {
  // Podman's /version runs conmon and runc to report their versions (0.6 s a start)
  {
    fixture fx;
    fake_daemon fake("pingonly");  // /version would fail
    trainer_client client(fx.config(fake.socket));
    CHECK(client.list_jobs().empty());
  }
  fixture fx;
  fake_daemon fake("oldping");  // no Api-Version header: /version it is
  trainer_client client(fx.config(fake.socket));
  CHECK(client.list_jobs().empty());
  CHECK(fake.proc->wait_for_stdout("asked /version"));
}

TEST_CASE("a daemon answering 500 gives its own message, naming the job") {
  fixture fx;
  fake_daemon fake("500");
  trainer_client client(fx.config(fake.socket));
  auto msg = message_of([&] { client.train(shell_job("true", "on-broken")); });
  CHECK(msg.find("injected failure: the daemon is broken") != std::string::npos);
  CHECK(msg.find("500") != std::string::npos);
  CHECK(code_of([&] { client.get_job("x"); }) == errc::backend_error);
}

TEST_CASE(
    "a container that Podman says started after it finished makes a job that never ends before it starts") {
  fixture fx;
  fake_daemon fake("bigframe");  // one exited job, `big`
  trainer_client client(fx.config(fake.socket));
  auto job = client.get_job("big");
  REQUIRE(job.start_time);
  REQUIRE(job.end_time);
  CHECK(*job.end_time >= *job.start_time);  // `tjob run` printed "Complete in -0.00 s"
}

TEST_CASE("a cancel that finds its container gone from running by the time it signals it succeeds") {
  // Issue 42: Podman answers such a kill 500, "can only kill running containers".
  fixture fx;
  fake_daemon fake("killrace");
  trainer_client client(fx.config(fake.socket));
  REQUIRE(client.get_job("big").status == job_status::running);
  client.cancel_job("big", {.force = true});
  CHECK(fake.proc->wait_for_stdout("asked to kill"));
  CHECK(client.get_job("big").status != job_status::running);
}

TEST_CASE("a daemon closing the connection mid-response is an error, not a hang or a crash") {
  fixture fx;
  fake_daemon fake("cut");
  trainer_client client(fx.config(fake.socket));
  auto msg = message_of([&] { client.list_jobs(); });
  CHECK(msg.find("closed in the middle") != std::string::npos);
  CHECK(code_of([&] { client.list_jobs(); }) == errc::backend_unavailable);
}

TEST_CASE("a daemon resetting the connection mid-answer is backend_unavailable naming the daemon") {
  fixture fx;
  fake_daemon fake("reset");
  trainer_client client(fx.config(fake.socket));
  CHECK(code_of([&] { client.list_jobs(); }) == errc::backend_unavailable);
  CHECK(code_of([&] { client.train(shell_job("true", "on-reset")); }) == errc::backend_unavailable);
  CHECK(message_of([&] { client.list_jobs(); }).find(fake.socket) != std::string::npos);
}

TEST_CASE("a daemon that does not answer is a timeout naming the daemon, after the request timeout") {
  fixture fx;
  fake_daemon fake("slow");
  auto cfg = fx.config(fake.socket);
  cfg.backend_config["request_timeout_ms"] = 1000;
  trainer_client client(cfg);
  auto msg = message_of([&] { client.list_jobs(); });
  CHECK(msg.find("timed out") != std::string::npos);
  CHECK(msg.find(fake.socket) != std::string::npos);
}

TEST_CASE("a daemon answering something that is not the Engine API is a protocol error, never a status") {
  fixture fx;
  fake_daemon fake("garbage");
  trainer_client client(fx.config(fake.socket));
  CHECK(code_of([&] { client.list_jobs(); }) == errc::protocol_error);
  CHECK(code_of([&] { client.get_job("big"); }) == errc::protocol_error);
  CHECK(message_of([&] { client.get_job("big"); }).find("not JSON") != std::string::npos);
}

TEST_CASE("a log frame longer than the limit is refused, naming the job and the container") {
  fixture fx;
  fake_daemon fake("bigframe");
  trainer_client client(fx.config(fake.socket));
  auto job = client.get_job("big");
  CHECK(job.status == job_status::complete);
  auto msg = message_of([&] { all_of(client.get_job_logs("big", {})); });
  CHECK(msg.find("TrainJob 'big'") != std::string::npos);
  CHECK(msg.find("c0ffee") != std::string::npos);
  CHECK(msg.find("over the limit") != std::string::npos);
}

TEST_CASE("without the daemon's event stream a waiter still sees the job end") {
  fixture fx;
  fake_daemon fake("noevents");
  trainer_client client(fx.config(fake.socket));
  CHECK(client.get_job("big").status == job_status::running);
  CHECK(client.wait_for_job_status("big", {job_status::complete}, 60s).status == job_status::complete);
}

TEST_CASE("container options without the container backend are a usage error") {
  fixture fx;
  auto r = tjob::test::run({tjob::test::tjob_bin(), "list", "--network", "host"}, fx.env());
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("add --backend container") != std::string::npos);
  auto i = tjob::test::run({tjob::test::tjob_bin(), "run", "--image", "x", "--", "true"}, fx.env());
  CHECK(i.exit_code == 2);
  CHECK(i.err.find("--image is for the container and kubernetes backends") != std::string::npos);
}

TEST_CASE("dockerd restarting while a log is followed: the follower ends, the status is re-read") {
  if (socket_of("docker").empty()) return;
  fixture fx;
  tjob::test::temp_dir d;
  auto script = tjob::test::source_dir() + "/tests/support/container_peers";
  auto started = tjob::test::run({script, "start", d.str(), "docker"}, {}, 120s);
  REQUIRE_MESSAGE(started.exit_code == 0, started.err);
  auto sock = (d.path() / "docker.sock").string();
  {
    trainer_client client(fx.config(sock));
    auto name = client.train(shell_job("echo first; sleep 600"));
    client.wait_for_job_status(name, {job_status::running}, 60s);
    auto reader = client.get_job_logs(name, {.follow = true});
    CHECK(reader.next() == std::optional<std::string>("first\n"));
    auto follower = std::async(std::launch::async, [&] {
      return code_of([&] {
        while (reader.next()) {
        }
      });
    });
    auto restarted = tjob::test::run({script, "restart-docker", d.str()}, {}, 120s);
    REQUIRE_MESSAGE(restarted.exit_code == 0, restarted.err);
    REQUIRE(follower.wait_for(60s) == std::future_status::ready);
    auto how = follower.get();  // ended, or an error saying the daemon went away
    CHECK((!how || *how == errc::backend_unavailable));
    auto job = client.wait_for_job_status(name, {job_status::failed, job_status::complete}, 60s);
    CHECK(job.status == job_status::failed);  // dockerd stopped it; never left Running
    client.delete_job(name);
  }
  tjob::test::run({script, "stop", d.str()}, {}, 120s);
}

TEST_CASE_TEMPLATE("the README's container command trains the linear example", D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty() || !tjob::test::system_python_has("torch")) return;
  std::vector<std::string> argv = {tjob::test::tjob_bin(),
                                   "run",
                                   "--backend",
                                   "container",
                                   "--container-runtime",
                                   D::name,
                                   "--container-host",
                                   "unix://" + sock,
                                   "--image",
                                   "localhost/tjob-host:bookworm",
                                   "--network",
                                   "host"};
  for (const auto& v : host_volumes) {
    argv.push_back("-v");
    argv.push_back(v);
  }
  for (const char* a : {"--func", "train_model"}) argv.push_back(a);
  argv.push_back(tjob::test::source_dir() + "/examples/train_linear.py");
  auto r = tjob::test::run(argv, fx.env(), 300s);
  CHECK_MESSAGE(r.exit_code == 0, r.err);
  CHECK(r.out.find("Epoch 5/5, Loss: ") != std::string::npos);
  CHECK(r.out.find("Training completed!\n") != std::string::npos);
  CHECK(r.err.find("Complete") != std::string::npos);
}

TEST_CASE_TEMPLATE("two ranks that print at once in a container never tear each other's lines", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty() || !tjob::test::system_python_has("torch.distributed")) return;
  auto cfg = fx.config(sock, "host");
  cfg.backend_config["volumes"] = boost::json::value_from(host_volumes);
  cfg.backend_config["image"] = "localhost/tjob-host:bookworm";
  trainer_client client(cfg);
  python_trainer t;
  t.source = tjob::test::rank_chatter_source;
  t.function = "chatter";
  t.python = "/usr/bin/python3";
  t.procs_per_node = 2;
  train_request r;
  r.runtime = "torch-distributed";
  r.job_trainer = t;
  auto name = client.train(r);
  auto job = client.wait_for_job_status(name, {job_status::complete, job_status::failed}, 300s);
  auto log = all_of(client.get_job_logs(name, {}));
  CHECK_MESSAGE(job.status == job_status::complete, log);
  auto lines = tjob::test::read_rank_chatter(log);
  CHECK_MESSAGE(lines.torn == 0, lines.torn << " torn lines, e.g. \"" << lines.example << "\"");
  CHECK(lines.whole.size() == 1200);
  client.delete_job(name);
}

TEST_CASE_TEMPLATE("wait_for_jobs_change is woken by the daemon's events", D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  auto name = started_sleeper(client);
  auto known = client.list_jobs();
  std::vector<train_job> mine;
  for (const auto& j : known)
    if (j.name == name) mine.push_back(j);
  REQUIRE(mine.size() == 1);
  REQUIRE(mine[0].status == job_status::running);
  // A waiter from that view is woken when another process cancels the job.
  // Other tests' jobs on the same daemon change too: each wake is a change,
  // and it goes on from what it saw until this job's is among them.
  auto woken = std::async(std::launch::async, [&] {
    auto view = known;
    for (int wakes = 0; wakes < 200; ++wakes) {
      auto now = client.wait_for_jobs_change(view, {}, 120s);
      for (const auto& j : now)
        if (j.name == name && (j.status != job_status::running || j.steps[0].status != job_status::running))
          return now;
      view = std::move(now);
    }
    return view;
  });
  auto env = fx.env();
  auto c = tjob::test::run({tjob::test::tjob_bin(), "cancel", name, "--backend", "container",
                            "--container-host", "unix://" + sock, "--grace", "3"},
                           env);
  CHECK(c.exit_code == 0);
  auto now = woken.get();
  bool changed = false;
  for (const auto& j : now)
    if (j.name == name) changed = j.status != job_status::running || j.steps[0].status != job_status::running;
  CHECK(changed);
  client.delete_job(name);
}

// --- admission (docs/scheduling.md): the queue of a home's container jobs ---

namespace {

engine_config slots(engine_config c, int n) {
  c.admission.max_running = n;
  return c;
}

// Waits until `name` is in the queue, as any process on the home sees it.
void wait_queued(trainer_client& c, const std::string& name) {
  auto job = c.wait_for_job_status(name, {job_status::created}, 30s);
  for (auto deadline = std::chrono::steady_clock::now() + 30s; job.reason != "Queued";) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    job = c.wait_for_job_change(name, job, 5s);
  }
}

}  // namespace

TEST_CASE_TEMPLATE(
    "container jobs wait for the budget, Created and Queued with their place, and start by priority", D,
    TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(slots(fx.config(sock), 1));
  auto holder = started_sleeper(client);
  auto low = client.train(shell_job("echo low", "low"));
  auto high_req = shell_job("echo high", "high");
  high_req.priority = 5;
  auto high = client.train(high_req);
  // Neither has a container yet; the queue shows them, the higher first.
  for (const auto& n : {low, high}) {
    auto j = client.get_job(n);
    CHECK(j.status == job_status::created);
    CHECK(j.reason == "Queued");
  }
  CHECK(client.get_job(high).queue_position == 1);
  CHECK(client.get_job(low).queue_position == 2);
  auto q = client.get_queue();
  REQUIRE(q.size() == 2);
  CHECK(q[0].name == high);
  CHECK(q[0].waits_for.find("1 of max_running 1 in use") != std::string::npos);
  CHECK(q[1].name == low);
  CHECK(docker_cli(sock, {"ps", "-a", "-q", "--filter", "name=low-node"}).empty());
  // Its log: empty while it waits; a follower waits for its container (tjob run follows so).
  CHECK(all_of(client.get_job_logs(low)).empty());
  log_options follow;
  follow.follow = true;
  auto followed = std::async(std::launch::async, [&] { return all_of(client.get_job_logs(low, follow)); });
  client.cancel_job(holder);
  CHECK(followed.get() == "low\n");
  auto h = client.wait_for_job_status(high, {job_status::complete}, 60s);
  auto l = client.wait_for_job_status(low, {job_status::complete}, 60s);
  REQUIRE(h.end_time);
  REQUIRE(l.start_time);
  CHECK(*l.start_time >= *h.end_time);  // one at a time, the higher first
  CHECK(all_of(client.get_job_logs(low)) == "low\n");
  std::vector<std::string> reasons;
  for (const auto& e : client.get_job_events(low)) reasons.push_back(e.reason);
  REQUIRE(reasons.size() >= 3);
  CHECK(reasons[0] == "Queued");
  CHECK(reasons[1] == "Admitted");
  CHECK(client.get_queue().empty());
  for (const auto& n : {holder, low, high}) client.delete_job(n);
}

TEST_CASE_TEMPLATE("a waiting container job cancelled by another process ends cancelled and never starts", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(slots(fx.config(sock), 1));
  auto holder = started_sleeper(client);
  auto waiting = client.train(shell_job("echo never", "waiting"));
  auto env = fx.env();
  // tjob run of a job that must wait: it follows the log of a container made later.
  const std::vector<std::string> on = {"--backend", "container", "--container-host", "unix://" + sock};
  std::vector<std::string> run = {tjob::test::tjob_bin(), "--max-running", "1", "run"};
  run.insert(run.end(), on.begin(), on.end());
  for (const auto& a : {"--network", "none", "--image", "localhost/tjob-bb:latest", "--name", "via-cli", "--",
                        "echo", "from the CLI"})
    run.emplace_back(a);
  tjob::test::background cli(run, env);
  // (it waits: tjob run says so, and not "started")
  REQUIRE_MESSAGE(cli.wait_for_stderr("tjob: job via-cli submitted; it waits (Queued"), cli.err());
  wait_queued(client, "via-cli");
  std::vector<std::string> queue = {tjob::test::tjob_bin(), "--max-running", "1", "queue"};
  queue.insert(queue.end(), on.begin(), on.end());
  auto listed = tjob::test::run(queue, env);
  CHECK(listed.out.find("waiting") != std::string::npos);
  CHECK(listed.out.find("via-cli") != std::string::npos);
  CHECK(listed.out.find("a running slot (1 of max_running 1 in use)") != std::string::npos);
  // Another process's jobs are judged by this tjob's budgets, and it says so
  // (issue 42, item 9: on the container backend too).
  CHECK_MESSAGE(listed.out.find("(judged by this tjob's budgets, max_running 1, ") != std::string::npos,
                listed.out);
  CHECK(listed.out.find(", which owns it, admits it by its own)") != std::string::npos);
  std::vector<std::string> cancel = {tjob::test::tjob_bin(), "cancel", waiting};
  cancel.insert(cancel.end(), on.begin(), on.end());
  auto r = tjob::test::run(cancel, env);
  CHECK_MESSAGE(r.exit_code == 0, (r.err));
  auto j = client.wait_for_job_status(waiting, {job_status::failed}, 30s);
  CHECK(j.reason == "cancelled");
  client.cancel_job(holder);
  CHECK(cli.wait(60s) == 0);
  CHECK(cli.out() == "from the CLI\n");
  client.delete_job("via-cli");
  client.wait_for_job_status(holder, {job_status::failed}, 60s);
  // The room it would have had is free, and it never got a container.
  auto next = client.train(shell_job("echo next", "next"));
  client.wait_for_job_status(next, {job_status::complete}, 60s);
  CHECK(client.get_job(waiting).reason == "cancelled");
  CHECK(docker_cli(sock, {"ps", "-a", "-q", "--filter", "name=waiting-node"}).empty());
  // Deleting it removes it; it is gone from the list.
  client.delete_job(waiting);
  for (const auto& j2 : client.list_jobs()) CHECK(j2.name != waiting);
  for (const auto& n : {holder, next}) client.delete_job(n);
}

TEST_CASE_TEMPLATE(
    "container job dependencies: a chain runs in order, a broken one fails naming the job, unknown names "
    "are refused",
    D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  auto first = client.train(shell_job("sleep 1; echo first", "first"));
  auto second_req = shell_job("echo second", "second");
  second_req.after_ok = {first};
  auto second = client.train(second_req);
  CHECK(client.get_job(second).reason == "Waiting");
  auto bad = client.train(shell_job("exit 3", "bad"));
  auto never_req = shell_job("echo never", "never");
  never_req.after_ok = {bad};
  auto never = client.train(never_req);
  auto on_fail_req = shell_job("echo cleanup", "cleanup");
  on_fail_req.after_not_ok = {bad};
  auto on_fail = client.train(on_fail_req);

  auto s = client.wait_for_job_status(second, {job_status::complete}, 60s);
  auto f = client.get_job(first);
  REQUIRE(f.end_time);
  REQUIRE(s.start_time);
  CHECK(*s.start_time >= *f.end_time);
  auto n = client.wait_for_job_status(never, {job_status::failed}, 60s);
  CHECK(n.reason == "DependencyNeverSatisfied");
  bool named = false;
  for (const auto& e : client.get_job_events(never))
    named |= e.message.find("job bad ended Failed") != std::string::npos;
  CHECK(named);
  client.wait_for_job_status(on_fail, {job_status::complete}, 60s);
  CHECK(all_of(client.get_job_logs(on_fail)) == "cleanup\n");

  auto unknown = shell_job("true", "orphan");
  unknown.after_any = {"no-such-job"};
  CHECK_THROWS_WITH_AS(client.train(unknown), doctest::Contains("no-such-job"), error);
  auto self = shell_job("true", "myself");
  self.after_ok = {"myself"};
  CHECK_THROWS_AS(client.train(self), error);
  for (const auto& name : {first, second, bad, never, on_fail}) client.delete_job(name);
}

TEST_CASE_TEMPLATE(
    "a container job with a begin time waits, Created and Waiting, until then, and one cancelled "
    "while it waits never starts",
    D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  auto req = shell_job("echo began", "later");
  const auto begin = std::chrono::floor<std::chrono::milliseconds>(tjob::clock::now()) + 2s;
  req.begin = begin;
  auto later = client.train(req);
  auto j = client.get_job(later);
  CHECK(j.status == job_status::created);
  CHECK(j.reason == "Waiting");
  CHECK(docker_cli(sock, {"ps", "-a", "-q", "--filter", "name=later-node"}).empty());  // nothing made yet
  auto someday_req = shell_job("echo never", "someday");
  someday_req.begin = tjob::clock::now() + 24h;
  auto someday = client.train(someday_req);

  auto done = client.wait_for_job_status(later, {job_status::complete}, 60s);
  REQUIRE(done.start_time);
  CHECK(*done.start_time >= begin);  // never before its time
  CHECK(all_of(client.get_job_logs(later)) == "began\n");
  bool said = false;
  for (const auto& e : client.get_job_events(later))
    said |= e.reason == "Waiting" &&
            e.message.find("its begin time " + tjob::format_time(begin)) != std::string::npos;
  CHECK(said);
  CHECK(client.get_job(someday).reason == "Waiting");
  client.cancel_job(someday);
  auto c = client.wait_for_job_status(someday, {job_status::failed}, 30s);
  CHECK(c.reason == "cancelled");
  CHECK(docker_cli(sock, {"ps", "-a", "-q", "--filter", "name=someday-node"}).empty());
  for (const auto& name : {later, someday}) client.delete_job(name);
}

TEST_CASE_TEMPLATE("a container job array runs its members one at a time under its limit of 1", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  auto req = shell_job("echo member $TJOB_ARRAY_INDEX", "sweep");
  auto members = array_members(req, "0-2%1");
  std::vector<std::string> names;
  for (auto& m : members) names.push_back(client.train(m));
  REQUIRE(names.size() == 3);
  std::vector<train_job> done;
  for (const auto& n : names) done.push_back(client.wait_for_job_status(n, {job_status::complete}, 60s));
  for (std::size_t i = 0; i < done.size(); ++i) {
    CHECK(done[i].array == "sweep");
    CHECK(all_of(client.get_job_logs(names[i])) == "member " + std::to_string(i) + "\n");
  }
  // Never two at once: each started after the one before it ended.
  for (std::size_t i = 1; i < done.size(); ++i) {
    REQUIRE(done[i].start_time);
    REQUIRE(done[i - 1].end_time);
    CHECK(*done[i].start_time >= *done[i - 1].end_time);
  }
  for (const auto& n : names) client.delete_job(n);
}

TEST_CASE_TEMPLATE(
    "a waiting container job survives its submitter (its supervisor owns it), and is lost when that "
    "supervisor is killed",
    D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  auto cfg = slots(fx.config(sock), 1);
  cfg.supervisor = tjob::test::tjob_bin();
  trainer_client client(cfg);
  auto holder = started_sleeper(client);
  auto kept = train_detached(shell_job("echo kept", "kept"), cfg);
  auto doomed = train_detached(shell_job("echo doomed", "doomed"), cfg);
  wait_queued(client, kept);
  wait_queued(client, doomed);
  // The queue file names the owner: the supervisor.
  std::ifstream in(fs::path(fx.home()) / "containers" / ".queue" / "doomed.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto owner = static_cast<pid_t>(boost::json::parse(text).at("owner_pid").to_number<std::int64_t>());
  REQUIRE(owner > 0);
  CHECK(owner != ::getpid());
  ::kill(owner, SIGKILL);
  auto lost = client.wait_for_job_status(doomed, {job_status::failed}, 30s);
  CHECK(lost.reason == "lost");
  client.cancel_job(holder);
  client.wait_for_job_status(kept, {job_status::complete}, 60s);
  CHECK(all_of(client.get_job_logs(kept)) == "kept\n");
  CHECK(client.get_job(doomed).reason == "lost");
  CHECK(docker_cli(sock, {"ps", "-a", "-q", "--filter", "name=doomed-node"}).empty());
  for (const auto& n : {holder, kept, doomed}) client.delete_job(n);
}

TEST_CASE_TEMPLATE("a container job that could never fit the budget is refused at submit, naming it", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  auto cfg = fx.config(sock);
  cfg.admission.cpus = 2;
  trainer_client client(cfg);
  auto req = shell_job("true", "huge");
  std::get<command_trainer>(req.job_trainer).cpus = 3;
  CHECK_THROWS_WITH_AS(client.train(req), doctest::Contains("needs 3 CPUs; the CPU budget is 2"), error);
  for (const auto& j : client.list_jobs()) CHECK(j.name != "huge");  // (the daemon's jobs of other homes too)
  CHECK(!fs::exists(fs::path(fx.home()) / "containers" / "huge"));
}

TEST_CASE_TEMPLATE("a container that cannot start is refused with the daemon's reason and leaves nothing", D,
                   TJOB_DAEMONS) {
  // Issue 41: the rollback of a failed start destroyed a path twice (g++ 12)
  // and the process died of a double free.
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock));
  auto r = shell_job("echo never", "nostart");
  std::get<command_trainer>(r.job_trainer).working_dir = "/bin/busybox";  // a file in the image
  auto why = message_of([&] { client.train(r); });
  CAPTURE(why);
  CHECK(why.find("nostart") != std::string::npos);
  CHECK(why.find("node-0") != std::string::npos);
  CHECK(code_of([&] { client.get_job("nostart"); }) == errc::job_not_found);
  CHECK(!fs::exists(fs::path(fx.home()) / "containers" / "nostart"));
  // the name is free again, and the engine goes on
  auto name = client.train(shell_job("echo again", "nostart"));
  client.wait_for_job_status(name, {job_status::complete}, 60s);
  CHECK(all_of(client.get_job_logs(name)) == "again\n");
  client.delete_job(name);
}

namespace {

// Host files a job tries to make tjob write through links (issue 41).
struct victims {
  fs::path dir;
  static constexpr const char* names[] = {"cancelled",     "deadline-exceeded", "admission.json",
                                          "progress.json", "progress.jsonl",    "progress.json.tmp"};
  explicit victims(const fs::path& d) : dir(d) {
    fs::create_directories(dir);
    for (const char* f : names) std::ofstream(dir / f) << "a host file\n";
  }
  void untouched() const {
    for (const char* f : names) {
      std::ifstream in(dir / f, std::ios::binary);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      CHECK_MESSAGE(text == "a host file\n", f);
    }
  }
  // A job that links every name tjob used to write under /workspace/.tjob to
  // a host file, then the directory itself, says what it managed, and waits.
  // Its stderr stays empty: the shell's message for a refused redirection
  // ("sh: can't create ...") could reach the log in pieces around "ready"
  // (CI saw "sh: ready"), so stderr goes to /dev/null before the redirection.
  std::string script() const {
    std::string s = "v=" + dir.string() + "\n";
    s += "for f in cancelled deadline-exceeded admission.json progress.json progress.jsonl "
         "progress.json.tmp; do\n"
         "  busybox ln -sf \"$v/$f\" /workspace/.tjob/$f 2>/dev/null && echo \"linked $f\"\n"
         "done\n"
         "busybox rm -rf /workspace/.tjob 2>/dev/null\n"
         "busybox mv /workspace/.tjob /workspace/moved 2>/dev/null && echo moved\n"
         "busybox ln -s \"$v\" /workspace/.tjob 2>/dev/null && echo relinked\n"
         "echo '{\"progress_percent\": 99}' 2>/dev/null > /workspace/.tjob/progress.json && echo faked\n"
         "echo ready\n"
         "exec sleep 600\n";
    return s;
  }
};

bool said_any(const std::string& log, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (log.find(w) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE_TEMPLATE("a container job cannot make the engine write host files, or fake its own state", D,
                   TJOB_DAEMONS) {
  // Issue 41: tjob kept its files in /workspace/.tjob, the job's to write,
  // and wrote them from the host (as root) following links: a cancel, a
  // deadline or a progress report wrote through a link into any host file.
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  victims v(fs::path(fx.home()).parent_path() / ("victims-" + std::string(D::name)));
  trainer_client client(fx.config(sock));
  auto linker = shell_job(v.script(), "linker-cancel");
  linker.active_deadline = 120s;  // (the bound of the follow below, should the job never say ready)
  auto cancelled = client.train(linker);
  auto deadline = shell_job(v.script(), "linker-deadline");
  deadline.active_deadline = 3s;
  client.train(deadline);
  // A job that writes every name of tjob's state into its workspace, and ends well.
  auto faker = client.train(shell_job(
      "for f in cancelled deadline-exceeded admission.json progress.json progress.jsonl; do\n"
      "  echo '{\"progress_percent\": 99, \"time_ms\": 1}' > /workspace/$f\n"
      "done\n"
      "echo '{\"progress_percent\": 99}' 2>/dev/null > /workspace/.tjob/progress.json && echo faked\n"
      "echo done\n",
      "faker"));

  auto log_of = [&](const std::string& name) { return all_of(client.get_job_logs(name)); };
  {
    auto follow = client.get_job_logs(cancelled, {.follow = true});
    std::optional<std::string> line;
    while ((line = follow.next()) && *line != "ready\n") {
    }
    REQUIRE_MESSAGE(line, "the job never said ready: " << log_of(cancelled));
  }
  client.cancel_job(cancelled);
  auto c = client.wait_for_job_status(cancelled, {job_status::failed}, 60s);
  CHECK(c.reason == "cancelled");
  auto d = client.wait_for_job_status("linker-deadline", {job_status::failed}, 60s);
  CHECK(d.reason == "DeadlineExceeded");
  auto f = client.wait_for_job_status(faker, {job_status::complete}, 60s);
  CHECK(f.reason.empty());
  CHECK(!f.progress_percent);
  for (const auto& name : {cancelled, std::string("linker-deadline"), faker}) {
    auto log = log_of(name);
    CAPTURE(name);
    CAPTURE(log);
    CHECK_FALSE(said_any(log, {"linked", "moved", "relinked", "faked"}));  // /workspace/.tjob is read-only
    CHECK(!client.get_job(name).progress_percent);
  }
  v.untouched();
  // tjob's own files are beside the workspace, out of the job's reach.
  const auto dir = fs::path(fx.home()) / "containers" / cancelled;
  CHECK(fs::exists(dir / "cancelled"));
  CHECK(fs::exists(dir / "admission.json"));
  CHECK(fs::is_directory(dir / "workspace"));
  CHECK(fs::exists(fs::path(fx.home()) / "containers" / "linker-deadline" / "deadline-exceeded"));
  for (const auto& name : {cancelled, std::string("linker-deadline"), faker}) client.delete_job(name);
  v.untouched();
}

TEST_CASE_TEMPLATE("a container job with host networking reports progress to the process that made it", D,
                   TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  auto cfg = fx.config(sock, "host");
  const auto src = tjob::test::source_dir();
  auto volumes = host_volumes;
  volumes.push_back(src + ":" + src + ":ro");
  cfg.backend_config["volumes"] = boost::json::value_from(volumes);
  cfg.backend_config["image"] = "localhost/tjob-host:bookworm";
  trainer_client client(cfg);
  // The helper (import tjob, on the PYTHONPATH tjob gives the job), then a
  // body that is not a report, as Kubeflow's client would send it.
  // It first tries to link the files tjob writes for a report to host files
  // (issue 41): /workspace/.tjob is read-only, and tjob writes elsewhere.
  victims v(fs::path(fx.home()).parent_path() / ("victims-" + std::string(D::name)));
  const std::string code =
      "import os, subprocess, sys, tjob\n"
      "for f in ('progress.json', 'progress.jsonl', 'progress.json.tmp'):\n"
      "    try:\n"
      "        os.symlink('" + v.dir.string() + "/' + f, '/workspace/.tjob/' + f)\n"
      "        print('linked', f, flush=True)\n"
      "    except OSError as e:\n"
      "        print('refused', f, e.errno, flush=True)\n"
      "print(os.environ['KUBEFLOW_TRAINER_SERVER_URL'], flush=True)\n"
      "print('module', tjob.__file__, flush=True)\n"
      "assert tjob.report(progress=50, eta=20, loss=0.5)\n"
      "subprocess.run([sys.executable, '" +
      src +
      "/tests/support/progress_probe.py', 'post', os.environ['KUBEFLOW_TRAINER_SERVER_URL'], "
      "os.environ['KUBEFLOW_TRAINER_SERVER_TOKEN'], '{\"trainerStatus\": {\"progressPercentage\": \"x\"}}'], "
      "check=True)\n";
  train_request r;
  command_trainer t;
  t.command = {"/usr/bin/python3", "-c", code};
  r.job_trainer = t;
  auto name = client.train(r);
  auto job = client.wait_for_job_status(name, {job_status::complete}, 120s);
  auto log = all_of(client.get_job_logs(name));
  CAPTURE(log);
  CHECK(log.find("module /opt/tjob/python/tjob/__init__.py") != std::string::npos);
  CHECK(log.find("linked") == std::string::npos);
  CHECK(log.find("refused progress.jsonl 30") != std::string::npos);  // EROFS
  CHECK(log.find("posted 400") != std::string::npos);
  CHECK(job.progress_percent == 50);
  CHECK(job.estimated_remaining_seconds == 20);
  CHECK(job.metrics == std::vector<std::pair<std::string, std::string>>{{"loss", "0.5"}});
  REQUIRE(job.progress_updated);
  // One Progress event, between the node's start and its end.
  std::vector<std::string> reasons;
  for (const auto& e : client.get_job_events(name))
    if (e.step.empty() || e.reason != "Setup") reasons.push_back(e.reason);
  auto at = std::find(reasons.begin(), reasons.end(), "Progress");
  REQUIRE(at != reasons.end());
  CHECK(std::count(reasons.begin(), reasons.end(), "Progress") == 1);
  CHECK(std::find(reasons.begin(), at, "Started") != at);
  CHECK(std::find(at, reasons.end(), "Exited") != reasons.end());
  // Another process reads the same (from the job's work dir).
  trainer_client other(cfg);
  CHECK(other.get_job(name).progress_percent == 50);

  // After its end, a report with its own token is refused, and nothing changes.
  const auto url = log.substr(log.find("https://"), log.find('\n', log.find("https://")) - log.find("https://"));
  const auto dir = fs::path(fx.home()) / "containers" / name / "inputs";
  auto late =
      tjob::test::run({"/usr/bin/python3", src + "/tests/support/progress_probe.py", "post", url,
                       (dir / "progress-token").string(), R"({"trainerStatus": {"progressPercentage": 90}})"},
                      {{"KUBEFLOW_TRAINER_SERVER_CA_CERT", (dir / "progress-ca.crt").string()}}, 60s);
  CAPTURE(late.err);
  CHECK(late.out.find("posted 409") != std::string::npos);
  CHECK(client.get_job(name).progress_percent == 50);
  client.delete_job(name);
  v.untouched();
}

TEST_CASE_TEMPLATE("a container job without host networking gets no progress endpoint", D, TJOB_DAEMONS) {
  fixture fx;
  auto sock = socket_of(D::name);
  if (sock.empty()) return;
  trainer_client client(fx.config(sock, "none"));
  auto name = client.train(shell_job("echo \"url=${KUBEFLOW_TRAINER_SERVER_URL:-none}\""));
  client.wait_for_job_status(name, {job_status::complete}, 60s);
  CHECK(all_of(client.get_job_logs(name)) == "url=none\n");
  client.delete_job(name);
}
