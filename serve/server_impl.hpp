// tjob serve's state: its listeners, budgets, connections, metrics and
// routes (struct server::impl), shared by serve/server.cpp (listening,
// accepting, draining) and serve/connection.hpp (one connection's requests).
#pragma once
#include "serve/server.hpp"

#include "serve/api.hpp"
#include "serve/listeners.hpp"
#include "serve/metrics.hpp"
#include "serve/setup_reader.hpp"
#include "serve/watch_hub.hpp"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <array>
#include <list>
#include <memory>

namespace tjob::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using local_stream = beast::basic_stream<asio::local::stream_protocol>;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

template <class Stream>
auto& lowest(Stream& s) {
  return beast::get_lowest_layer(s);
}

struct server::impl : std::enable_shared_from_this<server::impl> {
  engine& eng;
  server_config cfg;
  metrics stats;
  watch_hub hub;
  setup_reader setup;  // the setup phases of the jobs that end, for `stats`
  api routes;
  std::optional<asio::ssl::context> tls;
  std::vector<asio::local::stream_protocol::acceptor> unix_acceptors;
  std::vector<asio::ip::tcp::acceptor> tcp_acceptors;
  std::vector<std::string> bound;
  std::vector<std::filesystem::path> socket_files;
  std::list<listener_budget> budgets;            // one per acceptor (accept_loop)
  std::size_t open = 0;                          // connections being served, every listener's
  std::list<asio::cancellation_signal> signals;  // one per connection: a drain emits them all
  asio::steady_timer all_closed;
  bool stopping = false;
  std::size_t refusing = 0;  // 503s being written

  impl(engine& e, server_config c)
      : eng(e),
        cfg(std::move(c)),
        stats(cfg.backend),
        hub(e, cfg.watch_history),
        setup(e, stats),
        routes(e, hub,
               api_config{cfg.idempotency_dir, cfg.idempotency_ttl,
                          [this]() -> asio::awaitable<std::string> {
                            co_await setup.drained();  // every job the hub saw end is counted
                            co_return stats.scrape(hub.jobs());
                          },
                          cfg.engine}),
        all_closed(e.get_executor()) {
    hub.on_change = [this](const train_job* before, const train_job* now) {
      stats.job_changed(before, now);
      if (now && is_terminal(now->status) && !(before && is_terminal(before->status))) setup.job_ended(*now);
    };
  }

  void log_request(const std::string& peer, const std::string& method, std::string_view target, int status,
                   std::chrono::steady_clock::time_point began, std::size_t bytes) {
    stats.request_done(status);
    if (!cfg.logger) return;
    auto path = target.substr(0, target.find('?'));
    auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
    // (a method is an HTTP token, or "-": no quote or space can be in it)
    cfg.logger->info("msg=request peer={} method={} path={} status={} ms={:.2f} bytes={}", peer, method,
                     log_quoted(path), status, ms, bytes);
  }

  void bind_unix_at(const std::string& path) {
    unix_acceptors.push_back(bind_unix(eng.get_executor(), path));
    socket_files.emplace_back(path);
    bound.push_back("unix://" + path);
  }

  void bind_tcp_at(const listen_spec& l) {
    std::string address;
    tcp_acceptors.push_back(bind_tcp(eng.get_executor(), l, tls.has_value(), cfg.insecure, address));
    bound.push_back(address);
  }

  // The reactor's lag: how late a 100 ms timer fires (a stall of the one
  // thread shows here), until the server stops.
  asio::awaitable<void> measure_lag() {
    auto self = shared_from_this();
    asio::steady_timer t(eng.get_executor());
    while (!stopping) {
      t.expires_after(std::chrono::milliseconds(100));
      auto due = t.expiry();
      boost::system::error_code ec;
      co_await t.async_wait(
          asio::bind_cancellation_slot(lag_stop.slot(), asio::redirect_error(asio::use_awaitable, ec)));
      if (ec) break;
      stats.reactor_lag(std::chrono::duration<double>(asio::steady_timer::clock_type::now() - due).count());
    }
  }
  asio::cancellation_signal lag_stop;

  // --- one connection

  void closed_one(listener_budget& b) {
    stats.connection_closed();
    --open;
    --b.open;
    wake_if_drained();
  }

  // Every connection the server took, served or refused, has ended: the
  // drain (run()) awaits this, so nothing of the server outlives it.
  bool drained() const { return open == 0 && refusing == 0; }
  void wake_if_drained() {
    if (stopping && drained()) all_closed.cancel();
  }

  /// Accepts connections until the server stops, serving each or, past a
  /// budget, refusing it (serve/server.cpp).
  template <class Acceptor, class Stream>
  asio::awaitable<void> accept_loop(Acceptor& acceptor, bool tcp);
};

}  // namespace tjob::serve
