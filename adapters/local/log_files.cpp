#include "adapters/local/log_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <fstream>
#include <vector>

namespace tjob::detail {

boost::system::error_code append_file(const std::filesystem::path& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return {errno, boost::system::system_category()};
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      boost::system::error_code ec(errno, boost::system::system_category());
      ::close(fd);
      return ec;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  ::close(fd);
  return {};
}

std::uint64_t tail_offset(const std::filesystem::path& path, std::size_t lines, std::uint64_t limit) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0 || lines == 0) {
    std::uint64_t end = lines == 0 ? std::min(static_cast<std::uint64_t>(st.st_size), limit) : 0;
    ::close(fd);
    return end;
  }
  std::uint64_t end = std::min(static_cast<std::uint64_t>(st.st_size), limit);
  std::vector<char> buf(1 << 16);
  std::uint64_t pos = end;
  std::size_t newlines = 0;
  bool first_byte = true;  // a trailing '\n' ends the last line; it starts none
  while (pos > 0) {
    std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(pos, buf.size()));
    pos -= chunk;
    ssize_t n = ::pread(fd, buf.data(), chunk, static_cast<off_t>(pos));
    if (n != static_cast<ssize_t>(chunk)) break;
    for (std::size_t i = chunk; i-- > 0;) {
      if (buf[i] != '\n') {
        first_byte = false;
        continue;
      }
      if (first_byte) {
        first_byte = false;
        continue;
      }
      if (++newlines == lines) {
        ::close(fd);
        return pos + i + 1;
      }
    }
  }
  ::close(fd);
  return 0;
}

std::map<int, std::uint64_t> attempt_starts(const std::filesystem::path& attempts_file) {
  std::map<int, std::uint64_t> out;
  std::ifstream in(attempts_file);
  int attempt = 0;
  std::uint64_t offset = 0;
  while (in >> attempt >> offset) out[attempt] = offset;
  return out;
}

std::uint64_t line_start(const std::filesystem::path& path, std::uint64_t offset) {
  if (offset == 0) return 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::vector<char> buf(1 << 16);
  std::uint64_t pos = offset;
  while (pos > 0) {
    std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(pos, buf.size()));
    pos -= chunk;
    ssize_t n = ::pread(fd, buf.data(), chunk, static_cast<off_t>(pos));
    if (n != static_cast<ssize_t>(chunk)) break;
    for (std::size_t i = chunk; i-- > 0;)
      if (buf[i] == '\n') {
        ::close(fd);
        return pos + i + 1;
      }
  }
  ::close(fd);
  return 0;
}

namespace {

clock::time_point time_of(const struct stat& st) {
  auto since_epoch = std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec);
  return clock::time_point(std::chrono::duration_cast<clock::duration>(since_epoch));
}

}  // namespace

std::optional<clock::time_point> modified_time(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return time_of(st);
}

std::filesystem::path times_path_of(const std::filesystem::path& log_path) {
  auto dir = log_path.parent_path();
  if (dir.filename() == "logs") dir = dir.parent_path();  // a job made by an older tjob
  return dir / "log-times" / log_path.stem();
}

boost::system::error_code append_time_record(const std::filesystem::path& times_path, log_time_record r) {
  auto bytes = std::string_view(reinterpret_cast<const char*>(&r), sizeof r);
  auto ec = append_file(times_path, bytes);
  if (ec != boost::system::errc::no_such_file_or_directory) return ec;
  if (::mkdir(times_path.parent_path().c_str(), 0700) != 0 && errno != EEXIST)
    return {errno, boost::system::system_category()};
  return append_file(times_path, bytes);
}

void log_times::refresh() {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  for (;;) {
    log_time_record batch[256];
    ssize_t n = ::pread(fd, batch, sizeof batch, static_cast<off_t>(read_));
    if (n < 0 && errno == EINTR) continue;
    if (n < static_cast<ssize_t>(sizeof(log_time_record))) break;
    auto whole = static_cast<std::size_t>(n) / sizeof(log_time_record);  // a record being written waits
    records_.insert(records_.end(), batch, batch + whole);
    read_ += whole * sizeof(log_time_record);
  }
  ::close(fd);
}

std::optional<clock::time_point> log_times::time_of(std::uint64_t end) {
  if (records_.empty() || records_.back().size < end) refresh();
  auto it = std::lower_bound(records_.begin(), records_.end(), end,
                             [](const log_time_record& r, std::uint64_t e) { return r.size < e; });
  if (it == records_.end()) return std::nullopt;
  return clock::time_point(std::chrono::duration_cast<clock::duration>(std::chrono::nanoseconds(it->ns)));
}

std::uint64_t log_times::older_than(clock::time_point since) {
  refresh();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(since.time_since_epoch()).count();
  auto it = std::lower_bound(records_.begin(), records_.end(), ns,
                             [](const log_time_record& r, std::int64_t t) { return r.ns < t; });
  return it == records_.begin() ? 0 : std::prev(it)->size;
}

log_cursor::log_cursor(std::filesystem::path path, std::uint64_t offset)
    : path_(std::move(path)), offset_(offset) {}

log_cursor::~log_cursor() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<clock::time_point> log_cursor::modified() const {
  struct stat st {};
  if (fd_ < 0 || ::fstat(fd_, &st) != 0) return std::nullopt;
  return time_of(st);
}

std::size_t log_cursor::read_more(std::string& out, std::size_t max) {
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return 0;
  }
  std::size_t old = out.size();
  ssize_t n;
  if (out.capacity() - old >= max) {  // room already there (and its pages touched): read in place
    out.resize(old + max);
    do {
      n = ::pread(fd_, out.data() + old, max, static_cast<off_t>(offset_));
    } while (n < 0 && errno == EINTR);
    out.resize(old + static_cast<std::size_t>(n > 0 ? n : 0));
  } else {
    // Through one scratch buffer per thread, so a follower that waits holds
    // only what it has read, not `max` zero-filled bytes of its own (1,000
    // idle followers kept 64 MiB that way). The copy replaces resize's fill.
    thread_local std::vector<char> scratch;
    if (scratch.size() < max) scratch.resize(max);
    do {
      n = ::pread(fd_, scratch.data(), max, static_cast<off_t>(offset_));
    } while (n < 0 && errno == EINTR);
    if (n > 0) out.append(scratch.data(), static_cast<std::size_t>(n));
  }
  if (n <= 0) return 0;
  offset_ += static_cast<std::uint64_t>(n);
  return static_cast<std::size_t>(n);
}

}  // namespace tjob::detail
