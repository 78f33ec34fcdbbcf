// The Kubernetes adapter's pure parts: kubeconfig loading and merging, the
// TrainJob body, Kubeflow's status and step rules, watch lines and Status
// errors; and the API client's token re-read, against the stand-in.
#include "adapters/kubernetes/kube_api.hpp"
#include "adapters/kubernetes/kubeconfig.hpp"
#include "adapters/kubernetes/trainjob.hpp"
#include "core/times.hpp"
#include "tests/support/test_support.hpp"

#include <doctest/doctest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>

#include <cstdlib>
#include <fstream>

using namespace tjob;
using namespace tjob::kube;
using tjob::test::code_of;
using tjob::test::message_of;
namespace json = boost::json;

namespace {

void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

// KUBECONFIG for one scope.
struct kubeconfig_env {
  std::optional<std::string> old;
  explicit kubeconfig_env(const std::string& v) {
    if (const char* o = std::getenv("KUBECONFIG")) old = o;
    ::setenv("KUBECONFIG", v.c_str(), 1);
  }
  ~kubeconfig_env() {
    if (old)
      ::setenv("KUBECONFIG", old->c_str(), 1);
    else
      ::unsetenv("KUBECONFIG");
  }
};

const char* two_contexts = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c1
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: ca.pem
- name: c2
  cluster:
    server: https://example.invalid
    insecure-skip-tls-verify: true
users:
- name: u1
  user:
    token: s3cr3t-token-value
- name: u2
  user:
    tokenFile: tok
contexts:
- name: dev
  context: {cluster: c1, user: u1, namespace: team-a}
- name: prod
  context: {cluster: c2, user: u2}
)";

json::object parse(const char* text) { return json::parse(text).as_object(); }

std::vector<pod_step> steps(const std::vector<json::object>& pods) {
  std::vector<const json::object*> p;
  for (const auto& x : pods) p.push_back(&x);
  return steps_from_pods(p);
}

json::object pod(const std::string& name, int index, const std::string& phase, const std::string& created,
                 std::optional<int> exit = std::nullopt) {
  json::object state;
  if (exit)
    state["terminated"] = json::object{{"exitCode", *exit}, {"reason", *exit ? "Error" : "Completed"}};
  else
    state["running"] = json::object{};
  return json::object{
      {"metadata", json::object{{"name", name},
                                {"creationTimestamp", created},
                                {"labels", json::object{{label_jobset, "j"},
                                                        {label_rjob, "node"},
                                                        {label_index, std::to_string(index)}}}}},
      {"status",
       json::object{{"phase", phase},
                    {"containerStatuses", json::array{json::object{{"name", "node"}, {"state", state}}}}}}};
}

}  // namespace

TEST_CASE("a kubeconfig gives the current context's cluster, user and namespace") {
  tjob::test::temp_dir d;
  write(d.path() / "config", two_contexts);
  write(d.path() / "ca.pem", "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n");
  write(d.path() / "tok", "file-token\n");
  load_options o;
  o.config_file = (d.path() / "config").string();
  o.in_cluster_dir.clear();
  auto c = load(o);
  CHECK(c.server == "https://10.0.0.1:6443");
  CHECK(c.token == "s3cr3t-token-value");
  CHECK(c.ns == "team-a");
  CHECK(c.context == "dev");
  CHECK(c.tls.ca_pem.find("BEGIN CERTIFICATE") != std::string::npos);  // relative to the file
  CHECK_FALSE(c.tls.insecure_skip_verify);

  o.context = "prod";
  c = load(o);
  CHECK(c.server == "https://example.invalid");
  CHECK(c.token == "file-token");
  CHECK(c.token_file == d.path() / "tok");  // read again as it rotates
  CHECK(c.ns == "default");
  CHECK(c.tls.insecure_skip_verify);
  o.ns = "other";
  CHECK(load(o).ns == "other");
}

