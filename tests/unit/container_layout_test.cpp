// The pure parts of the container backend: log frames, line splitting,
// endpoints, the create body (GPU DeviceRequest included) and status mapping.
#include "adapters/container/container_config.hpp"
#include "adapters/container/docker_api.hpp"
#include "adapters/container/job_dir.hpp"
#include "adapters/container/layout.hpp"
#include "adapters/http/http_client.hpp"

#include <tjob/error.hpp>

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>
#include <boost/json/serialize.hpp>

using namespace tjob;
using namespace tjob::container;
namespace json = boost::json;

namespace {
std::string frame(int stream, const std::string& payload) {
  std::string h(8, '\0');
  h[0] = static_cast<char>(stream);
  auto n = payload.size();
  h[4] = static_cast<char>((n >> 24) & 0xff);
  h[5] = static_cast<char>((n >> 16) & 0xff);
  h[6] = static_cast<char>((n >> 8) & 0xff);
  h[7] = static_cast<char>(n & 0xff);
  return h + payload;
}
errc code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tjob::error& e) {
    return static_cast<errc>(e.code().value());
  }
  return errc{};
}
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tjob::error& e) {
    return e.what();
  }
  return {};
}
// What a failed step means to tjob (errc{} when it did not fail).
errc meaning(const detail::outcome<void>& r) { return r ? errc{} : detail::errc_of(r.error().code); }
}  // namespace

TEST_CASE("frame_decoder splits multiplexed frames fed byte by byte") {
  std::string bytes = frame(1, "out1\n") + frame(2, "err1\n") + frame(1, "") + frame(1, "out2\n");
  frame_decoder d;
  std::string out, err;
  for (char c : bytes)
    d.feed(std::string_view(&c, 1), [&](int s, std::string_view p) { (s == 2 ? err : out) += p; });
  CHECK(out == "out1\nout2\n");
  CHECK(err == "err1\n");
  CHECK(d.at_boundary());
  d.feed(frame(1, "abc").substr(0, 5), [](int, std::string_view) {});
  CHECK_FALSE(d.at_boundary());
}

TEST_CASE("frame_decoder rejects an oversized or malformed frame and passes TTY streams raw") {
  frame_decoder small(false, 16);
  auto oversized = small.feed(frame(1, std::string(17, 'x')), [](int, std::string_view) {});
  CHECK(meaning(oversized) == errc::protocol_error);
  CHECK(oversized.error().code == docker_errc::bad_answer);
  CHECK(oversized.error().message.find("over the limit of 16") != std::string::npos);
  frame_decoder d;
  CHECK(meaning(d.feed(std::string_view("\x07\0\0\0\0\0\0\x01x", 9), [](int, std::string_view) {})) ==
        errc::protocol_error);
  frame_decoder raw(true);
  std::string got;
  raw.feed("plain\r\ntext", [&](int s, std::string_view p) {
    CHECK(s == 1);
    got += p;
  });
  CHECK(got == "plain\r\ntext");
}

TEST_CASE("line_splitter keeps lines across pieces and bounds a line") {
  http::line_splitter s(10, "events");
  std::vector<std::string> out;
  CHECK(s.feed("ab", out));
  CHECK(s.feed("c\r\nde\nf", out));
  CHECK(out == std::vector<std::string>{"abc", "de"});
  CHECK(s.finish() == std::optional<std::string>("f"));
  auto too_long = s.feed(std::string(11, 'x'), out);
  CHECK(too_long.error().code == http::http_errc::too_large);
  CHECK(meaning(too_long) == errc::protocol_error);
  CHECK(too_long.error().message.find("events") != std::string::npos);
}

TEST_CASE("parse_endpoint takes unix sockets and TCP, and explains what it refuses") {
  auto u = http::parse_endpoint("unix:///run/docker.sock");
  CHECK(u.type == http::endpoint::kind::unix_socket);
  CHECK(u.path == "/run/docker.sock");
  CHECK(http::parse_endpoint("/tmp/x.sock").path == "/tmp/x.sock");
  auto t = http::parse_endpoint("tcp://127.0.0.1:2375");
  CHECK(t.type == http::endpoint::kind::tcp);
  CHECK(t.host == "127.0.0.1");
  CHECK(t.port == 2375);
  CHECK(http::parse_endpoint("http://[::1]:80").host == "::1");
  for (const char* bad : {"ftp://x", "unix://relative", "tcp://host", "tcp://h:99999", "tcp://h:x"})
    CHECK(code_of([&] { http::parse_endpoint(bad); }) == errc::invalid_argument);
}

