// The values the engine and the Python layer (tjob/*.py) exchange: the
// engine's as dicts, and the dicts tjob/*.py builds as the engine's. A dict
// of the wrong shape is the Python layer's bug: a TypeError naming the key.
#pragma once

#include <tjob/engine.hpp>
#include <tjob/types.hpp>

#include <pybind11/pybind11.h>

#include <exception>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tjob::python {

/// Seconds since the epoch, as Python's time.time() counts them.
std::optional<double> seconds_of(const std::optional<clock::time_point>& t);

pybind11::dict job_dict(const train_job& j);
pybind11::dict runtime_dict(const runtime& r);
pybind11::dict queue_dict(const queue_entry& q);
pybind11::dict event_dict(const event& e);

train_request request_of(const pybind11::dict& d);
engine_config config_of(const pybind11::dict& d);
log_options log_options_of(const pybind11::dict& d);
/// Kubeflow's status names; a ValueError for any other.
std::set<job_status> statuses_of(const std::vector<std::string>& names);

/// What a failed operation hands to Python: (code, message, diagnostics);
/// the Python layer picks the exception type by code (tjob.errc's names).
pybind11::tuple error_tuple(std::exception_ptr e);

/// Runs `f` without the GIL (it may not touch Python objects); what it threw.
std::exception_ptr without_gil(const std::function<void()>& f);

/// The sweep functions (tjob/sweep.hpp): optimize, get_sweep, list_sweeps,
/// wait_sweep, cancel_sweep, delete_sweep, resume_sweep; each answers
/// (result, None) or (None, error).
void add_sweep_functions(pybind11::module_& m);

}  // namespace tjob::python
