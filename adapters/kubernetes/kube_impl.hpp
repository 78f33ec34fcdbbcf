// The kubernetes backend's state (kube_backend.cpp): the API client, the
// informers that watch TrainJobs and pods, and each operation on them.
#pragma once

#include "adapters/kubernetes/kube_backend.hpp"

#include "adapters/kubernetes/informer.hpp"
#include "adapters/kubernetes/kube_api.hpp"
#include "adapters/kubernetes/kubeconfig.hpp"
#include "adapters/kubernetes/trainjob.hpp"
#include "adapters/python/python_plan.hpp"
#include "core/fail.hpp"
#include "core/log_stream_impl.hpp"
#include "core/messages.hpp"
#include "core/names.hpp"
#include "core/times.hpp"
#include "core/trainer_checks.hpp"
#include "core/wake.hpp"

#include <boost/json.hpp>

#include <spdlog/spdlog.h>

#include <utility>

#include <set>

namespace tjob::kube {

namespace asio = boost::asio;
using detail::fail;
using detail::prefixed;
using detail::raise;
namespace json = boost::json;
using steady = std::chrono::steady_clock;
using detail::quote;
using detail::who;

// A Python node runs the shared entry script (python3 -c ENTRY PLAN): the plan
// carries the code and everything the user gave, as data; the torchrun flags
// are filled in on the node from the controller's PET_* variables.
inline constexpr std::size_t max_arg = 1 << 20;  // the CRD's limit on one trainer argument
inline const std::set<std::string> reserved_env{"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK",
                                                "PET_MASTER_ADDR", "PET_MASTER_PORT"};

struct backend::impl : std::enable_shared_from_this<impl> {
  detail::backend_context ctx;
  kubernetes_backend_config cfg;
  std::shared_ptr<api> a;
  std::string ns, jobs_path, pods_path, where;
  std::unique_ptr<informer> jobs_inf, pods_inf;
  std::map<std::string, int> runtime_nodes;   // numNodes of runtimes seen
  std::vector<std::string> runtime_problems;  // of the last listing
  bool stopping = false;
  detail::task_group tasks;  // the informers' watches

  explicit impl(detail::backend_context c)
      : ctx(std::move(c)),
        cfg(config_of(ctx.cfg.backend_config, [](std::string_view m) { return std::string(m); })),
        tasks(ctx.ex, ctx.log) {
    load_options o;
    o.config_file = cfg.config_file;
    o.context = cfg.context;
    o.ns = cfg.namespace_name;
    o.in_cluster_dir = cfg.in_cluster_dir;
    auto conn = load(o);
    bool ns_ok = !conn.ns.empty() && conn.ns.size() <= 63 && conn.ns.front() != '-' &&
                 conn.ns.back() != '-' && std::all_of(conn.ns.begin(), conn.ns.end(), [](char c) {
                   return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
                 });
    if (!ns_ok)
      fail(errc::invalid_argument, "namespace " + quote(conn.ns) + " (from " + conn.source +
                                       ") is not a valid namespace name; give one with --namespace");
    ns = conn.ns;
    where = "namespace " + quote(ns) + " on " + conn.server;
    a = std::make_shared<api>(ctx.ex, std::move(conn), cfg.request_timeout);
    jobs_path = std::string("/apis/") + group + "/" + version + "/namespaces/" + ns + "/trainjobs";
    pods_path = "/api/v1/namespaces/" + ns + "/pods";
  }

  failure not_found(const std::string& name) const {
    return detail::not_found_failure(name, "in " + where, "tjob list --backend kubernetes");
  }

  void check_running() const {
    if (stopping) fail(errc::shut_down, "the engine is shutting down");
  }

  void ensure_watches() {
    if (!jobs_inf) {
      jobs_inf = std::make_unique<informer>(ctx.ex, a, jobs_path, "", "TrainJobs in " + where, ctx.log);
      pods_inf = std::make_unique<informer>(ctx.ex, a, pods_path, label_jobset, "pods in " + where, ctx.log);
    }
    jobs_inf->start(tasks);
    pods_inf->start(tasks);
  }

  // --- runtimes -------------------------------------------------------------

