// The venv cache's rules that need no venv: which requirements are pinned.
#include "adapters/local/venv_cache.hpp"

#include <doctest/doctest.h>

using namespace tjob::detail::venv_cache;

TEST_CASE("a requirement is pinned only when it names one exact version") {
  for (const char* r : {"numpy==2.1.0", "numpy == 2.1.0", "numpy===2.1.0", "numpy[extra]==2.1",
                        "numpy==2.1.0; python_version >= '3.9'"}) {
    CAPTURE(r);
    CHECK(pinned(r));
  }
  for (const char* r : {"numpy", "numpy>=2", "numpy~=2.1", "numpy==2.*", "numpy==2.1,!=2.1.1", "numpy!=2.1",
                        "numpy<=2.1", "numpy @ https://example.invalid/numpy-2.1.whl", "./local/pkg",
                        "numpy==", "numpy; python_version=='3.11'"}) {
    CAPTURE(r);
    CHECK_FALSE(pinned(r));
  }
  inputs in;
  in.packages = {"torch==2.1.0", "numpy", "tqdm>=4"};
  CHECK(unpinned(in) == std::vector<std::string>{"numpy", "tqdm>=4"});
}
