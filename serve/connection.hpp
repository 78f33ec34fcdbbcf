// One connection of tjob serve, as a small state machine: read a request
// (its header within the header timeout, the limits, the token, then its
// body), answer it whole and read the next, or hold it (a long poll, a
// chunked stream, the client watched meanwhile) until it ends the
// connection; then a lingering close. Included by serve/server.cpp alone.
#pragma once

#include "serve/server_impl.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace tjob::serve {

// Writes a whole reply; false when the client is gone.
template <class Stream>
asio::awaitable<bool> write_reply(server::impl& srv, Stream& stream, const reply& r, bool keep_alive) {
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  res.set(http::field::server, "tjob");
  res.set(http::field::content_type, r.content_type);
  for (const auto& [k, v] : r.headers) res.set(k, v);
  if (r.status == 401) res.set(http::field::www_authenticate, "Bearer realm=\"tjob\"");
  res.body() = r.body;
  res.keep_alive(keep_alive);
  res.prepare_payload();
  lowest(stream).expires_after(srv.cfg.idle_timeout);
  boost::system::error_code ec;
  co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

// Reads from the client while an answer is being made; a close (or an
// error) emits `gone`. Data the client sends meanwhile is kept for the
// next request (pipelining).
template <class Stream>
asio::awaitable<void> watch_client(server::impl& srv, Stream& stream, beast::flat_buffer& buffer,
                                   asio::cancellation_signal& gone, std::shared_ptr<bool> client_left) {
  boost::system::error_code ec;
  for (;;) {
    auto space = buffer.prepare(512);
    std::size_t n = co_await stream.async_read_some(space, asio::redirect_error(asio::use_awaitable, ec));
    buffer.commit(n);
    if (ec) break;
    if (buffer.size() > srv.cfg.max_header_bytes + srv.cfg.max_body_bytes) break;  // a flood, not a request
  }
  if (ec != asio::error::operation_aborted) {
    *client_left = true;
    gone.emit(asio::cancellation_type::terminal);
  }
}

template <class Stream>
asio::awaitable<void> serve_connection(server::impl& srv, Stream stream, std::string peer,
                                       listener_budget& budget, std::unique_ptr<pending_slot> pending) {
  auto self = srv.shared_from_this();
  auto& sig = srv.signals.emplace_back();
  auto sig_it = std::prev(srv.signals.end());
  struct leave {
    server::impl& s;
    listener_budget& b;
    std::list<asio::cancellation_signal>::iterator it;
    ~leave() {
      s.signals.erase(it);
      s.closed_one(b);
    }
  } on_exit{srv, budget, sig_it};
  (void)sig;
  try {
    co_await serve_requests(srv, stream, peer, pending.get(), *sig_it);
  } catch (const std::exception& e) {
    if (srv.cfg.logger)
      srv.cfg.logger->debug("msg=\"connection ended\" peer={} error=\"{}\"", peer, e.what());
  }
  co_await linger_close(srv, lowest(stream).socket());
}

// A lingering close, as nginx's: our side of the connection ends, then
// what the client still sends (a body we refused unread) is read and
// dropped, for a second at most (a refused connection: 200 ms). Closing with unread bytes would reset
// the connection, and the client could lose the answer it was sent.
template <class Socket>
asio::awaitable<void> linger_close(server::impl& srv, Socket& socket,
                                   std::chrono::milliseconds most = std::chrono::seconds(1)) {
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

// --- one connection, as a small state machine: read a request (header,
// limits, token, body), then answer it whole and read the next, or hold it
// (a long poll, a stream) until it ends the connection.

template <class Stream>
struct connection {
  Stream& stream;
  const std::string& peer;
  // A TCP connection's slot among those that have not shown the token
  // (null on the unix socket, which needs none): its header must come
  // within header_timeout, and its first request with the token frees it.
  pending_slot* pending;
  asio::cancellation_signal& sig;
  beast::flat_buffer buffer;
};

struct incoming {
  request rq;
  bool keep_alive = false;
  std::chrono::steady_clock::time_point began;
};

// A refusal before the request is read whole: it is answered, and the
// connection closes (what the client still sends is drained by linger).
template <class Stream>
asio::awaitable<void> refuse(server::impl& srv, connection<Stream>& c, const reply& r,
                             const std::string& method, std::string_view target,
                             std::chrono::steady_clock::time_point began) {
  co_await write_reply(srv, c.stream, r, false);
  srv.log_request(c.peer, method, target, r.status, began, r.status == 401 ? r.body.size() : 0);
}

// Why a request whose header did not read is refused; nullopt when the
// connection simply ended (closed, timed out, drained).
std::optional<reply> header_problem(server::impl& srv, const boost::system::error_code& ec,
                                    http::request_parser<http::string_body>& parser) {
  if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == beast::error::timeout ||
      ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
    return std::nullopt;
  if (ec == http::error::body_limit) {  // its Content-Length says so; nothing of it is read
    // (the header is not "done" for the parser, so its content_length()
    // may not be asked: the field itself is in the message already)
    std::string len(parser.get()[http::field::content_length]);
    return error_reply(
        413, "too_large",
        fmt::format("the body is {} bytes; a job spec may have at most {}", len, srv.cfg.max_body_bytes));
  }
  if (ec == http::error::header_limit)
    return error_reply(
        431, "headers_too_large",
        fmt::format("the request line and headers are over {} bytes", srv.cfg.max_header_bytes));
  return error_reply(400, "bad_request", "the request is not HTTP/1.1 (" + ec.message() + ")");
}

// The token, right after the header: a client without it is refused
// before anything of its body is read or a 100 Continue is sent.
std::optional<reply> token_problem(server::impl& srv, const http::request<http::string_body>& head) {
  auto auth = head[http::field::authorization];
  std::string_view given;
  bool bearer = auth.size() > 7 && beast::iequals(auth.substr(0, 7), "Bearer ");
  if (bearer) given = std::string_view(auth.data() + 7, auth.size() - 7);
  if (bearer && same_token(given, srv.cfg.token)) return std::nullopt;
  return error_reply(401, "unauthorized",
                     bearer ? "the bearer token is wrong; use the one in the server's token file"
                            : "this server needs a token: send Authorization: Bearer <token> (the "
                              "server's token file, or --token-file)");
}

// The next request, read whole; nullopt when the connection ends (it closed,
// or a refusal was answered).
template <class Stream>
asio::awaitable<std::optional<incoming>> read_request(server::impl& srv, connection<Stream>& c) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(srv.cfg.max_header_bytes));
  parser.body_limit(srv.cfg.max_body_bytes);
  lowest(c.stream).expires_after(c.pending && c.pending->held() ? srv.cfg.header_timeout
                                                                : srv.cfg.idle_timeout);
  boost::system::error_code ec;
  // (a drain cancels a connection that waits for its next request)
  co_await http::async_read_header(
      c.stream, c.buffer, parser,
      asio::bind_cancellation_slot(c.sig.slot(), asio::redirect_error(asio::use_awaitable, ec)));
  const auto began = std::chrono::steady_clock::now();
  if (ec) {
    if (auto r = header_problem(srv, ec, parser)) {
      // (the head is there to log only when its body was too large; named
      // locals: a conditional's temporary in a co_await is g++ 12's double free)
      const bool known = ec == http::error::body_limit;
      const std::string method = known ? std::string(parser.get().method_string()) : "-";
      const std::string target = known ? std::string(parser.get().target()) : "-";
      co_await refuse(srv, c, *r, method, target, began);
    }
    co_return std::nullopt;
  }
  auto& head = parser.get();
  std::string method(head.method_string()), target(head.target());
  std::optional<reply> refusal;
  if (auto len = parser.content_length(); len && *len > srv.cfg.max_body_bytes)
    refusal = error_reply(
        413, "too_large",
        fmt::format("the body is {} bytes; a job spec may have at most {}", *len, srv.cfg.max_body_bytes));
  else if (c.pending && !token_free(method, target))
    refusal = token_problem(srv, head);
  if (refusal) {
    co_await refuse(srv, c, *refusal, method, target, began);
    co_return std::nullopt;
  }
  if (c.pending && !token_free(method, target)) c.pending->release();  // a client, no longer a stranger
  lowest(c.stream).expires_after(srv.cfg.idle_timeout);
  if (auto expect = head[http::field::expect]; beast::iequals(expect, "100-continue")) {
    http::response<http::empty_body> cont{http::status::continue_, 11};
    co_await http::async_write(c.stream, cont, asio::use_awaitable);
  }
  if (!parser.is_done()) {
    co_await http::async_read(c.stream, c.buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::body_limit) {
      auto r =
          error_reply(413, "too_large", fmt::format("the body is over {} bytes", srv.cfg.max_body_bytes));
      co_await refuse(srv, c, r, method, target, began);
    }
    if (ec) co_return std::nullopt;
  }
  auto msg = parser.release();
  incoming in;
  in.keep_alive = msg.keep_alive();
  in.began = began;
  in.rq.method = std::move(method);
  in.rq.target = std::move(target);
  in.rq.body = std::move(msg.body());
  in.rq.idempotency_key = std::string(msg["Idempotency-Key"]);
  in.rq.local_peer = !c.pending;  // only TCP listeners take tokens: this is the unix socket
  co_return in;
}

