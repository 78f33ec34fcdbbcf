// Creating a job's containers: what each node runs (a command, or the shared
// Python plan's entry script), the image, the job network, then one container
// per node. A train that fails part way leaves nothing behind.
#include "adapters/container/container_impl.hpp"

#include "adapters/python/python_plan.hpp"
#include "core/json_fields.hpp"
#include "core/names.hpp"
#include "core/trainer_checks.hpp"

#include <boost/json/serialize.hpp>

#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <cerrno>
#include <cstring>

namespace tjob::container {

using detail::obj_of;
using detail::quote;
using detail::str_of;
using detail::who;

namespace {

// The fixed entry point of a Python node: finds an interpreter in the image
// and runs entry.py (the shared entry script; everything the user gave is
// data in the node's plan file).
constexpr const char* entry_sh =
    "for py in python3 python; do\n"
    "  if command -v \"$py\" >/dev/null 2>&1; then exec \"$py\" /workspace/.tjob/entry.py \"$1\"; fi\n"
    "done\n"
    "echo 'tjob: the image has neither python3 nor python on PATH; use an image with Python' >&2\n"
    "exit 127\n";

}  // namespace

namespace {

// The image's own PYTHONPATH (Config.Env), which a job's PYTHONPATH must keep.
std::string pythonpath_of(const json::object& image) {
  if (auto* config = obj_of(image, "Config"))
    if (auto* env = detail::arr_of(*config, "Env"))
      for (const auto& v : *env)
        if (v.is_string() && v.as_string().starts_with("PYTHONPATH="))
          return std::string(v.as_string().subview(11));
  return {};
}

}  // namespace

asio::awaitable<std::string> backend::impl::ensure_image(docker_api& d, const std::string& who,
                                                         const std::string& image) {
  auto prefix = who + ": Failed to ensure image " + quote(image) + ": ";
  if (cfg.pull != pull_policy::always) {
    auto found = co_await d.image_inspect(image);
    // Kubeflow words every failure here as a failure to ensure the image.
    if (!found)
      raise(failure(docker_errc::refused, prefix + found.error().message, found.error().diagnostics));
    if (*found) co_return pythonpath_of(**found);
  }
  if (cfg.pull == pull_policy::never)
    fail(errc::invalid_argument,
         prefix + "Image " + quote(image) +
             " not found locally and pull policy is Never; import or "
             "load it first (docker load, podman load), or use pull policy IfNotPresent");
  ctx.log->info("{}: pulling image {} on {}", who, image, d.describe());
  auto pulled = co_await d.image_pull(
      image, [&](const std::string& line) { ctx.log->info("{}: pull {}: {}", who, image, line); });
  if (!pulled)
    raise(failure(docker_errc::refused, prefix + pulled.error().message, pulled.error().diagnostics));
  auto pulled_image = co_await d.image_inspect(image);
  co_return pulled_image&&* pulled_image ? pythonpath_of(**pulled_image) : std::string();
}

// What every node of the job runs: a command as it is, or Python code
// through the entry script with its plan.
node_program backend::impl::program_of(const std::string& me, train_request& r, const runtime& rt) {
  node_program p;
  p.image = cfg.image;
  if (auto* ct = std::get_if<command_trainer>(&r.job_trainer)) {
    detail::check_command(me, *ct);
    if (!ct->working_dir.empty()) {
      if (ct->working_dir.front() != '/')
        fail(errc::invalid_argument, me + ": working_dir " + quote(ct->working_dir) +
                                         " must be an absolute path inside the container");
      p.working_dir = ct->working_dir;
    }
    p.cmd = ct->command;
    p.env = ct->env;
    if (!ct->image.empty()) p.image = ct->image;
  } else {
    auto& pt = std::get<python_trainer>(r.job_trainer);
    if (!pt.working_dir.empty())
      fail(errc::invalid_argument, me + ": working_dir is a local-backend field; a container "
                                        "job runs in /workspace (its work dir, mounted from the "
                                        "host); leave it empty");
    auto source = python::check_remote_trainer(me, pt);
    // The code goes into the work dir, a script file's too: a container reads no host path.
    p.files = python::shipped_files(pt, source);
    p.files.emplace_back("entry.py", std::string(python::entry_script()));
    p.plan = python::entry_plan(pt, source, rt.trainer.framework == "torch", false,
                                std::string(workspace) + "/.tjob/train.py");
    // The directory sent with the job is its /workspace, and importable.
    if (!pt.code_dir.empty()) p.plan["python_path"] = json::array{workspace};
    p.env = pt.env;
    p.env.emplace("PYTHONUNBUFFERED", "1");
    // the node's plan file is the last argument
    p.cmd = pt.python.empty() ? std::vector<std::string>{"/bin/sh", "-c", entry_sh, "tjob-entry"}
                              : std::vector<std::string>{pt.python, "/workspace/.tjob/entry.py"};
    if (!pt.image.empty()) p.image = pt.image;
    p.procs = pt.procs_per_node;
    if (pt.memory_limit > 0) p.memory = static_cast<std::int64_t>(pt.memory_limit);
    if (pt.cpu_limit) p.nano_cpus = std::int64_t(p.procs) * 1'000'000'000;
    p.gpus = pt.gpus;
    if (p.gpus > 0) p.procs = p.gpus;  // Kubeflow: one process per GPU
  }
  if (cfg.image.empty() && p.image.empty()) p.image = rt.trainer.image;
  if (p.image.empty())
    fail(errc::invalid_argument, me + ": no image: runtime " + quote(rt.name) +
                                     " names none; give one (--image, or image in the trainer)");
  if (r.num_nodes > 1 && cfg.network == container_network::none)
    fail(errc::invalid_argument, me + ": " + std::to_string(r.num_nodes) +
                                     " nodes cannot meet without a network; use network job "
                                     "or host (--network)");
  return p;
}

// The job network, or the one an earlier try left, recorded in `undo`.
// The job network is made in every mode: Kubeflow's container backend
// reads a job's runtime from it and calls a job without one broken
// ("missing network metadata"). With host or none networking no container
// joins it, and it is internal: it carries nothing. (It costs the daemon a
// bridge and about 0.1 s per job; bench/run's container rows show it.)
asio::awaitable<void> backend::impl::make_network(docker_api& d, const std::string& name,
                                                  const std::string& net,
                                                  const std::map<std::string, std::string>& net_labels,
                                                  train_rollback_state& undo) {
  auto inspected = co_await d.network_inspect(net);
  if (auto& existing = inspected.value(); existing && labels_of(*existing)[label_job] == name) {
    undo.network_id = str_of(*existing, "Id");  // left by an earlier try, as Kubeflow re-uses it
  } else {
    bool internal = cfg.network != container_network::job;
    auto made = co_await d.network_create(net, net_labels, internal);
    undo.network_id = std::move(made).value();
    undo.made_network = true;
  }
}

// Node `rank`'s container, as the job asks for it.
node_spec backend::impl::node_spec_of(const train_request& r, const runtime& rt, const node_program& p,
                                      int rank, const std::string& network_id,
                                      const std::string& node0_address) const {
  const auto& name = r.name;
  node_spec n;
  n.job = name;
  n.step = "node-" + std::to_string(rank);
  n.container_name = node_name(name, rank);
  n.image = p.image;
  n.network_id = network_id;
  n.runtime = rt.name;
  n.workdir = workdir(name).string();
  n.workspace_dir = workspace_of(name).string();
  n.inputs_dir = inputs_of(name).string();
  n.checkpoints_dir = checkpoints_of(name).string();
  n.cmd = p.cmd;
  n.env = cfg.env;  // the backend's, under the job's own
  for (const auto& [k, v] : p.env) n.env[k] = v;
  n.working_dir = p.working_dir;
  n.network = cfg.network;
  n.network_name = network_name(name);
  if (cfg.network == container_network::job) {
    n.hostname = n.container_name;
    if (rank > 0 && !node0_address.empty()) n.extra_hosts = {node_name(name, 0) + ":" + node0_address};
  }
  n.volumes = cfg.volumes;
  n.volumes.insert(n.volumes.end(), p.volumes.begin(), p.volumes.end());
  n.memory = p.memory;
  n.nano_cpus = p.nano_cpus;
  n.gpus = p.gpus;
  n.max_restarts = r.retry.max_restarts;
  return n;
}

// The job network (where the nodes use one), then a container per node,
// each recorded in `undo` as it is made.
asio::awaitable<void> backend::impl::create_nodes(docker_api& d, const std::string& me,
                                                  const train_request& r, const runtime& rt, node_program& p,
                                                  train_rollback_state& undo) {
  const auto& name = r.name;
  auto dir = workdir(name);
  auto net = network_name(name);
  std::map<std::string, std::string> net_labels{
      {label_job, name}, {label_runtime, rt.name}, {label_workdir, dir.string()}};
  co_await make_network(d, name, net, net_labels, undo);
  // What it was admitted for, read by the admission of the jobs after it.
  const auto need = detail::need_of(r);
  std::map<std::string, std::string> admission_labels{{label_cpus, std::to_string(need.cpus)},
                                                      {label_memory, std::to_string(need.memory)},
                                                      {label_gpus, std::to_string(need.gpus)}};
  if (!r.array.empty()) admission_labels[label_array] = r.array;
  if (cfg.network == container_network::host) open_progress(name, p);
  python::torch_topology topo;
  topo.nnodes = std::to_string(r.num_nodes);
  topo.nproc_per_node = std::to_string(p.procs);
  topo.master_port = std::to_string(cfg.network == container_network::host ? detail::free_port() : 29500);
  if (cfg.network == container_network::job) topo.master_addr = node_name(name, 0);
  std::string node0_address;  // on the job network, once node-0 runs
  for (int rank = 0; rank < r.num_nodes; ++rank) {
    auto n = node_spec_of(r, rt, p, rank, undo.network_id, node0_address);
    n.labels = admission_labels;
    if (!p.plan.empty()) {
      topo.node_rank = std::to_string(rank);
      json::array flags;
      for (auto& f : python::torchrun_flags(topo)) flags.emplace_back(std::move(f));
      p.plan["torchrun_args"] = std::move(flags);
      auto own = "plan-" + std::to_string(rank) + ".json";
      write_file(inputs_of(name) / own, json::serialize(p.plan));
      n.cmd.push_back(std::string(workspace) + "/.tjob/" + own);
    }
    auto where = me + ": node-" + std::to_string(rank) + " (container " + quote(n.container_name) + "): ";
    auto body = create_body(n);
    auto made = co_await d.container_create(n.container_name, body);
    if (!made) raise(prefixed(made.error(), where));
    std::string id = *made;
    undo.made.push_back(id);
    auto started = co_await d.container_start(id);
    if (!started) raise(prefixed(started.error(), where));
    if (rank == 0 && r.num_nodes > 1 && cfg.network == container_network::job) {
      // torch's agent on node-0 hands its workers and the other nodes its own
      // name as MASTER_ADDR, and a job network may have no DNS (Podman's, here):
      // every other node is told node-0's address in its /etc/hosts.
      auto inspected = co_await d.container_inspect(id);
      if (auto& ins = inspected.value())
        if (auto* ns = obj_of(*ins, "NetworkSettings"))
          if (auto* nets = obj_of(*ns, "Networks"))
            if (auto* mine = obj_of(*nets, net)) node0_address = str_of(*mine, "IPAddress");
    }
  }
}

// Nothing of a failed train stays behind: its containers, its network (when
// this train made it) and its work dir.
asio::awaitable<void> backend::impl::undo_train(docker_api& d, const std::string& me,
                                                const train_rollback_state& undo, const fs::path& dir) {
  for (const auto& id : undo.made) {
    auto removed = co_await d.container_remove(id);
    if (!removed) ctx.log->warn("{}: cleanup: {}", me, removed.error().message);
  }
  if (undo.made_network) {
    auto removed = co_await d.network_remove(undo.network_id);
    if (!removed) ctx.log->warn("{}: cleanup: {}", me, removed.error().message);
  }
  std::error_code ec;
  if (!dir.empty()) fs::remove_all(dir, ec);
}

namespace {

// Retries of a container job are the daemon's restart policy (on-failure:N):
// what it cannot do is refused by name.
void check_container_retry(const std::string& me, const train_request& r) {
  const auto& p = r.retry;
  if (p.max_restarts == 0) return;
  auto refuse = [&](const std::string& what) {
    fail(errc::invalid_argument,
         me + ": retry: " + what +
             " on the container backend, whose restarts are the daemon's restart policy (on-failure:" +
             std::to_string(p.max_restarts) +
             "); run the job on the local backend for that (docs/scheduling.md)");
  };
  if (r.num_nodes > 1)
    refuse(
        "a job of " + std::to_string(r.num_nodes) +
        " nodes cannot be restarted (the daemon restarts one node alone, and it cannot rejoin the others)");
  if (!p.retry_on.empty() || !p.never_retry.empty())
    refuse("retry_on and never_retry cannot be given (the daemon restarts on every non-zero exit)");
  const retry_policy defaults;
  if (p.backoff != defaults.backoff || p.backoff_factor != defaults.backoff_factor ||
      p.max_backoff != defaults.max_backoff)
    refuse(
        "the backoff cannot be set (the daemon's own applies: Docker's from 100 ms, doubling; Podman's "
        "none)");
}

}  // namespace

// The job's directories, and the directory sent with it (its snapshot) as
// its workspace's content.
void backend::impl::make_job_dirs(const std::string& me, const train_request& r) {
  const auto& name = r.name;
  const auto dir = workdir(name);
  // The job's directories are the user's own (0700), as everything in
  // $TJOB_HOME; so are the home's parents where they are missing (a fresh
  // machine has no ~/.local/state). Its workspace is the job's to write; its
  // inputs and its state are not (job_dir.hpp).
  try {
    make_home_dirs(ctx.home);
  } catch (const error& e) {
    fail(errc::invalid_argument, me + ": " + e.what());
  }
  // The job's own: made here, never a link (make_private_dir refuses one).
  for (const auto& p :
       {dir, inputs_of(name), workspace_of(name), workspace_of(name) / ".tjob", checkpoints_of(name)}) {
    try {
      make_private_dir(p);
    } catch (const error& e) {
      fail(errc::invalid_argument,
           me + ": " + e.what() + "; remove what is in the way, or choose another name");
    }
  }
  // The directory sent with the job (its snapshot) is the workspace's content.
  if (const auto& from = detail::code_dir_of(r); !from.empty()) {
    std::error_code ec;
    fs::copy(from, workspace_of(name), fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
    if (ec)
      fail(errc::invalid_argument,
           me + ": cannot copy its working_dir into " + workspace_of(name).string() + ": " + ec.message());
  }
}

asio::awaitable<std::string> backend::impl::train(detail::checked_request c) {
  auto& r = c.request;
  const auto name = r.name;
  auto me = who(name);
  check_container_retry(me, r);
  for (const auto& v : cfg.volumes) check_volume(v);
  auto program = program_of(me, r, c.rt);

  const auto need = detail::need_of(r);
  detail::check_fits(me, need, admission_budget(), ctx.home);

  auto daemon_ = co_await daemon();
  auto& d = *daemon_.value();
  auto found = co_await containers(name);
  if (!found.value().empty() || read_queue(name))
    fail(errc::duplicate_name,
         me + " exists already on " + d.describe() + "; delete it (tjob delete) or choose another name");
  for (const auto& [list, kind] :
       {std::pair{&r.after_ok, "after_ok"}, {&r.after_any, "after_any"}, {&r.after_not_ok, "after_not_ok"}})
    for (const auto& dep : *list) {
      if (dep == name)
        fail(errc::invalid_argument,
             me + ": " + kind + " names the job itself; a job cannot wait for its own end");
      auto there = co_await find(dep);
      if (!there && detail::means(there.error().code, errc::job_not_found))
        fail(errc::invalid_argument, me + ": " + kind + " " + quote(dep) + ": no such job on " +
                                         d.describe() +
                                         "; name a job that exists (tjob list), submitted before this one");
      there.value();
    }
  program.image_pythonpath = co_await ensure_image(d, me, program.image);

  auto dir = workdir(name);
  make_job_dirs(me, r);

  std::exception_ptr failed;
  try {
    for (const auto& [file, text] : program.files) write_file(inputs_of(name) / file, text);
    if (auto state_dir = state(name)) {
      state_dir->remove("cancelled");
      state_dir->remove("deadline-exceeded");
    }
    pending_job job{std::move(c), std::move(program), need};
    co_await enqueue(std::move(job));
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {
    // Nothing of a job refused here stays: its queue file and its work dir.
    pending.erase(name);
    std::error_code ec;
    fs::remove(queue_path(name), ec);
    fs::remove_all(dir, ec);
    std::rethrow_exception(failed);
  }
  co_return name;
}

asio::awaitable<void> backend::impl::create_job(pending_job& job, bool keep_dir) {
  auto& r = job.c.request;
  const auto name = r.name;
  auto me = who(name);
  auto daemon_ = co_await daemon();
  auto& d = *daemon_.value();
  auto dir = workdir(name);
  train_rollback_state undo;
  std::exception_ptr failed;
  try {
    co_await create_nodes(d, me, r, job.c.rt, job.program, undo);
  } catch (...) {
    failed = std::current_exception();
  }
  if (failed) {
    // (a coroutine cannot co_await in a catch block or a destructor: the
    // rollback is a step of its own, run on every failure)
    // (named: a conditional's temporary in a co_await is destroyed twice by
    // g++ 12, which crashed every failed start; tools/coawait_check)
    const auto remove_dir = keep_dir ? fs::path() : dir;
    co_await undo_train(d, me, undo, remove_dir);
    std::rethrow_exception(failed);
  }
  // Its place in the queue is its history now (its Queued and Admitted events).
  if (auto q = read_queue(name)) {
    q->state = "started";
    try {
      if (auto state_dir = state(name)) state_dir->replace("admission.json", json::serialize(to_json(*q)));
    } catch (const std::exception& e) {  // (its events then start with the daemon's)
      ctx.log->warn("{}: {}", me, e.what());
    }
    std::error_code ec;
    fs::remove(queue_path(name), ec);
  }
  // Cancelled while its containers were made: they stop now.
  if (cancelled(name)) co_await cancel(name, false);
  // The daemon has no active deadline: this process enforces it while it
  // lives (docs/scheduling.md says who that is).
  if (r.active_deadline.count() > 0)
    tasks.spawn(enforce_deadline(name, r.active_deadline), "the active deadline of " + me);
}

}  // namespace tjob::container
