// Step logs: append-only files, `jobs/<name>/logs/<step>.log`. The file is the
// buffer between the job and every reader, so a slow reader costs no memory.
#pragma once

#include <tjob/types.hpp>

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::detail {

/// Appends `data` (open, write all, close): the engine holds no log descriptor
/// between batches. Files are created 0600.
boost::system::error_code append_file(const std::filesystem::path& path, std::string_view data);

/// The offset at which the last `lines` lines of the file begin (0 when it has
/// fewer). A final line without '\n' counts as a line. `limit`: the file as if
/// it ended there (an earlier attempt's part of a log).
std::uint64_t tail_offset(const std::filesystem::path& path, std::size_t lines,
                          std::uint64_t limit = std::numeric_limits<std::uint64_t>::max());

/// Where each attempt after the first begins in a step's log: the lines
/// "N OFFSET" of `jobs/<name>/log-attempts/<step>` (written at each restart),
/// as attempt → offset. Missing or unreadable: none.
std::map<int, std::uint64_t> attempt_starts(const std::filesystem::path& attempts_file);

/// Where the line that holds byte `offset` begins (`offset` itself when the
/// byte before it is a '\n'; 0 when no '\n' precedes it).
std::uint64_t line_start(const std::filesystem::path& path, std::uint64_t offset);

/// The file's last modification, to the nanosecond the kernel keeps.
std::optional<clock::time_point> modified_time(const std::filesystem::path& path);

// --- the times of log lines ------------------------------------------------
// A job writes its log itself, so nothing stamps its lines as they are
// written. The engine that runs it appends a record to the step's times file
// whenever it sees the log grow (at most every 50 ms; log_clock): the log's
// size then and its modification time. A line's time is that of the first
// record at or past its end: the last write of the batch it came in.

/// One record: 16 bytes in the times file, in this machine's byte order.
struct log_time_record {
  std::uint64_t size;
  std::int64_t ns;  ///< since the epoch
};

/// `jobs/<name>/log-times/<step>` for `jobs/<name>/<step>.log` (or an older
/// tjob's `jobs/<name>/logs/<step>.log`): in a directory of their own, so
/// that a follower's watch of the job's directory is not woken by them.
std::filesystem::path times_path_of(const std::filesystem::path& log_path);

/// Appends one record (the directory is made when missing).
boost::system::error_code append_time_record(const std::filesystem::path& times_path, log_time_record r);

/// A reader of a log's times file, which may grow while it reads.
class log_times {
 public:
  explicit log_times(std::filesystem::path times_path) : path_(std::move(times_path)) {}

  /// The time of the line that ends at `end` (the offset past its last
  /// byte): the first record at or past it; nullopt when there is none yet.
  std::optional<clock::time_point> time_of(std::uint64_t end);
  /// The offset of the first byte of the first record written at or after
  /// `since`'s record; what precedes is older. Lines that end before it are
  /// older than `since`; the line that holds it may not be (line_start).
  std::uint64_t older_than(clock::time_point since);

 private:
  void refresh();
  std::filesystem::path path_;
  std::vector<log_time_record> records_;
  std::uint64_t read_ = 0;  // bytes of the file read (whole records)
};

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
  /// The file's last modification (through the open descriptor); nullopt
  /// before it is opened.
  std::optional<clock::time_point> modified() const;

 private:
  std::filesystem::path path_;
  std::uint64_t offset_;
  int fd_ = -1;
};

}  // namespace tjob::detail
