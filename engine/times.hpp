// Times as peers write them: RFC 3339 (Kubernetes, the Docker Engine API).
#pragma once

#include <tjob/types.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace tjob::detail {

/// "2026-12-02T10:00:00.25Z" (or with a +hh:mm / -hh:mm zone) as a time
/// point; nullopt for anything else, and for a year outside 1970..2261
/// (Docker's "0001-01-01T00:00:00Z", never set). tjob::parse_time.
std::optional<clock::time_point> parse_rfc3339(std::string_view s);

/// "2026-12-02T10:00:00.250000000Z": UTC, nine digits of fraction, as Docker
/// and the kubelet write log timestamps. tjob::format_time.
std::string format_rfc3339_nano(clock::time_point t);

/// `text` with the time that begins each of its lines (a peer's RFC 3339 and
/// a space: Docker's nanoseconds, Podman's whole seconds) written as
/// format_rfc3339_nano does; other lines as they are. `at_line_start` says
/// whether `text` begins a line, and is left saying whether the next does.
std::string restamp(std::string_view text, bool& at_line_start);

}  // namespace tjob::detail
