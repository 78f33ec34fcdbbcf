// tjob serve's listeners, apart from the HTTP they carry: where to listen,
// binding a private unix socket or a TCP address (TLS required off loopback),
// each listener's connection budget, and the access log's quoting.
#pragma once

#include "serve/server.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace tjob::serve {

struct listen_spec {
  bool unix_socket = true;
  std::string path, host;
  std::uint16_t port = 0;
};

/// "unix:///path" or "tcp://HOST:PORT"; throws tjob::error naming the fix.
listen_spec parse_listen(const std::string& s);

/// A unix socket at `path`, 0600 from before anyone can connect; a stale
/// socket of a dead server is replaced, a live one or a plain file refused.
boost::asio::local::stream_protocol::acceptor bind_unix(const boost::asio::any_io_executor& ex,
                                                        const std::string& path);

/// A TCP listener; one off loopback is refused without `tls` unless
/// `insecure`. `bound` gets its address ("tcp://127.0.0.1:8080", https with TLS).
boost::asio::ip::tcp::acceptor bind_tcp(const boost::asio::any_io_executor& ex, const listen_spec& l,
                                        bool tls, bool insecure, std::string& bound);

/// Tokens compared in constant time.
bool same_token(std::string_view a, std::string_view b);

/// One listener's budget: its connections, and those of them (TCP) that have
/// not shown the token yet, in all and per peer address.
struct listener_budget {
  std::size_t open = 0, pending = 0;
  std::map<boost::asio::ip::address, std::size_t> pending_by_peer;
};

/// Why a new connection is refused, or empty: its listener is full, or (TCP,
/// `peer` given) too many of its peer's connections, or of all, have not
/// shown the token.
std::string refusal(const server_config& cfg, const listener_budget& b, const boost::asio::ip::address* peer);

/// A TCP connection's place among the pending ones, given back when it shows
/// the token or ends.
class pending_slot {
 public:
  pending_slot(listener_budget& b, boost::asio::ip::address peer);
  pending_slot(const pending_slot&) = delete;
  pending_slot& operator=(const pending_slot&) = delete;
  ~pending_slot() { release(); }
  bool held() const { return b_ != nullptr; }
  void release();

 private:
  listener_budget* b_;
  boost::asio::ip::address peer_;
};

/// A field for the access log: quoted, with what would end or break the
/// field escaped (`"`, `\`, control characters as \xHH).
std::string log_quoted(std::string_view s);

}  // namespace tjob::serve
