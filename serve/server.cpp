// tjob serve's connections: listeners, limits, the token, TLS, and the three
// ways an answer goes out (whole, chunked stream, long poll), over Beast.
#include "serve/server.hpp"

#include "serve/api.hpp"
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

namespace {

struct listen_spec {
  bool unix_socket = true;
  std::string path, host;
  std::uint16_t port = 0;
};

listen_spec parse_listen(const std::string& s) {
  listen_spec l;
  if (s.rfind("unix://", 0) == 0) {
    l.path = s.substr(7);
    if (l.path.empty() || l.path[0] != '/')
      throw error(errc::invalid_argument, "--listen " + s + ": give unix:///absolute/path/to/socket");
    return l;
  }
  if (s.rfind("tcp://", 0) == 0) {
    l.unix_socket = false;
    auto rest = s.substr(6);
    auto colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw error(errc::invalid_argument,
                  "--listen " + s + ": give tcp://HOST:PORT, as tcp://127.0.0.1:8080");
    l.host = rest.substr(0, colon);
    if (l.host.size() > 2 && l.host.front() == '[' && l.host.back() == ']')
      l.host = l.host.substr(1, l.host.size() - 2);
    auto port = rest.substr(colon + 1);
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end || p < 0 || p > 65535)
      throw error(errc::invalid_argument, "--listen " + s + ": the port must be 0 to 65535");
    l.port = static_cast<std::uint16_t>(p);
    return l;
  }
  throw error(errc::invalid_argument, "--listen " + s + ": give unix:///path/to/socket or tcp://HOST:PORT");
}

template <class Stream>
auto& lowest(Stream& s) {
  return beast::get_lowest_layer(s);
}

