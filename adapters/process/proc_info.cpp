#include "adapters/process/proc_info.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>
#include <charconv>
#include <cstdio>
#include <string>
#include <string_view>

namespace tjob::process {
namespace {

// Reads /proc/<pid>/stat. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
bool read_stat(pid_t pid, std::string& out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  out.assign(buf, static_cast<std::size_t>(n));
  return true;
}

// Field `index` (1-based, as in proc(5)) from a stat line; fields >= 3 only.
std::string_view stat_field(std::string_view stat, int index) {
  auto close = stat.rfind(')');
  if (close == std::string_view::npos) return {};
  std::string_view rest = stat.substr(close + 2);  // skip ") "
  int field = 3;
  while (field < index) {
    auto sp = rest.find(' ');
    if (sp == std::string_view::npos) return {};
    rest.remove_prefix(sp + 1);
    ++field;
  }
  return rest.substr(0, rest.find(' '));
}

template <class T>
std::optional<T> to_number(std::string_view s) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::uint64_t> start_time(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::string stat;
  if (!read_stat(pid, stat)) return std::nullopt;
  if (stat_field(stat, 3) == "Z") return std::nullopt;
  return to_number<std::uint64_t>(stat_field(stat, 22));
}

bool is_same_process(pid_t pid, std::uint64_t start) {
  auto st = start_time(pid);
  return st && *st == start;
}

std::size_t count_group_members(pid_t pgid) {
  std::size_t count = 0;
  DIR* d = ::opendir("/proc");
  if (!d) return 0;
  std::string stat;
  while (auto* e = ::readdir(d)) {
    auto pid = to_number<pid_t>(e->d_name);
    if (!pid || !read_stat(*pid, stat)) continue;
    if (stat_field(stat, 3) == "Z") continue;
    if (to_number<pid_t>(stat_field(stat, 5)) == pgid) ++count;
  }
  ::closedir(d);
  return count;
}

std::size_t open_descriptors() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return 0;
  std::size_t count = 0;
  while (auto* e = ::readdir(d))
    if (e->d_name[0] != '.') ++count;
  ::closedir(d);
  return count > 0 ? count - 1 : 0;
}

std::vector<std::pair<pid_t, std::string>> find_by_environment(const std::set<std::string>& entries) {
  std::vector<std::pair<pid_t, std::string>> found;
  if (entries.empty()) return found;
  DIR* d = ::opendir("/proc");
  if (!d) return found;
  std::string env;
  char buf[1 << 15];
  while (auto* e = ::readdir(d)) {
    auto pid = to_number<pid_t>(e->d_name);
    if (!pid) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/environ", static_cast<int>(*pid));
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    env.clear();
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) env.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
    std::size_t start = 0;
    while (start < env.size()) {
      auto end = env.find('\0', start);
      if (end == std::string::npos) end = env.size();
      std::string entry = env.substr(start, end - start);
      if (entries.count(entry)) {
        found.emplace_back(*pid, std::move(entry));
        break;
      }
      start = end + 1;
    }
  }
  ::closedir(d);
  return found;
}

}  // namespace tjob::process
