// Times as peers write them: RFC 3339 (Kubernetes, the Docker Engine API).
#pragma once

#include <tjob/types.hpp>

#include <optional>
#include <string_view>

namespace tjob::detail {

/// "2026-12-02T10:00:00.25Z" as a time point; nullopt for anything else, and
/// for a year outside 1970..2261 (Docker's "0001-01-01T00:00:00Z", never set).
/// The zone must be UTC ('Z'), as both peers write it.
std::optional<clock::time_point> parse_rfc3339(std::string_view s);

}  // namespace tjob::detail
