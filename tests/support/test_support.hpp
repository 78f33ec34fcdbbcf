// What the test suites share: a private $TJOB_HOME per test, child processes
// with captured output and hard deadlines, and the paths of the built programs.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <tjob/engine.hpp>
#include <tjob/error.hpp>
#include <tjob/types.hpp>

#include <sys/types.h>

namespace tjob::test {

/// The built `tjob` and `tjob-test-helper`.
std::string tjob_bin();
std::string helper_bin();
/// True in an ASan or TSan build, where memory figures are the sanitizer's
/// (its quarantine and shadow), not the code's: memory bounds are not checked there.
constexpr bool under_sanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

/// The built tjob-stress (tests/support/stress.cpp).
std::string stress_bin();
/// tests/support/submit.cpp: submits jobs to a shared queue from a process of its own.
std::string submit_bin();
/// The source tree (for the README's examples).
std::string source_dir();

/// A fresh directory under /tmp, removed when the value goes.
class temp_dir {
 public:
  temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir();
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

/// A private $TJOB_HOME for one test: `home()` under a fresh temp dir, as an
/// engine_config for in-process engines and as the environment of `tjob`.
struct home_fixture {
  temp_dir dir;
  std::string home() const { return (dir.path() / "home").string(); }
  std::map<std::string, std::string> env() const { return {{"TJOB_HOME", home()}}; }
  engine_config config(std::chrono::milliseconds grace = std::chrono::seconds(10)) const {
    engine_config c;
    c.home = home();
    c.grace_period = grace;
    return c;
  }
};

struct result {
  int exit_code = -1;  ///< 128+signal when killed
  std::string out, err;
  bool timed_out = false;
};

/// Runs argv to completion (killing it at the deadline), with `env` laid over
/// this process's environment.
result run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
           std::chrono::milliseconds deadline = std::chrono::seconds(60), const std::string& input = {});

/// A child left running; its stdout and stderr are read on demand.
class background {
 public:
  background(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {});
  background(const background&) = delete;
  background& operator=(const background&) = delete;
  ~background();  ///< kills it if still running

  pid_t pid() const { return pid_; }
  /// Reads stderr until a line containing `needle` arrives (true) or the deadline.
  bool wait_for_stderr(const std::string& needle,
                       std::chrono::milliseconds deadline = std::chrono::seconds(30));
  /// Reads stdout until `needle` appears in it (true) or the deadline.
  bool wait_for_stdout(const std::string& needle,
                       std::chrono::milliseconds deadline = std::chrono::seconds(30));
  void signal(int sig);
  /// Waits for the exit (reading the rest of the output); the exit code.
  int wait(std::chrono::milliseconds deadline = std::chrono::seconds(60));
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  bool pump(std::chrono::steady_clock::time_point until, const std::string* needle, bool in_err);
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
  std::optional<int> status_;
};

/// True when `pid` is gone (no such process, or a zombie nobody reaped yet).
bool process_gone(pid_t pid);

/// Waits until `holds()` is true, checking it each time a file in `dir` is
/// written (inotify), never by sleeping; false when `deadline` passes first.
bool wait_for_file_change(const std::filesystem::path& dir, const std::function<bool()>& holds,
                          std::chrono::milliseconds deadline);

/// A FIFO for a job to wait on (tjob-test-helper's read-fifo): release()
/// lets the job go on. It proves a reader live: the job writes what follows
/// only after the test has seen what came before.
class gate {
 public:
  gate();
  ~gate();
  const std::string& path() const { return path_; }
  /// Opens the FIFO for writing (waiting for the job to open it for reading) and closes it.
  void release();

