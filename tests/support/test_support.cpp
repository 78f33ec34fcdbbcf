#include "tests/support/test_support.hpp"

#include <boost/json.hpp>

#include <doctest/doctest.h>

#include <set>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace tjob::test {

using steady = std::chrono::steady_clock;

std::string tjob_bin() { return TJOB_TEST_TJOB_BIN; }
std::string helper_bin() { return TJOB_TEST_HELPER_BIN; }
std::string stress_bin() { return TJOB_TEST_STRESS_BIN; }
std::string submit_bin() { return TJOB_TEST_SUBMIT_BIN; }
std::string source_dir() { return TJOB_TEST_SOURCE_DIR; }

temp_dir::temp_dir() {
  char tmpl[] = "/tmp/tjob-test-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

std::vector<std::string> make_env(const std::map<std::string, std::string>& overlay) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    if (!overlay.count(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [k, v] : overlay) env.push_back(k + "=" + v);
  return env;
}

pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, int& out_fd,
            int& err_fd, int& in_fd) {
  int o[2], e[2], in[2];
  if (::pipe2(o, O_CLOEXEC) || ::pipe2(e, O_CLOEXEC) || ::pipe2(in, O_CLOEXEC))
    throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, o[1], 1);
  posix_spawn_file_actions_adddup2(&fa, e[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  auto envs = make_env(env);
  std::vector<char*> ev;
  for (auto& s : envs) ev.push_back(s.data());
  ev.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, a[0], &fa, &attr, a.data(), ev.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(o[1]);
  ::close(e[1]);
  ::close(in[0]);
  if (rc != 0) throw std::runtime_error("spawn " + argv[0] + ": " + std::strerror(rc));
  out_fd = o[0];
  err_fd = e[0];
  in_fd = in[1];
  return pid;
}

int decode(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

// Reads what is available from fds into strings until both close or the deadline.
bool drain(int& out_fd, int& err_fd, std::string& out, std::string& err, steady::time_point until,
           const std::string* needle = nullptr, bool needle_in_err = false) {
  int* fdp[2] = {&out_fd, &err_fd};
  auto fds = [&](int i) -> int& { return *fdp[i]; };
  std::string* bufs[2] = {&out, &err};
  char buf[65536];
  for (;;) {
    if (needle && (needle_in_err ? err : out).find(*needle) != std::string::npos) return true;
    pollfd p[2];
    int n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i)
      if (fds(i) >= 0) {
        p[n] = {fds(i), POLLIN, 0};
        which[n++] = i;
      }
    if (n == 0) return needle == nullptr;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - steady::now()).count();
    if (left <= 0) return false;
    int r = ::poll(p, static_cast<nfds_t>(n), static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    for (int k = 0; k < n; ++k) {
      if (!(p[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = ::read(p[k].fd, buf, sizeof buf);
      if (got > 0)
        bufs[which[k]]->append(buf, static_cast<size_t>(got));
      else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(p[k].fd);
        fds(which[k]) = -1;
      }
    }
    if (!needle && fds(0) < 0 && fds(1) < 0) return true;
    if (needle && fds(needle_in_err ? 1 : 0) < 0 &&
        (needle_in_err ? err : out).find(*needle) == std::string::npos)
      return false;
  }
}

}  // namespace

result run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
           std::chrono::milliseconds deadline, const std::string& input) {
  int out_fd, err_fd, in_fd;
  pid_t pid = spawn(argv, env, out_fd, err_fd, in_fd);
  if (!input.empty() && ::write(in_fd, input.data(), input.size()) < 0) {
    // the child did not read its input; its output will say why
  }
  ::close(in_fd);
  result r;
  auto until = steady::now() + deadline;
  if (!drain(out_fd, err_fd, r.out, r.err, until)) {
    r.timed_out = true;
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.exit_code = decode(status);
  return r;
}

background::background(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  int in_fd;
  pid_ = spawn(argv, env, out_fd_, err_fd_, in_fd);
  ::close(in_fd);
}

background::~background() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    int st;
    ::waitpid(pid_, &st, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

bool background::pump(steady::time_point until, const std::string* needle, bool in_err) {
  return drain(out_fd_, err_fd_, out_, err_, until, needle, in_err);
}

bool background::wait_for_stderr(const std::string& needle, std::chrono::milliseconds deadline) {
  return pump(steady::now() + deadline, &needle, true);
}

bool background::wait_for_stdout(const std::string& needle, std::chrono::milliseconds deadline) {
  return pump(steady::now() + deadline, &needle, false);
}

void background::signal(int sig) { ::kill(pid_, sig); }

int background::wait(std::chrono::milliseconds deadline) {
  if (status_) return *status_;
  if (!drain(out_fd_, err_fd_, out_, err_, steady::now() + deadline)) {
    ::kill(pid_, SIGKILL);
    if (out_fd_ >= 0) ::close(out_fd_);
    if (err_fd_ >= 0) ::close(err_fd_);
    out_fd_ = err_fd_ = -1;
  }
  int st = 0;
  ::waitpid(pid_, &st, 0);
  status_ = decode(st);
  return *status_;
}

bool process_gone(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return true;
  std::string line;
  std::getline(f, line);
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

bool wait_gone(pid_t pid, std::chrono::milliseconds deadline) {
  auto until = steady::now() + deadline;
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return process_gone(pid);
  while (!process_gone(pid)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - steady::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left));  // readable when the process exits
  }
  ::close(fd);
  return process_gone(pid);
}

train_request helper_job(std::vector<std::string> args, std::string name,
                         std::map<std::string, std::string> env) {
  train_request r;
  r.name = std::move(name);
  command_trainer t;
  t.command = {helper_bin()};
  for (auto& a : args) t.command.push_back(std::move(a));
  t.env = std::move(env);
  r.job_trainer = std::move(t);
  return r;
}

std::optional<errc> code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const error& e) {
    return static_cast<errc>(e.code().value());
  }
  return std::nullopt;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return {};
}