// A long poll's reply, the wait cancelled when the client goes or the server drains.
template <class Stream>
asio::awaitable<reply> run_long(server::impl& srv, connection<Stream>& c, long_reply& l) {
  srv.stats.held_opened(metrics::held::wait);
  struct unhold {
    metrics& m;
    ~unhold() { m.held_closed(metrics::held::wait); }
  } unheld{srv.stats};
  try {
    // (as in write_stream: a drain's cancel may have come unheard)
    if (srv.stopping) throw boost::system::system_error(asio::error::operation_aborted);
    auto run = l.run;
    co_return co_await asio::co_spawn(c.stream.get_executor(), run(),
                                      asio::bind_cancellation_slot(c.sig.slot(), asio::use_awaitable));
  } catch (...) {
    co_return reply_of(std::current_exception(), srv.stopping);
  }
}

// A stream's chunks; the bytes sent.
template <class Stream>
asio::awaitable<std::size_t> run_stream(server::impl& srv, connection<Stream>& c, stream_reply& s,
                                        const std::string& target, std::shared_ptr<bool> client_left) {
  auto kind = target.rfind("/v1/watch", 0) == 0 ? metrics::held::watch : metrics::held::log_follow;
  srv.stats.held_opened(kind);
  struct unhold {
    metrics& m;
    metrics::held k;
    ~unhold() { m.held_closed(k); }
  } unheld{srv.stats, kind};
  auto bytes = co_await write_stream(srv, c.stream, s, c.sig, client_left);
  if (kind == metrics::held::log_follow) srv.stats.log_bytes_served(bytes);
  co_return bytes;
}

