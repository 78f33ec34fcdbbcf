// What a log_stream reads from: each backend has its own source. They share
// the cutting of bytes into lines.
#pragma once

#include <tjob/engine.hpp>

#include "core/times.hpp"

#include <optional>
#include <string>

namespace tjob {

struct log_stream::impl {
  virtual ~impl() = default;
  /// One line (`whole_lines` false) or every complete line buffered (true);
  /// nullopt at the end.
  virtual boost::asio::awaitable<std::optional<std::string>> next(bool whole_lines) = 0;
};

namespace detail {

/// The bytes a log source has read and not yet handed out, cut at '\n'.
class line_buffer {
 public:
  /// Longer lines are handed out in pieces of this size.
  static constexpr std::size_t max_line = 1 << 20;

  /// Where a source appends what it reads.
  std::string& bytes() { return buf_; }
  bool empty() const { return buf_.empty(); }
  /// One line (`whole_lines` false) or every complete line, each with its
  /// '\n'; a line grown to max_line comes as a piece; nullopt when neither.
  std::optional<std::string> take(bool whole_lines) {
    auto nl = whole_lines ? buf_.rfind('\n') : buf_.find('\n');
    if (nl == std::string::npos) return buf_.size() >= max_line ? take_rest() : std::nullopt;
    if (whole_lines) {
      // The buffer itself goes out; only the unfinished last line is copied back.
      std::string out = std::move(buf_);
      buf_.assign(out, nl + 1);
      out.resize(nl + 1);
      return out;
    }
    std::string out = buf_.substr(0, nl + 1);
    buf_.erase(0, nl + 1);
    return out;
  }
  /// Everything held (a last line without '\n' once the stream has ended);
  /// nullopt when nothing is.
  std::optional<std::string> take_rest() {
    if (buf_.empty()) return std::nullopt;
    std::string rest = std::move(buf_);
    buf_.clear();
    return rest;
  }

 private:
  std::string buf_;
};

/// A log read from a stream in pieces (a daemon's, an API server's): the
/// cutting into lines and the end are here; a source says what comes next.
class piecewise_log : public log_stream::impl {
 public:
  boost::asio::awaitable<std::optional<std::string>> next(bool whole_lines) final {
    for (;;) {
      auto out = buf_.take(whole_lines);
      if (!out && ended_) {
        out = buf_.take_rest();
        if (!out) co_return std::nullopt;
      }
      if (out) {
        if (stamps_) *out = (*stamps_)(*out);
        if (out->empty()) continue;  // every line was older than since
        co_return out;
      }
      if (!co_await read_piece(buf_.bytes())) ended_ = true;
    }
  }

 protected:
  /// `stamps`: the peer begins each line with its time (peer_stamps).
  explicit piecewise_log(std::optional<peer_stamps> stamps = std::nullopt) : stamps_(std::move(stamps)) {}

  /// Appends the next bytes to `out` (none is fine: it is asked again);
  /// false when the log has ended.
  virtual boost::asio::awaitable<bool> read_piece(std::string& out) = 0;

 private:
  line_buffer buf_;
  bool ended_ = false;
  std::optional<peer_stamps> stamps_;
};

}  // namespace detail
}  // namespace tjob
