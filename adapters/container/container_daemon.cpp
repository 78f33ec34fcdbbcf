// The container backend's daemon: finding and connecting to it (a unix
// socket, or TCP as the docker CLI reaches one), and following its event
// stream, which wakes the waiters of the jobs it names.
#include "adapters/container/container_impl.hpp"

#include "core/backoff.hpp"
#include "core/names.hpp"
#include "core/secrets.hpp"

#include <spdlog/spdlog.h>

#include <fstream>

#include <sys/stat.h>

namespace tjob::container {

namespace {

// Why a unix socket endpoint cannot be the daemon's; empty when it may be.
std::string socket_problem(const http::endpoint& ep) {
  if (ep.type != http::endpoint::kind::unix_socket) return {};
  struct stat st {};
  if (::stat(ep.path.c_str(), &st) != 0) return "no such socket";
  if (!S_ISSOCK(st.st_mode)) return "not a socket";
  return {};
}

std::string read_pem(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    fail(errc::invalid_argument, "DOCKER_CERT_PATH: cannot read " + p.string() +
                                     "; give the directory of ca.pem, cert.pem and key.pem (as for docker)");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A TCP daemon as the docker CLI reaches it: with DOCKER_TLS_VERIFY set, TLS
// verified against DOCKER_CERT_PATH's ca.pem (default ~/.docker), showing its
// cert.pem and key.pem; without it, plain HTTP, and only on this machine
// (plain HTTP elsewhere lets anyone on the path run containers as the
// daemon's user). Sets `tls` and the endpoint's scheme; returns why it may
// not be used, or empty.
std::string tcp_setup(http::endpoint& ep, std::optional<http::tls_config>& tls) {
  if (ep.type != http::endpoint::kind::tcp) return {};
  const char* verify = std::getenv("DOCKER_TLS_VERIFY");
  if (verify && *verify) {
    const char* path = std::getenv("DOCKER_CERT_PATH");
    const char* home = std::getenv("HOME");
    fs::path dir = path && *path ? fs::path(path) : fs::path(home ? home : "") / ".docker";
    if (auto why = secret_file_problem(dir / "key.pem"); !why.empty())
      return "DOCKER_CERT_PATH: key.pem " + why;
    tls.emplace();
    tls->ca_pem = read_pem(dir / "ca.pem");
    tls->client_cert_pem = read_pem(dir / "cert.pem");
    tls->client_key_pem = read_pem(dir / "key.pem");
    tls->source = "DOCKER_CERT_PATH " + dir.string();
    ep.tls = true;
    return {};
  }
  if (ep.tls) {
    tls.emplace();
    tls->source = "the system's trust store";
    return {};
  }
  if (!detail::is_loopback_host(ep.host))
    return "plain HTTP to a daemon that is not on this machine would let anyone on the path run containers "
           "there; set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH (ca.pem, cert.pem, key.pem), as for the "
           "docker "
           "CLI";
  return {};
}

}  // namespace

// --- the daemon -----------------------------------------------------------

asio::awaitable<outcome<docker_api*>> backend::impl::daemon() {
  if (api) co_return api.get();
  struct candidate {
    std::string url, origin;
  };
  std::vector<candidate> tried;
  bool want_docker = cfg.container_runtime != "podman";
  bool want_podman = cfg.container_runtime != "docker";  // (config_of allows docker, podman or none)
  if (!cfg.container_host.empty()) {
    tried.push_back({cfg.container_host, "container_host"});
  } else {
    if (const char* h = std::getenv("DOCKER_HOST"); h && *h && want_docker)
      tried.push_back({h, "DOCKER_HOST"});
    if (const char* h = std::getenv("CONTAINER_HOST"); h && *h && want_podman)
      tried.push_back({h, "CONTAINER_HOST"});
    if (want_docker) tried.push_back({"unix:///var/run/docker.sock", "docker"});
    if (want_podman) {
      tried.push_back({"unix:///run/podman/podman.sock", "podman"});
      if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x && *x)
        tried.push_back({std::string("unix://") + x + "/podman/podman.sock", "podman"});
    }
  }
  std::string failures, diagnostics;
  for (const auto& c : tried) {
    auto ep = http::try_parse_endpoint(c.url);
    std::optional<http::tls_config> tls;
    std::string why = ep ? socket_problem(*ep) : ep.error().message;
    if (why.empty()) why = tcp_setup(*ep, tls);
    if (why.empty()) {
      auto a = std::make_unique<docker_api>(ctx.ex, *ep, std::move(tls));
      a->timeout = cfg.request_timeout;
      auto connected = co_await a->connect(std::min(cfg.request_timeout, std::chrono::milliseconds(5'000)));
      if (connected) {
        if (!api) {
          ctx.log->debug("using {}", a->describe());
          api = std::move(a);
        }
        co_return api.get();
      }
      why = connected.error().message;
      if (!connected.error().diagnostics.empty())
        diagnostics += (diagnostics.empty() ? "" : "\n") + connected.error().diagnostics;
    }
    failures += "\n  " + c.url + " (" + c.origin + "): " + why;
  }
  std::string which = cfg.container_runtime.empty() ? "Docker or Podman" : cfg.container_runtime;
  co_return detail::make_failure(
      errc::backend_unavailable,
      "Could not connect to " + which + " (tried:" + failures +
          ")\nTo name a socket: --container-host unix:///path/to/socket (container_host in "
          "the config), or set DOCKER_HOST or CONTAINER_HOST; start one with `dockerd` or "
          "`podman system service`.\nOr use the local backend (--backend local) for "
          "non-containerized execution.",
      std::move(diagnostics));
}

// --- events ---------------------------------------------------------------

asio::awaitable<void> backend::impl::connect_events(detail::wake_signal& sig, steady::time_point deadline) {
  auto d = co_await daemon();
  d.value();
  ensure_events();
  auto settle = std::min(deadline, steady::now() + std::chrono::seconds(5));
  while (!events_connected && events_running && steady::now() < settle)
    if (!co_await sig.wait_until(settle)) break;
}

void backend::impl::ensure_events() {
  if (events_running || stopping) return;
  events_running = true;
  tasks.spawn(events_loop(shared_from_this()), "container events");
}

asio::awaitable<void> backend::impl::events_loop(std::shared_ptr<impl> self) {
  auto& b = *self;
  detail::backoff retry(std::chrono::milliseconds(100), std::chrono::milliseconds(5'000));
  while (!b.stopping) {
    auto ended = co_await b.follow_events();
    if (!ended && !b.stopping) b.ctx.log->debug("container events: {}", ended.error().message);
    if (b.events_connected) retry.reset();  // it was connected: the next try starts the backoff over
    b.events.reset();
    b.events_connected = false;
    ++b.epoch;
    b.waiters.notify_all();
    if (b.stopping) break;
    co_await b.backoff_wake.wait_until(steady::now() + retry.next());
  }
  b.events_running = false;
}

asio::awaitable<outcome<void>> backend::impl::follow_events() {
  auto daemon_ = co_await daemon();
  if (!daemon_) co_return daemon_.error();
  auto& d = **daemon_;
  // Podman's events match no bare-key label filter; on_event picks
  // the jobs' containers by their label instead.
  json::object filters{{"type", json::array{"container"}}};
  if (d.info().kind == daemon_kind::docker) filters["label"] = json::array{label_job};
  auto opened = co_await d.events(filters, 0, 0);
  if (!opened) co_return opened.error();
  events.emplace(std::move(*opened));
  events_connected = true;
  ++epoch;
  waiters.notify_all();
  http::line_splitter lines(1 << 20, "the event stream of " + d.describe());
  std::vector<std::string> got;
  for (;;) {
    auto piece = co_await events->read_some();
    if (!piece) co_return piece.error();
    if (!*piece) co_return outcome<void>();
    got.clear();
    auto fed = lines.feed(**piece, got);
    if (!fed) co_return fed.error();
    for (const auto& line : got) on_event(line);
  }
}

void backend::impl::on_event(const std::string& line) {
  auto e = container_event_of(line);
  if (e.job.empty()) return;
  if (e.action == "die" && !e.id.empty() && died.insert(e.id).second) {
    died_order.push_back(e.id);
    constexpr std::size_t max_died = 4096;
    if (died_order.size() > max_died) {
      died.erase(died_order.front());
      died_order.pop_front();
    }
  }
  ++generation[e.job];
  waiters.notify_all();
}

std::uint64_t backend::impl::mark(const std::string& job) {
  auto it = generation.find(job);
  return epoch + (it == generation.end() ? 0 : it->second);
}

}  // namespace tjob::container
