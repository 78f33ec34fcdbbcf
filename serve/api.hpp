// tjob serve: the API v1 routes, apart from the connections that carry them.
// A request comes in as method, target, headers and body; an answer goes out
// as a whole reply or as a stream of chunks. No Beast here.
//
// Threading: the engine's executor only.
// Cancellation: a long poll's or a stream's awaits take the caller's
//   cancellation slot (the connection's: its client went away, or the server
//   is draining).
#pragma once

#include "serve/idempotency.hpp"
#include "serve/watch_hub.hpp"

#include <tjob/engine.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

namespace tjob::serve {

struct request {
  std::string method;  ///< "GET", "POST", ...
  std::string target;  ///< as sent: "/v1/jobs?limit=10"
  std::string body;
  std::string idempotency_key;  ///< the Idempotency-Key header, if any
  /// Over the unix socket: this machine and this user (the socket is 0600),
  /// so a spec may name a training file by path.
  bool local_peer = false;
};

struct reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

/// A 200 answer sent in chunks (chunked transfer): `next` gives each chunk,
/// nullopt at the end.
struct stream_reply {
  std::string content_type;
  std::function<boost::asio::awaitable<std::optional<std::string>>()> next;
};

/// An answer that takes a while (a long poll): run it with a cancellation
/// slot bound; it gives the reply.
struct long_reply {
  std::function<boost::asio::awaitable<reply>()> run;
};

using answer = std::variant<reply, stream_reply, long_reply>;

/// One error object, for every 4xx and 5xx:
/// {"status":404,"code":"job_not_found","message":"...","field":null}.
reply error_reply(int status, std::string code, std::string message, std::string field = {});

/// The reply for an exception thrown by the engine or by a route: a
/// tjob::error by its code, a spec_error with its field.
reply reply_of(std::exception_ptr e, bool draining);

struct api_config {
  std::filesystem::path idempotency_dir;
  std::chrono::hours idempotency_ttl{24};
  /// GET /metrics: the Prometheus text.
  std::function<boost::asio::awaitable<std::string>()> metrics_text;
  /// The engine's own settings: a sweep's owner (tjob/sweep.hpp) runs its
  /// trials with them, as the server's jobs.
  engine_config engine;
};

class api {
 public:
  api(engine& e, watch_hub& hub, api_config config);

  /// Routes the request (a table of paths and methods, below); may throw
  /// (reply_of makes the answer).
  boost::asio::awaitable<answer> handle(request req);

  /// New jobs are refused (503) from now on; /healthz says "draining".
  void drain() { draining_ = true; }
  bool draining() const { return draining_; }

  /// What a route's handler gets: the request, its query, and the path's
  /// one variable segment ({job} or {runtime}), checked.
  struct call {
    request& req;
    const std::map<std::string, std::string>& query;
    std::string name;
  };
  using handler = boost::asio::awaitable<answer> (api::*)(call&);

  // The routes (serve/routes.cpp), one per path and method.
  boost::asio::awaitable<answer> health(call& c);
  boost::asio::awaitable<answer> metrics(call& c);
  boost::asio::awaitable<answer> openapi(call& c);
  boost::asio::awaitable<answer> submit(call& c);
  boost::asio::awaitable<answer> list(call& c);
  boost::asio::awaitable<answer> watch(call& c);
  boost::asio::awaitable<answer> get(call& c);
  boost::asio::awaitable<answer> remove(call& c);
  boost::asio::awaitable<answer> cancel(call& c);
  boost::asio::awaitable<answer> logs(call& c);
  boost::asio::awaitable<answer> events(call& c);
  boost::asio::awaitable<answer> wait(call& c);
  boost::asio::awaitable<answer> runtimes(call& c);
  boost::asio::awaitable<answer> runtime(call& c);
  boost::asio::awaitable<answer> venv_cache(call& c);
  boost::asio::awaitable<answer> prune(call& c);
  boost::asio::awaitable<answer> queue(call& c);
  // serve/sweeps.cpp
  boost::asio::awaitable<answer> sweeps(call& c);
  boost::asio::awaitable<answer> start_sweep(call& c);
  boost::asio::awaitable<answer> sweep(call& c);
  boost::asio::awaitable<answer> cancel_sweep(call& c);
  boost::asio::awaitable<answer> delete_sweep(call& c);

 private:
  engine& engine_;
  watch_hub& hub_;
  api_config config_;
  bool draining_ = false;
  idempotency_keys keys_;
  boost::asio::thread_pool pool_{2};  // the sweep calls: file reads, a process started
};

/// The OpenAPI 3 document of the API (serve/openapi.json, built in).
const std::string& openapi_document();

/// A file of the dashboard (web/, built in): `path` is its URL path ("/",
/// "/ui/app.js"). Served to anyone: it holds no data, and what it shows it
/// asks of /v1 with the server's token.
struct web_asset {
  std::string_view path, content_type, body;
};
/// The file at `path`; null when there is none.
const web_asset* web_file(std::string_view path);

/// Whether a request needs no token even over TCP: /healthz, and a GET of
/// the dashboard's files (they hold no data: a browser loads them without it).
bool token_free(std::string_view method, std::string_view target);

}  // namespace tjob::serve