// A long poll or a stream: the client is watched meanwhile, so one that goes
// away ends the wait at once; then the connection closes (the client may
// have sent more, and a TLS read cannot be cancelled cleanly).
template <class Stream>
asio::awaitable<void> hold(server::impl& srv, connection<Stream>& c, incoming& in, answer& a) {
  auto client_left = std::make_shared<bool>(false);
  lowest(c.stream).expires_never();  // the watch read waits as long as the answer takes
  bool watching_done = false;
  asio::steady_timer watcher_ended(c.stream.get_executor());
  watcher_ended.expires_at(asio::steady_timer::time_point::max());
  asio::co_spawn(c.stream.get_executor(), watch_client(srv, c.stream, c.buffer, c.sig, client_left),
                 [&](std::exception_ptr) {
                   watching_done = true;
                   watcher_ended.cancel();
                 });
  int status = 200;
  std::size_t bytes = 0;
  std::exception_ptr failed;  // rethrown once the watch has ended (it uses this frame)
  try {
    if (auto* l = std::get_if<long_reply>(&a)) {
      auto r = co_await run_long(srv, c, *l);
      status = r.status;
      bytes = r.body.size();
      if (!*client_left) co_await write_reply(srv, c.stream, r, false);
    } else {
      bytes = co_await run_stream(srv, c, std::get<stream_reply>(a), in.rq.target, client_left);
    }
  } catch (...) {
    failed = std::current_exception();
  }
  srv.log_request(c.peer, in.rq.method, in.rq.target, *client_left ? 499 : status, in.began, bytes);
  boost::system::error_code sec;
  lowest(c.stream).socket().shutdown(asio::socket_base::shutdown_send, sec);
  lowest(c.stream).socket().cancel(sec);
  if (!watching_done) {
    boost::system::error_code wec;
    co_await watcher_ended.async_wait(asio::redirect_error(asio::use_awaitable, wec));
  }
  if (failed) std::rethrow_exception(failed);
}

