// The behaviours every backend must have, written once and run against each
// registered backend with its real peer: local processes, dockerd and Podman
// (the container_peers fixture), the Kubernetes API stand-in, a tjob serve
// (remote), a private Slurm cluster (the slurm_peer fixture), and the tests'
// own in-memory backend, which only this binary
// registers (adding it touched no file outside the tests).
//
// A job here is a small program, `print TEXT`, `sleep MS`, `exit CODE`,
// `forever`, which each target writes in its own terms (the test helper's
// arguments, a busybox shell line, the memory backend's program).
#include "tests/conformance/memory_backend.hpp"
#include "tests/support/test_support.hpp"

#include <tjob/client.hpp>

#include <doctest/doctest.h>

#include <boost/json/object.hpp>

#include <sys/stat.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace tjob;
using namespace std::chrono_literals;
using tjob::test::code_of;
using tjob::test::message_of;
namespace fs = std::filesystem;

namespace {

struct op {
  std::string what, arg;
};
using program = std::vector<op>;

op print(std::string text) { return {"print", std::move(text)}; }
op sleep_ms(int ms) { return {"sleep", std::to_string(ms)}; }
op exit_with(int code) { return {"exit", std::to_string(code)}; }
op forever() { return {"forever", {}}; }

// The test helper's arguments (local, kubernetes, remote over local).
std::vector<std::string> helper_argv(const program& p) {
  std::vector<std::string> argv{tjob::test::helper_bin()};
  for (const auto& o : p) {
    if (o.what == "forever") {
      argv.insert(argv.end(), {"sleep", "600000"});
      continue;
    }
    argv.push_back(o.what);
    argv.push_back(o.arg);
  }
  return argv;
}

// A busybox shell line, every text an argument of its own (data, never code).
std::vector<std::string> shell_argv(const program& p) {
  std::string script;
  std::vector<std::string> args;
  for (const auto& o : p) {
    if (o.what == "print") {
      args.push_back(o.arg);
      script += "printf '%s' \"$" + std::to_string(args.size()) + "\"; ";
    } else if (o.what == "sleep") {
      script += "busybox usleep " + std::to_string(std::stoll(o.arg) * 1000) + "; ";
    } else if (o.what == "exit") {
      script += "exit " + o.arg + "; ";
    } else if (o.what == "forever") {
      script += "exec sleep 600; ";
    }
  }
  std::vector<std::string> argv{"sh", "-c", script, "job"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::vector<std::string> memory_argv(const program& p) {
  std::vector<std::string> argv;
  for (const auto& o : p) {
    argv.push_back(o.what);
    if (o.what != "forever") argv.push_back(o.arg);
  }
  return argv;
}

train_request command_job(std::vector<std::string> argv, std::string name, std::string image = {}) {
  train_request r;
  r.name = std::move(name);
  command_trainer t;
  t.command = std::move(argv);
  t.image = std::move(image);
  r.job_trainer = std::move(t);
  return r;
}

fs::path peers_dir() {
  const char* d = std::getenv("TJOB_TEST_PEERS");
  return d ? fs::path(d) : fs::path("/nonexistent");
}

// --- the targets: one per backend and peer ----------------------------------

struct local_target {
  static constexpr const char* name = "local";
  tjob::test::home_fixture fx;
  bool ready() { return true; }
  engine_config config() { return fx.config(3s); }
  train_request job(const program& p, std::string n) { return command_job(helper_argv(p), std::move(n)); }
};

template <const char* Daemon>
struct container_target {
  static constexpr const char* name = Daemon;
  tjob::test::home_fixture fx;
  std::string socket = (peers_dir() / (std::string(Daemon) + ".sock")).string();
  bool ready() {
    struct stat st {};
    if (::stat(socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return true;
    tjob::test::skip(std::string(Daemon) + " is not running at " + socket + " (the container_peers fixture)");
    return false;
  }
  engine_config config() {
    auto c = fx.config(3s);
    c.backend = "container";
    c.backend_config = {{"container_host", "unix://" + socket}, {"network", "none"}};
    return c;
  }
  train_request job(const program& p, std::string n) {
    return command_job(shell_argv(p), std::move(n), "localhost/tjob-bb:latest");
  }
};
constexpr char docker_name[] = "docker";
constexpr char podman_name[] = "podman";
using docker_target = container_target<docker_name>;
using podman_target = container_target<podman_name>;

struct kubernetes_target {
  static constexpr const char* name = "kubernetes";
  tjob::test::home_fixture fx;
  tjob::test::kube_standin cluster;
  bool ready() { return true; }
  engine_config config() {
    auto c = fx.config(3s);
    c.backend = "kubernetes";
    c.backend_config = cluster.config();
    return c;
  }
  train_request job(const program& p, std::string n) { return command_job(helper_argv(p), std::move(n)); }
};

// A tjob serve on a local home, and the remote backend as its client.
struct remote_target {
  static constexpr const char* name = "remote";
  tjob::test::home_fixture fx;
  std::unique_ptr<tjob::test::background> server;
  bool ready() {
    server = std::make_unique<tjob::test::background>(
        std::vector<std::string>{tjob::test::tjob_bin(), "serve"},
        std::map<std::string, std::string>{{"TJOB_HOME", fx.home()}});
    REQUIRE(server->wait_for_stderr("msg=listening", 60s));
    return true;
  }
  engine_config config() {
    engine_config c;
    c.home = (fx.dir.path() / "client-home").string();
    c.backend = "remote";
    c.backend_config = {{"server", "unix://" + fx.home() + "/tjob.sock"}};
    return c;
  }
  train_request job(const program& p, std::string n) { return command_job(helper_argv(p), std::move(n)); }
};

// A private Slurm cluster (the slurm_peer fixture) of one node, whose nodes
// of a job are tasks packed on it; the jobs' files under the home.
struct slurm_target {
  static constexpr const char* name = "slurm";
  tjob::test::home_fixture fx;
  std::string conf;
  bool ready() {
    auto c = tjob::test::slurm_conf();
    if (!c) return false;
    conf = *c;
    return true;
  }
  engine_config config() {
    auto c = fx.config(3s);
    c.backend = "slurm";
    c.backend_config = {{"slurm_conf", conf}, {"pack_nodes", true}};
    return c;
  }
  train_request job(const program& p, std::string n) { return command_job(helper_argv(p), std::move(n)); }
};

struct memory_target {
  static constexpr const char* name = "memory";
  tjob::test::home_fixture fx;
  bool ready() {
    tjob::test::memory::register_once();
    return true;
  }
  engine_config config() {
    auto c = fx.config(3s);
    c.backend = "memory";
    return c;
  }
  train_request job(const program& p, std::string n) { return command_job(memory_argv(p), std::move(n)); }
};

bool listed(trainer_client& c, const std::string& name) {
  for (const auto& j : c.list_jobs())
    if (j.name == name) return true;
  return false;
}

}  // namespace

#define TJOB_BACKENDS \
  local_target, docker_target, podman_target, kubernetes_target, remote_target, slurm_target, memory_target

TEST_CASE_TEMPLATE("conformance: a job runs to Complete, and is got, listed and logged alike", T, TJOB_BACKENDS) {
  T t;
  if (!t.ready()) return;
  trainer_client c(t.config());
  auto name = c.train(t.job({print("hello\n"), print("world\n"), exit_with(0)}, "hello"));
  CHECK(name == "hello");
  auto job = c.wait_for_job_status(name, {job_status::complete}, 120s);
  CHECK(job.status == job_status::complete);
  CHECK(job.reason.empty());
  REQUIRE(!job.steps.empty());
  CHECK(job.steps[0].name == "node-0");
  CHECK(job.steps[0].status == job_status::complete);
  CHECK(job.start_time);
  CHECK(job.end_time);
  CHECK(c.get_job(name).status == job_status::complete);
  CHECK(listed(c, name));
  CHECK(c.get_job_logs(name).read_all() == "hello\nworld\n");
  c.delete_job(name);
}

TEST_CASE_TEMPLATE("conformance: a failing job is Failed with its exit code, and a wait for Complete says why",
                   T, TJOB_BACKENDS) {
  T t;
  if (!t.ready()) return;
  trainer_client c(t.config());
  auto name = c.train(t.job({print("something broke\n"), exit_with(3)}, "broken"));
  auto why = message_of([&] { c.wait_for_job_status(name, {job_status::complete}, 120s); });
  CAPTURE(why);
  CHECK(code_of([&] { c.wait_for_job_status(name, {job_status::complete}, 120s); }) == errc::job_failed);
  CHECK(why.find("broken") != std::string::npos);
  CHECK(why.find("something broke") != std::string::npos);  // its last lines
  auto job = c.get_job(name);
  CHECK(job.status == job_status::failed);
  REQUIRE(!job.steps.empty());
  CHECK(job.steps[0].exit_code == 3);
  CHECK(job.reason.find("3") != std::string::npos);
  c.delete_job(name);
}

TEST_CASE_TEMPLATE("conformance: logs by tail, and followed from before the job ends to its end", T,
                   TJOB_BACKENDS) {
  T t;
  if (!t.ready()) return;
  trainer_client c(t.config());
  auto name = c.train(t.job({print("a\n"), print("b\n"), sleep_ms(1500), print("c\n"), exit_with(0)}, "logged"));
  // followed at once: whatever the job has written by then, and the rest as it comes
  CHECK(c.get_job_logs(name, {.follow = true}).read_all() == "a\nb\nc\n");
  c.wait_for_job_status(name, {job_status::complete}, 120s);
  CHECK(c.get_job_logs(name, {.tail = 1}).read_all() == "c\n");
  CHECK(c.get_job_logs(name, {.tail = 2}).read_all() == "b\nc\n");
  CHECK(c.get_job_logs(name, {.follow = true}).read_all() == "a\nb\nc\n");  // an ended job: its whole log
  c.delete_job(name);
}

TEST_CASE_TEMPLATE("conformance: a running job is cancelled: Failed, reason cancelled", T, TJOB_BACKENDS) {
  T t;
  if (!t.ready()) return;
  trainer_client c(t.config());
  auto name = c.train(t.job({print("up\n"), forever()}, "stopped"));
  c.wait_for_job_status(name, {job_status::running}, 120s);
  c.cancel_job(name);
  auto job = c.wait_for_job_status(name, {job_status::failed}, 120s);
  CHECK(job.reason == "cancelled");
  c.cancel_job(name);  // an ended job: nothing to do, no error
  c.delete_job(name);
}

TEST_CASE_TEMPLATE("conformance: delete removes the job, and then it is not found by name", T, TJOB_BACKENDS) {
  T t;
  if (!t.ready()) return;
  trainer_client c(t.config());
  auto name = c.train(t.job({exit_with(0)}, "gone"));
  c.wait_for_job_status(name, {job_status::complete}, 120s);
  c.delete_job(name);
  CHECK(code_of([&] { c.get_job(name); }) == errc::job_not_found);
  CHECK(message_of([&] { c.get_job(name); }).find("'gone'") != std::string::npos);
  CHECK(!listed(c, name));
  CHECK(code_of([&] { c.get_job("never-was"); }) == errc::job_not_found);
}

TEST_CASE_TEMPLATE("conformance: a job's events are in order", T, TJOB_BACKENDS) {
  T t;
  if (!t.ready()) return;
  trainer_client c(t.config());
  auto name = c.train(t.job({print("x\n"), exit_with(0)}, "evented"));
  c.wait_for_job_status(name, {job_status::complete}, 120s);
  auto events = c.get_job_events(name);
  REQUIRE(!events.empty());
  for (std::size_t i = 1; i < events.size(); ++i) {
    CHECK(events[i].seq > events[i - 1].seq);
    CHECK(!events[i].reason.empty());
  }
  c.delete_job(name);
}

TEST_CASE_TEMPLATE("conformance: bad input is refused before anything is made", T, TJOB_BACKENDS) {
  T t;
  if (!t.ready()) return;
  trainer_client c(t.config());
  auto before = c.list_jobs().size();
  CHECK(code_of([&] { c.train(t.job({exit_with(0)}, "Bad_Name")); }) == errc::invalid_name);
  auto r = t.job({exit_with(0)}, "no-runtime");
  r.runtime = "no-such-runtime";
  CHECK(code_of([&] { c.train(r); }) == errc::runtime_not_found);
  CHECK(c.list_jobs().size() == before);
  // a config the backend does not know is refused by name, before any engine
  auto cfg = t.config();
  cfg.backend_config["no_such_option"] = true;
  auto why = message_of([&] { trainer_client bad(cfg); });
  CHECK(why.find("no_such_option") != std::string::npos);
}

TEST_CASE_TEMPLATE(
    "conformance: a directory sent with a job is taken where the backend can, else refused by name", T,
    TJOB_BACKENDS) {
  // Issue 40: a remote backend forwards it to its server's engine (here on
  // its unix socket, so the path is the server machine's own).
  T t;
  if (!t.ready()) return;
  trainer_client c(t.config());
  const auto src = t.fx.dir.path() / "project";
  fs::create_directories(src);
  std::ofstream(src / "n.txt") << "21\n";
  auto r = t.job({print("sent\n")}, "sent-dir");
  std::get<command_trainer>(r.job_trainer).code_dir = src.string();
  const auto runs = c.job_backend();
  if (runs.takes_code_dir) {
    auto name = c.train(r);
    CHECK(c.wait_for_job_status(name, {job_status::complete}, 120s).status == job_status::complete);
    CHECK(c.get_job_logs(name).read_all() == "sent\n");
    c.delete_job(name);
  } else {
    auto before = c.list_jobs().size();
    auto why = message_of([&] { c.train(r); });
    CHECK(code_of([&] { c.train(r); }) == errc::invalid_argument);
    CHECK_MESSAGE(
        why.find("the " + runs.id + " backend cannot send a directory with a job") != std::string::npos, why);
    CHECK(c.list_jobs().size() == before);
  }
}
