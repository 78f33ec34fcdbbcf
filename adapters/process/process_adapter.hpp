// The process adapter: what the engine sees of child processes.
//
// Threading: a `child` belongs to the executor it was spawned on; call it only
// from there. `find_executable` and `merge_environment` are pure.
// Cancellation: `wait()` honours the coroutine's cancellation slot (the
// awaited operation completes with operation_aborted).
// Errors: spawn and reap return an outcome; its failure has a process_errc
//   code (what failed, and what it means to tjob), the OS's words
//   (strerror) as its diagnostics.
// Lifetime: destroying a `child` closes its descriptors but never signals or
// reaps the process; shutting an engine down is not cancelling its jobs.
#pragma once

#include "core/outcome.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace tjob::process {

/// Why a child could not be started or reaped.
enum class process_errc {
  not_found = 1,   ///< execve: no such program (executable_not_found)
  not_permitted,   ///< execve: not executable, or not allowed (executable_not_found)
  exec_failed,     ///< execve failed otherwise, e.g. not a program the kernel can run (spawn_failed)
  bad_cwd,         ///< the working directory cannot be entered (spawn_failed)
  log_unopenable,  ///< the log file cannot be opened for appending (spawn_failed)
  no_resources,    ///< no memory for a child (spawn_failed)
  setup_failed,    ///< another step before exec failed (spawn_failed)
  reap_failed,     ///< the exited child could not be waited for (backend_error)
  /// The OS would not make another process (EAGAIN: the user's limit, ulimit
  /// -u, or a pids cgroup's, or the system's): transient, as others end (spawn_failed)
  no_processes,
  /// This process may open no more files (EMFILE: ulimit -n; ENFILE: the
  /// system's): transient, as others' descriptors are closed (spawn_failed)
  no_descriptors,
};
const boost::system::error_category& process_category() noexcept;
inline boost::system::error_code make_error_code(process_errc e) noexcept {
  return {static_cast<int>(e), process_category()};
}

struct spawn_spec {
  std::string executable;         ///< absolute path (see find_executable)
  std::vector<std::string> argv;  ///< argv[0] as the user gave it
  std::vector<std::string> env;   ///< "KEY=VALUE", over `inherited_env`
  /// Entries the child also gets, each one whose key `env` does not set (as
  /// `environ`; null: none). Read at the spawn, not copied.
  char* const* inherited_env = nullptr;
  std::string cwd;           ///< working directory of the child
  bool new_session = false;  ///< setsid() instead of a new process group
  int stdin_fd = -1;         ///< -1: /dev/null
  /// Where stdout and stderr go: a file the child opens for appending
  /// (created 0600), so a job writes its output straight into its log; or,
  /// when `stdout_fd` is not -1, that descriptor (the caller keeps it).
  std::string stdout_path;
  int stdout_fd = -1;
  /// Where stderr goes when not with stdout: a descriptor the caller keeps,
  /// another than `stdout_fd`; -1: with stdout.
  int stderr_fd = -1;
  /// A cgroup's `cgroup.procs`, open for writing (the caller keeps it): the
  /// child joins that cgroup before exec, so nothing it starts is outside.
  /// (ThreadSanitizer builds spawn with posix_spawn and move it just after.)
  int cgroup_procs_fd = -1;
};

/// How a process ended: `code` is the exit status, or 128 + the signal number
/// when a signal killed it (the shell's and Kubernetes' convention).
struct exit_status {
  int code = 0;
  int signal = 0;
};

/// "exit code 3", "killed by signal 9 (SIGKILL)".
std::string describe(const exit_status& s);

/// Finds the program the child will execute, as execvp would in the child: a
/// name with '/' is taken relative to `cwd`; otherwise PATH is searched.
/// nullopt when no executable regular file is found.
std::optional<std::string> find_executable(std::string_view name, std::string_view path_env,
                                           std::string_view cwd);

/// The environment `base` (as `environ`; may be null) with `overlay`'s
/// "KEY=VALUE" entries laid on top, null-terminated: pointers into both,
/// nothing copied.
std::vector<char*> merge_environment(char* const* base, const std::vector<std::string>& overlay);

/// "KEY=VALUE" for each variable of `vars`.
std::vector<std::string> environment_entries(const std::map<std::string, std::string>& vars);

/// A running (or exited, not yet waited for) child process in its own process
/// group. Holds one descriptor: its pidfd.
class child {
 public:
  child();
  child(child&&) noexcept;
  child& operator=(child&&) noexcept;
  ~child();

  /// Starts `spec` (clone(CLONE_VM|CLONE_VFORK), so nothing of the engine's
  /// memory is copied, with a descriptor table of its own that holds only its
  /// stdin/stdout/stderr: the cost does not grow with the engine's open
  /// descriptors). A failure before exec (no such file, a bad cwd, the log
  /// cannot be opened) says which, and why in the OS's words.
  static detail::outcome<child> spawn(boost::asio::any_io_executor ex, const spawn_spec& spec);

  pid_t pid() const noexcept;
  /// Start time in clock ticks since boot (see proc_info.hpp); 0 if unknown.
  std::uint64_t start_time() const noexcept;

  /// The pidfd, readable once the process has exited: await that, then
  /// reap(). (Awaited directly by the job's coroutine, so a running job
  /// costs no frame of its own here.)
  boost::asio::posix::stream_descriptor& exit_signal() noexcept;
  /// Reaps the exited process (reap_failed when it cannot). nullopt: it has
  /// not exited, and the readiness was not its exit (the pidfd is
  /// non-blocking: waitid says EAGAIN); await exit_signal() again.
  detail::outcome<std::optional<exit_status>> reap();

  /// Sends `sig` to the child's whole process group; false if none is left.
  bool signal_group(int sig) noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tjob::process

template <>
struct boost::system::is_error_code_enum<tjob::process::process_errc> : std::true_type {};
