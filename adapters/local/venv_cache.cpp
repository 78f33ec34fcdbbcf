#include "adapters/local/venv_cache.hpp"

#include "adapters/process/proc_info.hpp"
#include "core/secrets.hpp"

#include <openssl/evp.h>
#include <boost/json.hpp>

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>

namespace tjob::detail::venv_cache {

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

constexpr const char* manifest_name = "tjob-venv.json";
constexpr const char* last_used_name = "last-used";
constexpr std::uintmax_t max_rewrite_bytes = 1 << 20;

[[noreturn]] void sys_fail(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::int64_t mtime_ms(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& text, mode_t mode = 0600) {
  int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) sys_fail("cannot write " + p.string());
  std::string_view rest = text;
  while (!rest.empty()) {
    ssize_t w = ::write(fd, rest.data(), rest.size());
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      ::close(fd);
      errno = e;
      sys_fail("cannot write " + p.string());
    }
    rest.remove_prefix(static_cast<std::size_t>(w));
  }
  ::close(fd);
}

json::array string_array(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

std::vector<std::string> strings_of(const json::value* v) {
  std::vector<std::string> out;
  if (v && v->is_array())
    for (const auto& s : v->as_array())
      if (s.is_string()) out.emplace_back(s.as_string());
  return out;
}

// Every entry below `venv`, relative to it: [path, type, size, link target].
json::array list_files(const fs::path& venv) {
  json::array files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(venv, fs::directory_options::none, ec), end; it != end;
       it.increment(ec)) {
    if (ec) throw std::system_error(ec, "cannot read " + venv.string());
    auto rel = it->path().lexically_relative(venv).string();
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) sys_fail("cannot read " + it->path().string());
    if (S_ISLNK(st.st_mode)) {
      files.push_back(json::array{rel, "l", 0, fs::read_symlink(it->path()).string()});
    } else if (S_ISDIR(st.st_mode)) {
      files.push_back(json::array{rel, "d", 0, ""});
    } else if (S_ISREG(st.st_mode)) {
      files.push_back(json::array{rel, "f", static_cast<std::uint64_t>(st.st_size), ""});
    }
  }
  return files;
}

std::optional<json::object> read_manifest(const fs::path& entry, std::string& problem) {
  auto path = entry / manifest_name;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    problem = "no manifest";
    return std::nullopt;
  }
  try {
    auto v = json::parse(read_text(path));
    if (!v.is_object()) throw std::runtime_error("not an object");
    return v.as_object();
  } catch (const std::exception& e) {
    problem = std::string("manifest unreadable: ") + e.what();
    return std::nullopt;
  }
}

inputs inputs_of(const json::object& m) {
  inputs in;
  if (auto* p = m.if_contains("python"); p && p->is_string()) in.python = p->as_string();
  if (auto* p = m.if_contains("python_identity"); p && p->is_string()) in.python_identity = p->as_string();
  in.packages = strings_of(m.if_contains("packages"));
  in.index_urls = detail::mask_urls(strings_of(m.if_contains("index_urls")));  // (an older entry's unmasked)
  if (auto* p = m.if_contains("system_site_packages"); p && p->is_bool())
    in.system_site_packages = p->as_bool();
  return in;
}

std::string python_version_of(const fs::path& venv) {
  std::istringstream cfg(read_text(venv / "pyvenv.cfg"));
  std::string line;
  while (std::getline(cfg, line)) {
    for (const char* k : {"version_info", "version"}) {
      std::string key = k;
      if (line.rfind(key, 0) == 0) {
        auto eq = line.find('=');
        if (eq == std::string::npos ||
            line.substr(0, eq).find_first_not_of(" ", key.size()) != std::string::npos)
          continue;
        auto v = line.substr(eq + 1);
        v.erase(0, v.find_first_not_of(' '));
        return v;
      }
    }
  }
  return {};
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
}