  // Kubeflow's list_runtimes: namespaced TrainingRuntimes (a 404 tolerated)
  // and ClusterTrainingRuntimes; the namespaced one wins a name clash;
  // runtimes without the framework label are skipped with a warning.
  asio::awaitable<outcome<std::vector<runtime>>> cluster_runtimes() {
    std::vector<runtime> out;
    std::set<std::string> names;
    std::vector<std::string> problems;
    auto add = [&](const json::value& list) {
      if (!list.is_object()) return;
      auto* items = list.as_object().if_contains("items");
      if (!items || !items->is_array()) return;
      for (const auto& it : items->as_array()) {
        if (!it.is_object()) continue;
        std::string problem;
        auto rt = runtime_from(it.as_object(), problem);
        if (!rt) {
          ctx.log->warn("skipping runtime: {}", problem);
          problems.push_back(problem);
          continue;
        }
        if (!names.insert(rt->name).second) continue;
        runtime_nodes[rt->name] = rt->trainer.num_nodes;
        out.push_back(std::move(*rt));
      }
    };
    std::string tr =
        std::string("/apis/") + group + "/" + version + "/namespaces/" + ns + "/trainingruntimes";
    auto namespaced = co_await a->get_if(tr);
    if (!namespaced) co_return namespaced.error();
    if (*namespaced) add(**namespaced);
    std::string ctr = std::string("/apis/") + group + "/" + version + "/clustertrainingruntimes";
    auto cluster = co_await a->get(ctr);
    if (!cluster) co_return cluster.error();
    add(*cluster);
    std::sort(out.begin(), out.end(), [](const runtime& x, const runtime& y) { return x.name < y.name; });
    runtime_problems = std::move(problems);
    co_return out;
  }

  asio::awaitable<int> nodes_of_runtime(const std::string& name) {
    if (auto it = runtime_nodes.find(name); it != runtime_nodes.end()) co_return it->second;
    auto read = co_await cluster_runtimes();
    if (!read) ctx.log->warn("cannot read the runtimes in {}: {}", where, read.error().message);
    // A runtime deleted since is no reason to fail (Kubeflow's #797): one node.
    auto it = runtime_nodes.find(name);
    co_return it == runtime_nodes.end() ? 1 : it->second;
  }

  // --- train ----------------------------------------------------------------

  detail::runtime_catalog catalog(std::vector<runtime> runtimes) const {
    detail::runtime_catalog cat;
    cat.runtimes = std::move(runtimes);
    cat.problems = runtime_problems;
    cat.how_to_add = "create a TrainingRuntime in " + where + " or a ClusterTrainingRuntime";
    return cat;
  }

  // --- train ----------------------------------------------------------------

  // A Python trainer as a TrainJob's trainer: the shared entry script with
  // its plan (the code travels in it) as the one argument.
  void python_spec(const std::string& me, python_trainer& pt, const runtime& rt, trainer_spec& t) {
    if (!pt.working_dir.empty())
      fail(errc::invalid_argument, me + ": working_dir is a local-backend field; on a cluster "
                                        "the code runs in a directory of its own; leave it empty");
    auto source = python::check_remote_trainer(me, pt);
    int procs = pt.gpus > 0 ? pt.gpus : pt.procs_per_node;
    bool torch = rt.trainer.framework == "torch";
    auto plan = python::entry_plan(pt, source, torch, true, {});
    // `import tjob` works in the pod as on the other backends: tjob.report
    // posts to Kubeflow Trainer's progress endpoint where the controller
    // gives one ($KUBEFLOW_TRAINER_SERVER_URL), and returns False elsewhere.
    json::object helper;
    for (auto& [file, text] : python::helper_files()) helper[file] = std::move(text);
    plan["site_files"] = std::move(helper);
    if (torch) python::torch_from_environment(plan, procs);
    auto text = json::serialize(plan);
    if (text.size() > max_arg)
      fail(errc::invalid_argument, me + ": the training code and its arguments take " +
                                       std::to_string(text.size()) +
                                       " bytes; a TrainJob "
                                       "argument holds at most 1 MiB (put the data in the "
                                       "image or fetch it from the code)");
    t.command = {pt.python.empty() ? std::string("python3") : pt.python, "-c",
                 std::string(python::entry_script())};
    t.args = {std::move(text)};
    t.env = pt.env;
    t.env.emplace("PYTHONUNBUFFERED", "1");
    t.image = pt.image;
    std::map<std::string, std::string> res;
    if (pt.gpus > 0) res["gpu"] = std::to_string(pt.gpus);
    if (pt.cpu_limit) res["cpu"] = std::to_string(pt.procs_per_node);
    if (pt.memory_limit > 0) res["memory"] = std::to_string(pt.memory_limit);
    t.resources = resources_per_node(me, res);
    if (procs > 1) t.num_proc_per_node = procs;
  }

