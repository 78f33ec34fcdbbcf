#include "adapters/process/run.hpp"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <signal.h>
#include <unistd.h>
#include <array>
#include <cstdlib>
#include <memory>

extern char** environ;

namespace tjob::process {

namespace asio = boost::asio;

namespace {

// Reads a pipe to its end into `out`, keeping at most `max` bytes.
asio::awaitable<void> drain(asio::posix::stream_descriptor& d, std::string& out, std::size_t max) {
  std::array<char, 16384> buf;
  boost::system::error_code ec;
  for (;;) {
    auto n = co_await d.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
    if (out.size() < max) out.append(buf.data(), std::min(n, max - out.size()));
  }
}

// Closes its descriptor at the end of the scope, unless reset() did first.
struct fd_guard {
  int fd = -1;
  ~fd_guard() { reset(); }
  void reset() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// Reads the whole of the file `fd` from its start into `out`, up to `max`.
void read_back(int fd, std::string& out, std::size_t max) {
  std::array<char, 16384> buf;
  off_t at = 0;
  while (out.size() < max) {
    auto n = ::pread(fd, buf.data(), std::min(buf.size(), max - out.size()), at);
    if (n <= 0) return;
    out.append(buf.data(), static_cast<std::size_t>(n));
    at += n;
  }
}

}  // namespace

asio::awaitable<detail::outcome<run_result>> run(asio::any_io_executor ex, std::vector<std::string> argv,
                                                 std::vector<std::string> env, std::chrono::milliseconds timeout,
                                                 std::size_t max_bytes, char* const* inherited) {
  const char* path = std::getenv("PATH");
  auto exe = find_executable(argv.at(0), path ? path : "/usr/bin:/bin", ".");
  if (!exe)
    co_return detail::make_failure(errc::executable_not_found,
                                   argv[0] + ": no such program on PATH; install it, or put it on PATH");
  // stdout through a pipe read as it comes; stderr (short, read once the
  // child is gone) into an anonymous file, so a child filling one while we
  // read the other cannot stall.
  int out_fds[2];
  if (::pipe2(out_fds, O_CLOEXEC) != 0) co_return detail::make_failure(errc::spawn_failed, "cannot make a pipe");
  asio::posix::stream_descriptor out(ex, out_fds[0]);
  fd_guard out_w{out_fds[1]};
  fd_guard err{::memfd_create("tjob-stderr", MFD_CLOEXEC)};
  if (err.fd < 0) co_return detail::make_failure(errc::spawn_failed, "cannot make a file for stderr");
  spawn_spec spec;
  spec.executable = *exe;
  spec.argv = std::move(argv);
  spec.env = std::move(env);
  spec.inherited_env = inherited ? inherited : environ;
  spec.stdout_fd = out_w.fd;
  spec.stderr_fd = err.fd;
  auto spawned = child::spawn(ex, spec);
  out_w.reset();
  if (!spawned) co_return spawned.error();
  auto c = std::move(*spawned);
  // The time limit kills the child's process group; once it is reaped the
  // group id may be reused, so the timer forgets it first.
  auto group = std::make_shared<pid_t>(c.pid());
  auto timed_out = std::make_shared<bool>(false);
  asio::steady_timer limit(ex, timeout);
  limit.async_wait([group, timed_out](boost::system::error_code e) {
    if (!e && *group > 0) {
      *timed_out = true;
      ::killpg(*group, SIGKILL);
    }
  });
  run_result r;
  co_await drain(out, r.out, max_bytes);
  boost::system::error_code ec;
  for (;;) {
    co_await c.exit_signal().async_wait(asio::posix::descriptor_base::wait_read,
                                        asio::redirect_error(asio::use_awaitable, ec));
    auto reaped = c.reap();
    if (!reaped) {
      *group = 0;
      co_return reaped.error();
    }
    if (*reaped) {
      r.status = **reaped;
      break;
    }
    if (ec) {
      *group = 0;
      co_return detail::make_failure(errc::backend_error, "cannot wait for " + spec.argv[0] + ": " + ec.message());
    }
  }
  *group = 0;
  limit.cancel();
  r.timed_out = *timed_out;
  read_back(err.fd, r.err, max_bytes);
  co_return r;
}

}  // namespace tjob::process
