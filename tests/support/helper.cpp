// tjob-test-helper: a child process with the edge cases the engine must handle.
//
//   lines N                print N lines "line <i>\n" (i from 1)
//   prefixed N PREFIX      print N lines "PREFIX<i>\n"
//   exit CODE              exit with CODE
//   print TEXT             write TEXT as given (no newline added)
//   allbytes               write the bytes 0..255 once each
//   env NAME               print the value of NAME ("<unset>" if unset)
//   pwd                    print the working directory
//   ppid                   print the parent's pid (the job's owner)
//   flood BYTES            write BYTES bytes as 100-byte lines, exit 0
//   longline BYTES         write one line of BYTES 'x' bytes (then '\n')
//   close-stdout MS        close stdout and stderr, keep running MS ms, exit 7
//   ignore-term PIDFILE    ignore SIGTERM, leave a grandchild (also ignoring it)
//                          behind, write "<child> <grandchild>" to PIDFILE, print
//                          "ready", then wait forever
//   escape PIDFILE MODE    leave two processes behind outside this process
//                          group, both waiting forever: a child in a session
//                          of its own (setsid) and a double-forked daemon (its
//                          parent exits at once); MODE "bare": both exec
//                          /bin/sleep with no environment, else "env". Writes
//                          "<setsid child> <daemon>" to PIDFILE, then goes on
//   sleep MS               sleep MS milliseconds, exit 0
//   await-signal NUM MS    wait for signal NUM at most MS milliseconds: print
//                          "signal NUM after <ms> ms" and go on when it comes,
//                          else print "no signal" and exit 4
//   block-signal NUM       block signal NUM from now on (await-signal takes it;
//                          without one it stays pending and does nothing)
//   read-fifo PATH         wait until the test writes to the FIFO at PATH (and closes it)
//   stderr TEXT            write TEXT to stderr
//   enter FILE             count this process in: under a lock of FILE, its
//                          "<now> <most>" counter goes up by one (<most>: the
//                          highest <now> ever seen)
//   leave FILE             count this process out (<now> down by one)
//   wait-most FILE N MS    wait until FILE's <most> is N or more (looking every
//                          5 ms), at most MS milliseconds; then go on either way
//   append FILE TEXT       append TEXT and a newline to FILE (one write)
//   fail-until FILE N CODE this is attempt K = 1 + the lines of FILE: append
//                          "K <realtime ns>" to it, print "attempt K"; exit
//                          CODE while K < N, else go on
// Commands run one after another: `lines 3 exit 2`.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void out(const std::string& s) { write_all(1, s.data(), s.size()); }

