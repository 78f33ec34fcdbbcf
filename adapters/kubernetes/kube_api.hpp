// A Kubernetes API client on the shared HTTP layer: JSON requests with the
// bearer token, Status error objects turned into errors that quote the
// server, and streams for watches and pod logs.
//
// Threading: the executor it was made on; call from coroutines there.
// Errors: kube::status_error (a tjob::error) for an answer that is a Status
//   failure, with its HTTP code and reason; tjob::error(backend_unavailable)
//   when the server cannot be reached; protocol_error for a malformed answer.
//   The token never appears in a message.
#pragma once

#include "adapters/http/http_client.hpp"
#include "adapters/kubernetes/kubeconfig.hpp"

#include <tjob/error.hpp>

#include <boost/json/value.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace tjob::kube {

/// A failure answer: `code` is the HTTP status, `reason` the Status reason
/// (NotFound, AlreadyExists, Conflict, Invalid, Expired, Forbidden, ...).
class status_error : public error {
 public:
  status_error(boost::system::error_code c, std::string message, unsigned code, std::string reason)
      : error(c, std::move(message)), code_(code), reason_(std::move(reason)) {}
  unsigned http_code() const noexcept { return code_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  unsigned code_;
  std::string reason_;
};

/// The error for a non-2xx answer `body` (a Status object, or anything) to
/// `what` at `server`: errc by code (404 not found → backend_error; 409 →
/// duplicate_name; 422/400 → invalid_argument; 401/403 → backend_error; 5xx →
/// backend_unavailable), the message quoting the server's.
status_error status_failure(const std::string& server, const std::string& what, unsigned code,
                            std::string_view body);

/// One watch event line: {"type": ..., "object": {...}}.
struct watch_event {
  std::string type;  ///< ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  boost::json::object object;
};
/// Parses one line; throws protocol_error naming `what` when it is not a
/// watch event.
watch_event parse_watch_event(std::string_view line, const std::string& what);

class api {
 public:
  api(boost::asio::any_io_executor ex, connection conn,
      std::chrono::milliseconds timeout = std::chrono::seconds(30));
  const connection& conn() const { return conn_; }
  /// "https://host:port", for messages.
  const std::string& server() const { return conn_.server; }

  boost::asio::awaitable<boost::json::value> get(std::string path);
  /// nullopt on 404.
  boost::asio::awaitable<std::optional<boost::json::value>> get_if(std::string path);
  boost::asio::awaitable<boost::json::value> post(std::string path, boost::json::value body);
  boost::asio::awaitable<boost::json::value> merge_patch(std::string path, boost::json::value body);
  boost::asio::awaitable<boost::json::value> del(std::string path);
  /// A streaming GET (watch, logs) whose answer was 2xx; failures as above.
  boost::asio::awaitable<http::body_stream> stream(std::string path);
  /// Requests sent so far (for tests and diagnostics).
  std::uint64_t requests() const { return requests_; }

  /// The clock that times the token file's re-reads (a test moves it).
  using clock_fn = std::function<std::chrono::steady_clock::time_point()>;
  void set_clock(clock_fn now);
  /// How often the token file is read again (service-account tokens rotate).
  static constexpr std::chrono::minutes token_reread{1};

 private:
  boost::asio::awaitable<http::response> send(std::string method, std::string path, std::string body,
                                              std::string content_type);
  /// The Authorization header's value, the token file re-read once a minute
  /// (service-account tokens rotate); empty without a token.
  std::string bearer();
  boost::asio::any_io_executor ex_;
  connection conn_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<http::client> http_;
  std::uint64_t requests_ = 0;
  clock_fn now_ = [] { return std::chrono::steady_clock::now(); };
  std::chrono::steady_clock::time_point token_read_ = now_();
};

}  // namespace tjob::kube
