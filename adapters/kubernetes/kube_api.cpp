#include "adapters/kubernetes/kube_api.hpp"

#include "core/backoff.hpp"
#include "core/json_fields.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

namespace tjob::kube {

namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr detail::code_info kube_codes[] = {
    {"not found", errc::backend_error},
    {"already exists", errc::duplicate_name},
    {"conflict", errc::backend_error},
    {"bad request", errc::invalid_argument},
    {"invalid", errc::invalid_argument},
    {"unauthorized", errc::backend_error},
    {"forbidden", errc::backend_error},
    {"expired", errc::backend_error},
    {"too many requests", errc::backend_unavailable},
    {"server error", errc::backend_unavailable},
    {"refused", errc::backend_error},
    {"malformed answer", errc::protocol_error},
};

kube_errc code_of_status(unsigned code, const std::string& reason) {
  switch (code) {
    case 400:
      return kube_errc::bad_request;
    case 401:
      return kube_errc::unauthorized;
    case 403:
      return kube_errc::forbidden;
    case 404:
      return kube_errc::not_found;
    case 409:
      return reason == "Conflict" ? kube_errc::conflict : kube_errc::already_exists;
    case 410:
      return kube_errc::expired;
    case 422:
      return kube_errc::invalid;
    case 429:
      return kube_errc::too_many_requests;
    default:
      return code >= 500 ? kube_errc::server_error : kube_errc::refused;
  }
}

// Only the path for messages: a query may hold selectors, never secrets, but
// it is noise.
std::string path_only(const std::string& target) { return target.substr(0, target.find('?')); }

}  // namespace

const boost::system::error_category& kube_category() noexcept {
  static const detail::table_category instance("kubernetes", kube_codes);
  return instance;
}

failure status_failure(const std::string& server, const std::string& what, unsigned code,
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
  std::string head = "the Kubernetes API server " + server + " refused " + what + ": " +
                     std::to_string(code) + (reason.empty() ? "" : " " + reason) + ": ";
  return {code_of_status(code, reason), head + message, std::string(body.substr(0, 4096))};
}

outcome<watch_event> parse_watch_event(std::string_view line, const std::string& what) {
  boost::system::error_code ec;
  auto v = json::parse(line, ec);
  auto head = [&] {
    std::string s(line.substr(0, 80));
    for (auto& ch : s)
      if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
    return s;
  };
  if (ec)
    return failure(kube_errc::bad_answer,
                   what + ": a watch line is not JSON (" + ec.message() + "): " + head());
  if (!v.is_object())
    return failure(kube_errc::bad_answer, what + ": a watch line is not an object: " + head());
  auto& o = v.as_object();
  watch_event ev;
  ev.type = detail::str_of(o, "type");
  auto it = o.find("object");
  if (ev.type.empty() || it == o.end() || !it->value().is_object())
    return failure(kube_errc::bad_answer, what + ": a watch line has no type or object: " + head());
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

asio::awaitable<outcome<http::response>> api::send(std::string method, std::string path, std::string body,
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
    auto resp = co_await http_->send(r);
    bool again = resp ? resp->status >= 500 : detail::means(resp.error().code, errc::backend_unavailable);
    if (!again || !idempotent || attempt >= 5) co_return resp;
    asio::steady_timer t(ex_, retry.next());
    co_await t.async_wait(asio::use_awaitable);
  }
}

namespace {

outcome<json::value> parse_answer(const std::string& server, const std::string& what,
                                  const outcome<http::response>& resp) {
  if (!resp) return resp.error();
  if (resp->status < 200 || resp->status >= 300)
    return status_failure(server, what, resp->status, resp->body);
  boost::system::error_code ec;
  auto v = json::parse(resp->body, ec);
  if (ec)
    return failure(kube_errc::bad_answer, "the Kubernetes API server " + server + " answered " + what +
                                              " with something that is not JSON (" + ec.message() + ")");
  return v;
}

}  // namespace

asio::awaitable<outcome<json::value>> api::get(std::string path) {
  auto what = "GET " + path_only(path);
  std::string no_body, no_type;  // (named: a braced list in a co_await, docs/architecture.md)
  auto resp = co_await send("GET", std::move(path), no_body, no_type);
  co_return parse_answer(conn_.server, what, resp);
}

asio::awaitable<outcome<std::optional<json::value>>> api::get_if(std::string path) {
  auto what = "GET " + path_only(path);
  std::string no_body, no_type;  // (named: a braced list in a co_await, docs/architecture.md)
  auto resp = co_await send("GET", std::move(path), no_body, no_type);
  if (resp && resp->status == 404) co_return std::optional<json::value>();
  auto v = parse_answer(conn_.server, what, resp);
  if (!v) co_return v.error();
  co_return std::optional<json::value>(std::move(*v));
}

asio::awaitable<outcome<json::value>> api::post(std::string path, json::value body) {
  auto what = "POST " + path_only(path);
  auto resp = co_await send("POST", std::move(path), json::serialize(body), "application/json");
  co_return parse_answer(conn_.server, what, resp);
}

asio::awaitable<outcome<json::value>> api::merge_patch(std::string path, json::value body) {
  auto what = "PATCH " + path_only(path);
  auto resp = co_await send("PATCH", std::move(path), json::serialize(body), "application/merge-patch+json");
  co_return parse_answer(conn_.server, what, resp);
}

asio::awaitable<outcome<json::value>> api::del(std::string path) {
  auto what = "DELETE " + path_only(path);
  std::string no_body, no_type;
  auto resp = co_await send("DELETE", std::move(path), no_body, no_type);
  co_return parse_answer(conn_.server, what, resp);
}

asio::awaitable<outcome<http::body_stream>> api::stream(std::string path) {
  http::request r;
  r.target = path;
  r.timeout = timeout_;
  r.headers.emplace_back("Accept", "application/json");
  if (auto b = bearer(); !b.empty()) r.headers.emplace_back("Authorization", std::move(b));
  ++requests_;
  auto s = co_await http_->open(r);
  if (!s || (s->status() >= 200 && s->status() < 300)) co_return s;
  auto body = co_await s->read_all(1 << 20);
  if (!body) co_return body.error();
  co_return status_failure(conn_.server, "GET " + path_only(path), s->status(), *body);
}

}  // namespace tjob::kube
