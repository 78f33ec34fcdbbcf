// The remote backend's state (remote_backend.cpp): the server's address and
// token, its HTTP client, and each operation as one request to it.
#pragma once

#include "adapters/remote/remote_backend.hpp"

#include "adapters/http/http_client.hpp"
#include "adapters/python/python_plan.hpp"
#include "core/backoff.hpp"
#include "core/fail.hpp"
#include "core/log_stream_impl.hpp"
#include "core/names.hpp"
#include "core/secrets.hpp"
#include "core/task_group.hpp"
#include "core/trainer_checks.hpp"
#include "core/wake.hpp"

#include <tjob/wire.hpp>

#include <spdlog/spdlog.h>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tjob::remote {

namespace asio = boost::asio;
namespace json = boost::json;
using detail::fail;
using steady = std::chrono::steady_clock;

inline std::string env_or(const std::string& given, const char* name) {
  if (!given.empty()) return given;
  const char* v = std::getenv(name);
  return v ? v : "";
}

inline std::string read_text(const std::filesystem::path& file, const char* what, const char* fix) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  if (in) ss << in.rdbuf();
  if (!in || in.bad())
    fail(errc::invalid_argument, std::string(what) + " " + file.string() + " cannot be read; " + fix);
  return ss.str();
}

// The token: given, else $TJOB_TOKEN, else the token file's first line.
inline std::string token_of(const remote_backend_config& c) {
  std::string t = env_or(c.token, "TJOB_TOKEN");
  if (t.empty() && !c.token_file.empty()) {
    if (auto why = secret_file_problem(c.token_file); !why.empty())
      fail(errc::invalid_argument, "the token file " + c.token_file.string() + " " + why);
    t = read_text(c.token_file, "the token file", "give the file tjob serve made (--token-file)");
    t = t.substr(0, t.find('\n'));
    if (t.empty())
      fail(errc::invalid_argument, "the token file " + c.token_file.string() +
                                       " is empty; give the file "
                                       "tjob serve made ($TJOB_HOME/serve.token on the server)");
  }
  while (!t.empty() && (t.back() == '\r' || t.back() == ' ')) t.pop_back();
  return t;
}

inline std::string query_of(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string q;
  for (const auto& [k, v] : params) q += (q.empty() ? "?" : "&") + k + "=" + http::url_encode(v);
  return q;
}

struct backend::impl : std::enable_shared_from_this<impl> {
  impl(const detail::backend_context& ctx, http::endpoint ep, std::optional<http::tls_config> tls,
       std::string token)
      : ex(ctx.ex),
        log(ctx.log),
        http(ctx.ex, ep, 256 << 20, std::move(tls)),
        bearer(token.empty() ? "" : "Bearer " + token),
        timeout(config_of(ctx.cfg.backend_config, [](std::string_view m) { return std::string(m); })
                    .request_timeout),
        tasks(ctx.ex, ctx.log),
        retry_timer(ctx.ex) {}

  asio::any_io_executor ex;
  std::shared_ptr<spdlog::logger> log;
  http::client http;
  std::string bearer;
  std::chrono::milliseconds timeout;
  detail::task_group tasks;
  std::optional<backend_capabilities> server_backend;

  // The watch stream and who waits on it.
  bool feed_running = false;  ///< its reader is started
  /// A waiter read its job before the stream was open (it was lost): wake
  /// every waiter once it is open, to read again.
  bool stale_waiters = false;
  bool feed_live = false;  ///< the stream is open: a change from now on wakes the waiters
  std::uint64_t feed_tries = 0;
  std::string feed_trouble;  ///< why the last try failed; empty while live
  std::optional<http::body_stream> feed;
  asio::steady_timer retry_timer;
  bool stopping = false;
  detail::named_wake_lists waiters;  ///< on one job (by its name), or on every job
  detail::wake_list ready;           ///< waiting for the stream to open

  std::string where() const { return "tjob serve at " + http.where().url(); }

  http::request make(std::string method, std::string target, std::string body = {}) const {
    http::request r;
    r.method = std::move(method);
    r.target = std::move(target);
    r.body = std::move(body);
    r.timeout = timeout;
    if (!bearer.empty()) r.headers.emplace_back("Authorization", bearer);
    return r;
  }

