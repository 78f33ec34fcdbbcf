// An API server's failure answers: any body with any code becomes one
// status_error whose message names what was asked and stays bounded.
#include "adapters/kubernetes/kube_api.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  unsigned code = 100u + (static_cast<unsigned>(data[0]) << 8 | data[1]) % 500u;
  auto body = tjob::fuzz::text(data + 2, size - 2);
  auto e = tjob::kube::status_failure("https://fuzz:6443", "get trainjob x", code, body);
  if (e.code.category() != tjob::kube::kube_category()) std::abort();
  if (e.message.find("get trainjob x: " + std::to_string(code)) == std::string::npos) std::abort();
  if (tjob::detail::errc_of(e.code) == tjob::errc{}) std::abort();
  return 0;
}
