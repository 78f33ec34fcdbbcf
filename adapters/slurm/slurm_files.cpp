// The job's directory on the shared file system, as tjob reads and writes
// it: its record, its Slurm id, each node's start and exit, the batch
// script's end, tjob's marks (cancel, never) and the latest progress report.
// Everything here is a small file, read whole (and bounded) on each look.
#include "adapters/slurm/slurm_impl.hpp"

#include "core/names.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>

namespace tjob::slurm {

namespace fs = std::filesystem;

namespace {

// At most `max` bytes of a file, read as they come (the files are small; the
// bound is for one that is not).
std::optional<std::string> read_text(const fs::path& p, std::size_t max = 1 << 20) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::string out;
  char buf[4096];
  while (out.size() < max && in.read(buf, static_cast<std::streamsize>(std::min(sizeof buf, max - out.size()))).gcount() > 0)
    out.append(buf, static_cast<std::size_t>(in.gcount()));
  return out;
}

std::optional<std::int64_t> number_in(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  std::int64_t n = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || p == s.data()) return std::nullopt;
  return n;
}

std::optional<clock::time_point> mtime_of(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return std::nullopt;
  return from_ns(std::int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec);
}

// What each node of one attempt left in `dir` (the job's directory for the
// current attempt, attempt-<k>/ for an earlier one).
std::vector<node_files> read_nodes(const fs::path& dir, int num_nodes) {
  std::vector<node_files> out;
  for (int i = 0; i < num_nodes; ++i) {
    node_files n;
    const auto node = "node-" + std::to_string(i);
    if (auto s = read_text(dir / (node + ".start"), 64))
      if (auto ns = number_in(*s)) n.started = from_ns(*ns);
    if (auto s = read_text(dir / (node + ".exit"), 128)) {
      std::istringstream in(*s);
      std::int64_t code = 0, ns = 0;
      if (in >> code) {
        n.exit_code = static_cast<int>(code);
        n.exited = in >> ns ? from_ns(ns) : mtime_of(dir / (node + ".exit")).value_or(clock::now());
      }
    }
    out.push_back(n);
  }
  return out;
}

}  // namespace

bool write_file(const fs::path& path, std::string_view text, mode_t mode) {
  auto tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return false;
  std::size_t done = 0;
  while (done < text.size()) {
    auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = e;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) return false;
  return true;
}

// --- the jobs' files --------------------------------------------------------------

std::optional<job_files> backend::impl::read_files(const std::string& name, bool history) const {
  if (detail::name_problem(name)) return std::nullopt;
  const auto dir = dir_of(name);
  auto text = read_text(dir / "job.json");
  if (!text) return std::nullopt;
  auto rec = record_from_json(*text);
  if (!rec || rec->name != name) return std::nullopt;
  job_files f;
  f.record = std::move(*rec);
  f.slurm_id = trimmed(read_text(dir / "slurm-id", 64).value_or(""));
  if (!f.slurm_id.empty()) f.submitted = mtime_of(dir / "slurm-id");
  f.nodes = read_nodes(dir, f.record.num_nodes);
  if (auto s = read_text(dir / "restarts", 1 << 16)) {
    f.restarts = parse_restarts(*s);
    if (history)
      for (const auto& r : f.restarts)
        f.earlier.push_back(read_nodes(dir / ("attempt-" + std::to_string(r.attempt)), f.record.num_nodes));
  }
  if (auto s = read_text(dir / "end", 128)) {
    std::istringstream in(*s);
    int code = 0;
    if (in >> code) {
      f.end_code = code;
      in >> f.end_what;
      f.ended = mtime_of(dir / "end");
    }
  }
  if (fs::exists(dir / "cancel")) f.cancel_requested = mtime_of(dir / "cancel");
  if (auto s = read_text(dir / "never", 4096)) {
    f.never = trimmed(*s);
    f.never_at = mtime_of(dir / "never");
  }
  // What the job reported last; one that does not read (half written by an
  // older writer, or not a report at all) is as none.
  if (auto s = read_text(dir / progress_file, 64 << 10)) {
    auto parsed = detail::parse_progress_body(*s);
    if (parsed.report) {
      f.progress = std::move(parsed.report);
      f.progress_at = mtime_of(dir / progress_file);
    }
  }
  return f;
}

off_t backend::impl::log_size_at(const std::string& name, int attempt, const std::string& step) const {
  auto text = read_text(dir_of(name) / ("attempt-" + std::to_string(attempt)) / (step + ".log.size"), 64);
  return text ? static_cast<off_t>(number_in(*text).value_or(0)) : 0;
}

std::vector<std::string> backend::impl::job_names() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(shared, ec), end; !ec && it != end; it.increment(ec)) {
    auto n = it->path().filename().string();
    if (!detail::name_problem(n)) out.push_back(std::move(n));
  }
  return out;
}

}  // namespace tjob::slurm
