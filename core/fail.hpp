// The one way code inside tjob raises an error for its caller: a
// tjob::error with our message and, apart, the peer's own words.
#pragma once

#include <tjob/error.hpp>

#include <string>

namespace tjob::detail {

/// Throws tjob::error(e, message, diagnostics).
[[noreturn]] inline void fail(errc e, std::string message, std::string diagnostics = {}) {
  throw error(e, std::move(message), std::move(diagnostics));
}

}  // namespace tjob::detail
