#include "engine/snapshot.hpp"

#include "core/fail.hpp"
#include "core/names.hpp"

#include <tjob/error.hpp>

#include <openssl/evp.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <random>

#include <fnmatch.h>
#include <sys/stat.h>

namespace tjob::detail {

namespace fs = std::filesystem;

namespace {

bool glob(const std::string& pattern, const std::string& text, int flags) {
  return ::fnmatch(pattern.c_str(), text.c_str(), flags) == 0;
}

std::string basename_of(const std::string& relative) {
  auto slash = relative.rfind('/');
  return slash == std::string::npos ? relative : relative.substr(slash + 1);
}

// One entry of the snapshot, in the order it is hashed and copied.
struct entry {
  std::string relative;  // '/'-separated
  fs::file_type type = fs::file_type::none;
  std::uint64_t size = 0;
  bool executable = false;
  std::string link;  // a symlink's target, as it reads
};

// The entries of `root` not excluded, sorted by path; a directory excluded is
// not entered (as git: nothing under it can come back).
std::vector<entry> walk(const fs::path& root, const ignore_rules& rules, const std::string& who,
                        std::uint64_t limit) {
  std::vector<entry> out;
  std::uint64_t total = 0;
  std::vector<fs::path> todo{root};
  while (!todo.empty()) {
    auto dir = todo.back();
    todo.pop_back();
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      entry e;
      e.relative = it->path().lexically_relative(root).generic_string();  // (fs::relative follows links)
      auto st = it->symlink_status(ec);
      if (ec) break;
      e.type = st.type();
      const bool is_dir = e.type == fs::file_type::directory;
      if (rules.excluded(e.relative, is_dir)) continue;
      if (is_dir) {
        todo.push_back(it->path());
      } else if (e.type == fs::file_type::regular) {
        e.size = it->file_size(ec);
        e.executable = (st.permissions() & fs::perms::owner_exec) != fs::perms::none;
        total += e.size;
        if (total > limit)
          fail(errc::invalid_argument,
               fmt::format(
                   "{}: working_dir {} holds more than {} MiB after its excludes (at {}); exclude data, "
                   "checkpoints and outputs in {}/.tjobignore (.gitignore's syntax), or mount them as a "
                   "volume",
                   who, quote(root.string()), limit >> 20, e.relative, root.string()));
      } else if (e.type == fs::file_type::symlink) {
        e.link = fs::read_symlink(it->path(), ec).string();
      } else {
        continue;  // sockets, fifos, devices: not code
      }
      out.push_back(std::move(e));
    }
    if (ec)
      fail(errc::invalid_argument, who + ": working_dir " + quote(root.string()) + ": cannot read " +
                                       dir.string() + ": " + ec.message());
  }
  std::sort(out.begin(), out.end(), [](const entry& a, const entry& b) { return a.relative < b.relative; });
  return out;
}

struct digest {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  digest() { EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr); }
  void add(std::string_view s) {
    EVP_DigestUpdate(ctx.get(), s.data(), s.size());
    EVP_DigestUpdate(ctx.get(), "\0", 1);
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx.get(), md, &n);
    std::string out;
    for (unsigned i = 0; i < n; ++i) out += fmt::format("{:02x}", md[i]);
    return out;
  }
};

std::string content_hash(const fs::path& root, const std::vector<entry>& entries, const std::string& who) {
  digest d;
  std::vector<char> buf(1 << 16);
  for (const auto& e : entries) {
    d.add(e.relative);
    if (e.type == fs::file_type::directory) {
      d.add("d");
    } else if (e.type == fs::file_type::symlink) {
      d.add("l");
      d.add(e.link);
    } else {
      d.add(e.executable ? "x" : "f");
      std::ifstream in(root / e.relative, std::ios::binary);
      if (!in)
        fail(errc::invalid_argument,
             who + ": working_dir " + quote(root.string()) + ": cannot read " + e.relative);
      while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        EVP_DigestUpdate(d.ctx.get(), buf.data(), static_cast<std::size_t>(in.gcount()));
      }
      d.add("");
    }
  }
  return d.hex();
}

