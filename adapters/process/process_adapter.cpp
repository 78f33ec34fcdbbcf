#include "adapters/process/process_adapter.hpp"

#include "adapters/process/proc_info.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <fcntl.h>
#include <linux/close_range.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>

// ThreadSanitizer's clone() interceptor cannot follow a CLONE_VM child: its
// builds spawn with posix_spawn (see spawn_portable).
#if defined(__SANITIZE_THREAD__)
#define TJOB_SPAWN_WITH_POSIX_SPAWN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TJOB_SPAWN_WITH_POSIX_SPAWN 1
#endif
#endif
#ifndef TJOB_SPAWN_WITH_POSIX_SPAWN
#define TJOB_SPAWN_WITH_POSIX_SPAWN 0
#endif

namespace tjob::process {

namespace asio = boost::asio;
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

namespace {
std::string_view key_of(std::string_view entry) { return entry.substr(0, entry.find('=')); }
}  // namespace

std::vector<char*> merge_environment(char* const* base, const std::vector<std::string>& overlay) {
  std::vector<char*> out;
  std::size_t n = 0;
  for (char* const* e = base; e && *e; ++e) ++n;
  out.reserve(n + overlay.size() + 1);
  // The overlay is a few variables and the base a few dozen: a scan of the
  // overlay per entry costs less than the strings a lookup would build
  // (this ran once per spawn and was 42 allocations a job).
  for (char* const* e = base; e && *e; ++e) {
    const std::string_view key = key_of(*e);
    bool overridden = false;
    for (const auto& o : overlay)
      if (key_of(o) == key) {
        overridden = true;
        break;
      }
    if (!overridden) out.push_back(*e);
  }
  for (const auto& o : overlay) out.push_back(const_cast<char*>(o.c_str()));
  out.push_back(nullptr);
  return out;
}

std::vector<std::string> environment_entries(const std::map<std::string, std::string>& vars) {
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [k, v] : vars) {
    std::string e;
    e.reserve(k.size() + 1 + v.size());
    e.append(k).append(1, '=').append(v);
    out.push_back(std::move(e));
  }
  return out;
}

struct child::impl {
  impl(asio::any_io_executor ex, pid_t p, int fd, std::optional<std::uint64_t> known_start = std::nullopt)
      : pid(p), pidfd(ex, fd) {
    start = known_start ? *known_start : process::start_time(p).value_or(0);
  }
  pid_t pid;
  std::uint64_t start = 0;
  asio::posix::stream_descriptor pidfd;  // readable once the process has exited
};

child::child() = default;
child::child(child&&) noexcept = default;
child& child::operator=(child&&) noexcept = default;
child::~child() = default;

namespace {

#if !TJOB_SPAWN_WITH_POSIX_SPAWN
std::int64_t boot_clock_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_BOOTTIME, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// A child's start time as /proc/<pid>/stat says it (field 22: the kernel's
// boot-time clock at the clone, in clock ticks, truncated), known without
// reading /proc when the clone began and ended within one tick; else unknown.
// The read it saves was 7 % of the reactor's time per job (perf, the spawn
// bench). Both sides see the same time namespace's offset.
std::optional<std::uint64_t> start_time_between(std::int64_t before, std::int64_t after) {
  static const long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0 || before <= 0 || after < before) return std::nullopt;
  const std::int64_t tick = 1'000'000'000 / hz;
  if (before / tick != after / tick) return std::nullopt;
  return static_cast<std::uint64_t>(before / tick);
}

// What the child of spawn() needs, in memory it shares with the parent
// (CLONE_VM); `err` is how it says what failed before exec.
struct launch {
  const char* path;
  char* const* argv;
  char* const* envp;
  const char* cwd;          // null: stay
  const char* stdout_path;  // opened in the child when stdout_fd < 0
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;  // -1: with stdout
  bool new_session;
  int cgroup_fd;  // -1: none to join
  int err = 0;
  const char* step = "";
};

// The kernel's struct sigaction (rt_sigaction), not glibc's.
struct kernel_sigaction {
  void (*handler)(int);
  unsigned long flags;
  void (*restorer)();
  std::uint64_t mask;
};

// Raw system calls only: the child shares the parent's memory and runs on a
// stack of its own until exec, so it must touch nothing of the parent's (no
// libc state, no sanitizer interceptors, no errno that matters).
#define TJOB_NO_SANITIZE __attribute__((no_sanitize("address", "thread", "undefined")))