// Tokens are compared in constant time.
bool same_token(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// One listener's budget: its connections, and those of them (TCP) that have
// not shown the token yet, in all and per peer address.
struct listener_budget {
  std::size_t open = 0, pending = 0;
  std::map<asio::ip::address, std::size_t> pending_by_peer;
};

// A TCP connection's place among the pending ones, given back when it shows
// the token or ends.
class pending_slot {
 public:
  pending_slot(listener_budget& b, asio::ip::address peer) : b_(&b), peer_(std::move(peer)) {
    ++b_->pending;
    ++b_->pending_by_peer[peer_];
  }
  pending_slot(const pending_slot&) = delete;
  pending_slot& operator=(const pending_slot&) = delete;
  ~pending_slot() { release(); }
  bool held() const { return b_ != nullptr; }
  void release() {
    if (!b_) return;
    --b_->pending;
    if (auto it = b_->pending_by_peer.find(peer_); it != b_->pending_by_peer.end() && --it->second == 0)
      b_->pending_by_peer.erase(it);
    b_ = nullptr;
  }

 private:
  listener_budget* b_;
  asio::ip::address peer_;
};

// A field for the access log: quoted, with what would end or break the field escaped.
std::string log_quoted(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

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
                          }}),
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

  void bind_unix(const std::string& path) {
    asio::local::stream_protocol::endpoint ep(path);
    if (std::filesystem::exists(std::filesystem::symlink_status(path))) {
      // A live server answers on it; a stale socket file of a dead one is replaced.
      asio::local::stream_protocol::socket probe(eng.get_executor());
      boost::system::error_code ec;
      probe.connect(ep, ec);
      if (!ec)
        throw error(errc::invalid_argument, "unix://" + path +
                                                ": another tjob serve is listening there; stop it or give "
                                                "another --listen");
      struct stat st {};
      if (::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode))
        throw error(errc::invalid_argument,
                    "unix://" + path +
                        ": the path is a file that is not a socket; remove it or give another --listen");
      std::filesystem::remove(path);
    }
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    asio::local::stream_protocol::acceptor a(eng.get_executor());
    a.open(ep.protocol());
    // Owner only from the start: no window in which others could connect.
    auto old = ::umask(0177);
    boost::system::error_code ec;
    a.bind(ep, ec);
    ::umask(old);
    if (ec) throw error(errc::invalid_argument, "unix://" + path + ": cannot listen: " + ec.message());
    ::chmod(path.c_str(), 0600);
    a.listen(asio::socket_base::max_listen_connections);
    unix_acceptors.push_back(std::move(a));
    socket_files.emplace_back(path);
    bound.push_back("unix://" + path);
  }

  void bind_tcp(const listen_spec& l) {
    asio::ip::tcp::resolver resolver(eng.get_executor());
    boost::system::error_code ec;
    auto results = resolver.resolve(l.host, std::to_string(l.port), asio::ip::tcp::resolver::passive, ec);
    if (ec || results.empty())
      throw error(errc::invalid_argument, "tcp://" + l.host + ": cannot resolve the host: " + ec.message());
    auto ep = results.begin()->endpoint();
    if (!tls && !cfg.insecure && !ep.address().is_loopback())
      throw error(errc::invalid_argument,
                  fmt::format("tcp://{}:{}: {} is not a loopback address, and without TLS the token and every job "
                              "would cross the network in clear; give --tls-cert and --tls-key, or --insecure to "
                              "serve plain HTTP there anyway",
                              l.host, l.port, ep.address().to_string()));
    asio::ip::tcp::acceptor a(eng.get_executor());
    a.open(ep.protocol());
    a.set_option(asio::socket_base::reuse_address(true));
    a.bind(ep, ec);
    if (ec)
      throw error(errc::invalid_argument,
                  fmt::format("tcp://{}:{}: cannot listen: {}", l.host, l.port, ec.message()));
    a.listen(asio::socket_base::max_listen_connections);
    auto local = a.local_endpoint();
    auto host =
        local.address().is_v6() ? "[" + local.address().to_string() + "]" : local.address().to_string();
    bound.push_back(fmt::format("{}://{}:{}", tls ? "https" : "tcp", host, local.port()));
    tcp_acceptors.push_back(std::move(a));
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

  // Writes a whole reply; false when the client is gone.
  template <class Stream>
  asio::awaitable<bool> write_reply(Stream& stream, const reply& r, bool keep_alive) {
    http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
    res.set(http::field::server, "tjob");
    res.set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res.set(k, v);
    if (r.status == 401) res.set(http::field::www_authenticate, "Bearer realm=\"tjob\"");
    res.body() = r.body;
    res.keep_alive(keep_alive);
    res.prepare_payload();
    lowest(stream).expires_after(cfg.idle_timeout);
    boost::system::error_code ec;
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    co_return !ec;
  }

  // Reads from the client while an answer is being made; a close (or an
  // error) emits `gone`. Data the client sends meanwhile is kept for the
  // next request (pipelining).
  template <class Stream>
  asio::awaitable<void> watch_client(Stream& stream, beast::flat_buffer& buffer,
                                     asio::cancellation_signal& gone, std::shared_ptr<bool> client_left) {
    boost::system::error_code ec;
    for (;;) {
      auto space = buffer.prepare(512);
      std::size_t n = co_await stream.async_read_some(space, asio::redirect_error(asio::use_awaitable, ec));
      buffer.commit(n);
      if (ec) break;
      if (buffer.size() > cfg.max_header_bytes + cfg.max_body_bytes) break;  // a flood, not a request
    }
    if (ec != asio::error::operation_aborted) {
      *client_left = true;
      gone.emit(asio::cancellation_type::terminal);
    }
  }

  template <class Stream>
  asio::awaitable<void> serve_connection(Stream stream, std::string peer, listener_budget& budget,
                                         std::unique_ptr<pending_slot> pending) {
    auto self = shared_from_this();
    auto& sig = signals.emplace_back();
    auto sig_it = std::prev(signals.end());
    struct leave {
      impl& s;
      listener_budget& b;
      std::list<asio::cancellation_signal>::iterator it;
      ~leave() {
        s.signals.erase(it);
        s.closed_one(b);
      }
    } on_exit{*this, budget, sig_it};
    (void)sig;
    try {
      co_await serve_requests(stream, peer, pending.get(), *sig_it);
    } catch (const std::exception& e) {
      if (cfg.logger) cfg.logger->debug("msg=\"connection ended\" peer={} error=\"{}\"", peer, e.what());
    }
    co_await linger(lowest(stream).socket());
  }

  // A lingering close, as nginx's: our side of the connection ends, then
  // what the client still sends (a body we refused unread) is read and
  // dropped, for a second at most (a refused connection: 200 ms). Closing with unread bytes would reset
  // the connection, and the client could lose the answer it was sent.
  template <class Socket>
  asio::awaitable<void> linger(Socket& socket, std::chrono::milliseconds most = std::chrono::seconds(1)) {
    boost::system::error_code ec;
    socket.shutdown(asio::socket_base::shutdown_send, ec);
    asio::steady_timer limit(socket.get_executor(), most);
    // The timer's handler can already be queued when the read ends (both
    // completed in one turn): limit.cancel() is then too late, and the
    // socket is gone when the handler runs. It touches the socket only while
    // this frame still reads (`reading`), so a late handler does nothing.
    auto reading = std::make_shared<bool>(true);
    limit.async_wait([&socket, reading](boost::system::error_code e) {
      if (!e && *reading) {
        boost::system::error_code ignored;
        socket.cancel(ignored);
      }
    });
    std::array<char, 16384> sink;
    std::size_t dropped = 0;
    while (!ec && dropped < (8u << 20)) {
      dropped +=
          co_await socket.async_read_some(asio::buffer(sink), asio::redirect_error(asio::use_awaitable, ec));
    }
    *reading = false;
    limit.cancel();
    socket.close(ec);
  }

  // `pending`: a TCP connection's slot among those that have not shown the
  // token (null on the unix socket, which needs none): its header must come
  // within header_timeout, and its first request with the token frees it.
  template <class Stream>
  asio::awaitable<void> serve_requests(Stream& stream, const std::string& peer, pending_slot* pending,
                                       asio::cancellation_signal& sig) {
    const bool needs_token = pending != nullptr;
    auto header_time = [&] { return pending && pending->held() ? cfg.header_timeout : cfg.idle_timeout; };
    if constexpr (std::is_same_v<Stream, tls_stream>) {
      lowest(stream).expires_after(header_time());
      co_await stream.async_handshake(asio::ssl::stream_base::server, asio::use_awaitable);
    }
    beast::flat_buffer buffer;
    for (;;) {
      if (stopping) co_return;
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(cfg.max_header_bytes));
      parser.body_limit(cfg.max_body_bytes);
      lowest(stream).expires_after(header_time());
      boost::system::error_code ec;
      // (a drain cancels a connection that waits for its next request)
      co_await http::async_read_header(
          stream, buffer, parser,
          asio::bind_cancellation_slot(sig.slot(), asio::redirect_error(asio::use_awaitable, ec)));
      auto began = std::chrono::steady_clock::now();
      if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
          ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
        co_return;
      if (ec == http::error::body_limit) {  // its Content-Length says so; nothing of it is read
        // (the header is not "done" for the parser, so its content_length()
        // may not be asked: the field itself is in the message already)
        std::string len(parser.get()[http::field::content_length]);
        auto r = error_reply(
            413, "too_large",
            fmt::format("the body is {} bytes; a job spec may have at most {}", len, cfg.max_body_bytes));
        co_await write_reply(stream, r, false);
        log_request(peer, std::string(parser.get().method_string()), parser.get().target(), 413, began, 0);
        co_return;
      }
      if (ec == http::error::header_limit) {
        auto r =
            error_reply(431, "headers_too_large",
                        fmt::format("the request line and headers are over {} bytes", cfg.max_header_bytes));
        co_await write_reply(stream, r, false);
        log_request(peer, "-", "-", 431, began, 0);
        co_return;
      }
      if (ec) {
        auto r = error_reply(400, "bad_request", "the request is not HTTP/1.1 (" + ec.message() + ")");
        co_await write_reply(stream, r, false);
        log_request(peer, "-", "-", 400, began, 0);
        co_return;
      }
      auto& head = parser.get();
      std::string method(head.method_string());
      std::string target(head.target());
      if (auto len = parser.content_length(); len && *len > cfg.max_body_bytes) {
        auto r = error_reply(
            413, "too_large",
            fmt::format("the body is {} bytes; a job spec may have at most {}", *len, cfg.max_body_bytes));
        co_await write_reply(stream, r, false);
        log_request(peer, method, target, 413, began, 0);
        co_return;
      }
      // The token, right after the header: nothing of a body is read, and no
      // 100 Continue sent, for a client without it (then the connection closes).
      if (needs_token && !token_free(method, target)) {
        auto auth = head[http::field::authorization];
        std::string_view given;
        bool bearer = auth.size() > 7 && beast::iequals(auth.substr(0, 7), "Bearer ");
        if (bearer) given = std::string_view(auth.data() + 7, auth.size() - 7);
        if (!bearer || !same_token(given, cfg.token)) {
          auto r = error_reply(401, "unauthorized",
                               bearer ? "the bearer token is wrong; use the one in the server's token file"
                                      : "this server needs a token: send Authorization: Bearer <token> (the "
                                        "server's token file, or --token-file)");
          co_await write_reply(stream, r, false);
          log_request(peer, method, target, 401, began, r.body.size());
          co_return;
        }
        pending->release();  // it has shown the token: a client, no longer a stranger
      }
      lowest(stream).expires_after(cfg.idle_timeout);
      if (auto expect = head[http::field::expect]; beast::iequals(expect, "100-continue")) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        co_await http::async_write(stream, cont, asio::use_awaitable);
      }
      if (!parser.is_done()) {
        co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
        if (ec == http::error::body_limit) {
          auto r =
              error_reply(413, "too_large", fmt::format("the body is over {} bytes", cfg.max_body_bytes));
          co_await write_reply(stream, r, false);
          log_request(peer, method, target, 413, began, 0);
          co_return;
        }
        if (ec) co_return;
      }
      auto req_msg = parser.release();
      bool keep_alive = req_msg.keep_alive();
      request rq;
      rq.method = method;
      rq.target = target;
      rq.body = std::move(req_msg.body());
      rq.idempotency_key = std::string(req_msg["Idempotency-Key"]);
      rq.local_peer = !needs_token;  // only TCP listeners take tokens: this is the unix socket
      answer a;
      try {
        a = co_await routes.handle(std::move(rq));
      } catch (...) {
        a = reply_of(std::current_exception(), stopping);
      }
      if (auto* r = std::get_if<reply>(&a)) {
        bool ok = co_await write_reply(stream, *r, keep_alive && !stopping);
        log_request(peer, method, target, r->status, began, r->body.size());
        if (!ok || !keep_alive || stopping) co_return;
        continue;
      }
      // A long poll or a stream: watch the client meanwhile, so one that
      // goes away ends the wait at once; then close (the client may have
      // sent more, and a TLS read cannot be cancelled cleanly).
      auto client_left = std::make_shared<bool>(false);
      lowest(stream).expires_never();  // the watch read waits as long as the answer takes
      bool watching_done = false;
      asio::steady_timer watcher_ended(stream.get_executor());
      watcher_ended.expires_at(asio::steady_timer::time_point::max());
      asio::co_spawn(stream.get_executor(), watch_client(stream, buffer, sig, client_left),
                     [&](std::exception_ptr) {
                       watching_done = true;
                       watcher_ended.cancel();
                     });
      int status = 200;
      std::size_t bytes = 0;
      std::exception_ptr failed;  // rethrown once the watch has ended (it uses this frame)
      try {
        if (auto* l = std::get_if<long_reply>(&a)) {
          stats.held_opened(metrics::held::wait);
          struct unhold {
            metrics& m;
            ~unhold() { m.held_closed(metrics::held::wait); }
          } unheld{stats};
          reply r;
          try {
            // (as in write_stream: a drain's cancel may have come unheard)
            if (stopping) throw boost::system::system_error(asio::error::operation_aborted);
            auto run = l->run;
            r = co_await asio::co_spawn(stream.get_executor(), run(),
                                        asio::bind_cancellation_slot(sig.slot(), asio::use_awaitable));
          } catch (...) {
            r = reply_of(std::current_exception(), stopping);
          }
          status = r.status;
          bytes = r.body.size();
          if (!*client_left) co_await write_reply(stream, r, false);
        } else {
          auto& s = std::get<stream_reply>(a);
          auto kind = target.rfind("/v1/watch", 0) == 0 ? metrics::held::watch : metrics::held::log_follow;
          stats.held_opened(kind);
          struct unhold {
            metrics& m;
            metrics::held k;
            ~unhold() { m.held_closed(k); }
          } unheld{stats, kind};
          bytes = co_await write_stream(stream, s, sig, client_left);
          if (kind == metrics::held::log_follow) stats.log_bytes_served(bytes);
        }
      } catch (...) {
        failed = std::current_exception();
      }
      log_request(peer, method, target, *client_left ? 499 : status, began, bytes);
      boost::system::error_code sec;
      lowest(stream).socket().shutdown(asio::socket_base::shutdown_send, sec);
      lowest(stream).socket().cancel(sec);
      if (!watching_done) {
        boost::system::error_code wec;
        co_await watcher_ended.async_wait(asio::redirect_error(asio::use_awaitable, wec));
      }
      if (failed) std::rethrow_exception(failed);
      co_return;
    }
  }

  // A 200 with chunked transfer: each chunk as the producer gives it, the
  // last chunk at its end (or when the server drains). A slow reader holds
  // the producer back: one chunk is in flight at a time.
  template <class Stream>
  asio::awaitable<std::size_t> write_stream(Stream& stream, stream_reply& s, asio::cancellation_signal& sig,
                                            std::shared_ptr<bool> client_left) {
    http::response<http::empty_body> res{http::status::ok, 11};
    res.set(http::field::server, "tjob");
    res.set(http::field::content_type, s.content_type);
    res.set(http::field::cache_control, "no-store");
    res.set("X-Content-Type-Options", "nosniff");
    res.keep_alive(false);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    boost::system::error_code ec;
    lowest(stream).expires_after(cfg.idle_timeout);
    co_await http::async_write_header(stream, sr, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return 0;
    std::size_t bytes = 0;
    for (;;) {
      std::optional<std::string> chunk;
      if (stopping) break;  // a drain's cancel can come while a chunk is being written, unheard
      try {
        auto next = s.next;
        chunk = co_await asio::co_spawn(stream.get_executor(), next(),
                                        asio::bind_cancellation_slot(sig.slot(), asio::use_awaitable));
      } catch (const std::exception& e) {
        if (!stopping && !*client_left && cfg.logger)
          cfg.logger->warn("msg=\"stream ended early\" error=\"{}\"", e.what());
        chunk.reset();
      }
      if (*client_left) co_return bytes;
      if (!chunk) break;
      if (chunk->empty()) continue;
      lowest(stream).expires_after(cfg.idle_timeout);
      co_await asio::async_write(stream, http::make_chunk(asio::buffer(*chunk)),
                                 asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return bytes;
      bytes += chunk->size();
    }
    lowest(stream).expires_after(cfg.idle_timeout);
    co_await asio::async_write(stream, http::make_chunk_last(),
                               asio::redirect_error(asio::use_awaitable, ec));
    co_return bytes;
  }

  // One more connection than allowed: a 503 saying why, then close.
  template <class Stream>
  asio::awaitable<void> refuse_connection(Stream stream, std::string why) {
    auto self = shared_from_this();
    auto r = error_reply(503, "unavailable", why);
    r.headers.emplace_back("Retry-After", "1");
    lowest(stream).expires_after(std::chrono::seconds(2));
    co_await write_reply(stream, r, false);
    co_await linger(lowest(stream).socket(), std::chrono::milliseconds(200));  // (a flood: be brief)
  }

  // Why a new connection is refused, or empty: its listener is full, or (TCP)
  // too many of its peer's connections, or of all, have not shown the token.
  std::string refusal(const listener_budget& b, const asio::ip::address* peer) const {
    if (b.open >= cfg.max_connections)
      return fmt::format("the server has {} connections open, its limit; retry later", cfg.max_connections);
    if (!peer) return {};
    const auto most = std::max<std::size_t>(1, cfg.max_connections / 4);
    if (b.pending >= most)
      return fmt::format("{} connections are open that have not sent the token, the limit; retry later", most);
    auto it = b.pending_by_peer.find(*peer);
    if (it != b.pending_by_peer.end() && it->second >= cfg.max_pending_per_peer)
      return fmt::format("{} connections from {} have not sent the token, the limit for one address; send "
                         "requests with it, or retry later",
                         cfg.max_pending_per_peer, peer->to_string());
    return {};
  }

  template <class Acceptor, class Stream>
  asio::awaitable<void> accept_loop(Acceptor& acceptor, bool tcp) {
    auto self = shared_from_this();
    auto& budget = budgets.emplace_back();
    for (;;) {
      boost::system::error_code ec;
      auto socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (stopping || ec == asio::error::operation_aborted) co_return;
      if (ec) {
        // Out of descriptors (EMFILE) and the like: the connection waits in
        // the backlog; try again shortly rather than spin.
        asio::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(50));
        co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        continue;
      }
      std::string peer = tcp ? "tcp" : "unix";
      std::optional<asio::ip::address> address;
      if constexpr (!std::is_same_v<Stream, local_stream>) {
        boost::system::error_code aec;
        auto remote = socket.remote_endpoint(aec);
        if (aec) continue;  // gone already
        address = remote.address();
      }
      if (auto why = refusal(budget, address ? &*address : nullptr); !why.empty()) {
        if (refusing >= 64) continue;  // a flood: the socket closes as it goes out of scope
        ++refusing;
        auto done = [self](std::exception_ptr) {
          --self->refusing;
          self->wake_if_drained();
        };
        if constexpr (std::is_same_v<Stream, local_stream>)
          asio::co_spawn(acceptor.get_executor(), refuse_connection(local_stream(std::move(socket)), why), done);
        else
          asio::co_spawn(acceptor.get_executor(), refuse_connection(beast::tcp_stream(std::move(socket)), why),
                         done);
        continue;
      }
      ++open;
      ++budget.open;
      stats.connection_opened();
      if constexpr (std::is_same_v<Stream, local_stream>) {
        asio::co_spawn(acceptor.get_executor(),
                       serve_connection(local_stream(std::move(socket)), peer, budget, nullptr),
                       [self](std::exception_ptr) {});
      } else {
        auto slot = std::make_unique<pending_slot>(budget, *address);
        if (tls) {
          tls_stream s(beast::tcp_stream(std::move(socket)), *tls);
          asio::co_spawn(acceptor.get_executor(), serve_connection(std::move(s), peer, budget, std::move(slot)),
                         [self](std::exception_ptr) {});
        } else {
          asio::co_spawn(acceptor.get_executor(),
                         serve_connection(beast::tcp_stream(std::move(socket)), peer, budget, std::move(slot)),
                         [self](std::exception_ptr) {});
        }
      }
    }
  }
};