// The "<now> <most>" counter in `path`, changed by `delta` under flock.
void count(const std::string& path, int delta) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 || ::flock(fd, LOCK_EX) != 0) std::exit(90);
  char buf[64] = {};
  ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  long now = 0, most = 0;
  if (n > 0) std::sscanf(buf, "%ld %ld", &now, &most);
  now += delta;
  if (now > most) most = now;
  std::string text = std::to_string(now) + " " + std::to_string(most) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    std::exit(91);
  ::close(fd);  // releases the lock
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string cmd = argv[i];
    auto arg = [&](int k) -> std::string { return i + k < argc ? argv[i + k] : ""; };
    if (cmd == "lines" || cmd == "prefixed") {
      long n = std::atol(arg(1).c_str());
      std::string prefix = cmd == "lines" ? "line " : arg(2);
      for (long k = 1; k <= n; ++k) out(prefix + std::to_string(k) + "\n");
      i += cmd == "lines" ? 1 : 2;
    } else if (cmd == "enter" || cmd == "leave") {
      count(arg(1), cmd == "enter" ? 1 : -1);
      i += 1;
    } else if (cmd == "append") {
      int fd = ::open(arg(1).c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
      std::string line = arg(2) + "\n";
      if (fd < 0) return 92;
      write_all(fd, line.data(), line.size());
      ::close(fd);
      i += 2;
    } else if (cmd == "fail-until") {
      int fd = ::open(arg(1).c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
      if (fd < 0 || ::flock(fd, LOCK_EX) != 0) return 93;
      char buf[4096];
      long lines = 0;
      ssize_t n;
      off_t at = 0;
      while ((n = ::pread(fd, buf, sizeof buf, at)) > 0) {
        for (ssize_t k = 0; k < n; ++k) lines += buf[k] == '\n';
        at += n;
      }
      long attempt = lines + 1;
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
      std::string line = std::to_string(attempt) + " " + std::to_string(ns) + "\n";
      write_all(fd, line.data(), line.size());
      ::close(fd);
      out("attempt " + std::to_string(attempt) + "\n");
      if (attempt < std::atol(arg(2).c_str())) return std::atoi(arg(3).c_str());
      i += 3;
    } else if (cmd == "exit") {
      return std::atoi(arg(1).c_str());
    } else if (cmd == "allbytes") {
      std::string b;
      for (int k = 0; k < 256; ++k) b.push_back(static_cast<char>(k));
      out(b);
    } else if (cmd == "print") {
      out(arg(1));
      i += 1;
    } else if (cmd == "stderr") {
      std::string s = arg(1);
      write_all(2, s.data(), s.size());
      i += 1;
    } else if (cmd == "env") {
      const char* v = std::getenv(arg(1).c_str());
      out(std::string(v ? v : "<unset>") + "\n");
      i += 1;
    } else if (cmd == "ppid") {
      out(std::to_string(::getppid()) + "\n");
    } else if (cmd == "pwd") {
      char buf[4096];
      out(std::string(getcwd(buf, sizeof buf) ? buf : "?") + "\n");
    } else if (cmd == "flood") {
      long long bytes = std::atoll(arg(1).c_str());
      std::string line(99, 'x');
      line.push_back('\n');
      std::string block;
      for (int k = 0; k < 640; ++k) block += line;  // 64000 bytes
      while (bytes > 0) {
        size_t n = static_cast<size_t>(std::min<long long>(bytes, static_cast<long long>(block.size())));
        write_all(1, block.data(), n);
        bytes -= static_cast<long long>(n);
      }
      i += 1;
    } else if (cmd == "longline") {
      long long bytes = std::atoll(arg(1).c_str());
      std::string block(1 << 20, 'x');
      while (bytes > 0) {
        size_t n = static_cast<size_t>(std::min<long long>(bytes, static_cast<long long>(block.size())));
        write_all(1, block.data(), n);
        bytes -= static_cast<long long>(n);
      }
      write_all(1, "\n", 1);
      i += 1;
    } else if (cmd == "close-stdout") {
      ::close(1);
      ::close(2);
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(arg(1).c_str())));
      return 7;
    } else if (cmd == "ignore-term") {
      std::signal(SIGTERM, SIG_IGN);
      pid_t g = ::fork();
      if (g == 0) {
        for (;;) ::pause();
      }
      FILE* f = std::fopen(arg(1).c_str(), "w");
      if (f) {
        std::fprintf(f, "%d %d\n", static_cast<int>(::getpid()), static_cast<int>(g));
        std::fclose(f);
      }
      out("ready\n");
      for (;;) ::pause();
    } else if (cmd == "escape") {
      const bool bare = arg(2) == "bare";
      int link[2], settled[2];
      // `settled` closes in each child once it is what it will stay (exec'd
      // with no environment, or not): the pidfile is written only then, so
      // nobody can look for them while they still carry the job's variables.
      if (::pipe(link) != 0 || ::pipe2(settled, O_CLOEXEC) != 0) return 102;
      auto wait_forever = [bare, &settled] {
        if (bare) {  // exec'd again with no environment (clearenv alone leaves /proc/<pid>/environ as it was)
          char* const argv[] = {const_cast<char*>("sleep"), const_cast<char*>("100000"), nullptr};
          char* const envp[] = {nullptr};
          ::execve("/bin/sleep", argv, envp);
        }
        ::close(settled[1]);
        for (;;) ::pause();
      };
      pid_t session = ::fork();
      if (session == 0) {
        ::setsid();
        wait_forever();
      }
      if (::fork() == 0) {  // the daemon's parent: it starts the daemon and leaves
        ::setsid();
        pid_t daemon = ::fork();
        if (daemon == 0) wait_forever();
        write_all(link[1], reinterpret_cast<const char*>(&daemon), sizeof daemon);
        ::_exit(0);
      }
      ::close(settled[1]);
      pid_t daemon = 0;
      if (::read(link[0], &daemon, sizeof daemon) != sizeof daemon) return 103;
      char byte;
      while (::read(settled[0], &byte, 1) > 0) {
      }
      FILE* f = std::fopen(arg(1).c_str(), "w");
      if (!f) return 104;
      std::fprintf(f, "%d %d\n", static_cast<int>(session), static_cast<int>(daemon));
      std::fclose(f);
      i += 2;
    } else if (cmd == "wait-most") {
      const long want = std::atol(arg(2).c_str());
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(std::atol(arg(3).c_str()));
      for (;;) {
        long now = 0, most = 0;
        if (FILE* f = std::fopen(arg(1).c_str(), "r")) {
          if (std::fscanf(f, "%ld %ld", &now, &most) != 2) most = 0;
          std::fclose(f);
        }
        if (most >= want || std::chrono::steady_clock::now() >= until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      i += 3;
    } else if (cmd == "await-signal") {
      const int sig = std::atoi(arg(1).c_str());
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, sig);
      sigprocmask(SIG_BLOCK, &set, nullptr);
      const long ms = std::atol(arg(2).c_str());
      const timespec limit{ms / 1000, (ms % 1000) * 1'000'000};
      const auto t0 = std::chrono::steady_clock::now();
      if (sigtimedwait(&set, nullptr, &limit) != sig) {
        out("no signal\n");
        return 4;
      }
      const auto waited =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
              .count();
      out("signal " + arg(1) + " after " + std::to_string(waited) + " ms\n");
      i += 2;
    } else if (cmd == "sleep") {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atol(arg(1).c_str())));
      i += 1;
    } else if (cmd == "block-signal") {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, std::atoi(arg(1).c_str()));
      sigprocmask(SIG_BLOCK, &set, nullptr);
      i += 1;
    } else if (cmd == "read-fifo") {
      int fd = ::open(arg(1).c_str(), O_RDONLY | O_CLOEXEC);  // blocks until the test opens it
      if (fd < 0) return 101;
      char buf[64];
      while (::read(fd, buf, sizeof buf) > 0) {
      }
      ::close(fd);
      i += 1;
    } else {
      std::fprintf(stderr, "tjob-test-helper: unknown command %s\n", cmd.c_str());
      return 100;
    }
  }
  return 0;
}