TEST_CASE("KUBECONFIG lists are merged as kubectl merges them: the first file wins") {
  tjob::test::temp_dir d;
  write(d.path() / "a", R"(current-context: first
clusters: [{name: c, cluster: {server: "https://a:1"}}]
users: [{name: u, user: {token: from-a}}]
contexts: [{name: first, context: {cluster: c, user: u}}]
)");
  write(d.path() / "b", R"(current-context: second
clusters: [{name: c, cluster: {server: "https://b:2"}}, {name: d, cluster: {server: "https://d:4"}}]
users: [{name: u, user: {token: from-b}}]
contexts: [{name: second, context: {cluster: d, user: u, namespace: nb}}]
)");
  kubeconfig_env env((d.path() / "a").string() + ":" + (d.path() / "missing").string() + ":" +
                     (d.path() / "b").string());
  load_options o;
  o.in_cluster_dir.clear();
  auto c = load(o);
  CHECK(c.context == "first");  // current-context of the first file that sets it
  CHECK(c.server == "https://a:1");
  CHECK(c.token == "from-a");
  o.context = "second";
  c = load(o);
  CHECK(c.server == "https://d:4");  // only b has cluster d
  CHECK(c.token == "from-a");        // user u is a's
  CHECK(c.ns == "nb");
}

