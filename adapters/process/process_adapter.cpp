#include "adapters/process/process_adapter.hpp"

#include "adapters/process/proc_info.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
// Boost.Process v2 as shipped in 1.81 compiles header-only only in this order.
#include <boost/asio/detail/throw_error.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/process_handle.hpp>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tjob::process {

namespace asio = boost::asio;
namespace bp2 = boost::process::v2;
using boost::system::error_code;

std::string describe(const exit_status& s) {
  if (s.signal != 0) {
    const char* abbrev = sigabbrev_np(s.signal);
    return "killed by signal " + std::to_string(s.signal) +
           (abbrev ? std::string(" (SIG") + abbrev + ")" : std::string());
  }
  return "exit code " + std::to_string(s.code);
}

namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  return S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string join_path(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (out.empty()) out = ".";
  if (out.back() != '/') out.push_back('/');
  out.append(name);
  return out;
}

}  // namespace

std::optional<std::string> find_executable(std::string_view name, std::string_view path_env,
                                           std::string_view cwd) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string_view::npos) {
    std::string path = name.front() == '/' ? std::string(name) : join_path(cwd, name);
    if (is_executable_file(path)) return path;
    return std::nullopt;
  }
  if (path_env.empty()) path_env = "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path_env.size()) {
    auto end = path_env.find(':', start);
    if (end == std::string_view::npos) end = path_env.size();
    std::string_view dir = path_env.substr(start, end - start);
    // An empty PATH entry means the current directory, which for the child is `cwd`.
    std::string candidate = join_path(dir.empty() ? cwd : dir, name);
    if (!dir.empty() && dir.front() != '/') candidate = join_path(cwd, candidate);
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

std::vector<std::string> merge_environment(char** base,
                                           const std::map<std::string, std::string>& overlay) {
  std::vector<std::string> out;
  for (char** e = base; e && *e; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    std::string key(entry.substr(0, eq));
    if (overlay.count(key) == 0) out.emplace_back(entry);
  }
  for (const auto& [k, v] : overlay) out.push_back(k + "=" + v);
  return out;
}

struct child::impl {
  impl(asio::any_io_executor ex, pid_t p, int out)
      : pid(p), handle(ex, p), output(ex) {
    if (out >= 0) output.assign(out);
    start = process::start_time(p).value_or(0);
  }
  pid_t pid;
  std::uint64_t start = 0;
  bp2::basic_process_handle<asio::any_io_executor> handle;
  asio::posix::stream_descriptor output;
};

child::child() = default;
child::child(child&&) noexcept = default;
child& child::operator=(child&&) noexcept = default;
child::~child() = default;

child child::spawn(asio::any_io_executor ex, const spawn_spec& spec, error_code& ec) {
  ec.clear();
  child c;
  int pipe_fds[2] = {-1, -1};
  int out_fd = spec.stdout_fd;
  if (out_fd < 0) {
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      ec.assign(errno, boost::system::system_category());
      return c;
    }
    out_fd = pipe_fds[1];
  }

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  if (spec.stdin_fd >= 0)
    posix_spawn_file_actions_adddup2(&actions, spec.stdin_fd, STDIN_FILENO);
  else
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out_fd, STDERR_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  if (!spec.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, spec.cwd.c_str());

  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (spec.new_session)
    flags |= POSIX_SPAWN_SETSID;
  else {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);

  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(spec.env.size() + 1);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, spec.executable.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
  if (rc != 0) {
    if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
    ec.assign(rc, boost::system::system_category());
    return c;
  }
  int read_end = pipe_fds[0];
  if (read_end >= 0) ::fcntl(read_end, F_SETFL, ::fcntl(read_end, F_GETFL) | O_NONBLOCK);
  c.impl_ = std::make_unique<impl>(ex, pid, read_end);
  return c;
}

pid_t child::pid() const noexcept { return impl_ ? impl_->pid : -1; }
std::uint64_t child::start_time() const noexcept { return impl_ ? impl_->start : 0; }

asio::awaitable<exit_status> child::wait() {
  error_code ec;
  int native = co_await impl_->handle.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  if (ec) throw boost::system::system_error(ec, "waiting for process " + std::to_string(impl_->pid));
  exit_status st;
  if (WIFSIGNALED(native)) {
    st.signal = WTERMSIG(native);
    st.code = 128 + st.signal;
  } else {
    st.code = WEXITSTATUS(native);
  }
  co_return st;
}

bool child::has_output() const noexcept { return impl_ && impl_->output.is_open(); }

asio::awaitable<error_code> child::wait_output() {
  error_code ec;
  co_await impl_->output.async_wait(asio::posix::descriptor_base::wait_read,
                                    asio::redirect_error(asio::use_awaitable, ec));
  co_return ec;
}

std::size_t child::read_output(std::span<char> buf, error_code& ec) {
  ec.clear();
  for (;;) {
    ssize_t n = ::read(impl_->output.native_handle(), buf.data(), buf.size());
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      ec = asio::error::would_block;
    else
      ec.assign(errno, boost::system::system_category());
    return 0;
  }
}

void child::close_output() noexcept {
  if (!impl_) return;
  error_code ignored;
  impl_->output.close(ignored);
}

bool child::signal_group(int sig) noexcept {
  if (!impl_ || impl_->pid <= 0) return false;
  return ::killpg(impl_->pid, sig) == 0;
}

}  // namespace tjob::process