 private:
  temp_dir dir_;
  std::string path_;
};

/// Waits until `pid` is gone, without sleeping: a pidfd where one can be had.
bool wait_gone(pid_t pid, std::chrono::milliseconds deadline);

/// A request for a job that runs tjob-test-helper with `args`.
train_request helper_job(std::vector<std::string> args, std::string name = {},
                         std::map<std::string, std::string> env = {});

/// The tjob::error code `f` throws (nullopt when it throws none).
std::optional<errc> code_of(const std::function<void()>& f);
/// The message of the tjob::error `f` throws (empty when it throws none).
std::string message_of(const std::function<void()>& f);

/// The private Slurm cluster of the slurm_peer fixture (tests/support/slurm_peer):
/// its slurm.conf under $TJOB_TEST_SLURM; skip()s and returns nullopt when
/// it is not running.
std::optional<std::string> slurm_conf();

/// Skips the running test case because `what` is missing here: it reports as
/// skipped (ctest prints "Skipped": the case's process exits 77, the suites'
/// SKIP_RETURN_CODE), never as passed. On a CI machine (CI set), which
/// installs every prerequisite, a skip fails the case instead. Returns false,
/// for `if (!have) return tjob::test::skip(...);`-style use.
bool skip(const std::string& what);
/// Skips a case that does not apply to the way the suite runs (a case of the
/// local store run through a server): reported as skipped, with `why`, also
/// in CI. Never for a missing prerequisite (that is skip()). Returns false.
bool not_applicable(const std::string& why);
/// True when the suite runs every tjob as a client of a tjob serve
/// (--tjob-via-server, or $TJOB_TEST_VIA_SERVER=1).
bool via_server();
/// The test cases this process skipped, and how many it ran (tests/support/doctest_main.cpp).
std::vector<std::string> cases_skipped();
std::size_t cases_run();

/// True when /usr/bin/python3 (Debian's) imports `module`. Where it does not,
/// a test that needs it is skipped on a developer machine but fails in CI,
/// which installs it.
bool system_python_has(const std::string& module);

/// A PEP 503 index of tiny wheels (tests/support/make_index.py: tinyjob
/// depending on tinydep), served by Python's http.server on 127.0.0.1 at a
/// port the kernel picks; `url` is its /simple/ root.
struct package_index {
  temp_dir dir;
  std::unique_ptr<background> server;
  std::string url;
  package_index();
  /// Publishes tinyjob `version` (beside the versions already there).
  void publish_tinyjob(const std::string& version);

 private:
  std::vector<std::string> versions_;
};

/// The Kubernetes API stand-in (tests/support/kube_standin.py) on
/// 127.0.0.1, with TLS from a CA it makes and a bearer token; its kubeconfig
/// is `kubeconfig()`. Stopped (its pods killed) when the value goes.
struct kube_standin {
  temp_dir dir;
  std::unique_ptr<background> server;
  std::string url, token, ca;
  explicit kube_standin(const std::vector<std::string>& extra = {});
  ~kube_standin();
  std::string kubeconfig() const { return (dir.path() / "kubeconfig").string(); }
  /// A fault or a query (drop-watches, compact, fail, delay, inject-line,
  /// stats, reset-stats): the server's JSON answer.
  std::string ctl(const std::string& action, const std::string& json = "{}") const;
  /// An engine_config part that talks to it.
  /// The kubernetes backend's config (its JSON options) for this stand-in.
  boost::json::object config() const;
};

std::string read_file(const std::filesystem::path& p);

/// A function `chatter` for torch ranks: after a barrier, each prints 300
/// lines to stdout ("rank<R>-line<NNNN>-" and 150 x) and 300 to stderr
/// ("rank<R>-err<NNNN> " and 40 y), at once with the others.
extern const char* const rank_chatter_source;
/// A function `allreduce` for torch ranks: one gloo process group, an
/// all_reduce of rank+1, and a line "node=<GROUP_RANK> rank=<R>
/// world=<WORLD_SIZE> sum=<S>" from each rank.
extern const char* const allreduce_source;
/// What `log` holds of two ranks' chatter: the lines that came out whole
/// (their first 14 bytes), and the torn ones (a count, and the first).
struct rank_lines {
  std::set<std::string> whole;
  int torn = 0;
  std::string example;
};
rank_lines read_rank_chatter(const std::string& log);

/// Number of open descriptors of this process.
std::size_t open_fds();

}  // namespace tjob::test
