// What a log_stream reads from: each backend has its own source.
#pragma once

#include <tjob/engine.hpp>

namespace tjob {

struct log_stream::impl {
  virtual ~impl() = default;
  /// One line (`whole_lines` false) or every complete line buffered (true);
  /// nullopt at the end.
  virtual boost::asio::awaitable<std::optional<std::string>> next(bool whole_lines) = 0;
};

}  // namespace tjob
