// tjob serve: the engine as an HTTP/1.1 service (API v1, JSON), on the
// engine's own io_context: one coroutine per connection, no thread per
// connection, the same single reactor as the engine.
//
// Threading: the engine's executor only (construct, run and stop there).
// Cancellation: stop() drains: the listeners close, new jobs are refused
//   (503), log and watch streams end cleanly (their last chunk), long polls
//   answer 503, and run() returns once every connection has closed. Jobs are
//   not cancelled: they keep running under the engine's usual ownership rules.
// Errors: the constructor throws tjob::error when a listener cannot be made
//   (an address in use, a socket path that is not ours) or TLS cannot be set up.
// Lifetime: the server holds a reference to the engine; co_await run() to its
//   end before destroying either.
#pragma once

#include <tjob/engine.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace tjob::serve {

struct server_config {
  /// The engine's settings (those it was made with): what the server starts
  /// beside it, a sweep's owner, runs its jobs with them. Its home must be
  /// the engine's.
  engine_config engine;
  /// Where to listen: "unix:///path/to/socket" (made 0600, owner only; a stale
  /// socket left by a dead server is replaced) or "tcp://HOST:PORT" (port 0:
  /// any free one; see server::addresses). Empty: unix://$TJOB_HOME/tjob.sock.
  std::vector<std::string> listen;
  /// The bearer token every TCP request must carry (Authorization: Bearer);
  /// required when listening on TCP. Unix-socket requests need none: the
  /// socket's mode keeps others out.
  std::string token;
  /// TLS on the TCP listeners (PEM files); both or neither.
  std::filesystem::path tls_cert, tls_key;
  /// Listen on a TCP address off loopback without TLS (the token and every
  /// job cross the network in clear). Without it such a listener is refused.
  bool insecure = false;
  /// Connections open at once, per listener: the unix socket and each TCP
  /// address count apart, so no TCP client can lock the owner out of the
  /// socket. One more is answered 503 and closed.
  std::size_t max_connections = 1024;
  /// TCP connections that have not shown the token yet ("pending"): at most
  /// this many from one peer address, and a quarter of max_connections in
  /// all; one more is answered 503 and closed. A connection stops being
  /// pending at its first request with the right token.
  std::size_t max_pending_per_peer = 16;
  /// A pending connection's request header (its TLS handshake included) must
  /// arrive whole within this time, or the connection is closed.
  std::chrono::milliseconds header_timeout{10'000};
  /// A request's body (a job spec), and its request line and headers together.
  std::size_t max_body_bytes = 1 << 20;
  std::size_t max_header_bytes = 16 << 10;
  /// A connection with no request under way is closed after this long; so is
  /// one whose request or answer does not move for this long.
  std::chrono::milliseconds idle_timeout{60'000};
  /// How many status changes /v1/watch keeps for ?since= resumes.
  std::size_t watch_history = 10'000;
  /// Where Idempotency-Key records live; empty: $TJOB_HOME/serve/idempotency.
  std::filesystem::path idempotency_dir;
  /// How long an Idempotency-Key is remembered.
  std::chrono::hours idempotency_ttl{24};
  /// The backend's name, for the metrics' `backend` label.
  std::string backend = "local";
  /// Request logs (one logfmt line per request); null: none.
  std::shared_ptr<spdlog::logger> logger;
};

class server {
 public:
  server(engine& e, server_config config);
  server(const server&) = delete;
  server& operator=(const server&) = delete;
  ~server();

  /// What the listeners are bound to, as "unix:///path" and "tcp://HOST:PORT"
  /// (the real port when 0 was asked for).
  std::vector<std::string> addresses() const;
  /// Serves until stop() and every connection has closed.
  boost::asio::awaitable<void> run();
  void stop();

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tjob::serve