// A copy that shares blocks with the source where the filesystem can (reflink),
// else copied inside the kernel.
void copy_file(const fs::path& from, const fs::path& to, mode_t mode, std::uint64_t size) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) sys_fail("cannot read " + from.string());
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777);
  if (out < 0) {
    int e = errno;
    ::close(in);
    errno = e;
    sys_fail("cannot create " + to.string());
  }
  bool ok = ::ioctl(out, FICLONE, in) == 0;
  std::uint64_t left = size;
  while (!ok && left > 0) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, left, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    left -= static_cast<std::uint64_t>(n);
  }
  int e = errno;
  ::close(in);
  ::close(out);
  if (!ok && left > 0) {
    errno = e ? e : EIO;
    sys_fail("cannot copy " + from.string());
  }
}

}  // namespace

std::string key_of(const inputs& in) {
  json::object o;
  o["format"] = 1;
  o["python"] = in.python;
  o["python_identity"] = in.python_identity;
  o["packages"] = string_array(in.packages);
  o["index_urls"] = string_array(in.index_urls);
  o["system_site_packages"] = in.system_site_packages;
  auto text = json::serialize(o);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(text.data(), text.size(), digest, &len, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < 16 && i < len; ++i) {
    out.push_back(hex[digest[i] >> 4]);
    out.push_back(hex[digest[i] & 15]);
  }
  return out;
}

std::string file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) +
         ":" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

bool pinned(std::string_view requirement) {
  auto req = requirement.substr(0, requirement.find(';'));  // environment markers
  auto eq = req.find("==");
  if (eq == std::string_view::npos || req.find('@') != std::string_view::npos) return false;
  auto version = req.substr(eq + (req.substr(eq).starts_with("===") ? 3 : 2));
  auto blank = [](char c) { return c == ' ' || c == '\t'; };
  while (!version.empty() && blank(version.front())) version.remove_prefix(1);
  while (!version.empty() && blank(version.back())) version.remove_suffix(1);
  // One version only: no wildcard (`==1.*`), no second clause (`==1,>0`).
  return !version.empty() && version.find_first_of("*,<>=!~ ") == std::string_view::npos;
}

std::vector<std::string> unpinned(const inputs& in) {
  std::vector<std::string> out;
  for (const auto& p : in.packages)
    if (!pinned(p)) out.push_back(p);
  return out;
}

std::optional<std::pair<std::string, std::string>> native_identity(const std::string& python) {
  char real[PATH_MAX];
  if (!::realpath(python.c_str(), real)) return std::nullopt;
  int fd = ::open(real, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char magic[4] = {};
  ssize_t n = ::read(fd, magic, sizeof magic);
  ::close(fd);
  if (n != 4 || std::memcmp(magic,
                            "\x7f"
                            "ELF",
                            4) != 0)
    return std::nullopt;
  return std::make_pair(std::string(real), file_identity(real));
}

cache::cache(fs::path root) : root_(std::move(root)) {}

fs::path cache::entry_dir(const std::string& key) const { return root_ / key; }
fs::path cache::venv_dir(const std::string& key) const { return root_ / key / "venv"; }
fs::path cache::build_dir(const std::string& key, const std::string& tag) const {
  return root_ / (key + ".build-" + tag);
}

namespace {

// mkdir -p, each directory it makes 0700 (the cache is the user's own).
void make_private_dirs(const fs::path& p) {
  std::error_code ec;
  if (p.empty() || fs::is_directory(p, ec)) return;
  make_private_dirs(p.parent_path());
  if (::mkdir(p.c_str(), 0700) != 0 && errno != EEXIST) sys_fail("cannot create " + p.string());
}

}  // namespace

int cache::try_lock(const std::string& key, bool exclusive) const {
  make_private_dirs(root_);
  auto path = root_ / (key + ".lock");
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) sys_fail("cannot open " + path.string());
  if (::flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
    int e = errno;
    ::close(fd);
    if (e == EWOULDBLOCK) return -1;
    errno = e;
    sys_fail("cannot lock " + path.string());
  }
  if (exclusive) {
    auto self = ::getpid();
    auto who = std::to_string(self) + " " + std::to_string(process::start_time(self).value_or(0)) + "\n";
    if (::ftruncate(fd, 0) == 0) {
      [[maybe_unused]] auto w = ::pwrite(fd, who.data(), who.size(), 0);
    }
  }
  return fd;
}

void cache::unlock(int fd) noexcept {
  if (fd >= 0) ::close(fd);  // closing the only descriptor releases the flock
}

