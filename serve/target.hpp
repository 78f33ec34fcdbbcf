// tjob serve: a request's target (path and query) taken apart, strictly.
// Pure functions: the fuzz target fuzz_serve_target drives them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::serve {

struct request_target {
  /// The path's segments, each percent-decoded ("/v1/jobs/a%2Fb" gives
  /// v1, jobs, "a/b": an encoded '/' stays inside its segment).
  std::vector<std::string> segments;
  /// The query's parameters, percent-decoded ('+' is a space); a name given
  /// twice keeps its last value.
  std::map<std::string, std::string> query;
};

/// The target of an origin-form request ("/path?query"), or nullopt with
/// `problem` set when it is not one: no leading '/', a bad percent escape, a
/// NUL or control byte, or more than `max_segments` segments or
/// `max_params` parameters.
std::optional<request_target> parse_target(std::string_view raw, std::string& problem,
                                           std::size_t max_segments = 16, std::size_t max_params = 32);

/// "%"-decodes `s` ('+' as a space when `plus_is_space`); nullopt for a bad
/// escape or a decoded control byte (below 0x20, or 0x7f).
std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space);

}  // namespace tjob::serve
