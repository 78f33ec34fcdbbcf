// The values the engine and the Python layer (tjob/*.py) exchange: the
// engine's as dicts, and the dicts tjob/*.py builds as the engine's. A dict
// of the wrong shape is the Python layer's bug: a TypeError naming the key.
#pragma once

#include <tjob/engine.hpp>
#include <tjob/types.hpp>

#include <pybind11/pybind11.h>

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

}  // namespace tjob::python
