// Kubernetes watch lines and the objects in them: parse_watch_event, then the
// TrainJob and pod views built from what a server sent (status, steps, exit
// codes, times). A line that is not a watch event is a protocol_error.
#include "adapters/kubernetes/kube_api.hpp"
#include "adapters/kubernetes/trainjob.hpp"
#include "core/times.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <tjob/error.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto line = tjob::fuzz::text(data, size);
  auto ev = tjob::kube::parse_watch_event(line, "fuzz");
  if (!ev) return 0;
  const auto& obj = ev->object;
  (void)tjob::kube::name_of(obj);
  (void)tjob::kube::resource_version_of(obj);
  (void)tjob::kube::runtime_of(obj);
  (void)tjob::kube::num_nodes_of(obj);
  std::vector<const boost::json::object*> pods{&obj};
  auto steps = tjob::kube::steps_from_pods(pods);
  auto job = tjob::kube::to_job(obj, steps, 1);
  for (const auto& s : job.steps)
    if (s.name.empty()) std::abort();
  std::string problem;
  (void)tjob::kube::runtime_from(obj, problem);
  if (auto* items = obj.if_contains("items"); items && items->is_array())
    (void)tjob::kube::events_of(items->as_array(), "job", steps);
  if (auto* t = obj.if_contains("time"); t && t->is_string())
    (void)tjob::detail::parse_rfc3339(t->as_string());
  return 0;
}
