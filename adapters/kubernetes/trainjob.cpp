#include "adapters/kubernetes/trainjob.hpp"

#include "core/job_state.hpp"
#include "core/json_fields.hpp"
#include "core/progress.hpp"
#include "core/runtimes.hpp"
#include "core/times.hpp"

#include <tjob/error.hpp>

#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>

namespace tjob::kube {

namespace json = boost::json;
using detail::arr_of;
using detail::obj_of;
using detail::str_of;

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string label_of(const json::object& o, std::string_view key) {
  auto* md = obj_of(o, "metadata");
  return md ? str_of(obj_of(*md, "labels"), key) : "";
}

std::string resource_version_of(const json::object& o) {
  return str_of(obj_of(o, "metadata"), "resourceVersion");
}

std::string pod_selector(const std::string& job) {
  return std::string(label_jobset) + "=" + job + "," + label_rjob +
         " in (dataset-initializer,model-initializer,launcher,node)";
}

std::map<std::string, std::string> resources_per_node(const std::string& who,
                                                      const std::map<std::string, std::string>& in) {
  std::map<std::string, std::string> out;
  std::string mig;
  bool gpu = false;
  for (const auto& [k, v] : in) {
    auto l = lower(k);
    std::string key = k;
    if (l == "cpu" || l == "memory" || l == "ephemeral-storage")
      key = l;
    else if (l == "gpu")
      key = "nvidia.com/gpu";
    else if (l == "storage")
      key = "ephemeral-storage";
    else if (l.starts_with("mig-"))
      key = "nvidia.com/" + l;
    if (key == "nvidia.com/gpu") gpu = true;
    if (key.starts_with("nvidia.com/mig-")) {
      if (!mig.empty() && mig != key)
        throw error(errc::invalid_argument,
                    who + ": resources_per_node asks for two MIG kinds (" + mig + ", " + key + "); give one");
      mig = key;
    }
    out[key] = v;
  }
  if (gpu && !mig.empty())
    throw error(errc::invalid_argument, who + ": resources_per_node asks for GPUs and MIG slices (" + mig +
                                            ") together; give one of them");
  return out;
}

json::object trainjob_body(const std::string& name, const std::string& ns, const runtime& rt,
                           const trainer_spec& t, const std::map<std::string, std::string>& labels,
                           const std::map<std::string, std::string>& annotations) {
  json::object md{{"name", name}, {"namespace", ns}};
  if (!labels.empty()) {
    json::object l;
    for (const auto& [k, v] : labels) l[k] = v;
    md["labels"] = std::move(l);
  }
  if (!annotations.empty()) {
    json::object a;
    for (const auto& [k, v] : annotations) a[k] = v;
    md["annotations"] = std::move(a);
  }
  json::object trainer;
  trainer["numNodes"] = t.num_nodes;
  if (!t.resources.empty()) {
    json::object q;
    for (const auto& [k, v] : t.resources) q[k] = v;
    trainer["resourcesPerNode"] = json::object{{"requests", q}, {"limits", q}};
  }
  if (!t.command.empty()) {
    json::array c;
    for (const auto& a : t.command) c.emplace_back(a);
    trainer["command"] = std::move(c);
  }
  if (!t.args.empty()) {
    json::array c;
    for (const auto& a : t.args) c.emplace_back(a);
    trainer["args"] = std::move(c);
  }
  if (!t.image.empty()) trainer["image"] = t.image;
  if (!t.env.empty()) {
    json::array e;
    for (const auto& [k, v] : t.env) e.emplace_back(json::object{{"name", k}, {"value", v}});
    trainer["env"] = std::move(e);
  }
  if (t.num_proc_per_node) trainer["numProcPerNode"] = *t.num_proc_per_node;
  json::object spec{{"runtimeRef", json::object{{"name", rt.name}, {"apiGroup", group}, {"kind", rt.kind}}},
                    {"trainer", std::move(trainer)}};
  if (t.active_deadline_seconds > 0) spec["activeDeadlineSeconds"] = t.active_deadline_seconds;
  return json::object{{"apiVersion", api_version},
                      {"kind", "TrainJob"},
                      {"metadata", std::move(md)},
                      {"spec", std::move(spec)}};
}

std::string name_of(const json::object& o) {
  auto* md = obj_of(o, "metadata");
  return str_of(md, "name");
}

std::string runtime_of(const json::object& tj) {
  auto* spec = obj_of(tj, "spec");
  return spec ? str_of(obj_of(*spec, "runtimeRef"), "name") : "";
}

std::optional<int> num_nodes_of(const json::object& tj) {
  auto* spec = obj_of(tj, "spec");
  auto* tr = spec ? obj_of(*spec, "trainer") : nullptr;
  if (!tr) return std::nullopt;
  auto it = tr->find("numNodes");
  if (it == tr->end() || !it->value().is_int64()) return std::nullopt;
  return static_cast<int>(it->value().as_int64());
}

job_status status_of_phase(std::string_view phase) {
  if (phase == "Running") return job_status::running;
  if (phase == "Succeeded") return job_status::complete;
  if (phase == "Failed") return job_status::failed;
  return job_status::created;
}

std::vector<pod_step> steps_from_pods(const std::vector<const json::object*>& pods) {
  std::vector<const json::object*> sorted(pods);
  auto created = [](const json::object* p) {
    auto* md = obj_of(*p, "metadata");
    return str_of(md, "creationTimestamp") + "|" + str_of(md, "resourceVersion");
  };
  // newest first: a restarted component's new pod wins
  std::stable_sort(sorted.begin(), sorted.end(), [&](auto* a, auto* b) { return created(a) > created(b); });
  std::map<std::string, pod_step> by_key;
  for (auto* p : sorted) {
    auto role = label_of(*p, label_rjob);
    if (role.empty()) continue;
    std::string key = role;
    if (role == "node" || role == "launcher") {
      auto idx = label_of(*p, label_index);
      if (idx.empty()) continue;
      key = role + "-" + idx;
    }
    if (by_key.count(key)) continue;
    pod_step s;
    s.step = key;
    s.pod = name_of(*p);
    auto* st = obj_of(*p, "status");
    s.phase = str_of(st, "phase");
    if (s.phase.empty()) s.phase = "Pending";
    if (st)
      if (auto* cs = arr_of(*st, "containerStatuses"))
        for (const auto& c : *cs) {
          if (!c.is_object()) continue;
          auto& co = c.as_object();
          auto cname = str_of(&co, "name");
          if (cname != "node" && cname != role) continue;
          auto* state = obj_of(co, "state");
          auto* term = state ? obj_of(*state, "terminated") : nullptr;
          auto* running = state ? obj_of(*state, "running") : nullptr;
          if (running) s.started = detail::parse_rfc3339(str_of(running, "startedAt"));
          if (term) {
            s.started = detail::parse_rfc3339(str_of(term, "startedAt"));
            s.finished = detail::parse_rfc3339(str_of(term, "finishedAt"));
            auto it = term->find("exitCode");
            if (it != term->end() && it->value().is_int64())
              s.exit_code = static_cast<int>(it->value().as_int64());
            s.terminated_reason = str_of(term, "reason");
          }
        }
    by_key.emplace(key, std::move(s));
  }
  std::vector<pod_step> out;
  for (auto& [k, v] : by_key) out.push_back(std::move(v));
  std::sort(out.begin(), out.end(), [](const pod_step& a, const pod_step& b) {
    return a.step.size() != b.step.size() ? a.step.size() < b.step.size() : a.step < b.step;
  });
  return out;
}

namespace {

// The controller's copy of what the training code last reported
// (status.trainerStatus, Kubeflow's update_trainjob_status): the percentage
// (0 to 100), the seconds left (0 or more), at most 256 metrics of names and
// values of at most 64 bytes (the API's bounds; one past them is left out),
// and when.
void read_trainer_status(const json::object& status, train_job& j) {
  const auto* ts = obj_of(status, "trainerStatus");
  if (!ts) return;
  auto number = [&](const char* key) -> std::optional<double> {
    auto* v = ts->if_contains(key);
    return v ? detail::number_of(*v) : std::nullopt;
  };
  if (auto p = number("progressPercentage")) j.progress_percent = detail::percent_of(*p);
  if (auto e = number("estimatedRemainingSeconds")) j.estimated_remaining_seconds = detail::remaining_of(*e);
  if (auto* metrics = arr_of(*ts, "metrics"))
    for (const auto& m : *metrics) {
      if (j.metrics.size() >= detail::max_metrics) break;
      if (!m.is_object()) continue;
      const auto& mo = m.get_object();
      auto name = str_of(&mo, "name");
      std::string value;
      if (auto* v = mo.if_contains("value"); v && v->is_string())
        value = std::string(v->get_string());
      else if (v && v->is_number())
        value = detail::number_text(*v);
      if (name.empty() || name.size() > detail::max_metric_bytes || value.size() > detail::max_metric_bytes)
        continue;
      detail::put_metric(j.metrics, std::move(name), std::move(value));  // a name given twice: its last value
    }
  j.progress_updated = detail::parse_rfc3339(str_of(ts, "lastUpdatedTime"));
}

}  // namespace

namespace {

// A True Complete or Failed condition of the TrainJob, applied to `j`
// (with the controller's end time and reason); false when there is none.
bool apply_conditions(const json::object& tj, train_job& j) {
  bool decided = false;
  if (auto* st = obj_of(tj, "status"))
    if (auto* conds = arr_of(*st, "conditions"))
      for (const auto& c : *conds) {
        if (!c.is_object()) continue;
        auto& co = c.as_object();
        if (str_of(&co, "status") != "True") continue;
        auto type = str_of(&co, "type");
        if (type == "Complete" || type == "Failed")  // the controller's word on when it ended
          if (auto t = detail::parse_rfc3339(str_of(&co, "lastTransitionTime"))) j.end_time = t;
        if (type == "Complete") {
          j.status = job_status::complete;
          decided = true;
        } else if (type == "Failed") {
          j.status = job_status::failed;
          // the controller's reason, as the local backend words it
          j.reason = str_of(&co, "reason") == "DeadlineExceeded" ? "DeadlineExceeded" : "";
          for (const auto& s : j.steps)
            if (s.status == job_status::failed && j.reason.empty()) j.reason = s.reason;
          if (j.reason.empty()) j.reason = str_of(&co, "message");
          decided = true;
        }
        if (decided) break;
      }
  return decided;
}

}  // namespace

train_job to_job(const json::object& tj, const std::vector<pod_step>& steps, int fallback_nodes) {
  train_job j;
  if (auto* st = obj_of(tj, "status")) read_trainer_status(*st, j);
  j.name = name_of(tj);
  j.runtime = runtime_of(tj);
  j.num_nodes = num_nodes_of(tj).value_or(fallback_nodes);
  if (auto t = detail::parse_rfc3339(str_of(obj_of(tj, "metadata"), "creationTimestamp")))
    j.creation_timestamp = *t;
  for (const auto& ps : steps) {
    step s;
    s.name = ps.step;
    s.status = status_of_phase(ps.phase);
    s.exit_code = ps.exit_code;
    if (s.status == job_status::failed)
      s.reason = ps.exit_code ? "exit code " + std::to_string(*ps.exit_code)
                              : (ps.terminated_reason.empty() ? "pod failed" : ps.terminated_reason);
    if (ps.started && (!j.start_time || *ps.started < *j.start_time)) j.start_time = ps.started;
    if (ps.finished && (!j.end_time || *ps.finished > *j.end_time)) j.end_time = ps.finished;
    j.steps.push_back(std::move(s));
  }
  // Kubeflow's rule: a True Complete or Failed condition decides; without
  // one, Running once every node pod runs or has succeeded. (Kubeflow stays
  // Created whenever any condition exists, even a Resumed Suspended one; we
  // apply the Running rule then too.)
  const bool decided = apply_conditions(tj, j);
  if (!decided) {
    // Suspended (by Kueue until it admits the workload, or by hand): it waits,
    // Created with reason Queued, as a local job waits for admission.
    bool suspended = false;
    if (auto* sp = obj_of(tj, "spec"); sp && sp->contains("suspend")) suspended = (*sp).at("suspend") == true;
    auto* md = obj_of(tj, "metadata");
    const bool cancelled = md && !str_of(obj_of(*md, "annotations"), annotation_cancel).empty();
    if (suspended && !cancelled && j.status == job_status::created)
      j.reason = std::string(detail::queued_reason);
    if (md && !str_of(obj_of(*md, "annotations"), annotation_cancel).empty()) {
      bool live = false;
      for (const auto& s : j.steps) live = live || s.status == job_status::running;
      if (!live) {
        j.status = job_status::failed;
        j.reason = "cancelled";
        for (auto& s : j.steps)
          if (!is_terminal(s.status)) {
            s.status = job_status::failed;
            s.reason = "cancelled";
          }
        return j;
      }
    }
    int up = 0;
    for (const auto& s : j.steps)
      if (s.name.starts_with("node-") &&
          (s.status == job_status::running || s.status == job_status::complete))
        ++up;
    if (up > 0 && up == j.num_nodes) j.status = job_status::running;
  }
  if (!is_terminal(j.status)) j.end_time.reset();
  return j;
}

detail::log_event log_event_of_reason(std::string_view reason) {
  using detail::log_event;
  static const std::map<std::string_view, log_event> known{
      {"Created", log_event::created},  // the TrainJob, or a pod's container
      {"SuccessfulCreate", log_event::created},
      {"Started", log_event::started},
      {"Completed", log_event::exited},
      {"Succeeded", log_event::exited},
      {"Failed", log_event::start_failed},  // a pod that could not pull or start its image
      {"BackOff", log_event::start_failed},
      {"ErrImagePull", log_event::start_failed},
      {"ImagePullBackOff", log_event::start_failed},
      {"CreateContainerError", log_event::start_failed},
      {"FailedCreate", log_event::start_failed},
      {"FailedScheduling", log_event::queued},  // it waits for room on a node
      {"Suspended", log_event::queued},
      {"Admitted", log_event::admitted},  // Kueue let the workload run
      {"Killing", log_event::cancel_requested},
      {"Evicted", log_event::lost},
      {"Preempted", log_event::lost},
      {"Preempting", log_event::lost},
      {"NodeNotReady", log_event::lost},
  };
  auto it = known.find(reason);
  return it == known.end() ? log_event::setup : it->second;  // Scheduled, Pulling, Pulled, ...
}

std::vector<event> events_of(const json::array& items, const std::string& job,
                             const std::vector<pod_step>& steps) {
  std::map<std::string, std::string> step_of;  // object name -> step
  step_of[job] = "";
  for (const auto& s : steps) {
    step_of[s.pod] = s.step;
    step_of.emplace(s.step, s.step);
  }
  static const std::set<std::string> kinds{"TrainJob", "JobSet", "Job", "Pod"};
  std::vector<event> out;
  for (const auto& v : items) {
    if (!v.is_object()) continue;
    auto& e = v.as_object();
    auto* io = obj_of(e, "involvedObject");
    if (!io || !kinds.count(str_of(io, "kind"))) continue;
    auto it = step_of.find(str_of(io, "name"));
    if (it == step_of.end()) continue;
    auto ts = str_of(&e, "firstTimestamp");
    if (ts.empty()) ts = str_of(&e, "eventTime");
    auto t = detail::parse_rfc3339(ts);
    if (!t) continue;
    event ev;
    ev.time = *t;
    ev.step = it->second;
    auto reason = str_of(&e, "reason");
    ev.reason = std::string(detail::to_string(log_event_of_reason(reason)));
    ev.message = str_of(io, "kind") + " " + str_of(io, "name") + " " + reason + ": " + str_of(&e, "message");
    out.push_back(std::move(ev));
  }
  std::stable_sort(out.begin(), out.end(), [](const event& a, const event& b) { return a.time < b.time; });
  for (std::size_t i = 0; i < out.size(); ++i) out[i].seq = static_cast<std::int64_t>(i + 1);
  return out;
}

std::optional<runtime> runtime_from(const json::object& cr, std::string& problem) {
  std::vector<runtime> out;
  std::vector<std::string> sources, problems;
  auto kind = str_of(&cr, "kind");
  detail::parse_runtime_documents(json::serialize(cr), kind + " " + name_of(cr), out, sources, problems);
  if (out.empty()) {
    problem = problems.empty() ? kind + " " + name_of(cr) + " is not a usable runtime" : problems.front();
    return std::nullopt;
  }
  if (!kind.empty()) out.front().kind = kind;
  return out.front();
}

}  // namespace tjob::kube
