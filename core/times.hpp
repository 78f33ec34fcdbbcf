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

/// A log from a peer that begins each line with its time and a space
/// (Docker's nanoseconds, Podman's whole seconds, the kubelet's): the time
/// written as format_rfc3339_nano does, or taken off when not `wanted`; lines
/// older than `since` left out, where the peer's own filter is coarser (the
/// API server passes sinceTime on to the kubelet in whole seconds). Lines
/// that do not begin with a time are kept as they are. Fed in pieces, which
/// may end inside a line.
class peer_stamps {
 public:
  peer_stamps(bool wanted, std::optional<clock::time_point> since) : wanted_(wanted), since_(since) {}
  std::string operator()(std::string_view text);

 private:
  bool wanted_;
  std::optional<clock::time_point> since_;
  bool at_line_start_ = true;
  bool dropping_ = false;  // the line being read is older than since_
};

}  // namespace tjob::detail