  asio::awaitable<std::string> train(detail::checked_request c) {
    check_running();
    auto& r = c.request;
    const runtime& rt = c.rt;
    const auto name = r.name;
    auto me = who(name);
    trainer_spec t;
    t.num_nodes = r.num_nodes;
    if (auto* ct = std::get_if<command_trainer>(&r.job_trainer)) {
      detail::check_command(me, *ct);
      if (!ct->working_dir.empty())
        fail(errc::invalid_argument, me + ": working_dir is not a TrainJob field; on a cluster the "
                                          "command runs in the image's working directory (use "
                                          "`sh -c 'cd DIR && ...'` as the command, or leave it empty)");
      t.command = ct->command;
      t.env = ct->env;
      t.image = ct->image;
    } else {
      python_spec(me, std::get<python_trainer>(r.job_trainer), rt, t);
    }
    for (const auto& [k, v] : t.env)
      if (reserved_env.count(k))
        fail(errc::invalid_argument, me + ": env " + k +
                                         " is set by the Kubeflow Trainer "
                                         "controller on every node; remove it from the env");
    for (const auto& x : t.command)
      if (x.size() > max_arg)
        fail(errc::invalid_argument, me + ": a command argument is over 1 MiB, the most a "
                                          "TrainJob holds");
    for (const auto* m : {&r.labels, &r.annotations})
      for (const auto& [k, v] : *m)
        if (k.empty() || detail::has_nul(k) || detail::has_nul(v))
          fail(errc::invalid_argument, me + ": " + (m == &r.labels ? "label" : "annotation") +
                                           " keys must not be empty and neither keys nor values "
                                           "may hold NUL");
    if (r.priority != 0)
      fail(errc::invalid_argument,
           me + ": priority=" + std::to_string(r.priority) +
               ": on Kubernetes, Kueue orders the queue by WorkloadPriorityClass; give the class as a label "
               "(--label kueue.x-k8s.io/priority-class=NAME) with the queue (--label "
               "kueue.x-k8s.io/queue-name=QUEUE), and leave priority 0 (docs/scheduling.md)");
    if (!r.after_ok.empty() || !r.after_any.empty() || !r.after_not_ok.empty())
      fail(
          errc::invalid_argument,
          me +
              ": after_ok/after_any/after_not_ok: a TrainJob has no dependencies; chain jobs with a workflow "
              "engine (Argo, Kubeflow Pipelines), or run the chain on the local backend "
              "(docs/scheduling.md)");
    if (!r.array.empty())
      fail(errc::invalid_argument,
           me + ": array: job arrays are the local backend's (on a cluster, submit the "
                "jobs and let Kueue's quota bound them; docs/scheduling.md)");
    if (r.retry.max_restarts > 0)
      fail(errc::invalid_argument,
           me +
               ": retry: a TrainJob has no restart policy of its own; restarts are its runtime's (the "
               "JobSet template's failurePolicy.maxRestarts in the ClusterTrainingRuntime), so use a runtime "
               "that sets them, or leave the retries out (docs/scheduling.md)");
    t.active_deadline_seconds = r.active_deadline.count();
    auto body = trainjob_body(name, ns, rt, t, r.labels, r.annotations);
    auto made = co_await a->post(jobs_path, std::move(body));
    if (made) co_return name;
    if (made.error().code == kube_errc::already_exists)
      fail(errc::duplicate_name,
           me + " exists already in " + where + "; delete it (tjob delete) or choose another name",
           made.error().message);
    raise(prefixed(made.error(), me + ": "));
  }

