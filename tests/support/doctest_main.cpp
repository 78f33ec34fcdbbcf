// The test programs' main: doctest's, except that skipped cases
// (tjob::test::skip) are reported as skipped, never as passed. doctest counts
// them as passed, so they are listed after its summary; and a run in which
// every case that ran was skipped exits 77, which ctest reports as "Skipped"
// (the suites' SKIP_RETURN_CODE): ctest runs one case per process.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace tjob::test {
// tests/support/test_support.hpp (not included: this file is compiled alone, and fast)
std::vector<std::string> cases_skipped();
std::size_t cases_run();
}  // namespace tjob::test

int main(int argc, char** argv) {
  // --tjob-via-server: the CLI suite's second way, every tjob a client of a
  // tjob serve (tjob::test::via_server); doctest does not see it.
  std::vector<char*> args(argv, argv + argc);
  std::erase_if(args, [](const char* a) {
    bool ours = std::strcmp(a, "--tjob-via-server") == 0;
    if (ours) ::setenv("TJOB_TEST_VIA_SERVER", "1", 1);
    return ours;
  });
  doctest::Context context(static_cast<int>(args.size()), args.data());
  int failed = context.run();
  if (context.shouldExit()) return failed;
  auto skipped = tjob::test::cases_skipped();
  if (!skipped.empty()) {
    std::fprintf(stderr, "[tjob] %zu of the %zu test cases above were skipped, not passed:\n", skipped.size(),
                 tjob::test::cases_run());
    for (const auto& name : skipped) std::fprintf(stderr, "[tjob]   skipped: %s\n", name.c_str());
  }
  if (failed == 0 && tjob::test::cases_run() > 0 && skipped.size() == tjob::test::cases_run()) return 77;
  return failed;
}
