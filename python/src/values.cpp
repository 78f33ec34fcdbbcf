// The values the engine and the Python layer exchange: the engine's as
// dicts for tjob/*.py, and the dicts it builds (requests, configs, log
// options) as the engine's.
#include "values.hpp"

#include <boost/asio/error.hpp>

#include <boost/json/parse.hpp>

#include <pybind11/stl.h>

#include <tjob/wire.hpp>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;

namespace tjob::python {

namespace {

template <class T>
T get_or(const py::dict& d, const char* key, T fallback) {
  if (!d.contains(key) || d[key].is_none()) return fallback;
  return d[key].cast<T>();
}

// The Python layer builds these dicts (tjob/_convert.py); a wrong type is its
// bug, and comes back as a TypeError naming the key.
template <class T>
void take(const py::dict& d, const char* key, T& out) {
  if (!d.contains(key) || d[key].is_none()) return;
  try {
    out = d[key].cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string("tjob: field '") + key + "' has the wrong type");
  }
}

// Reported progress (a job's latest, a Progress event's): None where not reported.
void put_progress(py::dict& d, const std::optional<int>& percent,
                  const std::optional<std::int64_t>& remaining,
                  const std::vector<std::pair<std::string, std::string>>& metrics) {
  d["progress_percent"] = percent ? py::object(py::int_(*percent)) : py::object(py::none());
  d["estimated_remaining_seconds"] = remaining ? py::object(py::int_(*remaining)) : py::object(py::none());
  py::dict m;  // (in the order reported)
  for (const auto& [name, value] : metrics) m[py::str(name)] = value;
  d["metrics"] = m;
}

}  // namespace

std::optional<double> seconds_of(const std::optional<clock::time_point>& t) {
  if (!t) return std::nullopt;
  return std::chrono::duration<double>(t->time_since_epoch()).count();
}

py::dict job_dict(const tjob::train_job& j) {
  py::list steps;
  for (const auto& s : j.steps) {
    py::dict d;
    d["name"] = s.name;
    d["status"] = std::string(tjob::to_string(s.status));
    d["exit_code"] = s.exit_code ? py::object(py::int_(*s.exit_code)) : py::object(py::none());
    d["reason"] = s.reason;
    d["pid"] = s.pid;
    d["attempt"] = s.attempt;
    steps.append(d);
  }
  py::dict d;
  d["name"] = j.name;
  d["runtime"] = j.runtime;
  d["steps"] = steps;
  d["num_nodes"] = j.num_nodes;
  d["creation_timestamp"] = seconds_of(j.creation_timestamp);
  d["start_time"] = seconds_of(j.start_time);
  d["end_time"] = seconds_of(j.end_time);
  d["status"] = std::string(tjob::to_string(j.status));
  d["reason"] = j.reason;
  d["array"] = j.array;
  put_progress(d, j.progress_percent, j.estimated_remaining_seconds, j.metrics);
  d["updated"] = seconds_of(j.progress_updated);
  return d;
}

py::dict runtime_dict(const tjob::runtime& r) {
  py::dict t;
  t["trainer_type"] = r.trainer.trainer_type;
  t["framework"] = r.trainer.framework;
  t["image"] = r.trainer.image;
  t["num_nodes"] = r.trainer.num_nodes;
  t["device"] = r.trainer.device;
  t["device_count"] = r.trainer.device_count;
  t["packages"] = r.trainer.packages;
  py::dict d;
  d["name"] = r.name;
  d["kind"] = r.kind;
  d["trainer"] = t;
  return d;
}

py::dict queue_dict(const tjob::queue_entry& q) {
  py::dict d;
  d["name"] = q.name;
  d["position"] = q.position;
  d["priority"] = q.priority;
  d["waits_for"] = q.waits_for;
  d["since"] = seconds_of(q.since);
  d["cpus"] = q.cpus;
  d["memory"] = q.memory;
  d["gpus"] = q.gpus;
  return d;
}

py::dict event_dict(const tjob::event& e) {
  py::dict d;
  d["seq"] = e.seq;
  d["time"] = seconds_of(e.time);
  d["step"] = e.step;
  d["reason"] = e.reason;
  d["message"] = e.message;
  put_progress(d, e.progress_percent, e.estimated_remaining_seconds, e.metrics);
  return d;
}

// The request in the job spec's shape (tjob/_checks.py builds it as tjob
// serve's JobSpec), read by the one codec every front end uses
// (tjob::request_from_json): a field added to the spec needs no code here.
// A file or a directory of this machine may be named, as on the server's
// unix socket. A refusal is a ValueError naming the field.
tjob::train_request request_of(const py::dict& d) {
  py::dict shown;
  for (auto item : d)
    if (!item.second.is_none()) shown[item.first] = item.second;
  const auto text = py::module_::import("json").attr("dumps")(shown, py::arg("allow_nan") = false).cast<std::string>();
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  if (ec) throw py::value_error("tjob: the request is not JSON: " + ec.message());
  try {
    return tjob::request_from_json(v, true);
  } catch (const tjob::error& e) {
    throw py::value_error(e.what());
  }
}