TEST_CASE("bad kubeconfigs are named with the file and the fix, and no secret is shown") {
  tjob::test::temp_dir d;
  auto file = (d.path() / "config").string();
  load_options o;
  o.config_file = file;
  o.in_cluster_dir.clear();

  write(file, "clusters: [unclosed\n  token: s3cr3t-token-value");
  auto m = message_of([&] { load(o); });
  CHECK(m.find("is not YAML") != std::string::npos);
  CHECK(m.find(file) != std::string::npos);
  CHECK(m.find("line") != std::string::npos);

  write(file, two_contexts);
  o.context = "nope";
  m = message_of([&] { load(o); });
  CHECK(m.find("no context 'nope'") != std::string::npos);
  CHECK(m.find("dev, prod") != std::string::npos);
  CHECK(m.find("--context") != std::string::npos);
  CHECK(m.find("s3cr3t") == std::string::npos);

  o.context = "dev";  // its CA file is missing
  m = message_of([&] { load(o); });
  CHECK(m.find("ca.pem") != std::string::npos);
  CHECK(m.find("s3cr3t") == std::string::npos);

  write(file, R"(current-context: x
clusters: [{name: c, cluster: {server: "https://a:1", certificate-authority-data: "not base64!"}}]
users: [{name: u, user: {exec: {command: aws}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)");
  o.context.clear();
  CHECK(message_of([&] { load(o); }).find("certificate-authority-data is not base64") != std::string::npos);
  write(file, R"(current-context: x
clusters: [{name: c, cluster: {server: "https://a:1"}}]
users: [{name: u, user: {exec: {command: aws}}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
)");
  CHECK(message_of([&] { load(o); }).find("exec or auth-provider plugin") != std::string::npos);
  write(file, "contexts: []\n");
  CHECK(message_of([&] { load(o); }).find("names no current-context") != std::string::npos);
  o.config_file = (d.path() / "absent").string();
  CHECK(message_of([&] { load(o); }).find("does not exist") != std::string::npos);
  CHECK(code_of([&] { load(o); }) == errc::invalid_argument);
}

TEST_CASE("inside a pod the service account is used, as Kubeflow does without a config file") {
  tjob::test::temp_dir d;
  write(d.path() / "token", "sa-token\n");
  write(d.path() / "ca.crt", "PEM");
  write(d.path() / "namespace", "jobs\n");
  ::setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
  load_options o;
  o.in_cluster_dir = d.path();
  auto c = load(o);
  CHECK(c.server == "https://127.0.0.1:6443");
  CHECK(c.token == "sa-token");
  CHECK(c.token_file == d.path() / "token");
  CHECK(c.ns == "jobs");
  CHECK(c.tls.ca_pem == "PEM");
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  CHECK(message_of([&] { load(o); }).find("KUBERNETES_SERVICE_HOST") != std::string::npos);
  ::unsetenv("KUBERNETES_SERVICE_PORT");
}

TEST_CASE("base64 decodes standard text and refuses the rest") {
  CHECK(base64_decode("aGVsbG8=") == std::optional<std::string>("hello"));
  CHECK(base64_decode("aGVs\nbG8h") == std::optional<std::string>("hello!"));
  CHECK_FALSE(base64_decode("a*b"));
  CHECK_FALSE(base64_decode("aGVsbG8=x"));
}

TEST_CASE("the TrainJob body is the one Kubeflow's SDK sends, with its resource aliases") {
  runtime rt;
  rt.name = "torch-distributed";
  trainer_spec t;
  t.num_nodes = 2;
  t.command = {"python3", "train.py"};
  t.env = {{"A", "1"}};
  t.image = "img:1";
  t.resources = resources_per_node("TrainJob 'x'", {{"GPU", "2"}, {"CPU", "4"}, {"storage", "1Gi"}});
  auto body = trainjob_body("x", "ns", rt, t, {{"team", "a"}});
  auto expected = json::parse(R"({
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
    "metadata": {"name": "x", "namespace": "ns", "labels": {"team": "a"}},
    "spec": {"runtimeRef": {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org",
                            "kind": "ClusterTrainingRuntime"},
             "trainer": {"numNodes": 2,
                         "resourcesPerNode": {
                           "requests": {"cpu": "4", "ephemeral-storage": "1Gi", "nvidia.com/gpu": "2"},
                           "limits": {"cpu": "4", "ephemeral-storage": "1Gi", "nvidia.com/gpu": "2"}},
                         "command": ["python3", "train.py"], "image": "img:1",
                         "env": [{"name": "A", "value": "1"}]}}})");
  CHECK(json::value(body) == expected);
  CHECK(resources_per_node("j", {{"mig-1g.5gb", "1"}}).count("nvidia.com/mig-1g.5gb") == 1);
  CHECK(code_of([] {
          resources_per_node("j", {{"gpu", "1"}, {"mig-1g.5gb", "1"}});
        }) == errc::invalid_argument);
  CHECK(code_of([] {
          resources_per_node("j", {{"mig-1g.5gb", "1"}, {"mig-2g.10gb", "1"}});
        }) == errc::invalid_argument);
}

TEST_CASE("steps come from the newest pod of each node, named node-<index>") {
  auto s = steps({pod("j-node-0-0-old", 0, "Failed", "2026-01-01T00:00:00Z", 1),
                  pod("j-node-0-0-new", 0, "Running", "2026-01-01T00:01:00Z"),
                  pod("j-node-0-1-a", 1, "Succeeded", "2026-01-01T00:00:30Z", 0)});
  REQUIRE(s.size() == 2);
  CHECK(s[0].step == "node-0");
  CHECK(s[0].pod == "j-node-0-0-new");
  CHECK(s[0].phase == "Running");
  CHECK(s[1].step == "node-1");
  CHECK(s[1].exit_code == 0);
}

TEST_CASE("status follows Kubeflow's rule: terminal conditions, else Running when every node is up") {
  auto tj = parse(R"({"metadata": {"name": "j", "creationTimestamp": "2026-01-01T00:00:00Z"},
                      "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}})");
  auto one_up = steps({pod("a", 0, "Running", "2026-01-01T00:00:01Z")});
  CHECK(to_job(tj, one_up, 1).status == job_status::created);
  auto both = steps(
      {pod("a", 0, "Running", "2026-01-01T00:00:01Z"), pod("b", 1, "Succeeded", "2026-01-01T00:00:01Z", 0)});
  auto j = to_job(tj, both, 1);
  CHECK(j.status == job_status::running);
  CHECK(j.num_nodes == 2);
  CHECK(j.runtime == "torch-distributed");
  CHECK(j.steps[1].status == job_status::complete);

  tj["status"] = json::parse(R"({"conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs",
                                                 "message": "jobset failed"}]})");
  auto failed = steps({pod("a", 0, "Failed", "2026-01-01T00:00:01Z", 3),
                       pod("b", 1, "Succeeded", "2026-01-01T00:00:01Z", 0)});
  j = to_job(tj, failed, 1);
  CHECK(j.status == job_status::failed);
  CHECK(j.reason == "exit code 3");
  CHECK(j.steps[0].reason == "exit code 3");
  CHECK(j.steps[0].exit_code == 3);

  tj["status"] = json::parse(R"({"conditions": [{"type": "Complete", "status": "True"}]})");
  CHECK(to_job(tj, both, 1).status == job_status::complete);
  // a condition that is not terminal does not freeze the job at Created (Kubeflow's does)
  tj["status"] =
      json::parse(R"({"conditions": [{"type": "Suspended", "status": "False", "reason": "Resumed"}]})");
  CHECK(to_job(tj, both, 1).status == job_status::running);
  // numNodes from the runtime when the TrainJob does not say
  tj["spec"].as_object()["trainer"].as_object().erase("numNodes");
  CHECK(to_job(tj, one_up, 1).status == job_status::running);
  CHECK(to_job(tj, one_up, 3).num_nodes == 3);
}

TEST_CASE("a cancelled TrainJob reads Failed (cancelled) once nothing of it runs") {
  auto tj = parse(R"({"metadata": {"name": "j", "annotations": {"tjob.dev/cancel-requested": "true"}},
                      "spec": {"runtimeRef": {"name": "r"}, "trainer": {"numNodes": 1}, "suspend": true}})");
  CHECK(to_job(tj, steps({pod("a", 0, "Running", "2026-01-01T00:00:01Z")}), 1).status == job_status::running);
  auto j = to_job(tj, {}, 1);
  CHECK(j.status == job_status::failed);
  CHECK(j.reason == "cancelled");
}