// Returns the result, or -errno.
TJOB_NO_SANITIZE long sys(long n, long a = 0, long b = 0, long c = 0, long d = 0) {
#if defined(__x86_64__)
  long r;
  register long r10 asm("r10") = d;
  asm volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
  return r;
#else
  long r = ::syscall(n, a, b, c, d);  // sets the parent's errno: harmless, it is suspended
  return r < 0 ? -errno : r;
#endif
}

[[noreturn]] TJOB_NO_SANITIZE void child_fail(launch* l, long r, const char* step) {
  l->err = static_cast<int>(-r);
  l->step = step;
  for (;;) sys(SYS_exit, 127);
}

// Moves `fd` above the three standard descriptors, so that placing one of
// them can never overwrite another that is still to be placed.
TJOB_NO_SANITIZE long above_stdio(long fd) {
  if (fd < 0 || fd > 2) return fd;
  long moved = sys(SYS_fcntl, fd, F_DUPFD, 3);
  sys(SYS_close, fd);
  return moved;
}

TJOB_NO_SANITIZE int child_main(void* arg) {
  auto* l = static_cast<launch*>(arg);
  // Into the step's cgroup first: whatever it forks after exec is inside.
  if (l->cgroup_fd >= 0) {
    long joined = sys(SYS_write, l->cgroup_fd, reinterpret_cast<long>("0"), 1);
    if (joined < 0) child_fail(l, joined, "join its cgroup");
  }
  // A descriptor table of its own holding only what the child needs: the
  // copy costs the same however many descriptors the engine has open
  // (posix_spawn copies them all and then closes them all, twice O(engine)).
  long keep = 3;
  if (l->stdin_fd >= keep) keep = l->stdin_fd + 1;
  if (l->stdout_fd >= keep) keep = l->stdout_fd + 1;
  if (l->stderr_fd >= keep) keep = l->stderr_fd + 1;
  long r = sys(SYS_close_range, keep, ~0U, CLOSE_RANGE_UNSHARE);
  if (r < 0) {
    r = sys(SYS_unshare, CLONE_FILES);
    if (r < 0) child_fail(l, r, "unshare");
    r = sys(SYS_close_range, keep, ~0U, 0);
    if (r < 0) child_fail(l, r, "close_range");
  }
  // Default dispositions for every signal (the parent's handlers must not run
  // here); the mask was all-blocked by the parent and is emptied before exec.
  kernel_sigaction dfl{SIG_DFL, 0, nullptr, 0};
  for (long sig = 1; sig < 65; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) sys(SYS_rt_sigaction, sig, reinterpret_cast<long>(&dfl), 0, 8);
  r = l->new_session ? sys(SYS_setsid) : sys(SYS_setpgid, 0, 0);
  if (r < 0) child_fail(l, r, l->new_session ? "setsid" : "setpgid");
  long in = l->stdin_fd >= 0 ? l->stdin_fd
                             : sys(SYS_openat, AT_FDCWD, reinterpret_cast<long>("/dev/null"), O_RDONLY);
  if (in < 0) child_fail(l, in, "open /dev/null");
  in = above_stdio(in);
  long out = l->stdout_fd >= 0 ? l->stdout_fd
                               : sys(SYS_openat, AT_FDCWD, reinterpret_cast<long>(l->stdout_path),
                                     O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (out < 0) child_fail(l, out, "open the log");
  out = above_stdio(out);
  long err = l->stderr_fd >= 0 ? above_stdio(l->stderr_fd) : out;
  if ((r = sys(SYS_dup2, in, 0)) < 0 || (r = sys(SYS_dup2, out, 1)) < 0 || (r = sys(SYS_dup2, err, 2)) < 0)
    child_fail(l, r, "dup2");
  sys(SYS_close_range, 3, ~0U, 0);
  if (l->cwd && (r = sys(SYS_chdir, reinterpret_cast<long>(l->cwd))) < 0) child_fail(l, r, "chdir");
  std::uint64_t none = 0;
  sys(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&none), 0, 8);
  r = sys(SYS_execve, reinterpret_cast<long>(l->path), reinterpret_cast<long>(l->argv),
          reinterpret_cast<long>(l->envp));
  child_fail(l, r, "execve");
}

