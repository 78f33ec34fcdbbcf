// HTTP/1.1 client on Boost.Beast over unix sockets, TCP and TLS (OpenSSL), for
// the daemon and API-server adapters. One request per connection; bodies are read whole (up to
// a bound) or piecewise for streams (logs, events, watches).
//
// Threading: a client and its streams belong to the executor they were made
//   on; call them from coroutines there.
// Cancellation: `body_stream::close()` ends a pending read_some (it fails
//   with http_errc::closed); destroying a stream closes its connection.
// Errors: exchanges return an outcome whose failure has an http_errc code
//   (connect_failed, timed_out, closed_early, exchange_failed mean
//   backend_unavailable; malformed and too_large mean protocol_error). HTTP
//   error statuses are answers, not failures: the caller reads `status`.
//   Bad settings (an endpoint, a certificate) throw tjob::error when the
//   client is made.
#pragma once

#include "core/outcome.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::http {

/// How an exchange with a peer failed.
enum class http_errc {
  connect_failed = 1,  ///< the socket could not be connected
  timed_out,           ///< connecting, sending or the head took longer than the request's timeout
  closed_early,        ///< the peer closed before or in the middle of its answer
  exchange_failed,     ///< another I/O error while sending or reading
  malformed,           ///< the answer is not HTTP
  too_large,           ///< the answer (or a line of it) is over a limit
  closed,              ///< we closed the stream (a read pending or after it)
  untrusted,           ///< the server's certificate could not be verified
  bad_request,         ///< the request cannot be sent as it is (an unknown method, no TLS settings)
};
const boost::system::error_category& http_category() noexcept;
inline boost::system::error_code make_error_code(http_errc e) noexcept {
  return {static_cast<int>(e), http_category()};
}

template <class T>
using outcome = detail::outcome<T>;

/// Where a server listens: a unix socket path or a TCP host and port.
struct endpoint {
  enum class kind { unix_socket, tcp };
  kind type = kind::unix_socket;
  std::string path;        ///< unix socket path
  std::string host;        ///< TCP host name or address
  std::uint16_t port = 0;  ///< TCP port
  bool tls = false;        ///< https: TLS over the TCP connection
  /// unix:///path, tcp://host:port or https://host:port, for messages.
  std::string url() const;
};

/// Parses `unix:///path` (or a bare absolute path), `tcp://host:port`,
/// `http://host:port` or `https://host[:port]` (port 443 when absent); the
/// failure (invalid_argument) names the problem.
outcome<endpoint> try_parse_endpoint(std::string_view url);
/// try_parse_endpoint, throwing its failure as tjob::error.
endpoint parse_endpoint(std::string_view url);

/// How a TLS connection is checked and who we are. Verification is on unless
/// `insecure_skip_verify`; without a CA the system's trust store is used.
struct tls_config {
  std::string ca_pem;  ///< PEM certificates of the CAs to trust
  bool insecure_skip_verify = false;
  std::string client_cert_pem;  ///< client certificate chain (PEM), optional
  std::string client_key_pem;   ///< its private key (PEM); never shown in errors
  std::string server_name;      ///< name to verify (and SNI); empty: the endpoint's host
  std::string source;           ///< where these came from, for messages ("kubeconfig /x, user u")
};

struct request {
  std::string method = "GET";
  std::string target;  ///< path and query, already encoded
  std::string body;
  std::string content_type;  ///< sent when the body is not empty; default application/json
  std::vector<std::pair<std::string, std::string>> headers;
  /// Connecting, sending and reading the head; for `send` also the whole body.
  std::chrono::milliseconds timeout{30'000};
};

struct response {
  unsigned status = 0;
  std::map<std::string, std::string> headers;  ///< names in lower case
  std::string body;
  std::string header(std::string_view name) const;
};

/// A response whose body is read as it arrives (chunked or not).
class body_stream {
 public:
  struct impl;
  explicit body_stream(std::unique_ptr<impl> p);
  body_stream(body_stream&&) noexcept;
  body_stream& operator=(body_stream&&) noexcept;
  ~body_stream();

  unsigned status() const;
  std::string header(std::string_view name) const;
  const std::map<std::string, std::string>& headers() const;  ///< names in lower case
  /// The next bytes of the body (at most a bounded buffer's worth); nullopt
  /// when the body has ended. No timeout: a stream may be quiet for long.
  boost::asio::awaitable<outcome<std::optional<std::string>>> read_some();
  /// The rest of the body, at most `limit` bytes (more is too_large).
  boost::asio::awaitable<outcome<std::string>> read_all(std::size_t limit);
  /// Closes the connection; a read_some pending or later fails with `closed`.
  void close();

 private:
  std::unique_ptr<impl> impl_;
};

class client {
 public:
  /// `max_body`: the most a whole-body response may hold. An https endpoint
  /// needs `tls` (throws invalid_argument when a certificate or key is not
  /// usable PEM).
  client(boost::asio::any_io_executor ex, endpoint ep, std::size_t max_body = 64 << 20,
         std::optional<tls_config> tls = std::nullopt);
  const endpoint& where() const { return ep_; }
  /// Sends the request and reads the whole response.
  boost::asio::awaitable<outcome<response>> send(request r);
  /// Sends the request, reads the head, and hands over the body as a stream.
  boost::asio::awaitable<outcome<body_stream>> open(request r);

 private:
  struct tls_state;
  boost::asio::any_io_executor ex_;
  endpoint ep_;
  std::size_t max_body_;
  std::shared_ptr<tls_state> tls_;
};

/// Splits a byte stream into lines ('\n'-terminated, the '\n' dropped, a
/// trailing '\r' too). A line longer than `max_line` is a failure (too_large,
/// naming `what`), never an unbounded buffer.
class line_splitter {
 public:
  explicit line_splitter(std::size_t max_line, std::string what = "stream");
  /// Adds bytes; the complete lines are appended to `out`.
  outcome<void> feed(std::string_view bytes, std::vector<std::string>& out);
  /// What is left after the stream ended (a last line without '\n').
  std::optional<std::string> finish();

 private:
  std::size_t max_;
  std::string what_;
  std::string buf_;
};

/// Percent-encodes a query value (RFC 3986 unreserved characters stay).
std::string url_encode(std::string_view s);

}  // namespace tjob::http

template <>
struct boost::system::is_error_code_enum<tjob::http::http_errc> : std::true_type {};