TEST_CASE("watch lines and Status errors are parsed, and bad ones are named") {
  auto ev = parse_watch_event(
      R"({"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"7"}}})", "w");
  REQUIRE(ev.has_value());
  CHECK(ev->type == "MODIFIED");
  CHECK(name_of(ev->object) == "a");
  auto not_json = parse_watch_event("not json", "TrainJobs watch");
  REQUIRE_FALSE(not_json.has_value());
  CHECK(not_json.error().code == kube_errc::bad_answer);
  CHECK(detail::errc_of(not_json.error().code) == errc::protocol_error);
  CHECK(not_json.error().message.find("TrainJobs watch") != std::string::npos);
  auto no_object = parse_watch_event(R"({"type":"ADDED"})", "w");
  REQUIRE_FALSE(no_object.has_value());
  CHECK(detail::errc_of(no_object.error().code) == errc::protocol_error);
  // at the API's edge the failure is the tjob::error users know
  CHECK(code_of([] { parse_watch_event("not json", "w").value(); }) == errc::protocol_error);

  auto e = status_failure(
      "https://s", "GET /x", 404,
      R"({"kind":"Status","status":"Failure","reason":"NotFound","message":"trainjobs \"a\" not found","code":404})");
  CHECK(e.code == kube_errc::not_found);
  CHECK(e.message.find("404 NotFound") != std::string::npos);
  CHECK(e.message.find("trainjobs \"a\" not found") != std::string::npos);
  CHECK(e.diagnostics.find("\"kind\":\"Status\"") != std::string::npos);
  auto code = [](unsigned http, std::string_view body) { return status_failure("s", "x", http, body).code; };
  auto means = [&](unsigned http, std::string_view body) { return detail::errc_of(code(http, body)); };
  CHECK(code(409, "{}") == kube_errc::already_exists);
  CHECK(means(409, "{}") == errc::duplicate_name);
  CHECK(code(409, R"({"reason":"Conflict"})") == kube_errc::conflict);
  CHECK(means(409, R"({"reason":"Conflict"})") == errc::backend_error);
  CHECK(code(410, R"({"reason":"Expired"})") == kube_errc::expired);
  CHECK(means(422, "{}") == errc::invalid_argument);
  CHECK(code(503, "<html>down</html>") == kube_errc::server_error);
  CHECK(means(503, "<html>down</html>") == errc::backend_unavailable);
  CHECK(means(429, "{}") == errc::backend_unavailable);
  CHECK(code(403, R"({"reason":"Forbidden","message":"no"})") == kube_errc::forbidden);
  CHECK(means(403, R"({"reason":"Forbidden","message":"no"})") == errc::backend_error);
  CHECK(std::string(kube_category().name()) == "kubernetes");
  CHECK(kube_category().message(static_cast<int>(kube_errc::expired)) == "expired");
}

