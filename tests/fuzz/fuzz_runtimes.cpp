// Runtime manifests: any text as a (multi-document) YAML file. Unusable
// documents become one problem each, naming the source; usable ones a
// runtime with a name. Anchors and aliases are not expanded into bombs.
#include "core/runtimes.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<tjob::runtime> found;
  std::vector<std::string> sources, problems;
  tjob::detail::parse_runtime_documents(tjob::fuzz::text(data, size), "fuzz.yaml", found, sources, problems);
  if (found.size() != sources.size()) std::abort();
  for (const auto& r : found)
    if (r.name.empty()) std::abort();
  for (const auto& p : problems)
    if (p.find("fuzz.yaml") == std::string::npos) std::abort();
  return 0;
}
