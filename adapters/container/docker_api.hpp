// Docker Engine API client (Docker and Podman's compatible API), asynchronous,
// on the shared HTTP layer. Bodies are Boost.JSON values; what a daemon returns
// is handed back as it is, apart from the two daemons' differences noted here.
//
// Threading: one executor; call from coroutines on it.
// Errors: every call returns an outcome. Its failure has an http_errc code
//   when the daemon cannot be reached or the exchange broke, else a
//   docker_errc: the daemon refused (the message quotes the daemon's own words
//   and the HTTP status; its body is the diagnostics), or its answer is not
//   what the API documents. Lookups of things that do not exist return nullopt.
#pragma once

#include "adapters/http/http_client.hpp"

#include <tjob/types.hpp>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tjob::container {

/// How the daemon refused, or what was wrong with its answer.
enum class docker_errc {
  not_found = 1,     ///< 404: no such container, image or network
  conflict,          ///< 409: a name in use, a container in the wrong state
  bad_parameter,     ///< 400: the daemon rejected what we sent
  refused,           ///< another 4xx
  daemon_failed,     ///< 5xx: the daemon failed (its message says why)
  bad_answer,        ///< the answer is not what the Engine API documents
  too_old,           ///< the daemon's API version is older than tjob speaks
  pull_failed,       ///< an image pull or import reported an error in its stream
  unreadable_input,  ///< a file to send (an image tarball) cannot be read
};
const boost::system::error_category& docker_category() noexcept;
inline boost::system::error_code make_error_code(docker_errc e) noexcept {
  return {static_cast<int>(e), docker_category()};
}

using detail::failure;
template <class T>
using outcome = detail::outcome<T>;

enum class daemon_kind { docker, podman };
std::string_view to_string(daemon_kind k) noexcept;

struct daemon_info {
  daemon_kind kind = daemon_kind::docker;
  std::string version;      ///< the daemon's own version ("20.10.24", "4.3.1")
  std::string api_version;  ///< the API version requests use ("1.41")
};

/// Splits the 8-byte multiplexed log frames ([stream, 0, 0, 0, length big-endian]
/// then the payload) that /logs and /attach send when the container has no TTY.
/// In raw mode (a TTY container) bytes pass through as stdout.
class frame_decoder {
 public:
  /// `max_frame`: a frame header announcing more is a failure (bad_answer).
  explicit frame_decoder(bool raw = false, std::size_t max_frame = 1 << 20);
  /// Adds bytes; calls `out(stream, payload)` for each payload piece (1 stdout,
  /// 2 stderr; 0 stdin). A frame may come in several pieces.
  outcome<void> feed(std::string_view bytes, const std::function<void(int, std::string_view)>& out);
  /// True between frames (a stream that ends elsewhere was cut).
  bool at_boundary() const { return raw_ || (header_have_ == 0 && remaining_ == 0); }

 private:
  bool raw_;
  std::size_t max_;
  unsigned char header_[8]{};
  std::size_t header_have_ = 0;
  std::size_t remaining_ = 0;
  int stream_ = 1;
};

class docker_api {
 public:
  /// `tls`: for an https endpoint (DOCKER_TLS_VERIFY's certificates).
  docker_api(boost::asio::any_io_executor ex, http::endpoint ep, std::optional<http::tls_config> tls = {});
  const http::endpoint& where() const { return http_.where(); }
  /// The daemon's info, after `connect`.
  const daemon_info& info() const { return info_; }
  /// "docker at unix:///run/docker.sock", for messages.
  std::string describe() const;

  /// GET /_ping then /version: which daemon, and the API version to speak
  /// (the daemon's, capped at 1.41; both daemons here speak exactly 1.41).
  boost::asio::awaitable<outcome<daemon_info>> connect(std::chrono::milliseconds timeout);

