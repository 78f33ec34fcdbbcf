// Package requirements: each line of the input is one, the first half of the
// lines the runtime's, the rest the trainer's. Names are parsed by Kubeflow's
// rule and merged; what cannot be parsed is a tjob::error naming it.
#include "adapters/python/python_setup.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <tjob/error.hpp>

#include <cstdlib>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto text = tjob::fuzz::text(data, size);
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  for (const auto& l : lines)
    if (auto n = tjob::python::requirement_name(l)) {
      auto c = tjob::python::canonical_name(*n);
      if (c.empty() || tjob::python::canonical_name(c) != c) std::abort();
    }
  std::vector<std::string> runtime(lines.begin(), lines.begin() + static_cast<long>(lines.size() / 2));
  std::vector<std::string> trainer(lines.begin() + static_cast<long>(lines.size() / 2), lines.end());
  try {
    auto merged = tjob::python::merge_packages(runtime, trainer);
    for (const auto& t : trainer)
      if (std::find(merged.begin(), merged.end(), t) == merged.end()) std::abort();  // the trainer's all stay
  } catch (const tjob::error&) {
  }
  return 0;
}