TEST_CASE("events are the job's, its steps' and its pods', by time") {
  auto items = json::parse(R"([
    {"involvedObject": {"kind": "Pod", "name": "j-node-0-0-a"}, "reason": "Started", "message": "m2",
     "firstTimestamp": "2026-01-01T00:00:02Z"},
    {"involvedObject": {"kind": "TrainJob", "name": "j"}, "reason": "Created", "message": "m1",
     "firstTimestamp": "2026-01-01T00:00:01Z"},
    {"involvedObject": {"kind": "Pod", "name": "other"}, "reason": "Started", "firstTimestamp": "2026-01-01T00:00:01Z"},
    {"involvedObject": {"kind": "ConfigMap", "name": "j"}, "reason": "X", "firstTimestamp": "2026-01-01T00:00:01Z"},
    {"involvedObject": {"kind": "Pod", "name": "j-node-0-0-a"}, "reason": "NoTime"}])")
                   .as_array();
  auto ev = events_of(items, "j", steps({pod("j-node-0-0-a", 0, "Running", "2026-01-01T00:00:01Z")}));
  REQUIRE(ev.size() == 2);
  CHECK(ev[0].reason == "Created");
  CHECK(ev[0].step.empty());
  CHECK(ev[1].reason == "Started");
  CHECK(ev[1].step == "node-0");
  CHECK(ev[1].message == "Pod j-node-0-0-a Started: m2");
}

TEST_CASE("the cluster's event reasons are told in the event log's vocabulary") {
  using tjob::detail::log_event;
  CHECK(log_event_of_reason("Created") == log_event::created);
  CHECK(log_event_of_reason("SuccessfulCreate") == log_event::created);
  CHECK(log_event_of_reason("Started") == log_event::started);
  CHECK(log_event_of_reason("Completed") == log_event::exited);
  CHECK(log_event_of_reason("ErrImagePull") == log_event::start_failed);
  CHECK(log_event_of_reason("FailedScheduling") == log_event::queued);
  CHECK(log_event_of_reason("Suspended") == log_event::queued);
  CHECK(log_event_of_reason("Killing") == log_event::cancel_requested);
  CHECK(log_event_of_reason("Evicted") == log_event::lost);
  CHECK(log_event_of_reason("Scheduled") == log_event::setup);
  CHECK(log_event_of_reason("Pulled") == log_event::setup);
  CHECK(log_event_of_reason("") == log_event::setup);
  auto items = json::parse(R"([
    {"involvedObject": {"kind": "Pod", "name": "j-node-0-0-a"}, "reason": "Scheduled",
     "message": "Successfully assigned default/j-node-0-0-a to n1", "firstTimestamp": "2026-01-01T00:00:02Z"}])")
                   .as_array();
  auto ev = events_of(items, "j", steps({pod("j-node-0-0-a", 0, "Running", "2026-01-01T00:00:01Z")}));
  REQUIRE(ev.size() == 1);
  CHECK(ev[0].reason == "Setup");
  CHECK(ev[0].message == "Pod j-node-0-0-a Scheduled: Successfully assigned default/j-node-0-0-a to n1");
}

TEST_CASE("times from a server are range-checked: a year that does not fit the clock is no time") {
  // fuzz_watch found a creationTimestamp in 4052 overflowing the nanosecond clock.
  CHECK_FALSE(detail::parse_rfc3339("4052-12-02T10:00:00Z").has_value());
  CHECK_FALSE(detail::parse_rfc3339("2026-13-02T10:00:00Z").has_value());
  CHECK_FALSE(detail::parse_rfc3339("99999999999-12-02T10:00:00Z").has_value());
  CHECK_FALSE(detail::parse_rfc3339("2026-12-02 garbage").has_value());
  auto t = detail::parse_rfc3339("2026-12-02T10:00:00.250Z");
  REQUIRE(t.has_value());
  CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(t->time_since_epoch()).count() ==
        1796205600250);
}