server::server(engine& e, server_config config) {
  if (config.listen.empty()) config.listen.push_back("unix://" + (e.home() / "tjob.sock").string());
  if (config.idempotency_dir.empty()) config.idempotency_dir = e.home() / "serve" / "idempotency";
  std::vector<listen_spec> specs;
  bool any_tcp = false;
  for (const auto& l : config.listen) {
    specs.push_back(parse_listen(l));
    any_tcp = any_tcp || !specs.back().unix_socket;
  }
  if (any_tcp && config.token.empty())
    throw error(errc::invalid_argument, "listening on TCP needs a token (--token-file); none was given");
  if (config.tls_cert.empty() != config.tls_key.empty())
    throw error(errc::invalid_argument, "TLS needs both --tls-cert and --tls-key");
  impl_ = std::make_shared<impl>(e, std::move(config));
  auto& s = *impl_;
  if (!s.cfg.tls_cert.empty()) {
    s.tls.emplace(asio::ssl::context::tls_server);
    s.tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1);
    boost::system::error_code ec;
    s.tls->use_certificate_chain_file(s.cfg.tls_cert.string(), ec);
    if (!ec) s.tls->use_private_key_file(s.cfg.tls_key.string(), asio::ssl::context::pem, ec);
    if (ec)
      throw error(errc::invalid_argument, "--tls-cert " + s.cfg.tls_cert.string() + " / --tls-key " +
                                              s.cfg.tls_key.string() + ": " + ec.message());
  }
  for (const auto& l : specs) {
    if (l.unix_socket)
      s.bind_unix(l.path);
    else
      s.bind_tcp(l);
  }
}

