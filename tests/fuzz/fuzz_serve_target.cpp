// tjob serve's request targets: any bytes as "path?query". A target is
// refused with a reason or taken apart into segments and parameters that
// hold no control byte; never a crash.
#include "serve/target.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto text = tjob::fuzz::text(data, size);
  std::string problem;
  auto t = tjob::serve::parse_target(text, problem);
  if (!t) {
    if (problem.empty()) std::abort();
    return 0;
  }
  auto clean = [](const std::string& s) {
    for (unsigned char c : s)
      if (c < 0x20 || c == 0x7f) return false;
    return true;
  };
  if (t->segments.size() > 16 || t->query.size() > 32) std::abort();
  for (const auto& s : t->segments)
    if (!clean(s)) std::abort();
  for (const auto& [k, v] : t->query)
    if (k.empty() || !clean(k) || !clean(v)) std::abort();
  (void)tjob::serve::percent_decode(text, true);
  return 0;
}
