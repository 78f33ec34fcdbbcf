#include "adapters/container/layout.hpp"

#include "core/json_fields.hpp"

#include <tjob/error.hpp>

#include <boost/json/parse.hpp>

#include <cctype>
#include <climits>

namespace tjob::container {

namespace json = boost::json;

namespace {

// The node's mounts: its workspace, its inputs, its checkpoints (whose
// variable joins `env` unless the job sets it), then the volumes given.
json::array binds_of(const node_spec& n, json::array& env) {
  json::array binds;
  binds.emplace_back((n.workspace_dir.empty() ? n.workdir : n.workspace_dir) + ":" + workspace + ":rw");
  // (after /workspace: the daemon mounts it on top, and the job cannot change it)
  if (!n.inputs_dir.empty()) binds.emplace_back(n.inputs_dir + ":" + inputs_mount + ":ro");
  if (!n.checkpoints_dir.empty()) {
    binds.emplace_back(n.checkpoints_dir + ":" + checkpoints_mount + ":rw");
    if (!n.env.count("TJOB_CHECKPOINT_DIR"))
      env.emplace_back(std::string("TJOB_CHECKPOINT_DIR=") + checkpoints_mount);
  }
  for (const auto& v : n.volumes) binds.emplace_back(v);
  return binds;
}

// The HostConfig: mounts, network, restarts (also a label of the node's),
// limits and GPUs.
json::object host_config(const node_spec& n, json::array binds, json::object& labels) {
  json::object host{{"Binds", std::move(binds)}, {"Init", true}, {"AutoRemove", false}};
  // Always explicit: Podman's compat API would otherwise put the container
  // on its default bridge, whatever containers.conf says.
  switch (n.network) {
    case container_network::job:
      host["NetworkMode"] = n.network_name;
      break;
    case container_network::host:
      host["NetworkMode"] = "host";
      break;
    case container_network::none:
      host["NetworkMode"] = "none";
      break;
  }
  if (!n.extra_hosts.empty()) {
    json::array hosts;
    for (const auto& h : n.extra_hosts) hosts.emplace_back(h);
    host["ExtraHosts"] = std::move(hosts);
  }
  if (n.max_restarts > 0) {
    // The daemon restarts the node itself when it exits non-zero, not after a
    // stop (a cancel): docker run --restart on-failure:N.
    host["RestartPolicy"] = json::object{{"Name", "on-failure"}, {"MaximumRetryCount", n.max_restarts}};
    labels[label_max_restarts] = std::to_string(n.max_restarts);
  }
  if (n.memory > 0) host["Memory"] = n.memory;
  if (n.nano_cpus > 0) host["NanoCpus"] = n.nano_cpus;
  if (n.gpus > 0) {
    // what `docker run --gpus N` sends
    json::array caps;
    caps.emplace_back(json::array{"gpu"});
    host["DeviceRequests"] = json::array{json::object{{"Driver", ""},
                                                      {"Count", n.gpus},
                                                      {"DeviceIDs", nullptr},
                                                      {"Capabilities", std::move(caps)},
                                                      {"Options", json::object{}}}};
  }
  return host;
}

}  // namespace

json::object create_body(const node_spec& n) {
  json::object labels{{label_job, n.job},
                      {label_step, n.step},
                      {label_network, n.network_id},
                      {label_runtime, n.runtime},
                      {label_workdir, n.workdir}};
  for (const auto& [k, v] : n.labels) labels[k] = v;
  json::array env;
  for (const auto& [k, v] : n.env) env.emplace_back(k + "=" + v);
  json::array cmd;
  for (const auto& a : n.cmd) cmd.emplace_back(a);
  auto host = host_config(n, binds_of(n, env), labels);
  json::object body{{"Image", n.image},
                    {"Cmd", std::move(cmd)},
                    {"Env", std::move(env)},
                    {"WorkingDir", n.working_dir},
                    {"Labels", std::move(labels)},
                    {"Tty", false},
                    {"AttachStdout", false},
                    {"AttachStderr", false},
                    {"HostConfig", std::move(host)}};
  if (!n.hostname.empty()) body["Hostname"] = n.hostname;
  if (n.network == container_network::job)
    body["NetworkingConfig"] = json::object{
        {"EndpointsConfig",
         json::object{{n.network_name, json::object{{"Aliases", json::array{n.container_name}}}}}}};
  return body;
}

namespace {

// A named volume, as the daemons name one: [a-zA-Z0-9][a-zA-Z0-9_.-]+
bool volume_name(std::string_view s) {
  if (s.size() < 2 || !std::isalnum(static_cast<unsigned char>(s.front()))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') return false;
  return true;
}

}  // namespace

void check_volume(const std::string& v) {
  auto bad = [&](const std::string& why) {
    throw error(make_error_code(errc::invalid_argument),
                "volume '" + v + "': " + why +
                    " (write SOURCE:CONTAINER or SOURCE:CONTAINER:ro, SOURCE an absolute host path or a "
                    "volume's name, CONTAINER an absolute path)");
  };
  if (v.find('\0') != std::string::npos || v.find('\n') != std::string::npos)
    bad("it holds a control character");
  auto first = v.find(':');
  if (first == std::string::npos) bad("no ':'");
  auto host = v.substr(0, first);
  auto rest = v.substr(first + 1);
  auto second = rest.find(':');
  auto target = rest.substr(0, second);
  if (second != std::string::npos) {
    auto mode = rest.substr(second + 1);
    if (mode != "ro" && mode != "rw") bad("the mode must be ro or rw");
  }
  if (host.empty() || (host.front() != '/' && !volume_name(host)))
    bad("the source must be an absolute path or a volume's name (letters, digits, '_', '.', '-')");
  if (target.empty() || target.front() != '/') bad("the path in the container must be absolute");
  if (target == workspace) bad("/workspace is the job's work dir already");
  if (target == inputs_mount || target.starts_with(std::string(inputs_mount) + "/"))
    bad("/workspace/.tjob is where tjob gives the job its files");
  if (target == checkpoints_mount) bad(std::string(checkpoints_mount) + " is the job's checkpoint directory");
}

job_status status_of(const std::string& state, std::optional<int> exit_code) {
  if (state == "running" || state == "paused") return job_status::running;
  if (state == "created" || state == "configured" || state == "initialized" || state == "restarting")
    return job_status::created;
  if (state == "exited" || state == "stopped")
    return exit_code && *exit_code == 0 ? job_status::complete : job_status::failed;
  return job_status::failed;  // removing, dead
}

std::string job_of_event(std::string_view line) { return container_event_of(line).job; }

container_event container_event_of(std::string_view line) {
  boost::system::error_code ec;
  auto v = boost::json::parse(line, ec);
  if (ec || !v.is_object()) return {};
  auto& o = v.as_object();
  auto* actor = detail::obj_of(o, "Actor");
  auto* attrs = actor ? detail::obj_of(*actor, "Attributes") : nullptr;
  container_event e;
  if (!attrs || (e.job = detail::str_of(*attrs, label_job)).empty()) return {};
  e.id = detail::str_of(*actor, "ID");
  e.action = detail::str_of(o, "Action");
  if (e.action.empty()) e.action = detail::str_of(o, "status");  // the API before 1.22
  return e;
}

detail::log_event log_event_of_action(std::string_view action) {
  using detail::log_event;
  // "exec_start: sh -c ..." and "health_status: healthy" carry their detail after a colon.
  auto verb = action.substr(0, action.find(':'));
  if (verb == "create") return log_event::created;
  if (verb == "start" || verb == "restart" || verb == "unpause") return log_event::started;
  if (verb == "die" || verb == "died" || verb == "oom") return log_event::exited;
  if (verb == "kill" || verb == "stop" || verb == "pause") return log_event::cancel_requested;
  return log_event::setup;  // pull, attach, connect, mount, init, exec, destroy, ...
}

std::optional<event> event_of_line(std::string_view line, std::int64_t seq) {
  boost::system::error_code ec;
  auto v = boost::json::parse(line, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const auto& o = v.as_object();
  event e;
  e.seq = seq;
  // A number that does not fit (the daemon's, so anything) leaves the time unset.
  auto whole = [&](std::string_view key) -> std::optional<std::int64_t> {
    auto* t = o.if_contains(key);
    if (!t) return std::nullopt;
    if (t->is_int64()) return t->as_int64();
    if (t->is_uint64() && t->as_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
      return static_cast<std::int64_t>(t->as_uint64());
    return std::nullopt;
  };
  constexpr std::int64_t max_seconds = std::int64_t{1} << 33;  // year 2242; nanoseconds still fit
  if (auto ns = whole("timeNano"))
    e.time = clock::time_point(std::chrono::duration_cast<clock::duration>(std::chrono::nanoseconds(*ns)));
  else if (auto secs = whole("time"); secs && *secs > -max_seconds && *secs < max_seconds)
    e.time = clock::time_point(std::chrono::duration_cast<clock::duration>(std::chrono::seconds(*secs)));
  auto action = detail::str_of(o, "Action");
  if (action.empty()) action = detail::str_of(o, "status");
  auto* actor = detail::obj_of(o, "Actor");
  auto* attrs = actor ? detail::obj_of(*actor, "Attributes") : nullptr;
  std::string cname;
  if (attrs) {
    e.step = detail::str_of(*attrs, label_step);
    cname = detail::str_of(*attrs, "name");
  }
  e.reason = std::string(detail::to_string(log_event_of_action(action)));
  e.message = detail::str_of(o, "Type") + " " + cname + ": " + action;
  if (attrs && (action == "die" || action == "died")) {
    auto code = detail::str_of(*attrs, "exitCode");
    if (code.empty()) code = detail::str_of(*attrs, "containerExitCode");
    if (!code.empty()) e.message += " (exit code " + code + ")";
  }
  return e;
}

}  // namespace tjob::container
