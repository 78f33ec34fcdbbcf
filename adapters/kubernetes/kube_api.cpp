#include "adapters/kubernetes/kube_api.hpp"

#include "engine/backoff.hpp"
#include "engine/json_fields.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

namespace tjob::kube {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Only the path for messages: a query may hold selectors, never secrets, but
// it is noise.
std::string path_only(const std::string& target) { return target.substr(0, target.find('?')); }

}  // namespace

status_error status_failure(const std::string& server, const std::string& what, unsigned code,
                            std::string_view body) {
  std::string reason, message;
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    const auto& o = v.as_object();
    reason = detail::str_of(o, "reason");
    message = detail::str_of(o, "message");
  }
  if (message.empty()) {
    std::string text(body.substr(0, 300));
    for (auto& ch : text)
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
    message = text.empty() ? "no message" : text;
  }
  errc c = errc::backend_error;
  if (code == 409)
    c = errc::duplicate_name;
  else if (code == 400 || code == 422)
    c = errc::invalid_argument;
  else if (code >= 500)
    c = errc::backend_unavailable;
  std::string head = "the Kubernetes API server " + server + " refused " + what + ": " +
                     std::to_string(code) + (reason.empty() ? "" : " " + reason) + ": ";
  return status_error(c, head + message, code, reason);
}

watch_event parse_watch_event(std::string_view line, const std::string& what) {
  boost::system::error_code ec;
  auto v = json::parse(line, ec);
  auto head = [&] {
    std::string s(line.substr(0, 80));
    for (auto& ch : s)
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
    return s;
  };
  if (ec)
    throw error(errc::protocol_error, what + ": a watch line is not JSON (" + ec.message() + "): " + head());
  if (!v.is_object()) throw error(errc::protocol_error, what + ": a watch line is not an object: " + head());
  auto& o = v.as_object();
  watch_event ev;
  ev.type = detail::str_of(o, "type");
  auto it = o.find("object");
  if (ev.type.empty() || it == o.end() || !it->value().is_object())
    throw error(errc::protocol_error, what + ": a watch line has no type or object: " + head());
  ev.object = std::move(it->value().as_object());
  return ev;
}

api::api(asio::any_io_executor ex, connection conn, std::chrono::milliseconds timeout)
    : ex_(ex), conn_(std::move(conn)), timeout_(timeout) {
  auto ep = http::parse_endpoint(conn_.server);
  std::optional<http::tls_config> tls;
  if (ep.tls) tls = conn_.tls;
  http_ = std::make_unique<http::client>(ex_, ep, 64 << 20, std::move(tls));
}

void api::set_clock(clock_fn now) {
  now_ = std::move(now);
  token_read_ = now_();
}

std::string api::bearer() {
  auto now = now_();
  if (!conn_.token_file.empty() && now - token_read_ >= token_reread) {
    token_read_ = now;
    if (auto t = read_token(conn_.token_file); t && !t->empty()) conn_.token = std::move(*t);
  }
  return conn_.token.empty() ? std::string() : "Bearer " + conn_.token;
}

asio::awaitable<http::response> api::send(std::string method, std::string path, std::string body,
                                          std::string content_type) {
  http::request r;
  r.method = std::move(method);
  r.target = std::move(path);
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  r.timeout = timeout_;
  r.headers.emplace_back("Accept", "application/json");
  if (auto b = bearer(); !b.empty()) r.headers.emplace_back("Authorization", std::move(b));
  // Reads are retried with backoff when the server is away or answers 5xx;
  // writes are not (a create that timed out may have happened).
  bool idempotent = r.method == "GET";
  detail::backoff retry(std::chrono::milliseconds(200), std::chrono::milliseconds(3000));
  for (int attempt = 1;; ++attempt) {
    ++requests_;
    try {
      auto resp = co_await http_->send(r);
      if (resp.status < 500 || !idempotent || attempt >= 5) co_return resp;
    } catch (const error& e) {
      if (e.code() != errc::backend_unavailable || !idempotent || attempt >= 5) throw;
    }
    asio::steady_timer t(ex_, retry.next());
    co_await t.async_wait(asio::use_awaitable);
  }
}

namespace {

json::value parse_answer(const std::string& server, const std::string& what, const http::response& resp) {
  if (resp.status < 200 || resp.status >= 300) throw status_failure(server, what, resp.status, resp.body);
  boost::system::error_code ec;
  auto v = json::parse(resp.body, ec);
  if (ec)
    throw error(errc::protocol_error, "the Kubernetes API server " + server + " answered " + what +
                                          " with something that is not JSON (" + ec.message() + ")");
  return v;
}

}  // namespace

asio::awaitable<json::value> api::get(std::string path) {
  auto what = "GET " + path_only(path);
  auto resp = co_await send("GET", std::move(path), {}, {});
  co_return parse_answer(conn_.server, what, resp);
}

asio::awaitable<std::optional<json::value>> api::get_if(std::string path) {
  auto what = "GET " + path_only(path);
  auto resp = co_await send("GET", std::move(path), {}, {});
  if (resp.status == 404) co_return std::nullopt;
  co_return parse_answer(conn_.server, what, resp);
}

asio::awaitable<json::value> api::post(std::string path, json::value body) {
  auto what = "POST " + path_only(path);
  auto resp = co_await send("POST", std::move(path), json::serialize(body), "application/json");
  co_return parse_answer(conn_.server, what, resp);
}

asio::awaitable<json::value> api::merge_patch(std::string path, json::value body) {
  auto what = "PATCH " + path_only(path);
  auto resp = co_await send("PATCH", std::move(path), json::serialize(body), "application/merge-patch+json");
  co_return parse_answer(conn_.server, what, resp);
}

asio::awaitable<json::value> api::del(std::string path) {
  auto what = "DELETE " + path_only(path);
  auto resp = co_await send("DELETE", std::move(path), {}, {});
  co_return parse_answer(conn_.server, what, resp);
}

asio::awaitable<http::body_stream> api::stream(std::string path) {
  http::request r;
  r.target = path;
  r.timeout = timeout_;
  r.headers.emplace_back("Accept", "application/json");
  if (auto b = bearer(); !b.empty()) r.headers.emplace_back("Authorization", std::move(b));
  ++requests_;
  auto s = co_await http_->open(r);
  if (s.status() < 200 || s.status() >= 300) {
    auto body = co_await s.read_all(1 << 20);
    throw status_failure(conn_.server, "GET " + path_only(path), s.status(), body);
  }
  co_return s;
}

}  // namespace tjob::kube