  // images
  boost::asio::awaitable<outcome<std::optional<boost::json::object>>> image_inspect(const std::string& image);
  /// POST /images/create?fromImage=…; `progress` gets one line per status
  /// message the daemon streams. A pull that reports an error fails (pull_failed).
  boost::asio::awaitable<outcome<void>> image_pull(const std::string& image,
                                                   std::function<void(const std::string&)> progress);
  /// POST /images/create?fromSrc=- with a root-filesystem tarball as the body.
  boost::asio::awaitable<outcome<void>> image_import(const std::string& tarball, const std::string& repo,
                                                     const std::string& tag);

  // networks
  boost::asio::awaitable<outcome<std::string>> network_create(
      const std::string& name, const std::map<std::string, std::string>& labels, bool internal);
  boost::asio::awaitable<outcome<std::optional<boost::json::object>>> network_inspect(const std::string& id);
  /// True when it was removed, false when there was none.
  boost::asio::awaitable<outcome<bool>> network_remove(const std::string& id);

  // containers
  /// POST /containers/create?name=…; returns the id.
  boost::asio::awaitable<outcome<std::string>> container_create(const std::string& name,
                                                                const boost::json::object& body);
  boost::asio::awaitable<outcome<void>> container_start(const std::string& id);
  boost::asio::awaitable<outcome<std::optional<boost::json::object>>> container_inspect(
      const std::string& id);
  /// POST /containers/{id}/wait: the exit code (Docker answers an object,
  /// Podman's compat API too; a bare number is accepted as libpod sends it).
  boost::asio::awaitable<outcome<int>> container_wait(const std::string& id);
  boost::asio::awaitable<outcome<void>> container_kill(const std::string& id, const std::string& signal);
  /// POST /containers/{id}/stop?t=…; a container already stopped is fine.
  boost::asio::awaitable<outcome<void>> container_stop(const std::string& id, int seconds);
  /// DELETE /containers/{id}?force=1&v=1; false when there was none.
  boost::asio::awaitable<outcome<bool>> container_remove(const std::string& id);
  /// GET /containers/json?all=1&filters={"label":[…]}.
  boost::asio::awaitable<outcome<boost::json::array>> container_list(const std::vector<std::string>& labels);
  /// GET /containers/{id}/logs: the body as a stream of frames (decode with
  /// frame_decoder). The options' step is not used: `id` is the step's.
  boost::asio::awaitable<outcome<http::body_stream>> container_logs(const std::string& id, log_options o);
  /// GET /events with `filters` (a JSON object of lists), `since`/`until` in
  /// seconds (0: none); one JSON object per line.
  boost::asio::awaitable<outcome<http::body_stream>> events(const boost::json::object& filters,
                                                            std::int64_t since, std::int64_t until);

  /// The request timeout of ordinary calls.
  std::chrono::milliseconds timeout{30'000};

 private:
  boost::asio::awaitable<outcome<http::response>> call(std::string method, std::string path,
                                                       std::string body = {});
  /// A GET that is asked again (twice more at most) when Podman answered 500
  /// because a container it read exited meanwhile ("read /proc/<pid>/cgroup:
  /// no such process"): the next answer no longer sees that process.
  boost::asio::awaitable<outcome<http::response>> read(std::string path);
  /// Opens a streamed answer; anything but 200 is refused (`what` names the call).
  boost::asio::awaitable<outcome<http::body_stream>> stream(std::string method, std::string path,
                                                            std::string what);
  std::string path(std::string_view p) const;
  /// The failure for a refusal `r` of `what` (its code by the HTTP status).
  failure refuse(const std::string& what, const http::response& r) const;
  /// An inspect's answer: the object, nullopt for a 404, else the failure.
  outcome<std::optional<boost::json::object>> inspected(const std::string& what,
                                                        const outcome<http::response>& r) const;
  /// A create's answer (200 or 201): the new object's Id, else the failure.
  outcome<std::string> created(const std::string& what, const outcome<http::response>& r) const;

  http::client http_;
  daemon_info info_;
};

/// The daemon's own message from an error body ({"message": …}), or the body.
std::string daemon_message(const std::string& body);

}  // namespace tjob::container

template <>
struct boost::system::is_error_code_enum<tjob::container::docker_errc> : std::true_type {};
