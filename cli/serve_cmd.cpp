#include "cli/serve_cmd.hpp"

#include "cli/job_request.hpp"
#include "cli/run_job.hpp"
#include "serve/server.hpp"

#include <fcntl.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <csignal>
#include <fstream>
#include <random>
#include <sstream>

namespace tjob::cli {

namespace asio = boost::asio;

void add_serve_options(CLI::App* cmd, serve_options& o) {
  cmd->add_option("--listen", o.listen,
                  "Where to listen: unix:///path/to/socket (0600; default unix://$TJOB_HOME/tjob.sock) or "
                  "tcp://HOST:PORT (needs a token; repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--token-file", o.token_file,
                  "The bearer token TCP clients must send; default $TJOB_HOME/serve.token, made (0600) "
                  "when missing");
  cmd->add_option("--tls-cert", o.tls_cert, "TLS on TCP: the certificate chain (PEM)");
  cmd->add_option("--tls-key", o.tls_key, "TLS on TCP: the private key (PEM)");
  cmd->add_flag("--inherit-environment", o.inherit_environment,
                "Local jobs get this server's whole environment under their own env (default: only PATH, "
                "HOME, the locale, proxies, pip's and CUDA's settings; docs/security.md)");
  cmd->add_flag("--insecure", o.insecure,
                "Serve plain HTTP on a TCP address off loopback (the token and every job cross the network in "
                "clear); without it, such a --listen needs --tls-cert and --tls-key");
  cmd->add_option("--max-connections", o.max_connections,
                  "Connections open at once, per listener; one more is answered 503 (default 1024)");
  cmd->add_option("--max-pending-per-peer", o.max_pending_per_peer,
                  "TCP connections from one address that have not sent the token yet (default 16; a quarter "
                  "of --max-connections in all)");
  cmd->add_option("--header-timeout", o.header_timeout,
                  "Seconds a TCP connection without the token yet has to send a request's header (default 10)");
  cmd->add_option("--idle-timeout", o.idle_timeout,
                  "Seconds an idle or stalled connection is kept (default 60)");
  cmd->add_option("--max-body-bytes", o.max_body_bytes, "The largest job spec accepted (default 1048576)");
  cmd->add_flag("--detach", o.detach,
                "Serve in the background: return once listening, printing each address on stdout; the "
                "server's log goes to $TJOB_HOME/serve.log and its pid to $TJOB_HOME/serve.pid (kill it "
                "with SIGTERM to drain it)");
}

int serve_in_foreground(engine_config config, const serve_options& o, int& ready);

namespace {

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// The token: read from the file; made there (0600) when it is the default
// file and does not exist yet.
std::filesystem::path token_path_of(const std::string& given, const std::filesystem::path& home) {
  return given.empty() ? home / "serve.token" : std::filesystem::path(given);
}

std::string load_token(const std::string& given, const std::filesystem::path& home) {
  auto path = token_path_of(given, home);
  if (given.empty() && !std::filesystem::exists(path)) {
    std::filesystem::create_directories(home);
    std::random_device rd;  // /dev/urandom
    std::string token;
    for (int i = 0; i < 8; ++i) token += fmt::format("{:08x}", rd());
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      auto line = token + "\n";
      bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
      ::close(fd);
      if (!ok) throw usage_error("cannot write the token file " + path.string());
    }
  }
  if (auto why = secret_file_problem(path); !why.empty()) throw usage_error("--token-file " + path.string() + " " + why);
  std::ifstream in(path);
  if (!in) throw usage_error("--token-file " + path.string() + ": cannot read it");
  std::stringstream text;
  text << in.rdbuf();
  auto token = trimmed(text.str());
  if (token.size() < 16)
    throw usage_error("--token-file " + path.string() +
                      ": the token is shorter than 16 characters; use a long random one");
  return token;
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto sink =
      std::make_shared<spdlog::sinks::stderr_sink_mt>();  // (a detached server's stderr is its log file)
  auto logger = std::make_shared<spdlog::logger>("tjob.serve", sink);
  // logfmt, one line per event, times in UTC
  logger->set_pattern("time=%Y-%m-%dT%H:%M:%S.%fZ level=%l %v", spdlog::pattern_time_type::utc);
  logger->set_level(spdlog::level::info);
  logger->flush_on(spdlog::level::info);
  return logger;
}

}  // namespace

namespace {

// --detach: the server runs in a child of its own session; the parent waits
// (on a pipe, not a timer) until the child listens or fails, and reports it.
// Returns the pipe's write end in the child, -1 when not detaching; in the
// parent it exits with the outcome.
int detach_server(const std::filesystem::path& home) {
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) throw usage_error("--detach: cannot make a pipe");
  pid_t pid = ::fork();
  if (pid < 0) throw usage_error("--detach: cannot fork");
  if (pid > 0) {
    ::close(ready[1]);
    std::string said;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(ready[0], buf, sizeof buf)) > 0) said.append(buf, static_cast<std::size_t>(n));
    ::close(ready[0]);
    if (said.rfind("ok\n", 0) == 0) {
      std::fputs(said.c_str() + 3, stdout);
      std::exit(0);
    }
    std::fprintf(stderr, "tjob: error: %s\n",
                 said.empty() ? "the server ended before it listened; see serve.log" : said.c_str());
    std::exit(1);
  }
  ::close(ready[0]);
  ::setsid();
  std::filesystem::create_directories(home);
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  int log = ::open((home / "serve.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (devnull >= 0) {
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
  }
  if (log >= 0) ::dup2(log, 2);
  return ready[1];
}