std::optional<std::pair<pid_t, std::uint64_t>> cache::holder(const std::string& key) const {
  std::istringstream in(read_text(root_ / (key + ".lock")));
  long pid = 0;
  std::uint64_t start = 0;
  if (!(in >> pid >> start) || pid <= 0) return std::nullopt;
  return std::make_pair(static_cast<pid_t>(pid), start);
}

std::optional<std::string> cache::check(const std::string& key, std::int64_t not_before_ms,
                                        std::string_view why) const {
  auto entry = entry_dir(key);
  std::error_code ec;
  if (!fs::is_directory(entry, ec)) return "missing";
  std::string problem;
  auto m = read_manifest(entry, problem);
  if (!m) return problem;
  if (not_before_ms > 0) {
    std::int64_t created = 0;
    if (auto* c = m->if_contains("created_ms"); c && c->is_int64()) created = c->as_int64();
    if (created < not_before_ms) {
      auto age_s = (now_ms() - created) / 1000;
      auto age = age_s >= 2 * 3600 ? std::to_string(age_s / 3600) + " h"
                 : age_s >= 120    ? std::to_string(age_s / 60) + " min"
                                   : std::to_string(age_s) + " s";
      return "stale: built " + age + " ago, " + std::string(why);
    }
  }
  auto venv = entry / "venv";
  auto* files = m->if_contains("files");
  if (!files || !files->is_array() || files->as_array().empty()) return "manifest lists no files";
  for (const auto& f : files->as_array()) {
    if (!f.is_array() || f.as_array().size() != 4) return "manifest entry malformed";
    const auto& a = f.as_array();
    std::string rel(a[0].as_string());
    std::string type(a[1].as_string());
    struct stat st {};
    if (::lstat((venv / rel).c_str(), &st) != 0) return rel + ": missing";
    if (type == "d" && !S_ISDIR(st.st_mode)) return rel + ": not a directory";
    if (type == "l" && !S_ISLNK(st.st_mode)) return rel + ": not a symbolic link";
    if (type == "f") {
      if (!S_ISREG(st.st_mode)) return rel + ": not a file";
      auto want = a[2].to_number<std::uint64_t>();
      if (static_cast<std::uint64_t>(st.st_size) != want)
        return rel + ": size " + std::to_string(st.st_size) + ", expected " + std::to_string(want);
    }
  }
  struct stat st {};
  if (::stat((venv / "bin" / "python").c_str(), &st) != 0)
    return "bin/python does not lead to an interpreter any more";
  return std::nullopt;
}

void cache::finalize(const std::string& key, const fs::path& build, const inputs& in) const {
  json::object m;
  m["key"] = key;
  m["python"] = in.python;
  m["python_identity"] = in.python_identity;
  m["packages"] = string_array(in.packages);
  m["index_urls"] = string_array(detail::mask_urls(in.index_urls));  // (shown by tjob cache list)
  m["system_site_packages"] = in.system_site_packages;
  m["built_at"] = (build / "venv").string();
  m["created_ms"] = now_ms();
  m["files"] = list_files(build / "venv");
  write_text(build / manifest_name, json::serialize(m));
  write_text(build / last_used_name, "");
  if (::rename(build.c_str(), entry_dir(key).c_str()) != 0)
    sys_fail("cannot move " + build.string() + " to " + entry_dir(key).string());
}

