// TrainJob objects as Kubeflow's KubernetesBackend writes and reads them
// (reference/kubeflow-trainer.md §3c, §4): the create body, steps from the
// JobSet's pods, the status rule, events and runtimes. Pure functions over
// JSON, unit-tested without a server.
#pragma once

#include <tjob/types.hpp>

#include "core/job_state.hpp"

#include <boost/json/object.hpp>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::kube {

inline constexpr const char* group = "trainer.kubeflow.org";
inline constexpr const char* version = "v1alpha1";
inline constexpr const char* api_version = "trainer.kubeflow.org/v1alpha1";
inline constexpr const char* label_jobset = "jobset.sigs.k8s.io/jobset-name";
inline constexpr const char* label_rjob = "jobset.sigs.k8s.io/replicatedjob-name";
inline constexpr const char* label_index = "batch.kubernetes.io/job-completion-index";
/// Set by cancel_job together with spec.suspend: the job reads Failed (cancelled).
inline constexpr const char* annotation_cancel = "tjob.dev/cancel-requested";
/// Kubeflow's POD_LABEL_SELECTOR for one job.
std::string pod_selector(const std::string& job);

/// What goes into spec.trainer.
struct trainer_spec {
  std::vector<std::string> command;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::string image;
  int num_nodes = 1;
  /// resourcesPerNode, after Kubeflow's aliases; requests == limits.
  std::map<std::string, std::string> resources;
  std::optional<int> num_proc_per_node;
  /// The TrainJob's spec.activeDeadlineSeconds; 0: none.
  std::int64_t active_deadline_seconds = 0;
};

/// Kubeflow's get_resources_per_node: standard keys lower-cased, `gpu` →
/// nvidia.com/gpu, `storage` → ephemeral-storage, `mig-X` → nvidia.com/mig-X;
/// GPU with MIG, or two MIG kinds, are refused (invalid_argument naming `who`).
std::map<std::string, std::string> resources_per_node(const std::string& who,
                                                      const std::map<std::string, std::string>& in);

/// The TrainJob Kubeflow's SDK would create for this trainer.
boost::json::object trainjob_body(const std::string& name, const std::string& ns, const runtime& rt,
                                  const trainer_spec& t,
                                  const std::map<std::string, std::string>& labels = {},
                                  const std::map<std::string, std::string>& annotations = {});

/// One step, from the newest pod of its component.
struct pod_step {
  std::string step;   ///< node-0, node-1, dataset-initializer, ...
  std::string pod;    ///< the pod's name
  std::string phase;  ///< Pending, Running, Succeeded, Failed, Unknown
  std::optional<int> exit_code;
  std::string terminated_reason;
  /// Its container's state.running.startedAt (or terminated.startedAt), and
  /// terminated.finishedAt.
  std::optional<clock::time_point> started, finished;
};
/// Newest pod per step key (role, or <role>-<completion index>), sorted by
/// step name as the other backends sort (length, then name).
std::vector<pod_step> steps_from_pods(const std::vector<const boost::json::object*>& pods);

/// A pod phase as a TrainJob status word: Pending/Unknown → Created, Running,
/// Succeeded → Complete, Failed.
job_status status_of_phase(std::string_view phase);

/// The job as the other backends report it. `fallback_nodes`: numNodes when
/// the TrainJob does not say (the runtime's).
train_job to_job(const boost::json::object& tj, const std::vector<pod_step>& steps, int fallback_nodes);

/// numNodes of the TrainJob's trainer, if it says.
std::optional<int> num_nodes_of(const boost::json::object& tj);
std::string name_of(const boost::json::object& obj);
/// metadata.labels[key] of an object; "" when absent.
std::string label_of(const boost::json::object& obj, std::string_view key);
/// metadata.resourceVersion of an object; "" when absent.
std::string resource_version_of(const boost::json::object& obj);
std::string runtime_of(const boost::json::object& tj);

/// The event log's name for a Kubernetes event's reason: Created and
/// SuccessfulCreate → Created, Started → Started, Completed/Succeeded →
/// Exited, image and start failures → StartFailed, FailedScheduling and
/// Suspended → Queued, Killing → CancelRequested, eviction and preemption →
/// Lost, anything else (Scheduled, Pulling, Pulled, ...) → Setup.
detail::log_event log_event_of_reason(std::string_view reason);

/// Kubeflow's get_job_events: events whose involved object is the job, one
/// of its steps or pods (kinds TrainJob, JobSet, Job, Pod), with a
/// firstTimestamp, by time. `step_of_pod` fills event.step; the reason is
/// the event log's (log_event_of_reason), the cluster's own reason is kept
/// in the message ("Pod j-node-0-0-x Scheduled: ...").
std::vector<event> events_of(const boost::json::array& items, const std::string& job,
                             const std::vector<pod_step>& steps);

/// A TrainingRuntime or ClusterTrainingRuntime object as a runtime; nullopt
/// (with `problem` set) when it lacks what Kubeflow requires.
std::optional<runtime> runtime_from(const boost::json::object& cr, std::string& problem);

}  // namespace tjob::kube