  [[noreturn]] void unreachable(const detail::failure& f) const {
    // (a certificate that does not verify says what to fix itself: the server is there)
    const bool untrusted = f.code == make_error_code(http::http_errc::untrusted);
    throw error(
        errc::backend_unavailable,
        "cannot reach " + where() + ": " + f.message +
            (untrusted ? "" : "; is `tjob serve` running there? (the server is --server or $TJOB_SERVER)"),
        f.diagnostics);
  }

  /// The tjob::error a non-2xx answer stands for: the server's own code,
  /// words and field.
  [[noreturn]] void refused(unsigned status, const std::string& body) const {
    boost::system::error_code ec;
    auto v = json::parse(body, ec);
    const json::object* o = !ec && v.is_object() ? &v.as_object() : nullptr;
    const json::value* code = o ? o->if_contains("code") : nullptr;
    const json::value* message = o ? o->if_contains("message") : nullptr;
    if (!code || !code->is_string() || !message || !message->is_string())
      fail(errc::protocol_error, where() + " answered " + std::to_string(status) +
                                     " without an error object: " + detail::printable(body, 200));
    std::string text(message->as_string());
    std::string field;
    if (auto* f = o->if_contains("field"); f && f->is_string()) field = f->as_string();
    if (auto e = parse_errc(code->as_string())) {
      if (*e == errc::invalid_argument && !field.empty()) throw spec_error(field, text);
      throw error(*e, text);
    }
    // The server's own refusals (a token, a route, a limit): not an engine's error.
    errc e = status == 401 || status == 403 || status >= 500 ? errc::backend_error : errc::invalid_argument;
    throw error(e, where() + " refused the request (" + std::to_string(status) + " " +
                       std::string(code->as_string()) + "): " + text);
  }

  /// Sends the request and returns the answer's body when its status is 2xx.
  asio::awaitable<std::string> call(http::request r) {
    auto got = co_await http.send(std::move(r));
    if (!got) unreachable(got.error());
    if (got->status < 200 || got->status >= 300) refused(got->status, got->body);
    co_return std::move(got->body);
  }

  asio::awaitable<json::value> call_json(http::request r) {
    auto body = co_await call(std::move(r));
    boost::system::error_code ec;
    auto v = json::parse(body, ec);
    if (ec)
      fail(errc::protocol_error,
           where() + " answered with malformed JSON (" + ec.message() + "): " + detail::printable(body, 200));
    co_return v;
  }

  /// Opens a streamed answer (a log, the watch); a non-2xx answer throws.
  asio::awaitable<http::body_stream> open(http::request r) {
    auto got = co_await http.open(std::move(r));
    if (!got) unreachable(got.error());
    if (got->status() < 200 || got->status() >= 300) {
      auto body = co_await got->read_all(1 << 20);
      refused(got->status(), body ? *body : std::string());
    }
    co_return std::move(*got);
  }

  static const json::array& items_of(const json::value& v, const std::string& what) {
    const auto* o = v.if_object();
    const auto* items = o ? o->if_contains("items") : nullptr;
    if (!items || !items->is_array())
      fail(errc::protocol_error, what + ": the answer has no \"items\" array");
    return items->as_array();
  }

  // ------------------------------------------------------------------------
  // the watch stream

  void wake_everyone() { waiters.notify_all(); }
  bool anyone_waits() const { return !waiters.empty(); }

  /// Opens /v1/watch from `since` (nullopt: from now, by the list's seq).
  asio::awaitable<std::int64_t> open_feed(std::optional<std::int64_t> since) {
    if (!since) {
      auto r = make("GET", "/v1/jobs?limit=1");  // (a named request: no temporary in co_await, g++ 12)
      auto list = co_await call_json(std::move(r));
      const auto* o = list.if_object();
      const auto* seq = o ? o->if_contains("seq") : nullptr;
      if (!seq || !seq->is_int64())
        fail(errc::protocol_error, where() + ": GET /v1/jobs answered without a \"seq\"");
      since = seq->as_int64();
    }
    auto target = "/v1/watch?since=" + std::to_string(*since);
    auto r = make("GET", std::move(target));
    auto stream = co_await open(std::move(r));
    feed.emplace(std::move(stream));
    co_return *since;
  }

