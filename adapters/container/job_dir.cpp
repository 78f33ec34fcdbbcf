#include "adapters/container/job_dir.hpp"

#include <tjob/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace tjob::container {

namespace {

constexpr int dir_flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;

bool is_dir_at(int fd, const char* name) {
  struct stat st {};
  return ::fstatat(fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

[[noreturn]] void refuse(const std::string& what, int err) {
  throw error(errc::invalid_argument, what + ": " + std::strerror(err));
}

void write_all(int fd, std::string_view text, const std::string& where) {
  while (!text.empty()) {
    auto n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(fd);
      refuse("cannot write " + where, err);
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

std::optional<job_dir> job_dir::open(const std::filesystem::path& containers, const std::string& job) {
  if (job.empty() || job.find('/') != std::string::npos || job == "." || job == "..") return std::nullopt;
  // ($TJOB_HOME/containers is tjob's, and may be a link to another disk; below it, no link is followed)
  int base = ::open(containers.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (base < 0) return std::nullopt;
  int dir = ::openat(base, job.c_str(), dir_flags);
  ::close(base);
  if (dir < 0) return std::nullopt;
  // A job made before the workspace/inputs layout keeps its state in .tjob/.
  if (!is_dir_at(dir, workspace_dir_name) && is_dir_at(dir, ".tjob")) {
    int state = ::openat(dir, ".tjob", dir_flags);
    ::close(dir);
    if (state < 0) return std::nullopt;
    return job_dir(state, true, containers / job / ".tjob");
  }
  return job_dir(dir, false, containers / job);
}

job_dir::job_dir(job_dir&& o) noexcept : fd_(o.fd_), legacy_(o.legacy_), path_(std::move(o.path_)) { o.fd_ = -1; }

job_dir& job_dir::operator=(job_dir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    legacy_ = o.legacy_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

job_dir::~job_dir() {
  if (fd_ >= 0) ::close(fd_);
}

std::string job_dir::where(std::string_view file) const { return (path_ / std::string(file)).string(); }

bool job_dir::exists(std::string_view file) const {
  struct stat st {};
  return ::fstatat(fd_, std::string(file).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

std::string job_dir::read(std::string_view file) const {
  int fd = ::openat(fd_, std::string(file).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    char buf[16384];
    for (;;) {
      auto n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  return text;
}

int job_dir::open_new(std::string_view file, int flags) const {
  return ::openat(fd_, std::string(file).c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC | flags, 0600);
}

void job_dir::mark(std::string_view file, std::string_view text) const {
  int fd = open_new(file, O_CREAT | O_EXCL);
  if (fd < 0) {
    if (errno == EEXIST) return;  // marked already (or, in a legacy dir, by the job: left as it is)
    refuse("cannot write " + where(file), errno);
  }
  write_all(fd, text, where(file));
  ::close(fd);
}

void job_dir::replace(std::string_view file, std::string_view text) const {
  const std::string tmp = std::string(file) + ".tmp";
  if (::unlinkat(fd_, tmp.c_str(), 0) != 0 && errno != ENOENT) refuse("cannot replace " + where(tmp), errno);
  int fd = open_new(tmp, O_CREAT | O_EXCL);
  if (fd < 0) refuse("cannot write " + where(tmp), errno);
  write_all(fd, text, where(tmp));
  ::close(fd);
  // (a rename replaces a link in the way; it never writes through one)
  if (::renameat(fd_, tmp.c_str(), fd_, std::string(file).c_str()) != 0)
    refuse("cannot write " + where(file), errno);
}

int job_dir::open_append(std::string_view file) const {
  int fd = open_new(file, O_CREAT | O_APPEND);
  if (fd < 0) return -1;
  struct stat st {};
  // One name only: a hard link to another file (in a legacy dir) is not ours to grow.
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
    ::close(fd);
    errno = EPERM;
    return -1;
  }
  return fd;
}

void job_dir::append(std::string_view file, std::string_view text) const {
  int fd = open_append(file);
  if (fd < 0) refuse("cannot write " + where(file), errno);
  write_all(fd, text, where(file));
  ::close(fd);
}

void job_dir::remove(std::string_view file) const {
  if (::unlinkat(fd_, std::string(file).c_str(), 0) != 0 && errno != ENOENT)
    refuse("cannot remove " + where(file), errno);
}

void make_private_dir(const std::filesystem::path& path) {
  if (::mkdir(path.c_str(), 0700) == 0) return;
  int err = errno;
  struct stat st {};
  if (err == EEXIST && ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
  if (err == EEXIST) err = ENOTDIR;
  refuse("cannot create " + path.string(), err);
}

void make_home_dirs(const std::filesystem::path& home) {
  std::vector<std::filesystem::path> missing;
  for (auto p = home; !p.empty() && p != p.parent_path() && !std::filesystem::exists(p); p = p.parent_path())
    missing.push_back(p);
  std::reverse(missing.begin(), missing.end());
  missing.push_back(home / "containers");
  missing.push_back(home / "containers" / ".queue");
  for (const auto& p : missing)
    if (::mkdir(p.c_str(), 0700) != 0 && errno != EEXIST)
      refuse("cannot create its work dir " + p.string(), errno);
}

}  // namespace tjob::container