  // --- reading --------------------------------------------------------------

  asio::awaitable<outcome<std::vector<json::object>>> pods_of(const std::string& name) {
    auto target = pods_path + "?labelSelector=" + http::url_encode(pod_selector(name));
    auto v = co_await a->get(std::move(target));
    if (!v) co_return v.error();
    std::vector<json::object> out;
    if (auto* items = items_of(*v))
      for (auto& p : *items)
        if (p.is_object()) out.push_back(std::move(p.as_object()));
    co_return out;
  }

  // The "items" of a list answer; null when it has none.
  static json::array* items_of(json::value& list) {
    if (!list.is_object()) return nullptr;
    auto* items = list.as_object().if_contains("items");
    return items && items->is_array() ? &items->as_array() : nullptr;
  }

  static std::vector<pod_step> steps_of(const std::vector<json::object>& pods) {
    std::vector<const json::object*> ptrs;
    for (const auto& p : pods) ptrs.push_back(&p);
    return steps_from_pods(ptrs);
  }

  asio::awaitable<outcome<json::object>> trainjob(const std::string& name) {
    if (auto problem = detail::name_problem(name))
      co_return detail::make_failure(errc::job_not_found, "No TrainJob with name " + quote(name) + " in " +
                                                              where + " (" + *problem + ")");
    auto v = co_await a->get_if(jobs_path + "/" + name);
    if (!v) co_return v.error();
    if (!*v || !(*v)->is_object()) co_return not_found(name);
    co_return std::move((*v)->as_object());
  }

  // The job, or why not (job_not_found among others, for a waiter to decide on).
  asio::awaitable<outcome<train_job>> find(const std::string& name) {
    auto tj = co_await trainjob(name);
    if (!tj) co_return tj.error();
    auto pods = co_await pods_of(name);
    if (!pods) co_return pods.error();
    int fallback = 1;
    if (!num_nodes_of(*tj)) fallback = co_await nodes_of_runtime(runtime_of(*tj));
    co_return to_job(*tj, steps_of(*pods), fallback);
  }

  asio::awaitable<train_job> get(const std::string& name) {
    auto found = co_await find(name);
    co_return std::move(found).value();
  }

  asio::awaitable<std::vector<train_job>> list(std::optional<std::string> runtime_filter) {
    auto jobs_read = co_await a->get(jobs_path);
    auto& jobs = jobs_read.value();
    auto target = pods_path + "?labelSelector=" + http::url_encode(label_jobset);
    auto pods_read = co_await a->get(std::move(target));
    auto& pods = pods_read.value();
    std::map<std::string, std::vector<const json::object*>> by_job;
    if (auto* items = items_of(pods))
      for (const auto& p : *items)
        if (p.is_object()) by_job[label_of(p.as_object(), label_jobset)].push_back(&p.as_object());
    std::vector<train_job> out;
    if (auto* items = items_of(jobs))
      for (const auto& j : *items) {
        if (!j.is_object()) continue;
        auto& tj = j.as_object();
        if (runtime_filter && runtime_of(tj) != *runtime_filter) continue;
        int fallback = 1;
        if (!num_nodes_of(tj)) fallback = co_await nodes_of_runtime(runtime_of(tj));
        out.push_back(to_job(tj, steps_from_pods(by_job[name_of(tj)]), fallback));
      }
    std::stable_sort(out.begin(), out.end(), [](const train_job& x, const train_job& y) {
      return x.creation_timestamp != y.creation_timestamp ? x.creation_timestamp < y.creation_timestamp
                                                          : x.name < y.name;
    });
    co_return out;
  }

  // The job from what the watches hold; nullopt when the job is not there.
  std::optional<train_job> from_watches(const std::string& name) {
    auto& jobs = jobs_inf->items();
    auto it = jobs.find(name);
    if (it == jobs.end()) return std::nullopt;
    std::vector<const json::object*> pods;
    for (const auto& [pn, p] : pods_inf->items())
      if (label_of(p, label_jobset) == name) pods.push_back(&p);
    auto n = num_nodes_of(it->second);
    int fallback = 1;
    if (!n)
      if (auto r = runtime_nodes.find(runtime_of(it->second)); r != runtime_nodes.end()) fallback = r->second;
    return to_job(it->second, steps_from_pods(pods), fallback);
  }

