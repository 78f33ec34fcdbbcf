// The test programs' main: doctest's, except that a run in which every case
// that ran was skipped (tjob::test::skip) exits 77, which ctest reports as
// "Skipped" (the suites' SKIP_RETURN_CODE): ctest runs one case per process.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstddef>

namespace tjob::test {
// tests/support/test_support.hpp (not included: this file is compiled alone, and fast)
std::size_t cases_skipped();
std::size_t cases_run();
}  // namespace tjob::test

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  int failed = context.run();
  if (context.shouldExit()) return failed;
  if (failed == 0 && tjob::test::cases_run() > 0 && tjob::test::cases_skipped() == tjob::test::cases_run())
    return 77;
  return failed;
}
