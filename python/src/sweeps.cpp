// The sweep functions of the extension (tjob/sweep.hpp), for tjob/optimizer.py.
// A sweep is owned by a supervising process of its own, so these are plain
// calls (file reads, one process started), made without the GIL.
#include "values.hpp"

#include <tjob/sweep.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <pybind11/stl.h>

#include <chrono>
#include <functional>
#include <string>

namespace py = pybind11;

namespace tjob::python {

namespace {

// (f(), None) or (None, error), f run without the GIL.
py::tuple answer(const std::function<std::string()>& f) {
  std::string out;
  if (auto failed = without_gil([&] { out = f(); })) return py::make_tuple(py::none(), error_tuple(failed));
  return py::make_tuple(py::str(out), py::none());
}

// The trial's request as train takes it; the rest of the sweep as the JSON of
// tjob::sweep_request (its "trial" member left out).
void def_optimize(py::module_& m) {
  m.def(
      "optimize",
      [](py::dict trial, std::string sweep_json, py::dict config) {
        auto t = request_of(trial);
        auto c = config_of(config);
        return answer([&] {
          auto v = boost::json::parse(sweep_json).as_object();
          // (the trial is the request above; a stand-in lets the rest be read)
          v["trial"] = boost::json::parse(R"({"trainer":{"kind":"command","command":["true"]}})");
          auto r = sweep_request_from_json(boost::json::serialize(v));
          r.trial = t;
          return optimize(std::move(r), c);
        });
      },
      py::arg("trial"), py::arg("sweep"), py::arg("config"));
}

// What reads sweeps: one, all, and a wait for one to change.
void def_reads(py::module_& m) {
  m.def(
      "get_sweep",
      [](std::string name, py::dict config) {
        auto c = config_of(config);
        return answer([&] { return sweep_to_json(get_sweep(name, c)); });
      },
      py::arg("name"), py::arg("config"));
  m.def(
      "list_sweeps",
      [](py::dict config) {
        auto c = config_of(config);
        return answer([&] {
          std::string out = "[";
          for (const auto& s : list_sweeps(c)) out += (out.size() > 1 ? "," : "") + sweep_to_json(s);
          return out + "]";
        });
      },
      py::arg("config"));
  // Returns the sweep once it differs from `known` (its JSON), or at the timeout.
  m.def(
      "wait_sweep",
      [](std::string name, std::string known, double timeout_s, py::dict config) {
        auto c = config_of(config);
        return answer([&] {
          auto was = get_sweep(name, c);
          if (sweep_to_json(was) != known) return sweep_to_json(was);
          auto ms = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
          return sweep_to_json(wait_for_sweep_change(name, was, ms, c));
        });
      },
      py::arg("name"), py::arg("known"), py::arg("timeout"), py::arg("config"));
}

// An operation on a sweep by name that answers nothing: ("", None) or (None, error).
template <class Op>
void def_by_name(py::module_& m, const char* function, Op op) {
  m.def(
      function,
      [op](std::string name, py::dict config) {
        auto c = config_of(config);
        return answer([&] {
          op(name, c);
          return std::string();
        });
      },
      py::arg("name"), py::arg("config"));
}

}  // namespace

void add_sweep_functions(py::module_& m) {
  def_optimize(m);
  def_reads(m);
  def_by_name(m, "cancel_sweep", [](const std::string& n, const engine_config& c) { cancel_sweep(n, c); });
  def_by_name(m, "delete_sweep", [](const std::string& n, const engine_config& c) { delete_sweep(n, c); });
  def_by_name(m, "resume_sweep", [](const std::string& n, const engine_config& c) { resume_sweep(n, c); });
}

}  // namespace tjob::python
