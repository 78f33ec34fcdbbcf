// Progress reports as a job's code sends them to its engine (POST
// /v1/jobs/<job>/progress, Kubeflow's update_trainjob_status body): any
// bytes. A body is refused with a reason, or read into a report within
// Kubeflow's bounds that is kept, read back and sent again unchanged.
#include "tests/fuzz/fuzz_support.hpp"

#include "core/progress.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tjob::detail;
  auto p = parse_progress_body(tjob::fuzz::text(data, size));
  if (!p.report) {
    if (p.error.empty()) std::abort();
    return 0;
  }
  const auto& r = *p.report;
  if (r.percent && (*r.percent < 0 || *r.percent > 100)) std::abort();
  if (r.remaining && *r.remaining < 0) std::abort();
  if (r.metrics.size() > max_metrics) std::abort();
  for (const auto& [name, value] : r.metrics)
    if (name.empty() || name.size() > max_metric_bytes || value.size() > max_metric_bytes) std::abort();
  if (progress_from_json(progress_json(r)) != r) std::abort();  // kept, then read back
  auto again = parse_progress_body(progress_body(r));           // sent again
  if (!again.report || *again.report != r) std::abort();
  if (progress_message(r).empty()) std::abort();
  return 0;
}
