// tjob/wire.hpp — jobs, events, runtimes and job specs as JSON: the one shape
// `tjob get -o json` prints, `tjob serve` answers and sends, and its clients
// read back.
//
// Threading: pure functions.
// Errors: the *_from_json readers of answers throw tjob::error
//   (protocol_error) naming the field; request_from_json, which reads what a
//   person or a program sent, throws spec_error (invalid_argument) naming the
//   field at fault, the problem and the fix, and refuses unknown fields by name.
#pragma once

#include <tjob/backends.hpp>
#include <tjob/engine.hpp>
#include <tjob/error.hpp>
#include <tjob/types.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <string>

namespace tjob {

/// {"name","status","reason","runtime","num_nodes","creation_timestamp",
///  "start_time","end_time","steps":[{"name","status","exit_code","reason"}]},
/// and "queue_position" while it waits for admission; times are RFC 3339 in
/// UTC with milliseconds, null when not yet known.
boost::json::object to_json(const train_job& job);
/// {"seq","time","step","reason","message"}
boost::json::object to_json(const event& ev);
/// {"name","kind","trainer":{"trainer_type","framework","image","num_nodes",
///  "device","device_count","packages"}}
boost::json::object to_json(const runtime& rt);
/// {"key","python","python_version","packages","index_urls",
///  "system_site_packages","bytes","created","last_used","problem"}
boost::json::object to_json(const venv_cache_entry& e);

/// {"name","position","priority","waits_for","since","cpus","memory","gpus"}
boost::json::object to_json(const queue_entry& e);

/// {"id","runs_here","forwards","needs_owner","owner_until_started",
///  "admission","queued_by","restarts","arrays","keeps_labels","takes_image",
///  "workdir_in_image","runs_images_as_is","venv_cache","job_files"}: what `tjob serve`'s GET /healthz says of its backend.
boost::json::object to_json(const backend_capabilities& c);
backend_capabilities capabilities_from_json(const boost::json::value& v);

/// An engine's configuration, as one process hands it to another (a
/// supervisor): {"backend","backend_config","home","grace_ms",
/// "store_busy_timeout_ms","runtime_dirs","cleanup_venv","venv_cache",
/// "venv_cache_ttl_s","gpu_devices","admission":{"max_running","cpus",
/// "memory"},"failure_log_lines","supervisor","clean_job_environment"}; the
/// logger is not in it. The backend's own options stay its own object, which
/// it checks when the engine is made.
boost::json::object to_json(const engine_config& c);
/// The inverse; a member of the wrong type is refused by name (protocol_error).
engine_config engine_config_from_json(const boost::json::value& v);

train_job job_from_json(const boost::json::value& v);
queue_entry queue_entry_from_json(const boost::json::value& v);
event event_from_json(const boost::json::value& v);
runtime runtime_from_json(const boost::json::value& v);
venv_cache_entry venv_cache_entry_from_json(const boost::json::value& v);

/// A job spec: {"name","runtime","num_nodes","labels","annotations",
/// "trainer":{"kind":"command",...} or {"kind":"python",...}}; every field but
/// "trainer" may be left out. A command trainer has "command", "env",
/// "working_dir", "image"; a Python trainer has the fields of python_trainer
/// ("source", "function", "function_args" as a JSON object, "args",
/// "packages_to_install", ...) and Kubeflow's "resources_per_node"
/// ({"cpu":"2","memory":"4Gi","gpu":"1"}). A spec carries the source itself;
/// only one read on the server's own machine may name a file instead
/// ("source_file", an absolute path; see request_from_json).
boost::json::object to_json(const train_request& request);

/// A field of a job spec that cannot be used.
class spec_error : public error {
 public:
  spec_error(std::string field, std::string message);
  /// The field's path in the spec: "trainer.command", "labels.team".
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

/// The inverse of to_json(train_request), strict: a field of the wrong type or
/// not known is refused by name (spec_error). `allow_source_file`: the spec
/// comes from this machine and this user (tjob serve's unix socket), so a
/// Python trainer may name its training file by absolute path, and the job
/// runs it where it is, its directory first on sys.path, as a local job does.
train_request request_from_json(const boost::json::value& v, bool allow_source_file = false);

}  // namespace tjob