tjob::engine_config config_of(const py::dict& d) {
  tjob::engine_config c;
  std::string home, backend = tjob::engine_config{}.backend;
  take(d, "home", home);
  c.home = home;
  take(d, "backend", backend);
  if (!tjob::find_backend(backend)) throw py::value_error("tjob: unknown backend '" + backend + "'");
  c.backend = backend;
  // The backend's own options: its JSON config, which it checks (naming a bad member).
  std::string options = "{}";
  take(d, "backend_config", options);
  boost::system::error_code ec;
  auto parsed = boost::json::parse(options, ec);
  if (ec || !parsed.is_object()) throw py::value_error("tjob: backend_config is not a JSON object");
  c.backend_config = parsed.as_object();
  try {
    tjob::check_backend_config(backend, c.backend_config);
  } catch (const tjob::error& e) {
    throw py::value_error(std::string("tjob: ") + e.what());
  }
  take(d, "cleanup_venv", c.cleanup_venv);
  take(d, "venv_cache", c.venv_cache);
  if (d.contains("grace_period") && !d["grace_period"].is_none())
    c.grace_period =
        std::chrono::milliseconds(static_cast<long long>(d["grace_period"].cast<double>() * 1000));
  std::vector<std::string> dirs;
  take(d, "runtime_dirs", dirs);
  for (auto& x : dirs) c.runtime_dirs.emplace_back(x);
  take(d, "gpu_devices", c.gpu_devices);
  if (d.contains("max_running") && !d["max_running"].is_none())
    c.admission.max_running = d["max_running"].cast<int>();
  if (d.contains("cpu_budget") && !d["cpu_budget"].is_none()) c.admission.cpus = d["cpu_budget"].cast<int>();
  if (d.contains("memory_budget") && !d["memory_budget"].is_none()) {
    // bytes, or a quantity ("16Gi") read by the one rule of resources_per_node; 0: no limit
    auto v = py::str(d["memory_budget"]).cast<std::string>();
    if (v == "0") {
      c.admission.memory = 0;
    } else {
      try {
        c.admission.memory = tjob::parse_memory(v, "memory_budget");
      } catch (const tjob::error& e) {
        throw py::value_error(e.what());
      }
    }
  }
  take(d, "failure_log_lines", c.failure_log_lines);
  return c;
}

tjob::log_options log_options_of(const py::dict& d) {
  tjob::log_options o;
  take(d, "step", o.step);
  take(d, "follow", o.follow);
  take(d, "timestamps", o.timestamps);
  if (d.contains("tail") && !d["tail"].is_none()) o.tail = d["tail"].cast<std::size_t>();
  if (d.contains("attempt") && !d["attempt"].is_none()) o.attempt = d["attempt"].cast<int>();
  if (d.contains("since") && !d["since"].is_none())
    o.since = clock::time_point(std::chrono::duration_cast<clock::duration>(
        std::chrono::duration<double>(d["since"].cast<double>())));
  return o;
}

std::set<tjob::job_status> statuses_of(const std::vector<std::string>& names) {
  std::set<tjob::job_status> out;
  for (const auto& n : names) {
    auto s = tjob::parse_job_status(n);
    if (!s)
      throw py::value_error("tjob: unknown status '" + n + "': use Created, Running, Complete or Failed");
    out.insert(*s);
  }
  return out;
}

// tjob::errc's names (tjob::to_string), which the Python layer maps to exception types.
std::string errc_name(const boost::system::error_code& ec) {
  std::string name =
      ec.category() == tjob::category() ? tjob::to_string(static_cast<tjob::errc>(ec.value())) : "";
  return name.empty() || name == "unknown" ? "internal" : name;
}

// What a failed operation hands to Python: (code, message, diagnostics); the
// Python layer picks the exception type by code.
pybind11::tuple error_tuple(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const tjob::error& x) {
    return pybind11::make_tuple(errc_name(x.code()), std::string(x.what()), std::string(x.diagnostics()));
  } catch (const boost::system::system_error& x) {
    if (x.code() == boost::asio::error::operation_aborted)
      return pybind11::make_tuple(std::string("cancelled"), std::string("cancelled"), std::string());
    return pybind11::make_tuple(std::string("internal"), std::string(x.what()), std::string());
  } catch (const std::exception& x) {
    return pybind11::make_tuple(std::string("internal"), std::string(x.what()), std::string());
  }
}

std::exception_ptr without_gil(const std::function<void()>& f) {
  pybind11::gil_scoped_release nogil;
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace tjob::python
