// Step logs: append-only files, `jobs/<name>/logs/<step>.log`. The file is the
// buffer between the job and every reader, so a slow reader costs no memory.
#pragma once

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tjob::detail {

/// Appends `data` (open, write all, close): the engine holds no log descriptor
/// between batches. Files are created 0600.
boost::system::error_code append_file(const std::filesystem::path& path, std::string_view data);

/// The offset at which the last `lines` lines of the file begin (0 when it has
/// fewer). A final line without '\n' counts as a line.
std::uint64_t tail_offset(const std::filesystem::path& path, std::size_t lines);

/// A reader of one log file by offset. Opens the file lazily (it may not exist
/// yet) and holds one descriptor while it lives.
class log_cursor {
 public:
  log_cursor(std::filesystem::path path, std::uint64_t offset);
  log_cursor(const log_cursor&) = delete;
  log_cursor& operator=(const log_cursor&) = delete;
  ~log_cursor();

  /// Reads what was appended since the last call (at most `max` bytes) and
  /// appends it to `out`; returns the number of bytes read.
  std::size_t read_more(std::string& out, std::size_t max = 1 << 16);
  std::uint64_t offset() const noexcept { return offset_; }

 private:
  std::filesystem::path path_;
  std::uint64_t offset_;
  int fd_ = -1;
};

}  // namespace tjob::detail