namespace {

// The cases of this process: started, and those that skipped.
struct case_counter : doctest::IReporter {
  static inline std::size_t run = 0;
  static inline std::set<std::string> skipped;
  static inline std::string current;
  explicit case_counter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& d) override {
    ++run;
    current = d.m_name;
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("tjob_case_counter", 1, case_counter);

bool skip(const std::string& what) {
  REQUIRE_MESSAGE(std::getenv("CI") == nullptr,
                  what << " on a CI machine, which installs everything the tests need (scripts/setup)");
  MESSAGE("skipped: " << what << " (scripts/setup installs it)");
  case_counter::skipped.insert(case_counter::current);
  return false;
}

std::optional<std::string> slurm_conf() {
  const char* d = std::getenv("TJOB_TEST_SLURM");
  std::string conf = std::string(d ? d : "/nonexistent") + "/slurm.conf";
  if (::access(conf.c_str(), R_OK) == 0) return conf;
  skip("a Slurm cluster (the slurm_peer fixture; Debian's slurmctld, slurmd and munge) at " + conf);
  return std::nullopt;
}

bool not_applicable(const std::string& why) {
  MESSAGE("skipped: " << why);
  case_counter::skipped.insert(case_counter::current);
  return false;
}

bool via_server() {
  const char* v = std::getenv("TJOB_TEST_VIA_SERVER");
  return v && std::string_view(v) == "1";
}

std::vector<std::string> cases_skipped() {
  return {case_counter::skipped.begin(), case_counter::skipped.end()};
}
std::size_t cases_run() { return case_counter::run; }

gate::gate() : path_((dir_.path() / "gate").string()) { REQUIRE(::mkfifo(path_.c_str(), 0600) == 0); }

gate::~gate() = default;

namespace {

// Checks `holds()` each time `what` (a file, or a directory's files) sees one
// of `events` (inotify), until it is true or `deadline` passes; never sleeps.
bool on_inotify(const std::filesystem::path& what, std::uint32_t events, const std::function<bool()>& holds,
                std::chrono::milliseconds deadline) {
  int fd = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  REQUIRE(fd >= 0);
  REQUIRE(::inotify_add_watch(fd, what.c_str(), events) >= 0);
  auto until = std::chrono::steady_clock::now() + deadline;
  bool ok = false;
  for (;;) {
    if (holds()) {
      ok = true;
      break;
    }
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(left.count()));
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace

void gate::release() {
  // The job's open() of the FIFO for reading blocks until a writer comes, and
  // no inotify event says that it has begun to wait (IN_OPEN is sent once an
  // open is done, and two of them in a row are merged into one). A blocking
  // open for writing returns once the job is there: it is made on a thread,
  // and past the deadline the test opens the FIFO for reading itself to let
  // that thread go, and fails.
  auto opened =
      std::async(std::launch::async, [p = path_] { return ::open(p.c_str(), O_WRONLY | O_CLOEXEC); });
  bool job_came = opened.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  int unblock = job_came ? -1 : ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  int fd = opened.get();
  if (unblock >= 0) ::close(unblock);
  if (fd >= 0) ::close(fd);  // the job reads the end of file
  REQUIRE_MESSAGE(job_came, "the job never opened " << path_ << " (did it die?)");
  REQUIRE(fd >= 0);
}

bool wait_for_file_change(const std::filesystem::path& dir, const std::function<bool()>& holds,
                          std::chrono::milliseconds deadline) {
  return on_inotify(dir, IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO, holds, deadline);
}

bool system_python_has(const std::string& module) {
  if (run({"/usr/bin/python3", "-c", "import " + module}).exit_code == 0) return true;
  return skip("/usr/bin/python3 cannot import " + module);
}

package_index::package_index() {
  auto made = run({"python3", source_dir() + "/tests/support/make_index.py", dir.str()});
  REQUIRE(made.exit_code == 0);
  server = std::make_unique<background>(std::vector<std::string>{
      "python3", "-u", "-m", "http.server", "--bind", "127.0.0.1", "--directory", dir.str(), "0"});
  REQUIRE(server->wait_for_stdout(") ..."));
  auto& out = server->out();
  auto at = out.find("port ");
  REQUIRE(at != std::string::npos);
  url = "http://127.0.0.1:" + std::to_string(std::atoi(out.c_str() + at + 5)) + "/simple/";
}

void package_index::publish_tinyjob(const std::string& version) {
  versions_.push_back(version);
  std::vector<std::string> argv{"python3", source_dir() + "/tests/support/make_index.py", dir.str()};
  argv.insert(argv.end(), versions_.begin(), versions_.end());
  REQUIRE(run(argv).exit_code == 0);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::size_t open_fds() {
  std::size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (auto* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n - 1;  // the directory stream itself
}

}  // namespace tjob::test

namespace tjob::test {

kube_standin::kube_standin(const std::vector<std::string>& extra) {
  std::vector<std::string> argv{"python3", source_dir() + "/tests/support/kube_standin.py", "serve",
                                dir.str(), "--die-with-parent"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  server = std::make_unique<background>(argv);
  if (!server->wait_for_stdout("standin: serving on", std::chrono::seconds(60)))
    throw std::runtime_error("the Kubernetes stand-in did not start: " + server->err());
  auto info = boost::json::parse(read_file(dir.path() / "ready.json")).as_object();
  url = std::string(info.at("url").as_string());
  token = std::string(info.at("token").as_string());
  ca = std::string(info.at("ca").as_string());
}

kube_standin::~kube_standin() {
  run({"python3", source_dir() + "/tests/support/kube_standin.py", "stop", dir.str()}, {},
      std::chrono::seconds(30));
  if (server) server->wait(std::chrono::seconds(15));
}

std::string kube_standin::ctl(const std::string& action, const std::string& json) const {
  auto r = run({"python3", source_dir() + "/tests/support/kube_standin.py", "ctl", dir.str(), action, json},
               {}, std::chrono::seconds(60));
  if (r.exit_code != 0) throw std::runtime_error("stand-in ctl " + action + " failed: " + r.err);
  return r.out;
}

boost::json::object kube_standin::config() const {
  return {{"config_file", kubeconfig()}, {"in_cluster_dir", ""}};
}

const char* const allreduce_source =
    "def allreduce():\n"
    "    import os, torch, torch.distributed as dist\n"
    "    dist.init_process_group('gloo')\n"
    "    x = torch.tensor([float(dist.get_rank() + 1)])\n"
    "    dist.all_reduce(x)\n"
    "    print(f\"node={os.environ['GROUP_RANK']} rank={dist.get_rank()} world={os.environ['WORLD_SIZE']} "
    "sum={x.item()}\", flush=True)\n"
    "    dist.destroy_process_group()\n";

const char* const rank_chatter_source =
    "def chatter():\n"
    "    import sys, torch.distributed as dist\n"
    "    dist.init_process_group('gloo')\n"
    "    r = dist.get_rank()\n"
    "    dist.barrier()\n"
    "    for i in range(300):\n"
    "        print(f'rank{r}-line{i:04d}-' + 'x' * 150)\n"
    "        print(f'rank{r}-err{i:04d}', 'y' * 40, file=sys.stderr)\n"
    "    dist.destroy_process_group()\n";

rank_lines read_rank_chatter(const std::string& log) {
  rank_lines out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    const bool out_line = line.size() == 4 + 1 + 9 + 150 + 1 && line.rfind("rank", 0) == 0 &&
                          line.compare(5, 5, "-line") == 0 &&
                          line.find_first_not_of('x', 15) == std::string::npos;
    const bool err_line = line.size() == 13 + 1 + 40 && line.rfind("rank", 0) == 0 &&
                          line.compare(5, 4, "-err") == 0 &&
                          line.find_first_not_of('y', 14) == std::string::npos;
    if (out_line || err_line) {
      out.whole.insert(line.substr(0, 14));
    } else if (line.find("rank0-") != std::string::npos || line.find("rank1-") != std::string::npos ||
               line.empty()) {
      if (out.torn++ == 0) out.example = line.substr(0, 200);
    }
  }
  return out;
}

}  // namespace tjob::test
