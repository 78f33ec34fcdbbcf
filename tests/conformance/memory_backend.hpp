// A backend defined only in the tests: jobs are small programs run in memory
// on the engine's reactor (no process, no daemon), registered from the test
// binary as "memory". It proves that a backend is one folder and one
// registration: nothing outside the tests names it, and the shared
// conformance suite runs against it as against every real backend.
//
// A job is a command trainer whose command is a program of steps, as the
// test helper takes them: `print TEXT`, `sleep MS`, `exit CODE`, `forever`
// (until cancelled). Its one step, node-0, has the program's output as its log.
#pragma once

#include "core/driver.hpp"

namespace tjob::test::memory {

/// Its registration: id "memory", no options (any is refused), no
/// capabilities beyond running jobs.
detail::backend_registration registration();

/// Registers it once per process (later calls do nothing).
void register_once();

}  // namespace tjob::test::memory
