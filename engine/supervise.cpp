// See supervise.hpp.
#include "engine/supervise.hpp"

#include <boost/json.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

extern char** environ;

namespace tjob::detail {

namespace json = boost::json;

namespace {

bool executable(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

void write_all(int fd, std::string_view s) {
  while (!s.empty()) {
    ssize_t n = ::write(fd, s.data(), s.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

struct fds {
  int v[2] = {-1, -1};
  ~fds() {
    for (int fd : v)
      if (fd >= 0) ::close(fd);
  }
  int take(int i) { return std::exchange(v[i], -1); }
};

}  // namespace

std::string supervisor_program(const engine_config& cfg, const std::string& what) {
  if (!cfg.supervisor.empty()) return cfg.supervisor.string();
  if (const char* e = std::getenv("TJOB_SUPERVISOR"); e && *e) return e;
#ifdef TJOB_BUILT_CLI
  if (executable(TJOB_BUILT_CLI)) return TJOB_BUILT_CLI;
#endif
#ifdef TJOB_INSTALLED_CLI
  if (executable(TJOB_INSTALLED_CLI)) return TJOB_INSTALLED_CLI;
#endif
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!rest.empty()) {
    auto colon = rest.find(':');
    auto dir = rest.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    if (dir.empty()) continue;
    auto candidate = std::string(dir) + "/tjob";
    if (executable(candidate)) return candidate;
  }
  throw error(errc::executable_not_found,
              what + ": no tjob program to supervise the job (it was not found where the library "
              "was built or installed, nor on PATH); set engine_config::supervisor or $TJOB_SUPERVISOR "
              "to the tjob binary");
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

void respond(const json::object& o) { write_all(STDOUT_FILENO, json::serialize(o) + "\n"); }

void respond_error(const error& e) {
  respond({{"error", e.what()}, {"code", e.code().value()}, {"diagnostics", e.diagnostics()}});
}

json::object ask_supervisor(const std::string& program, const char* mode, const std::string& body,
                            const std::string& what) {
  // The request goes through a socket, not a pipe: a supervisor that dies
  // before reading it must not kill this program with SIGPIPE (MSG_NOSIGNAL).
  fds in, out;
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in.v) != 0 || ::pipe2(out.v, O_CLOEXEC) != 0)
    throw error(errc::spawn_failed, what + ": cannot create a pipe: " + std::strerror(errno));
  // In a session of its own: the shell's hang-up and Ctrl-C do not reach it.
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.v[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out.v[1], STDOUT_FILENO);
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::string arg0 = "tjob", arg1 = mode;
  char* argv[] = {arg0.data(), arg1.data(), nullptr};
  pid_t pid = 0;
  int err = ::posix_spawn(&pid, program.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in.take(0));
  ::close(out.take(1));
  if (err != 0)
    throw error(errc::spawn_failed, what + ": cannot start the supervisor " + program + ": " + std::strerror(err) +
                                        "; set engine_config::supervisor to the tjob binary");
  for (std::string_view rest = body; !rest.empty();) {
    ssize_t n = ::send(in.v[1], rest.data(), rest.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // it went away: its answer (or its absence) says why
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
  ::close(in.take(1));
  std::string answer = read_all(out.v[0]);
  // The process started here forked the supervisor and ended at once (see
  // leave_asker): reaped now, nothing of it is left as a zombie.
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  json::object o;
  try {
    auto v = json::parse(answer);
    o = v.as_object();
  } catch (const std::exception&) {
    throw error(errc::spawn_failed,
                what + ": the supervisor " + program + " (pid " + std::to_string(pid) + ") ended before it answered",
                answer);
  }
  if (!o.contains("error")) return o;
  auto text = [&](const char* k) {
    auto* v = o.if_contains(k);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  auto* c = o.if_contains("code");
  auto code = c && c->is_int64() ? static_cast<int>(c->as_int64()) : static_cast<int>(errc::backend_error);
  throw error(boost::system::error_code(code, category()), text("error"), text("diagnostics"));
}

bool leave_asker() {
  if (pid_t p = ::fork(); p < 0) {
    respond_error(error(errc::spawn_failed, std::string("supervisor: cannot fork: ") + std::strerror(errno)));
    return false;
  } else if (p > 0) {
    ::_exit(0);
  }
  std::signal(SIGPIPE, SIG_IGN);  // an asker gone before the answer must not take the owner with it
  return true;
}

void on_stop_signals(std::function<void()> stop) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, stop = std::move(stop)] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) == 0) stop();
    }
  }).detach();
}

void redirect_output(const std::filesystem::path& log) {
  int logfd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  ::dup2(null, STDIN_FILENO);
  ::dup2(logfd >= 0 ? logfd : null, STDOUT_FILENO);
  ::dup2(logfd >= 0 ? logfd : null, STDERR_FILENO);
}

}  // namespace tjob::detail
