// A Kubernetes API client on the shared HTTP layer: JSON requests with the
// bearer token, Status error objects turned into errors that quote the
// server, and streams for watches and pod logs.
//
// Threading: the executor it was made on; call from coroutines there.
// Errors: every call returns an outcome. A failure answer (a Status) has a
//   kube_errc code by its HTTP code and reason, the server's message quoted;
//   a server that cannot be reached, an http_errc code; a malformed answer,
//   kube_errc::bad_answer. The token never appears in a message.
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

/// What a Status failure said, by its HTTP code and reason; what it means to
/// tjob is in the comment.
enum class kube_errc {
  not_found = 1,      ///< 404 NotFound (backend_error: the caller words "no such job")
  already_exists,     ///< 409 AlreadyExists (duplicate_name)
  conflict,           ///< 409 Conflict: a stale resourceVersion (backend_error)
  bad_request,        ///< 400 BadRequest (invalid_argument)
  invalid,            ///< 422 Invalid (invalid_argument)
  unauthorized,       ///< 401 (backend_error)
  forbidden,          ///< 403 (backend_error)
  expired,            ///< 410 Expired/Gone: a watch's resourceVersion is too old, list again
  too_many_requests,  ///< 429 (backend_unavailable)
  server_error,       ///< 5xx (backend_unavailable)
  refused,            ///< another non-2xx answer (backend_error)
  bad_answer,         ///< not JSON, or not what the API documents (protocol_error)
};
const boost::system::error_category& kube_category() noexcept;
inline boost::system::error_code make_error_code(kube_errc e) noexcept {
  return {static_cast<int>(e), kube_category()};
}

using detail::failure;
template <class T>
using outcome = detail::outcome<T>;

/// The failure for a non-2xx answer `body` (a Status object, or anything) to
/// `what` at `server`: its code by HTTP code and reason, the message quoting
/// the server's, the body as diagnostics.
failure status_failure(const std::string& server, const std::string& what, unsigned code,
                       std::string_view body);

/// One watch event line: {"type": ..., "object": {...}}.
struct watch_event {
  std::string type;  ///< ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  boost::json::object object;
};
/// Parses one line; bad_answer naming `what` when it is not a watch event.
outcome<watch_event> parse_watch_event(std::string_view line, const std::string& what);

class api {
 public:
  api(boost::asio::any_io_executor ex, connection conn,
      std::chrono::milliseconds timeout = std::chrono::seconds(30));
  const connection& conn() const { return conn_; }
  /// "https://host:port", for messages.
  const std::string& server() const { return conn_.server; }

  boost::asio::awaitable<outcome<boost::json::value>> get(std::string path);
  /// nullopt on 404.
  boost::asio::awaitable<outcome<std::optional<boost::json::value>>> get_if(std::string path);
  boost::asio::awaitable<outcome<boost::json::value>> post(std::string path, boost::json::value body);
  boost::asio::awaitable<outcome<boost::json::value>> merge_patch(std::string path, boost::json::value body);
  boost::asio::awaitable<outcome<boost::json::value>> del(std::string path);
  /// A streaming GET (watch, logs) whose answer was 2xx; failures as above.
  boost::asio::awaitable<outcome<http::body_stream>> stream(std::string path);
  /// Requests sent so far (for tests and diagnostics).
  std::uint64_t requests() const { return requests_; }

  /// The clock that times the token file's re-reads (a test moves it).
  using clock_fn = std::function<std::chrono::steady_clock::time_point()>;
  void set_clock(clock_fn now);
  /// How often the token file is read again (service-account tokens rotate).
  static constexpr std::chrono::minutes token_reread{1};

 private:
  boost::asio::awaitable<outcome<http::response>> send(std::string method, std::string path, std::string body,
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

template <>
struct boost::system::is_error_code_enum<tjob::kube::kube_errc> : std::true_type {};