server::~server() {
  std::error_code ec;
  if (impl_)
    for (const auto& f : impl_->socket_files) std::filesystem::remove(f, ec);
}

std::vector<std::string> server::addresses() const { return impl_->bound; }

asio::awaitable<void> server::run() {
  auto s = impl_;
  co_await s->hub.load();
  auto ex = s->eng.get_executor();
  std::size_t tasks = 0;
  asio::steady_timer tasks_done(ex);
  tasks_done.expires_at(asio::steady_timer::time_point::max());
  auto done = [&](std::exception_ptr e) {
    if (e && s->cfg.logger) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        s->cfg.logger->error("msg=\"server task failed\" error=\"{}\"", x.what());
      }
    }
    if (--tasks == 0) tasks_done.cancel();
  };
  ++tasks;
  asio::co_spawn(ex, s->hub.run(), done);
  for (auto& a : s->unix_acceptors) {
    ++tasks;
    asio::co_spawn(ex, s->accept_loop<asio::local::stream_protocol::acceptor, local_stream>(a, false), done);
  }
  for (auto& a : s->tcp_acceptors) {
    ++tasks;
    asio::co_spawn(ex, s->accept_loop<asio::ip::tcp::acceptor, beast::tcp_stream>(a, true), done);
  }
  ++tasks;
  asio::co_spawn(ex, s->measure_lag(), done);
  ++tasks;
  asio::co_spawn(ex, s->setup.run(), done);
  boost::system::error_code ec;
  co_await tasks_done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  // The listeners and the hub have ended (stop()); the connections, served
  // and refused, drain.
  if (!s->drained()) {
    s->all_closed.expires_at(asio::steady_timer::time_point::max());
    co_await s->all_closed.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void server::stop() {
  auto& s = *impl_;
  if (s.stopping) return;
  s.stopping = true;
  s.routes.drain();
  boost::system::error_code ec;
  for (auto& a : s.unix_acceptors) a.close(ec);
  for (auto& a : s.tcp_acceptors) a.close(ec);
  s.hub.stop();
  s.lag_stop.emit(asio::cancellation_type::terminal);
  s.setup.stop();
  for (auto& sig : s.signals) sig.emit(asio::cancellation_type::terminal);
  s.wake_if_drained();
}

}  // namespace tjob::serve