template <class Stream>
asio::awaitable<void> serve_requests(server::impl& srv, Stream& stream, const std::string& peer,
                                     pending_slot* pending, asio::cancellation_signal& sig) {
  connection<Stream> c{stream, peer, pending, sig, {}};
  if constexpr (std::is_same_v<Stream, tls_stream>) {
    lowest(stream).expires_after(pending && pending->held() ? srv.cfg.header_timeout : srv.cfg.idle_timeout);
    boost::system::error_code hec;
    co_await stream.async_handshake(asio::ssl::stream_base::server, asio::redirect_error(asio::use_awaitable, hec));
    if (hec) {
      // A plain HTTP request where TLS was due (OpenSSL knows it by its
      // first bytes): answered in plain HTTP, saying so, where an empty
      // reply would leave the client guessing (nginx does the same).
      if (hec.category() == asio::error::get_ssl_category() && ERR_GET_REASON(hec.value()) == SSL_R_HTTP_REQUEST) {
        auto r = error_reply(400, "tls_required",
                             "this tjob serve listener speaks HTTPS (it has --tls-cert): give its URL as "
                             "https://HOST:PORT, not http:// or tcp://");
        co_await write_reply(srv, lowest(stream), r, false);
        srv.log_request(peer, "-", "(plain HTTP on a TLS listener)", 400, std::chrono::steady_clock::now(),
                        r.body.size());
        co_return;
      }
      throw boost::system::system_error(hec);
    }
  }
  while (!srv.stopping) {
    auto in = co_await read_request(srv, c);
    if (!in) co_return;
    const auto method = in->rq.method, target = in->rq.target;
    answer a;
    try {
      a = co_await srv.routes.handle(in->rq);
    } catch (...) {
      a = reply_of(std::current_exception(), srv.stopping);
    }
    auto* r = std::get_if<reply>(&a);
    if (!r) {
      co_await hold(srv, c, *in, a);
      co_return;
    }
    bool ok = co_await write_reply(srv, stream, *r, in->keep_alive && !srv.stopping);
    srv.log_request(peer, method, target, r->status, in->began, r->body.size());
    if (!ok || !in->keep_alive) co_return;
  }
}

// A 200 with chunked transfer: each chunk as the producer gives it, the
// last chunk at its end (or when the server drains). A slow reader holds
// the producer back: one chunk is in flight at a time.
template <class Stream>
asio::awaitable<std::size_t> write_stream(server::impl& srv, Stream& stream, stream_reply& s,
                                          asio::cancellation_signal& sig, std::shared_ptr<bool> client_left) {
  http::response<http::empty_body> res{http::status::ok, 11};
  res.set(http::field::server, "tjob");
  res.set(http::field::content_type, s.content_type);
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
  res.keep_alive(false);
  res.chunked(true);
  http::response_serializer<http::empty_body> sr{res};
  boost::system::error_code ec;
  lowest(stream).expires_after(srv.cfg.idle_timeout);
  co_await http::async_write_header(stream, sr, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return 0;
  std::size_t bytes = 0;
  for (;;) {
    std::optional<std::string> chunk;
    if (srv.stopping) break;  // a drain's cancel can come while a chunk is being written, unheard
    try {
      auto next = s.next;
      chunk = co_await asio::co_spawn(stream.get_executor(), next(),
                                      asio::bind_cancellation_slot(sig.slot(), asio::use_awaitable));
    } catch (const std::exception& e) {
      if (!srv.stopping && !*client_left && srv.cfg.logger)
        srv.cfg.logger->warn("msg=\"stream ended early\" error=\"{}\"", e.what());
      chunk.reset();
    }
    if (*client_left) co_return bytes;
    if (!chunk) break;
    if (chunk->empty()) continue;
    lowest(stream).expires_after(srv.cfg.idle_timeout);
    co_await asio::async_write(stream, http::make_chunk(asio::buffer(*chunk)),
                               asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return bytes;
    bytes += chunk->size();
  }
  lowest(stream).expires_after(srv.cfg.idle_timeout);
  co_await asio::async_write(stream, http::make_chunk_last(), asio::redirect_error(asio::use_awaitable, ec));
  co_return bytes;
}

// One more connection than allowed: a 503 saying why, then close.
template <class Stream>
asio::awaitable<void> refuse_connection(server::impl& srv, Stream stream, std::string why) {
  auto self = srv.shared_from_this();
  auto r = error_reply(503, "unavailable", why);
  r.headers.emplace_back("Retry-After", "1");
  lowest(stream).expires_after(std::chrono::seconds(2));
  co_await write_reply(srv, stream, r, false);
  co_await linger_close(srv, lowest(stream).socket(), std::chrono::milliseconds(200));  // (a flood: be brief)
}

}  // namespace tjob::serve