  /// Reads the watch stream while anyone waits, opening it again when it is
  /// lost (from the last line seen, or from now when that has expired).
  asio::awaitable<void> run_feed() {
    auto self = shared_from_this();
    std::optional<std::int64_t> at;
    detail::backoff pause(std::chrono::milliseconds(100), std::chrono::seconds(5));
    bool reopened = false;
    while (!stopping) {
      ++feed_tries;
      std::string failed;
      try {
        at = co_await open_feed(at);
      } catch (const error& e) {
        failed = e.what();
      }
      if (!failed.empty()) {
        at.reset();  // expired (410), or the server is another: from now, after a fresh read
        feed_trouble = std::move(failed);
        ready.notify_all();
        wake_everyone();  // each reads again, and says so when the server is gone
        if (!anyone_waits() || stopping) break;
        retry_timer.expires_after(pause.next());
        boost::system::error_code ec;
        co_await retry_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        if (!anyone_waits()) break;
        continue;
      }
      pause.reset();
      feed_live = true;
      feed_trouble.clear();
      ready.notify_all();
      // What changed while no stream was open: those who read before it
      // read again. (A new waiter reads after this anyway.)
      if (reopened || stale_waiters) wake_everyone();
      stale_waiters = false;
      reopened = true;
      http::line_splitter lines(4 << 20, "the watch of " + where());
      std::vector<std::string> got;
      for (;;) {
        auto piece = co_await feed->read_some();
        if (!piece || !*piece) {
          if (!piece && !stopping) feed_trouble = piece.error().message;
          break;
        }
        got.clear();
        if (auto fed = lines.feed(**piece, got); !fed) {
          feed_trouble = fed.error().message;
          break;
        }
        for (const auto& line : got) {
          boost::system::error_code ec;
          auto v = json::parse(line, ec);
          const auto* o = !ec ? v.if_object() : nullptr;
          const auto* seq = o ? o->if_contains("seq") : nullptr;
          const auto* job = o ? o->if_contains("job") : nullptr;
          const auto* name = job && job->is_object() ? job->as_object().if_contains("name") : nullptr;
          if (!seq || !seq->is_int64() || !name || !name->is_string()) {
            log->warn("{}: a watch line that is not one: {}", where(), detail::printable(line, 200));
            wake_everyone();
            continue;
          }
          at = seq->as_int64();
          waiters.notify(name->as_string());
        }
        if (!anyone_waits()) break;
      }
      feed_live = false;
      feed.reset();
      wake_everyone();
      if (!anyone_waits()) break;
    }
    feed_running = false;
    feed_live = false;
    feed.reset();
  }

  /// Returns once the watch stream is open, so that every change after this
  /// call wakes a waiter registered before it; throws when it cannot be.
  asio::awaitable<void> await_feed(bool stale) {
    stale_waiters = stale_waiters || stale;
    while (!feed_live) {
      if (stopping) fail(errc::shut_down, "the engine is shutting down");
      std::uint64_t tries = feed_tries;
      detail::wake_signal w(ex);
      detail::wake_registration reg(ready, &w);
      if (!feed_running) {
        feed_running = true;
        tasks.spawn(run_feed(), "the watch of " + where());
      }
      co_await w.wait_until(steady::now() + timeout);
      if (feed_live) break;
      if (feed_tries > tries && !feed_trouble.empty())
        fail(errc::backend_unavailable, "cannot watch the jobs of " + where() + ": " + feed_trouble);
      if (!feed_running && feed_tries == tries)
        fail(errc::backend_unavailable, "cannot watch the jobs of " + where() + ": no answer in " +
                                            std::to_string(timeout.count()) + " ms");
    }
  }

  std::string trouble() const {
    return feed_trouble.empty() ? std::string() : " (the watch is failing: " + feed_trouble + ")";
  }
};

}  // namespace tjob::remote