TEST_CASE("url_encode leaves unreserved characters alone") {
  CHECK(http::url_encode("a-b_c.d~e") == "a-b_c.d~e");
  CHECK(http::url_encode("{\"label\":[\"a=b\"]}") == "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D");
}

TEST_CASE("create_body lays a node out as Kubeflow does, with limits and a GPU request") {
  node_spec n;
  n.job = "j1";
  n.step = "node-1";
  n.container_name = node_name("j1", 1);
  n.image = "localhost/img:1";
  n.network_id = "net123";
  n.runtime = "torch-distributed";
  n.workdir = "/home/u/.tjob/containers/j1";
  n.workspace_dir = "/home/u/.tjob/containers/j1/workspace";
  n.inputs_dir = "/home/u/.tjob/containers/j1/inputs";
  n.checkpoints_dir = "/home/u/.tjob/containers/j1/checkpoints";
  n.cmd = {"python3", "x.py"};
  n.env = {{"A", "1; $(rm -rf /)"}};
  n.network = container_network::job;
  n.network_name = network_name("j1");
  n.volumes = {"/data:/data:ro"};
  n.memory = 268435456;
  n.nano_cpus = 500000000;
  n.gpus = 2;
  n.hostname = n.container_name;
  n.extra_hosts = {"j1-node-0:192.0.2.7"};
  auto b = create_body(n);
  auto& labels = b.at("Labels").as_object();
  CHECK(labels.at(label_job) == "j1");
  CHECK(labels.at(label_step) == "node-1");
  CHECK(labels.at(label_network) == "net123");
  CHECK(b.at("Env").as_array()[0] == "A=1; $(rm -rf /)");  // data, never a shell line
  CHECK(b.at("WorkingDir") == "/workspace");
  auto& host = b.at("HostConfig").as_object();
  CHECK(host.at("NetworkMode") == "j1-net");
  CHECK(host.at("Init") == true);
  CHECK(host.at("Memory") == 268435456);
  CHECK(host.at("NanoCpus") == 500000000);
  // The workspace is the job's; its inputs are bound read-only on top, at
  // /workspace/.tjob; tjob's own state (the job's dir) is not bound at all.
  CHECK(labels.at(label_workdir) == "/home/u/.tjob/containers/j1");
  CHECK(host.at("Binds").as_array()[0] == "/home/u/.tjob/containers/j1/workspace:/workspace:rw");
  CHECK(host.at("Binds").as_array()[1] == "/home/u/.tjob/containers/j1/inputs:/workspace/.tjob:ro");
  CHECK(host.at("Binds").as_array()[2] == "/home/u/.tjob/containers/j1/checkpoints:/tjob/checkpoints:rw");
  CHECK(host.at("Binds").as_array()[3] == "/data:/data:ro");
  CHECK(b.at("Env").as_array()[1] == "TJOB_CHECKPOINT_DIR=/tjob/checkpoints");
  CHECK(json::serialize(host.at("DeviceRequests")) ==
        R"([{"Driver":"","Count":2,"DeviceIDs":null,"Capabilities":[["gpu"]],"Options":{}}])");
  CHECK(b.at("NetworkingConfig").at("EndpointsConfig").at("j1-net").at("Aliases").as_array()[0] ==
        "j1-node-1");
  // Issue 42: node-0's name reaches every node by /etc/hosts, not by DNS.
  CHECK(b.at("Hostname") == "j1-node-1");
  CHECK(json::serialize(host.at("ExtraHosts")) == R"(["j1-node-0:192.0.2.7"])");

  n.network = container_network::host;
  n.hostname.clear();
  n.extra_hosts.clear();
  n.gpus = 0;
  auto h = create_body(n);
  CHECK(h.at("HostConfig").at("NetworkMode") == "host");
  CHECK_FALSE(h.at("HostConfig").as_object().contains("DeviceRequests"));
  CHECK_FALSE(h.contains("NetworkingConfig"));
  CHECK_FALSE(h.contains("Hostname"));
  CHECK_FALSE(h.at("HostConfig").as_object().contains("ExtraHosts"));
  n.network = container_network::none;
  CHECK(create_body(n).at("HostConfig").at("NetworkMode") == "none");
  CHECK_FALSE(create_body(n).at("HostConfig").as_object().contains("RestartPolicy"));
  // Retries: the daemon's restart policy, and a label that says how many.
  n.max_restarts = 3;
  auto r = create_body(n);
  CHECK(json::serialize(r.at("HostConfig").at("RestartPolicy")) ==
        R"({"Name":"on-failure","MaximumRetryCount":3})");
  CHECK(r.at("Labels").at(label_max_restarts) == "3");
}

