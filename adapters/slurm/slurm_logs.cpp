// A node's log: the file srun writes for its task in the job's directory,
// read from where the tail starts, and followed on the shared poll's reads
// until the job has ended.
#include "adapters/slurm/slurm_impl.hpp"
#include "core/fail.hpp"
#include "core/log_stream_impl.hpp"
#include "core/messages.hpp"
#include "core/names.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <limits>

namespace tjob::slurm {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using detail::fail;
using detail::quote;
using steady = std::chrono::steady_clock;

namespace {

// Where the last `lines` lines before `limit` of the file `fd` begin (a last
// line without '\n' counts as one).
off_t tail_offset(int fd, std::size_t lines, off_t limit) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 0;
  const off_t size = std::min(st.st_size, limit);
  if (size == 0 || lines == 0) return size;
  std::array<char, 65536> buf;
  std::size_t seen = 0;
  off_t end = size;
  while (end > 0) {
    off_t from = end > off_t(buf.size()) ? end - off_t(buf.size()) : 0;
    auto n = ::pread(fd, buf.data(), static_cast<std::size_t>(end - from), from);
    if (n <= 0) return 0;
    for (auto i = n; i-- > 0;) {
      off_t at = from + i;
      if (buf[static_cast<std::size_t>(i)] != '\n' || at == size - 1) continue;
      if (++seen == lines) return at + 1;
    }
    end = from;
  }
  return 0;
}

struct node_log final : detail::piecewise_log {
  std::shared_ptr<backend::impl> b;
  std::string job;
  fs::path path;
  log_options options;
  int fd = -1;
  off_t at = 0;
  off_t limit = std::numeric_limits<off_t>::max();  // an earlier attempt's part ends here
  bool last_look = false;  // the job has ended: what is left is read, then the end
  std::optional<backend::impl::watcher> w;
  std::optional<detail::wake_signal> sig;
  std::optional<detail::wake_registration> reg;

  node_log(std::shared_ptr<backend::impl> bk, std::string j, fs::path p, log_options o)
      : b(std::move(bk)), job(std::move(j)), path(std::move(p)), options(std::move(o)) {}
  ~node_log() override {
    if (fd >= 0) ::close(fd);
  }

  asio::awaitable<bool> read_piece(std::string& out) override {
    if (fd < 0) {
      fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd >= 0 && options.tail) at = std::max(at, tail_offset(fd, *options.tail, limit));
    }
    if (fd >= 0 && at < limit) {
      std::array<char, 65536> buf;
      auto n = ::pread(fd, buf.data(),
                       static_cast<std::size_t>(std::min<off_t>(off_t(buf.size()), limit - at)), at);
      if (n > 0) {
        at += n;
        out.append(buf.data(), static_cast<std::size_t>(n));
        co_return true;
      }
    }
    // An earlier attempt has ended: its part is whole.
    if (!options.follow || last_look || limit != std::numeric_limits<off_t>::max()) co_return false;
    if (!w) {
      w.emplace(b);
      sig.emplace(b->ctx.ex);
      reg.emplace(b->waiters, &*sig);
    }
    // At the end of what is written: the job's end ends the log, after one
    // more read of what its last moments wrote.
    auto j = co_await b->find(job, true);
    if (!j && j.error().code == errc::job_not_found) co_return false;
    if (j && is_terminal(j->status)) {
      last_look = true;
      co_return true;
    }
    co_await sig->wait_until(steady::now() + std::chrono::seconds(10));
    co_return true;
  }
};

}  // namespace

asio::awaitable<log_stream> backend::impl::logs(const std::string& name, const log_options& o) {
  auto f = read_files(name);
  if (!f) detail::raise(not_found(name));
  std::vector<std::string> steps;
  for (int i = 0; i < f->record.num_nodes; ++i) steps.push_back("node-" + std::to_string(i));
  if (std::find(steps.begin(), steps.end(), o.step) == steps.end()) detail::throw_step_not_found(name, o.step, steps);
  if (o.timestamps || o.since)
    fail(errc::invalid_argument, "the log of TrainJob " + quote(name) +
                                     ": the slurm backend's logs are the files the nodes write, without the "
                                     "time of each line; leave out timestamps and since (docs/slurm.md)");
  auto path = dir_of(name) / (o.step + ".log");
  auto log = std::make_unique<node_log>(shared_from_this(), name, std::move(path), o);
  // One log holds every attempt: attempt k's part begins where attempt k-1's
  // ended, as the batch script recorded it when it restarted the job.
  if (o.attempt) {
    const int attempts = f->attempt();
    if (*o.attempt > attempts) detail::throw_attempt_not_found(name, o.step, *o.attempt, attempts);
    if (*o.attempt > 1) log->at = log_size_at(name, *o.attempt - 1, o.step);
    if (*o.attempt < attempts) log->limit = log_size_at(name, *o.attempt, o.step);
  }
  co_return log_stream(std::move(log));
}

}  // namespace tjob::slurm