  std::string watch_trouble() const {
    std::string s;
    if (jobs_inf && !jobs_inf->last_error().empty())
      s = jobs_inf->last_error();
    else if (pods_inf && !pods_inf->last_error().empty())
      s = pods_inf->last_error();
    return s.empty() ? s : " (the watch is failing: " + s + ")";
  }

  // Waits until `done` holds of the watched job, or the deadline. `done`
  // gets nullopt when the job is not (or no longer) there.
  // With `after_change`, only what changes after the call counts.
  template <class F>
  asio::awaitable<bool> watch_until(const std::string& name, steady::time_point deadline, F done,
                                    bool after_change = false) {
    ensure_watches();
    detail::wake_signal sig(ctx.ex);
    detail::wake_registration r1(jobs_inf->waiters(), &sig), r2(pods_inf->waiters(), &sig);
    for (bool check = !after_change;; check = true) {
      check_running();
      if (check && jobs_inf->synced() && pods_inf->synced() && done(from_watches(name))) co_return true;
      if (!co_await sig.wait_until(deadline) && steady::now() >= deadline) co_return false;
    }
  }

  // --- logs -----------------------------------------------------------------

  struct pod_log final : detail::piecewise_log {
    std::shared_ptr<backend::impl> b;
    std::string job, what;
    log_options options;
    std::optional<http::body_stream> body;
    std::optional<std::string> started;  // the step's pod, when it had started as the log was asked for

    pod_log(std::shared_ptr<backend::impl> bk, std::string j, log_options o, std::optional<std::string> pod)
        // sinceTime reaches the kubelet in whole seconds: the times say which lines are since
        : piecewise_log(o.timestamps || o.since ? std::optional(detail::peer_stamps(o.timestamps, o.since))
                                                : std::nullopt),
          b(std::move(bk)),
          job(std::move(j)),
          options(std::move(o)),
          started(std::move(pod)) {
      what = "the log of TrainJob " + quote(job) + " step " + quote(options.step);
    }

    // The pod of the step once it has started; nullopt when there is none to
    // read (not following and not started, or the job ended before it did).
    asio::awaitable<outcome<std::optional<std::string>>> started_pod() {
      if (started) co_return std::exchange(started, std::nullopt);
      for (bool last_look = false;;) {
        auto pods = co_await b->pods_of(job);
        if (!pods) co_return pods.error();
        for (const auto& s : steps_of(*pods))
          if (s.step == options.step && s.phase != "Pending") co_return std::optional<std::string>(s.pod);
        // Kubeflow returns nothing here (#182); a follower waits for the start.
        if (!options.follow || last_look) co_return std::optional<std::string>();
        bool started = false, seen = false;
        co_await b->watch_until(job, steady::time_point::max(), [&](const std::optional<train_job>& j) {
          // A job the watch has not shown yet was just made (it was read
          // above): absent counts as gone only once it has been seen.
          if (!j && !seen) return false;
          seen = true;
          if (!j || is_terminal(j->status)) {
            last_look = true;  // read the pods once more: the two watches need not agree yet
            return true;
          }
          for (const auto& [pn, p] : b->pods_inf->items()) {
            if (label_of(p, label_jobset) != job) continue;
            std::vector<const json::object*> one{&p};
            for (const auto& s : steps_from_pods(one))
              if (s.step == options.step && s.phase != "Pending") started = true;
          }
          return started;
        });
      }
    }

