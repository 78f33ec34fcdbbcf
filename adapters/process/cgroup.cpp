#include "adapters/process/cgroup.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tjob::process {
namespace {

constexpr long period_us = 100000;

bool write_file(const std::string& path, const std::string& value, std::string& why_not) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    why_not = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  ssize_t n = ::write(fd, value.data(), value.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    why_not = "cannot write " + path + ": " + std::strerror(err);
    return false;
  }
  return true;
}

bool v2_has_cpu() {
  std::ifstream f("/sys/fs/cgroup/cgroup.controllers");
  std::string word;
  while (f >> word)
    if (word == "cpu") return true;
  return false;
}

bool make_dir(const std::string& dir, std::string& why_not) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return true;
  why_not = "cannot create " + dir + ": " + std::strerror(errno);
  return false;
}

}  // namespace

std::string cgroup_dir_for(const std::string& name) {
  struct stat st {};
  if (v2_has_cpu()) return "/sys/fs/cgroup/tjob/" + name;
  if (::stat("/sys/fs/cgroup/cpu/cgroup.procs", &st) == 0) return "/sys/fs/cgroup/cpu/tjob/" + name;
  return {};
}

std::optional<std::string> limit_cpu(pid_t pid, const std::string& name, double cpus, std::string& why_not) {
  std::string dir = cgroup_dir_for(name);
  if (dir.empty()) {
    why_not = "no cgroup cpu controller is mounted";
    return std::nullopt;
  }
  std::string parent = dir.substr(0, dir.rfind('/'));
  bool v2 = dir.rfind("/sys/fs/cgroup/tjob/", 0) == 0;
  if (!make_dir(parent, why_not)) return std::nullopt;
  if (v2 && !write_file(parent + "/cgroup.subtree_control", "+cpu", why_not)) return std::nullopt;
  if (!make_dir(dir, why_not)) return std::nullopt;
  auto quota = static_cast<long>(cpus * period_us);
  bool ok =
      v2 ? write_file(dir + "/cpu.max", std::to_string(quota) + " " + std::to_string(period_us), why_not)
         : write_file(dir + "/cpu.cfs_period_us", std::to_string(period_us), why_not) &&
               write_file(dir + "/cpu.cfs_quota_us", std::to_string(quota), why_not);
  if (!ok || !write_file(dir + "/cgroup.procs", std::to_string(pid), why_not)) {
    ::rmdir(dir.c_str());
    return std::nullopt;
  }
  return dir;
}

void remove_cgroup(const std::string& dir) {
  if (!dir.empty()) ::rmdir(dir.c_str());
}

}  // namespace tjob::process