TEST_CASE(
    "times: zones and fractions are read, nine digits are written, and each peer's line stamp is rewritten") {
  using namespace std::chrono;
  auto ns = [](clock::time_point t) { return duration_cast<nanoseconds>(t.time_since_epoch()).count(); };
  auto z = parse_time("2026-12-03T19:31:20.672427912Z");
  REQUIRE(z);
  CHECK(ns(*z) % 1000000000 == 672427912);
  CHECK(parse_time("2026-12-03T20:31:20.672427912+01:00") == z);
  CHECK(parse_time("2026-12-03T18:01:20.672427912-01:30") == z);
  CHECK(parse_time("2026-12-03T19:31:20.6724279129999Z") == z);  // digits below the nanosecond are dropped
  CHECK(format_time(*z) == "2026-12-03T19:31:20.672427912Z");
  CHECK(format_time(*parse_time("2026-12-03T19:31:20Z")) == "2026-12-03T19:31:20.000000000Z");
  for (const char* bad : {"2026-12-03T19:31:20", "2026-12-03T19:31:20.Z", "2026-12-03T19:31:20Zjunk",
                          "2026-12-03T19:31:20+0100", "2026-12-03T19:31:20+24:00", "2026-12-03"})
    CHECK_MESSAGE(!parse_time(bad), bad);
  // Podman writes whole seconds, Docker nine digits: both come out as nine.
  detail::peer_stamps keep(true, std::nullopt);
  CHECK(keep("2026-12-03T19:31:15Z a\n2026-12-03T19:31:16.5Z b\nnot a time\n") ==
        "2026-12-03T19:31:15.000000000Z a\n2026-12-03T19:31:16.500000000Z b\nnot a time\n");
  CHECK(keep("2026-12-03T19:31:15Z part") == "2026-12-03T19:31:15.000000000Z part");
  // the rest of that line is not a line's start, whatever it looks like
  CHECK(keep("2026-12-03T19:31:15Z x\n") == "2026-12-03T19:31:15Z x\n");
  // since, where the peer's is coarser: older lines go, in pieces too; the times go when not wanted
  detail::peer_stamps since(false, parse_time("2026-12-03T19:31:15.5Z"));
  CHECK(since("2026-12-03T19:31:15.4Z old\n2026-12-03T19:31:15.5Z new\n2026-12-03T19:31:15.1Z long") ==
        "new\n");
  CHECK(since(" line, still old\n2026-12-03T19:31:16Z later\n") == "later\n");
}

TEST_CASE(
    "a kubeconfig whose top level is not a mapping is refused, also the one-byte file that hangs yaml-cpp") {
  tjob::test::temp_dir dir;
  for (std::string text : {",", "- a\n,", "\"x\","}) {
    auto file = dir.path() / "config";
    std::ofstream(file, std::ios::trunc) << text;
    load_options opt;
    opt.config_file = file.string();
    opt.in_cluster_dir = dir.path() / "nowhere";
    auto msg = tjob::test::message_of([&] { load(opt); });
    CAPTURE(text);
    CHECK(msg.find("is not a kubeconfig: document 1 (line 1) must be a mapping") != std::string::npos);
  }
}

namespace {

// One GET through `a`; the error's message, empty when it succeeded.
boost::asio::awaitable<void> get_pods(kube::api& a, std::string& error) {
  auto got = co_await a.get("/api/v1/namespaces/default/pods");
  if (!got) error = got.error().message;
}

}  // namespace

TEST_CASE("against the stand-in: a rotated token file is read again once a minute has passed, not before") {
  tjob::test::kube_standin server;
  tjob::test::temp_dir dir;
  auto token_file = dir.path() / "token";
  std::ofstream(token_file) << server.token << "\n";
  kube::load_options o;
  o.config_file = (dir.path() / "rotating.kubeconfig").string();
  write(o.config_file,
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n"
        "    server: " +
            server.url + "\n    certificate-authority: " + server.ca +
            "\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nusers:\n- name: u\n  user:\n"
            "    tokenFile: " +
            token_file.string() + "\n");
  o.in_cluster_dir.clear();
  boost::asio::io_context io;
  kube::api a(io.get_executor(), kube::load(o), std::chrono::seconds(10));
  // The test moves the api's clock: the re-read is logic, not a wait.
  auto now = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  a.set_clock([now] { return *now; });
  auto get = [&] {
    std::string error;
    auto done = boost::asio::co_spawn(io, get_pods(a, error), boost::asio::use_future);
    io.restart();
    io.run();
    done.get();  // the request has ended (and any other failure surfaces here)
    return error;
  };
  CHECK(get() == "");
  // The token rotates: the file holds the new one, the server takes only it.
  std::ofstream(token_file, std::ios::trunc) << "rotated-token\n";
  server.ctl("set-token", R"({"token": "rotated-token"})");
  *now += kube::api::token_reread - std::chrono::seconds(1);
  CHECK(get().find("401") != std::string::npos);  // the file is not read before a minute
  *now += std::chrono::seconds(2);
  CHECK(get() == "");  // read again: the new token
}