    asio::awaitable<bool> read_piece(std::string& out) override {
      auto where = what + ": ";
      if (!body) {
        auto pod = co_await started_pod();
        if (!pod) raise(prefixed(pod.error(), where));
        if (!*pod) co_return false;
        const auto& o = options;
        auto target =
            b->pods_path + "/" + **pod + "/log?container=node" + (o.follow ? "&follow=true" : "") +
            (o.tail ? "&tailLines=" + std::to_string(*o.tail) : "") +
            (o.timestamps || o.since ? "&timestamps=true" : "") +
            (o.since ? "&sinceTime=" + http::url_encode(detail::format_rfc3339_nano(*o.since)) : "");
        auto opened = co_await b->a->stream(std::move(target));
        if (!opened) {
          // started between our read and the request: wait and try again
          bool not_yet = options.follow && opened.error().code == kube_errc::bad_request &&
                         opened.error().message.find("waiting to start") != std::string::npos;
          if (not_yet) co_return true;
          raise(prefixed(opened.error(), where));
        }
        body.emplace(std::move(*opened));
      }
      auto piece = co_await body->read_some();
      if (!piece) raise(prefixed(piece.error(), where));
      if (!*piece) co_return false;
      out.append(**piece);
      co_return true;
    }
  };

  asio::awaitable<log_stream> logs(const std::string& name, const log_options& o) {
    auto tj_read = co_await trainjob(name);
    auto tj = std::move(tj_read).value();
    auto pods_read = co_await pods_of(name);
    auto pods = std::move(pods_read).value();
    auto steps = steps_of(pods);
    int nodes = 1;
    if (auto n = num_nodes_of(tj))
      nodes = *n;
    else
      nodes = co_await nodes_of_runtime(runtime_of(tj));
    std::set<std::string> known;
    for (int i = 0; i < nodes; ++i) known.insert("node-" + std::to_string(i));
    for (const auto& s : steps) known.insert(s.step);
    if (!known.count(o.step))
      detail::throw_step_not_found(name, o.step, std::vector<std::string>(known.begin(), known.end()));
    std::optional<std::string> started;
    for (const auto& s : steps)
      if (s.step == o.step && s.phase != "Pending") started = s.pod;
    co_return log_stream(std::make_unique<pod_log>(shared_from_this(), name, o, std::move(started)));
  }

  // --- cancel / delete / events ---------------------------------------------

  // A TrainJob has no cancel: suspending it is how Kubernetes stops its pods
  // and keeps the object. The annotation makes it read Failed (cancelled).
  asio::awaitable<void> cancel(const std::string& name) {
    auto job = co_await get(name);
    if (is_terminal(job.status)) co_return;
    json::object patch{{"metadata", json::object{{"annotations", json::object{{annotation_cancel, "true"}}}}},
                       {"spec", json::object{{"suspend", true}}}};
    auto patched = co_await a->merge_patch(jobs_path + "/" + name, std::move(patch));
    if (!patched && patched.error().code == kube_errc::not_found) raise(not_found(name));
    if (!patched) raise(prefixed(patched.error(), who(name) + ": cannot cancel: "));
    auto deadline = steady::now() + ctx.cfg.grace_period + std::chrono::seconds(30);
    bool ok = co_await watch_until(
        name, deadline, [](const std::optional<train_job>& j) { return !j || is_terminal(j->status); });
    if (!ok)
      fail(errc::timeout, who(name) +
                              " was suspended to cancel it, but its pods were still "
                              "running after " +
                              std::to_string((ctx.cfg.grace_period.count() + 999) / 1000 + 30) +
                              " s; the cluster's controller is not acting on it" + watch_trouble());
  }

  asio::awaitable<void> remove(const std::string& name) {
    if (auto problem = detail::name_problem(name)) raise(not_found(name));
    auto deleted = co_await a->del(jobs_path + "/" + name);
    if (!deleted && deleted.error().code == kube_errc::not_found) raise(not_found(name));
    if (!deleted) raise(prefixed(deleted.error(), who(name) + ": cannot delete: "));
  }

  asio::awaitable<std::vector<event>> job_events(const std::string& name) {
    auto tj = co_await trainjob(name);
    tj.value();
    auto pods = co_await pods_of(name);
    auto evs = co_await a->get("/api/v1/namespaces/" + ns + "/events");
    auto* items = items_of(evs.value());
    json::array empty;
    co_return events_of(items ? *items : empty, name, steps_of(pods.value()));
  }

  asio::awaitable<void> shutdown() {
    stopping = true;
    if (jobs_inf) jobs_inf->stop();
    if (pods_inf) pods_inf->stop();
    co_await tasks.join();
  }
};

}  // namespace tjob::kube