// The child's stack until exec (the parent waits meanwhile: CLONE_VFORK), one
// per thread that spawns.
char* child_stack_top() {
  constexpr std::size_t size = 256 * 1024;
  thread_local char* base = nullptr;
  if (!base) {
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    base = static_cast<char*>(m);
  }
  return base + size;
}

#endif  // !TJOB_SPAWN_WITH_POSIX_SPAWN

#if TJOB_SPAWN_WITH_POSIX_SPAWN
// The same start through posix_spawn, for ThreadSanitizer builds only: its
// clone() interceptor cannot follow a CLONE_VM child ("CHECK failed:
// !thr->slot"). It copies the engine's descriptor table on every spawn.
pid_t spawn_portable(const spawn_spec& spec, std::vector<char*>& argv, std::vector<char*>& envp, int& pidfd,
                     error_code& ec, std::string* failed_step) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&attr);
  if (spec.stdin_fd >= 0)
    posix_spawn_file_actions_adddup2(&fa, spec.stdin_fd, STDIN_FILENO);
  else
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (spec.stdout_fd >= 0)
    posix_spawn_file_actions_adddup2(&fa, spec.stdout_fd, STDOUT_FILENO);
  else
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, spec.stdout_path.c_str(),
                                     O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (spec.stderr_fd >= 0)
    posix_spawn_file_actions_adddup2(&fa, spec.stderr_fd, STDERR_FILENO);
  else
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  if (!spec.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, spec.cwd.c_str());
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (spec.new_session) {
    flags |= POSIX_SPAWN_SETSID;
  } else {
    flags |= POSIX_SPAWN_SETPGROUP;
    posix_spawnattr_setpgroup(&attr, 0);
  }
  posix_spawnattr_setflags(&attr, flags);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, spec.executable.c_str(), &fa, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    // posix_spawn does not say which of its steps failed: tell the chdir and
    // the log's open from the exec as the clone path does, by looking.
    ec.assign(rc, boost::system::system_category());
    // No process, or no descriptor, for it: its clone failed (a transient
    // refusal that the engine waits out), not the exec.
    std::string step = rc == EAGAIN || rc == EMFILE || rc == ENFILE ? "clone" : "execve";
    auto parent = std::filesystem::path(spec.stdout_path).parent_path();
    if (!spec.cwd.empty() && ::access(spec.cwd.c_str(), X_OK) != 0)
      step = "chdir";
    else if (spec.stdout_fd < 0 && ::access(parent.empty() ? "." : parent.c_str(), W_OK | X_OK) != 0)
      step = "open the log";
    if (failed_step) *failed_step = step;
    return -1;
  }
  pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    ec.assign(errno, boost::system::system_category());
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return -1;
  }
  return pid;
}
#endif

// The failure for `step` failing with `ec` before `spec` was exec'd.
detail::failure spawn_failure(const spawn_spec& spec, const std::string& step, const error_code& ec) {
  int e = ec.value();
  auto code = process_errc::setup_failed;
  std::string what = step;
  if (step == "execve") {
    code = e == ENOENT || e == ENOTDIR ? process_errc::not_found
           : e == EACCES || e == EPERM ? process_errc::not_permitted
                                       : process_errc::exec_failed;
    what = "exec";
  } else if (step == "chdir") {
    code = process_errc::bad_cwd;
    what = "cannot enter " + spec.cwd;
  } else if (step == "open the log") {
    code = process_errc::log_unopenable;
    what = "cannot open its log " + spec.stdout_path;
  } else if (e == EAGAIN) {
    code = process_errc::no_processes;
  } else if (e == EMFILE || e == ENFILE) {
    code = process_errc::no_descriptors;
  } else if (e == ENOMEM) {
    code = process_errc::no_resources;
  }
  return {code, "cannot start " + spec.executable + ": " + what + ": " + ec.message(), ec.message()};
}

constexpr detail::code_info process_codes[] = {
    {"no such program", errc::executable_not_found},
    {"not permitted to execute", errc::executable_not_found},
    {"exec failed", errc::spawn_failed},
    {"cannot enter the working directory", errc::spawn_failed},
    {"cannot open the log", errc::spawn_failed},
    {"no resources for a child", errc::spawn_failed},
    {"setting up the child failed", errc::spawn_failed},
    {"cannot reap the child", errc::backend_error},
    {"no process for a child: the limit on processes is reached", errc::spawn_failed},
    {"no descriptor for a child: the limit on open files is reached", errc::spawn_failed},
};

}  // namespace