void cache::remove(const std::string& key) const {
  std::error_code ec;
  fs::remove_all(entry_dir(key), ec);
  if (ec) throw std::system_error(ec, "cannot remove " + entry_dir(key).string());
  std::string prefix = key + ".build-";
  for (const auto& e : fs::directory_iterator(root_, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove_all(e.path(), ec);
}

void cache::copy_to(const std::string& key, const fs::path& to) const {
  auto entry = entry_dir(key);
  std::string problem;
  auto m = read_manifest(entry, problem);
  if (!m) throw std::runtime_error("venv cache entry " + key + ": " + problem);
  std::string from_prefix;
  if (auto* b = m->if_contains("built_at"); b && b->is_string()) from_prefix = b->as_string();
  const std::string to_prefix = to.string();
  const auto venv = entry / "venv";
  if (::mkdir(to.c_str(), 0700) != 0) sys_fail("cannot create " + to.string());
  std::error_code ec;
  for (fs::recursive_directory_iterator it(venv, fs::directory_options::none, ec), end; it != end;
       it.increment(ec)) {
    if (ec) throw std::system_error(ec, "cannot read " + venv.string());
    auto rel = it->path().lexically_relative(venv);
    auto dst = to / rel;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0) sys_fail("cannot read " + it->path().string());
    if (S_ISDIR(st.st_mode)) {
      if (::mkdir(dst.c_str(), st.st_mode & 07777) != 0) sys_fail("cannot create " + dst.string());
    } else if (S_ISLNK(st.st_mode)) {
      auto target = fs::read_symlink(it->path()).string();
      if (!from_prefix.empty() && target.rfind(from_prefix, 0) == 0)
        target = to_prefix + target.substr(from_prefix.size());
      if (::symlink(target.c_str(), dst.c_str()) != 0) sys_fail("cannot create " + dst.string());
    } else if (S_ISREG(st.st_mode)) {
      auto rel_s = rel.string();
      bool relocatable = rel_s.rfind("bin/", 0) == 0 || rel_s == "pyvenv.cfg";
      if (relocatable && !from_prefix.empty() &&
          static_cast<std::uintmax_t>(st.st_size) <= max_rewrite_bytes) {
        // Scripts' shebangs, activate and pyvenv.cfg name the venv's own path.
        auto text = read_text(it->path());
        if (text.find(from_prefix) != std::string::npos) {
          replace_all(text, from_prefix, to_prefix);
          write_text(dst, text, st.st_mode & 07777);
          continue;
        }
      }
      copy_file(it->path(), dst, st.st_mode, static_cast<std::uint64_t>(st.st_size));
    }
  }
  // When a job last took it: `tjob cache prune` keeps what is in use.
  auto stamp = entry / last_used_name;
  if (::utimensat(AT_FDCWD, stamp.c_str(), nullptr, 0) != 0) write_text(stamp, "");
}

std::vector<entry_info> cache::list() const {
  std::vector<entry_info> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    auto name = e.path().filename().string();
    if (!e.is_directory(ec) || name.find('.') != std::string::npos) continue;
    entry_info info;
    info.key = name;
    std::string problem;
    if (auto m = read_manifest(e.path(), problem)) {
      info.from = inputs_of(*m);
      if (auto* c = m->if_contains("created_ms"); c && c->is_int64()) info.created_ms = c->as_int64();
      if (auto* f = m->if_contains("files"); f && f->is_array())
        for (const auto& x : f->as_array())
          if (x.is_array() && x.as_array().size() == 4 && x.as_array()[2].is_number())
            info.bytes += x.as_array()[2].to_number<std::uint64_t>();
      info.python_version = python_version_of(e.path() / "venv");
    }
    info.last_used_ms = mtime_ms(e.path() / last_used_name);
    info.problem = check(name).value_or("");
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  return out;
}

std::vector<entry_info> cache::prune(std::chrono::seconds unused_for) const {
  std::vector<entry_info> removed;
  auto cutoff = now_ms() - std::chrono::duration_cast<std::chrono::milliseconds>(unused_for).count();
  for (auto& info : list()) {
    bool stale = unused_for.count() == 0 || !info.problem.empty() || info.last_used_ms < cutoff;
    if (!stale) continue;
    int fd = try_lock(info.key, true);
    if (fd < 0) continue;  // being built or copied: in use
    try {
      remove(info.key);
    } catch (...) {
      unlock(fd);
      throw;
    }
    unlock(fd);
    removed.push_back(std::move(info));
  }
  // Builds whose builder is gone (nobody holds their key's lock).
  std::error_code ec;
  std::vector<fs::path> builds;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    auto name = e.path().filename().string();
    if (name.find(".build-") != std::string::npos) builds.push_back(e.path());
  }
  for (const auto& b : builds) {
    auto name = b.filename().string();
    auto key = name.substr(0, name.find(".build-"));
    int fd = try_lock(key, true);
    if (fd < 0) continue;
    fs::remove_all(b, ec);
    unlock(fd);
  }
  return removed;
}

}  // namespace tjob::detail::venv_cache
