// Lines of a daemon's /events stream and its error bodies: whatever comes,
// a job name, an event or nothing; never a crash or an exception.
#include "adapters/container/docker_api.hpp"
#include "adapters/container/layout.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto line = tjob::fuzz::text(data, size);
  auto job = tjob::container::job_of_event(line);
  if (auto e = tjob::container::event_of_line(line, 1)) {
    if (e->seq != 1) std::abort();
  } else if (!job.empty()) {
    std::abort();  // a job named by a line that is not an event
  }
  (void)tjob::container::daemon_message(std::string(line));
  return 0;
}
