#include "adapters/local/log_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
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

std::uint64_t tail_offset(const std::filesystem::path& path, std::size_t lines) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0 || lines == 0) {
    std::uint64_t end = lines == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    ::close(fd);
    return end;
  }
  std::uint64_t end = static_cast<std::uint64_t>(st.st_size);
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

log_cursor::log_cursor(std::filesystem::path path, std::uint64_t offset)
    : path_(std::move(path)), offset_(offset) {}

log_cursor::~log_cursor() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t log_cursor::read_more(std::string& out, std::size_t max) {
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return 0;
  }
  std::size_t old = out.size();
  out.resize(old + max);
  ssize_t n;
  do {
    n = ::pread(fd_, out.data() + old, max, static_cast<off_t>(offset_));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    out.resize(old);
    return 0;
  }
  out.resize(old + static_cast<std::size_t>(n));
  offset_ += static_cast<std::uint64_t>(n);
  return static_cast<std::size_t>(n);
}

}  // namespace tjob::detail