void copy_entries(const fs::path& root, const std::vector<entry>& entries, const fs::path& into) {
  fs::create_directories(into);
  for (const auto& e : entries) {
    auto to = into / e.relative;
    if (e.type == fs::file_type::directory) {
      fs::create_directories(to);
    } else if (e.type == fs::file_type::symlink) {
      fs::create_symlink(e.link, to);
    } else {
      fs::copy_file(root / e.relative, to);
      fs::permissions(to, e.executable ? fs::perms(0755) : fs::perms(0644));
    }
  }
}

}  // namespace

void ignore_rules::add(std::string_view line) {
  std::string p(line);
  while (!p.empty() && (p.back() == ' ' || p.back() == '\r') && !(p.size() > 1 && p[p.size() - 2] == '\\'))
    p.pop_back();
  if (p.empty() || p.front() == '#') return;
  rule r;
  if (p.front() == '!') {
    r.negate = true;
    p.erase(0, 1);
  } else if (p.starts_with("\\!") || p.starts_with("\\#")) {
    p.erase(0, 1);
  }
  if (!p.empty() && p.back() == '/') {
    r.directory_only = true;
    p.pop_back();
  }
  if (p.starts_with("**/"))
    p.erase(0, 3);  // at any depth: as a name without '/'
  else if (p.find('/') != std::string::npos)
    r.anchored = true;
  if (!p.empty() && p.front() == '/') p.erase(0, 1);
  if (p.empty()) return;
  r.pattern = std::move(p);
  rules_.push_back(std::move(r));
}

bool ignore_rules::excluded(const std::string& relative, bool directory) const {
  bool out = false;
  for (const auto& r : rules_) {
    if (r.directory_only && !directory) continue;
    bool hit = r.anchored ? glob(r.pattern, relative, FNM_PATHNAME) ||
                                (r.pattern.ends_with("/**") &&
                                 relative.starts_with(r.pattern.substr(0, r.pattern.size() - 2)))
                          : glob(r.pattern, basename_of(relative), 0);
    if (hit) out = !r.negate;
  }
  return out;
}

ignore_rules ignore_rules::of_directory(const fs::path& root) {
  ignore_rules rules;
  for (auto d : {".git/", "__pycache__/", "*.pyc", ".venv/", ".tjob/"}) rules.add(d);
  for (auto name : {".gitignore", ".tjobignore"}) {
    std::ifstream in(root / name);
    for (std::string line; std::getline(in, line);) rules.add(line);
  }
  return rules;
}

snapshot take_snapshot(const fs::path& source, const fs::path& home, const std::string& who,
                       std::uint64_t limit) {
  std::error_code ec;
  auto root = fs::canonical(source, ec);
  if (ec || !fs::is_directory(root, ec))
    fail(errc::invalid_argument,
         who + ": working_dir " + quote(source.string()) +
             " is not a directory here; give a directory of this machine to send with the job");
  auto entries = walk(root, ignore_rules::of_directory(root), who, limit);
  snapshot s;
  s.source = root;
  for (const auto& e : entries) {
    s.bytes += e.size;
    s.files += e.type == fs::file_type::regular;
  }
  s.hash = content_hash(root, entries, who);
  auto store = home / "snapshots";
  s.dir = store / s.hash;
  if (fs::is_directory(s.dir, ec)) {
    s.reused = true;
    return s;
  }
  fs::create_directories(store, ec);
  ::chmod(store.c_str(), 0700);
  // Made aside, then renamed into place: a reader never sees half of one.
  std::random_device rd;
  auto tmp = store / fmt::format(".new-{:08x}", rd());
  try {
    copy_entries(root, entries, tmp);
  } catch (const fs::filesystem_error& x) {
    fs::remove_all(tmp, ec);
    fail(errc::invalid_argument, who + ": working_dir " + quote(source.string()) + ": " + x.what());
  }
  if (::rename(tmp.c_str(), s.dir.c_str()) != 0) {
    fs::remove_all(tmp, ec);  // another submit made the same one first
    s.reused = true;
  }
  return s;
}

}  // namespace tjob::detail