const boost::system::error_category& process_category() noexcept {
  static const detail::table_category instance("process", process_codes);
  return instance;
}

detail::outcome<child> child::spawn(asio::any_io_executor ex, const spawn_spec& spec) {
  error_code ec;
  std::string step = "clone";
  std::string* failed_step = &step;
  child c;
  if (spec.stdout_fd < 0 && spec.stdout_path.empty()) {
    ec.assign(EBADF, boost::system::system_category());
    return spawn_failure(spec, "open stdout", ec);
  }
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp = merge_environment(spec.inherited_env, spec.env);
#if TJOB_SPAWN_WITH_POSIX_SPAWN
  int pidfd = -1;
  pid_t pid = spawn_portable(spec, argv, envp, pidfd, ec, failed_step);
  if (ec) return spawn_failure(spec, step, ec);
  if (spec.cgroup_procs_fd >= 0) {  // just after exec: a window the clone path does not have
    auto text = std::to_string(pid);
    if (::write(spec.cgroup_procs_fd, text.data(), text.size()) < 0) {
      ec.assign(errno, boost::system::system_category());
      ::kill(pid, SIGKILL);
      siginfo_t info{};
      ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED);
      ::close(pidfd);
      return spawn_failure(spec, "join its cgroup", ec);
    }
  }
  c.impl_ = std::make_unique<impl>(ex, pid, pidfd);
  return c;
#else
  launch l{spec.executable.c_str(),
           argv.data(),
           envp.data(),
           spec.cwd.empty() ? nullptr : spec.cwd.c_str(),
           spec.stdout_path.c_str(),
           spec.stdin_fd,
           spec.stdout_fd,
           spec.stderr_fd,
           spec.new_session,
           spec.cgroup_procs_fd};
  char* stack = child_stack_top();
  if (!stack) {
    ec.assign(ENOMEM, boost::system::system_category());
    return spawn_failure(spec, "allocate a stack", ec);
  }
  // All signals blocked while the child shares our memory (it unblocks them
  // just before exec); the pidfd comes with the clone, so no pid can be reused
  // between the two.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  int pidfd = -1;
  const auto before = boot_clock_ns();
  pid_t pid =
      ::clone(child_main, stack, CLONE_VM | CLONE_VFORK | CLONE_FILES | CLONE_PIDFD | SIGCHLD, &l, &pidfd);
  int clone_errno = errno;
  const auto after = boot_clock_ns();
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    ec.assign(clone_errno, boost::system::system_category());
    return spawn_failure(spec, "clone", ec);
  }
  if (l.err != 0) {
    // It has exited (127) before exec: reap it and say why.
    siginfo_t info{};
    ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED);
    ::close(pidfd);
    ec.assign(l.err, boost::system::system_category());
    *failed_step = l.step;
    return spawn_failure(spec, step, ec);
  }
  c.impl_ = std::make_unique<impl>(ex, pid, pidfd, start_time_between(before, after));
  return c;
#endif
}

pid_t child::pid() const noexcept { return impl_ ? impl_->pid : -1; }
std::uint64_t child::start_time() const noexcept { return impl_ ? impl_->start : 0; }

asio::posix::stream_descriptor& child::exit_signal() noexcept { return impl_->pidfd; }

detail::outcome<std::optional<exit_status>> child::reap() {
  siginfo_t info{};
  int rc;
  do {
    rc = ::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(impl_->pidfd.native_handle()), &info,
                  WEXITED);
  } while (rc != 0 && errno == EINTR);
  // Readiness is a hint: asio makes the pidfd non-blocking, and a wake-up that
  // was not the exit (seen under load in tjob serve) leaves nothing to reap yet.
  if (rc != 0 && errno == EAGAIN) return std::optional<exit_status>();
  if (rc != 0) {
    error_code ec(errno, boost::system::system_category());
    return detail::failure(process_errc::reap_failed,
                           "cannot reap process " + std::to_string(impl_->pid) + ": " + ec.message(),
                           ec.message());
  }
  exit_status st;
  if (info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED) {
    st.signal = info.si_status;
    st.code = 128 + st.signal;
  } else {
    st.code = info.si_status;
  }
  return std::optional<exit_status>(st);
}

bool child::signal_group(int sig) noexcept {
  if (!impl_ || impl_->pid <= 0) return false;
  return ::killpg(impl_->pid, sig) == 0;
}

}  // namespace tjob::process