// serve.pid names the server that listens: written once it does (a second
// server refused its socket never touches it), whole or not at all, and
// removed at the end only while it still names this process.
void write_pid_file(const std::filesystem::path& home) {
  auto path = home / "serve.pid", tmp = home / ("serve.pid." + std::to_string(::getpid()));
  { std::ofstream(tmp) << ::getpid() << "\n"; }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

void remove_own_pid_file(const std::filesystem::path& home) {
  auto path = home / "serve.pid";
  std::ifstream in(path);
  long pid = 0;
  if (in >> pid && pid == ::getpid()) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
}

void tell_parent(int& fd, const std::string& what) {
  if (fd < 0) return;
  auto n = ::write(fd, what.data(), what.size());
  (void)n;
  ::close(fd);
  fd = -1;
}

}  // namespace

int run_serve(engine_config config, const serve_options& o) {
  std::signal(SIGPIPE, SIG_IGN);
  if (o.idle_timeout <= 0) throw usage_error("--idle-timeout must be more than 0 seconds");
  if (o.header_timeout <= 0) throw usage_error("--header-timeout must be more than 0 seconds");
  if (o.max_pending_per_peer < 1) throw usage_error("--max-pending-per-peer must be 1 or more");
  if (!o.tls_key.empty())
    if (auto why = secret_file_problem(o.tls_key); !why.empty())
      throw usage_error("--tls-key " + o.tls_key + " " + why);
  if (o.max_connections < 1) throw usage_error("--max-connections must be 1 or more");
  // Before any thread exists (the engine's): fork is safe only then.
  int ready = o.detach ? detach_server(config.home.empty() ? default_home() : config.home) : -1;
  try {
    return serve_in_foreground(std::move(config), o, ready);
  } catch (const std::exception& e) {
    tell_parent(ready, e.what());
    throw;
  }
}

int serve_in_foreground(engine_config config, const serve_options& o, int& ready) {
  auto logger = make_logger();
  asio::io_context io(1);
  // A submitter gets what it asks for and the documented allow-list of the
  // server's environment, not the server's secrets (docs/security.md).
  config.clean_job_environment = !o.inherit_environment;
  engine eng(io.get_executor(), config);
  serve::server_config sc;
  sc.engine = config;
  sc.engine.home = eng.home();
  if (sc.engine.supervisor.empty()) sc.engine.supervisor = self_exe();  // (a sweep's owner, and its trials')
  sc.listen = o.listen;
  bool tcp = false;
  for (const auto& l : o.listen) tcp = tcp || l.rfind("tcp://", 0) == 0;
  if (tcp) sc.token = load_token(o.token_file, eng.home());
  sc.tls_cert = o.tls_cert;
  sc.tls_key = o.tls_key;
  sc.max_connections = o.max_connections;
  sc.max_pending_per_peer = o.max_pending_per_peer;
  sc.insecure = o.insecure;
  sc.idle_timeout = std::chrono::milliseconds(static_cast<long long>(o.idle_timeout * 1000));
  sc.header_timeout = std::chrono::milliseconds(static_cast<long long>(o.header_timeout * 1000));
  sc.max_body_bytes = o.max_body_bytes;
  sc.logger = logger;
  sc.backend = config.backend;
  serve::server srv(eng, sc);
  std::string addresses;
  for (const auto& a : srv.addresses()) {
    logger->info("msg=listening address={} backend={} home=\"{}\"", a, config.backend,
                 eng.home().string());
    addresses += a + "\n";
  }
  // Where a client finds what it needs: the token (never logged itself) and the dashboard.
  for (const auto& a : srv.addresses())
    if (a.rfind("tcp://", 0) == 0)
      logger->info("msg=\"clients send the token in {} (Authorization: Bearer); the dashboard is at {}://{}/\"",
                   token_path_of(o.token_file, eng.home()).string(), o.tls_cert.empty() ? "http" : "https",
                   a.substr(6));
  if (o.detach) write_pid_file(eng.home());
  tell_parent(ready, "ok\n" + addresses);
  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    logger->info("msg=draining signal={}", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    srv.stop();
  });
  std::exception_ptr failed;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        std::exception_ptr e;
        try {
          co_await srv.run();
        } catch (...) {
          e = std::current_exception();
        }
        signals.cancel();
        co_await eng.shutdown();
        if (e) std::rethrow_exception(e);
      },
      [&](std::exception_ptr e) { failed = e; });
  io.run();
  if (failed) std::rethrow_exception(failed);
  logger->info("msg=stopped");
  if (o.detach) remove_own_pid_file(eng.home());
  return 0;
}

}  // namespace tjob::cli