TEST_CASE("status_of maps container states as Kubeflow does") {
  CHECK(status_of("running", std::nullopt) == job_status::running);
  CHECK(status_of("created", std::nullopt) == job_status::created);
  CHECK(status_of("restarting", 3) == job_status::created);  // between attempts (restart policy)
  CHECK(status_of("exited", 0) == job_status::complete);
  CHECK(status_of("exited", 1) == job_status::failed);
  CHECK(status_of("exited", std::nullopt) == job_status::failed);
  CHECK(status_of("dead", 137) == job_status::failed);
}

TEST_CASE("check_volume wants SOURCE:CONTAINER[:ro|rw], SOURCE a host path or a volume's name") {
  check_volume("/usr:/usr:ro");
  check_volume("/data:/data");
  check_volume("datasets:/data:ro");  // a named volume (issue 40)
  check_volume("my_vol.1-a:/cache");
  for (const char* bad :
       {"./usr:/usr", "/usr", "/a:/b:xx", "/a:/workspace", "/a:rel", "/a:/workspace/.tjob",
        "/a:/workspace/.tjob/x:ro", "/a:/tjob/checkpoints", "-vol:/x", "v:/x", "a b:/x", ":/x", "vol:"})
    CHECK_MESSAGE(code_of([&] { check_volume(bad); }) == errc::invalid_argument, bad);
  CHECK(message_of([] {
          check_volume("./usr:/usr");
        }).find("the source must be an absolute path or a volume's name") != std::string::npos);
}

TEST_CASE("the backend's env is NAME=VALUE entries, the value free, and a bad one names its flag") {
  auto flag = [](std::string_view m) { return m == "env" ? std::string("--container-env") : std::string(m); };
  auto c = config_of(json::object{{"env", json::array{"A=1", "PROXY=http://p:3128/a=b", "EMPTY="}}}, flag);
  CHECK(c.env ==
        std::map<std::string, std::string>{{"A", "1"}, {"PROXY", "http://p:3128/a=b"}, {"EMPTY", ""}});
  for (const char* bad : {"A", "=1", ""}) {
    auto said = message_of([&] { config_of(json::object{{"env", json::array{bad}}}, flag); });
    CHECK_MESSAGE(said.find("--container-env") != std::string::npos, said);
    CHECK_MESSAGE(said.find("expected NAME=VALUE") != std::string::npos, said);
  }
}

TEST_CASE("a daemon's container events are told in the event log's vocabulary, the action kept") {
  using tjob::detail::log_event;
  CHECK(log_event_of_action("create") == log_event::created);
  CHECK(log_event_of_action("start") == log_event::started);
  CHECK(log_event_of_action("die") == log_event::exited);
  CHECK(log_event_of_action("died") == log_event::exited);  // Podman's word
  CHECK(log_event_of_action("oom") == log_event::exited);
  CHECK(log_event_of_action("kill") == log_event::cancel_requested);
  CHECK(log_event_of_action("stop") == log_event::cancel_requested);
  CHECK(log_event_of_action("exec_start: sh -c true") == log_event::setup);
  CHECK(log_event_of_action("destroy") == log_event::setup);
  CHECK(log_event_of_action("") == log_event::setup);
  auto e = event_of_line(
      R"({"Type":"container","Action":"die","timeNano":1700000000000000000,)"
      R"("Actor":{"Attributes":{"name":"j-node-1","trainer.kubeflow.org/step":"node-1","exitCode":"3"}}})",
      7);
  REQUIRE(e.has_value());
  CHECK(e->seq == 7);
  CHECK(e->reason == "Exited");
  CHECK(e->step == "node-1");
  CHECK(e->message == "container j-node-1: die (exit code 3)");
  auto podman =
      event_of_line(R"({"status":"start","Type":"container","Actor":{"Attributes":{"name":"p"}}})", 1);
  REQUIRE(podman.has_value());
  CHECK(podman->reason == "Started");
  CHECK(podman->message == "container p: start");
}

namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    char t[] = "/tmp/tjob-jobdir-XXXXXX";
    path = ::mkdtemp(t);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("a job's state files are written without following a link the job may have made (issue 41)") {
  namespace fs = std::filesystem;
  temp_dir t;
  const auto containers = t.path / "containers";
  const auto victim = t.path / "victim";
  fs::create_directories(victim);
  for (const char* f : {"cancelled", "deadline-exceeded", "progress.jsonl", "progress.json", "hard"})
    std::ofstream(victim / f) << "host file\n";
  auto untouched = [&] {
    for (const char* f : {"cancelled", "deadline-exceeded", "progress.jsonl", "progress.json", "hard"})
      CHECK_MESSAGE(read_file(victim / f) == "host file\n", f);
  };

  SUBCASE("a job of the old layout: its state was inside its workspace") {
    // containers/j/.tjob/ was /workspace/.tjob, the job's to write: every
    // name a link to a host file, and a hard link to one.
    const auto state = containers / "j" / ".tjob";
    fs::create_directories(state);
    for (const char* f : {"cancelled", "deadline-exceeded", "progress.jsonl", "progress.json"})
      fs::create_symlink(victim / f, state / f);
    fs::create_symlink(victim / "progress.json", state / "progress.json.tmp");
    fs::create_hard_link(victim / "hard", state / "admission.json");
    auto d = job_dir::open(containers, "j");
    REQUIRE(d);
    CHECK(d->legacy());
    CHECK_FALSE(d->exists("cancelled"));      // a link is not a marker
    CHECK(d->read("progress.json").empty());  // nor a file to read
    d->mark("cancelled");                     // made in place of nothing: the link stays, unfollowed
    d->mark("deadline-exceeded", "3\n");
    d->replace("progress.json", "{}");  // replaces the link itself
    CHECK(d->read("progress.json") == "{}");
    CHECK(fs::is_symlink(state / "cancelled"));
    CHECK(code_of([&] { d->append("progress.jsonl", "x\n"); }) == errc::invalid_argument);
    CHECK(code_of([&] { d->append("admission.json", "x\n"); }) == errc::invalid_argument);  // two names
    untouched();
  }

  SUBCASE("the layout of now: its state is beside its workspace, out of its reach") {
    fs::create_directories(containers / "j" / "workspace" / ".tjob");
    fs::create_directories(containers / "j" / "inputs");
    auto d = job_dir::open(containers, "j");
    REQUIRE(d);
    CHECK_FALSE(d->legacy());
    d->mark("cancelled");
    CHECK(d->exists("cancelled"));
    CHECK(fs::exists(containers / "j" / "cancelled"));
    d->append("progress.jsonl", "a\n");
    d->append("progress.jsonl", "b\n");
    CHECK(d->read("progress.jsonl") == "a\nb\n");
    d->remove("progress.jsonl");
    CHECK_FALSE(d->exists("progress.jsonl"));
    untouched();
  }

  SUBCASE("the job's directory itself a link: not opened") {
    fs::create_directories(containers);
    fs::create_symlink(victim, containers / "j");
    CHECK_FALSE(job_dir::open(containers, "j"));
    CHECK_FALSE(job_dir::open(containers, ".."));
    CHECK_FALSE(job_dir::open(containers, "a/b"));
    CHECK(code_of([&] { make_private_dir(containers / "j"); }) == errc::invalid_argument);
    untouched();
  }
}
