#include "adapters/container/docker_api.hpp"

#include "core/fail.hpp"
#include "core/names.hpp"

#include <tjob/error.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace tjob::container {

namespace asio = boost::asio;
namespace json = boost::json;
using detail::quote;

namespace {

constexpr detail::code_info docker_codes[] = {
    {"no such object", errc::backend_error},      {"conflict", errc::backend_error},
    {"bad parameter", errc::backend_error},       {"request refused", errc::backend_error},
    {"the daemon failed", errc::backend_error},   {"malformed answer", errc::protocol_error},
    {"API version too old", errc::backend_error}, {"pull failed", errc::backend_error},
    {"input unreadable", errc::invalid_argument},
};

// "localhost/bb:latest" → ("localhost/bb", "latest"); a digest stays whole.
std::pair<std::string, std::string> split_reference(const std::string& image) {
  if (image.find('@') != std::string::npos) return {image, ""};
  auto slash = image.rfind('/');
  auto colon = image.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash))
    return {image.substr(0, colon), image.substr(colon + 1)};
  return {image, "latest"};
}

outcome<json::value> parse_json(const std::string& body, const std::string& what) {
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  if (ec) return failure(docker_errc::bad_answer, what + ": the answer is not JSON (" + ec.message() + ")");
  return v;
}

outcome<json::object> parse_object(const std::string& body, const std::string& what) {
  auto v = parse_json(body, what);
  if (!v) return v.error();
  if (!v->is_object()) return failure(docker_errc::bad_answer, what + ": the answer is not a JSON object");
  return std::move(v->as_object());
}

// The "Id" of a create's answer.
outcome<std::string> id_of(const std::string& body, const std::string& what) {
  auto o = parse_object(body, what);
  if (!o) return o.error();
  auto* id = o->if_contains("Id");
  if (!id || !id->is_string()) return failure(docker_errc::bad_answer, what + ": no Id in the answer");
  return std::string(id->as_string());
}

// "1.41" → (1, 41); (0, 0) when it is not a version.
std::pair<int, int> version_pair(const std::string& s) {
  auto dot = s.find('.');
  int major = 0, minor = 0;
  if (dot == std::string::npos) return {0, 0};
  auto a = std::from_chars(s.data(), s.data() + dot, major);
  auto b = std::from_chars(s.data() + dot + 1, s.data() + s.size(), minor);
  if (a.ec != std::errc() || b.ec != std::errc() || a.ptr != s.data() + dot) return {0, 0};
  return {major, minor};
}

}  // namespace

const boost::system::error_category& docker_category() noexcept {
  static const detail::table_category instance("docker", docker_codes);
  return instance;
}

std::string_view to_string(daemon_kind k) noexcept { return k == daemon_kind::podman ? "podman" : "docker"; }

std::string daemon_message(const std::string& body) {
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (auto* m = v.as_object().if_contains("message"); m && m->is_string())
      return std::string(m->as_string());
  }
  auto text = body;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.size() > 500) text = text.substr(0, 500) + "…";
  return text;
}

// ---------------------------------------------------------------------------

frame_decoder::frame_decoder(bool raw, std::size_t max_frame) : raw_(raw), max_(max_frame) {}

outcome<void> frame_decoder::feed(std::string_view bytes,
                                  const std::function<void(int, std::string_view)>& out) {
  if (raw_) {
    if (!bytes.empty()) out(1, bytes);
    return {};
  }
  while (!bytes.empty()) {
    if (remaining_ == 0) {
      auto n = std::min(bytes.size(), sizeof header_ - header_have_);
      std::copy_n(bytes.data(), n, header_ + header_have_);
      header_have_ += n;
      bytes.remove_prefix(n);
      if (header_have_ < sizeof header_) return {};
      header_have_ = 0;
      if (header_[0] > 2 || header_[1] != 0 || header_[2] != 0 || header_[3] != 0)
        return failure(docker_errc::bad_answer, "log stream: a frame header is malformed (stream byte " +
                                                    std::to_string(header_[0]) + ")");
      stream_ = header_[0];
      std::size_t len = (std::size_t(header_[4]) << 24) | (std::size_t(header_[5]) << 16) |
                        (std::size_t(header_[6]) << 8) | std::size_t(header_[7]);
      if (len > max_)
        return failure(docker_errc::bad_answer, "log stream: a frame of " + std::to_string(len) +
                                                    " bytes is over the limit of " + std::to_string(max_));
      remaining_ = len;
      continue;
    }
    auto n = std::min(bytes.size(), remaining_);
    out(stream_, bytes.substr(0, n));
    remaining_ -= n;
    bytes.remove_prefix(n);
  }
  return {};
}

// ---------------------------------------------------------------------------

docker_api::docker_api(asio::any_io_executor ex, http::endpoint ep, std::optional<http::tls_config> tls)
    : http_(std::move(ex), std::move(ep), 64 << 20, std::move(tls)) {}

std::string docker_api::describe() const {
  return std::string(to_string(info_.kind)) + " at " + http_.where().url();
}

std::string docker_api::path(std::string_view p) const {
  if (info_.api_version.empty()) return std::string(p);
  return "/v" + info_.api_version + std::string(p);
}

failure docker_api::refuse(const std::string& what, const http::response& r) const {
  // Podman answers 500 "... does not exist in database: no such container"
  // for a container removed while it looked it up (Docker: 404)
  const bool gone = r.status == 404 || (r.status >= 500 && daemon_message(r.body).find("no such container") !=
                                                               std::string::npos);
  auto code = gone              ? docker_errc::not_found
              : r.status == 409 ? docker_errc::conflict
              : r.status == 400 ? docker_errc::bad_parameter
              : r.status >= 500 ? docker_errc::daemon_failed
                                : docker_errc::refused;
  return {code,
          what + ": " + describe() + " answered " + std::to_string(r.status) + ": " + daemon_message(r.body),
          r.body};
}

outcome<std::optional<json::object>> docker_api::inspected(const std::string& what,
                                                           const outcome<http::response>& r) const {
  if (!r) return r.error();
  if (r->status != 200) {
    auto refused = refuse(what, *r);
    if (refused.code == docker_errc::not_found) return std::optional<json::object>();
    return refused;
  }
  auto o = parse_object(r->body, what);
  if (!o) return o.error();
  return std::optional<json::object>(std::move(*o));
}

outcome<std::string> docker_api::created(const std::string& what, const outcome<http::response>& r) const {
  if (!r) return r.error();
  if (r->status != 201 && r->status != 200) return refuse(what, *r);
  return id_of(r->body, what);
}

asio::awaitable<outcome<http::response>> docker_api::call(std::string method, std::string p,
                                                          std::string body) {
  http::request r;
  r.method = std::move(method);
  r.target = path(p);
  r.body = std::move(body);
  r.timeout = timeout;
  co_return co_await http_.send(std::move(r));
}

asio::awaitable<outcome<http::response>> docker_api::read(std::string p) {
  const std::string method = "GET";  // (named, not temporaries in the co_await: g++ 12)
  auto r = co_await call(method, p);
  for (int again = 0; again < 2 && r && r->status == 500 && r->body.find("/proc/") != std::string::npos &&
                      r->body.find("no such") != std::string::npos;
       ++again)
    r = co_await call(method, p);
  co_return r;
}

asio::awaitable<outcome<http::body_stream>> docker_api::stream(std::string method, std::string p,
                                                               std::string what) {
  http::request r;
  r.method = std::move(method);
  r.target = path(p);
  r.timeout = timeout;
  auto body = co_await http_.open(std::move(r));
  if (!body || body->status() == 200) co_return body;
  auto text = co_await body->read_all(1 << 20);  // (not inside a braced init: g++ 12)
  if (!text) co_return text.error();
  http::response resp{body->status(), body->headers(), std::move(*text)};
  co_return refuse(what, resp);
}

asio::awaitable<outcome<daemon_info>> docker_api::connect(std::chrono::milliseconds t) {
  http::request r;
  r.target = "/_ping";
  r.timeout = t;
  auto ping = co_await http_.send(r);
  if (!ping) co_return ping.error();
  if (ping->status != 200) co_return refuse("GET /_ping", *ping);
  daemon_info info;
  bool podman = ping->header("libpod-api-version").size() > 0 ||
                ping->header("server").find("Libpod") != std::string::npos;
  // The ping's headers say it all (Api-Version; Server: Docker/20.10.24 or
  // Libpod/4.3.1). GET /version is asked only of a daemon whose ping does
  // not: on Podman it runs conmon and runc to report their versions, about
  // 0.6 s on every start of a tjob.
  auto api = ping->header("api-version");
  auto server = ping->header("server");
  if (auto slash = server.find('/'); slash != std::string::npos)
    info.version = server.substr(slash + 1, server.find(' ', slash) - slash - 1);
  if (api.empty()) {
    r.target = "/version";
    auto ver = co_await http_.send(r);
    if (!ver) co_return ver.error();
    if (ver->status != 200) co_return refuse("GET /version", *ver);
    auto v = parse_object(ver->body, "GET /version at " + http_.where().url());
    if (!v) co_return v.error();
    auto str = [&](const char* k) {
      auto* p = v->if_contains(k);
      return p && p->is_string() ? std::string(p->as_string()) : std::string();
    };
    info.version = str("Version");
    api = str("ApiVersion");
    if (auto* comps = v->if_contains("Components"); comps && comps->is_array())
      for (const auto& c : comps->as_array())
        if (c.is_object())
          if (auto* n = c.as_object().if_contains("Name");
              n && n->is_string() && n->as_string().find("Podman") != json::string::npos)
            podman = true;
  }
  info.kind = podman ? daemon_kind::podman : daemon_kind::docker;
  // Speak the daemon's version, capped at the one this client is written for.
  auto have = version_pair(api);
  if (have == std::pair{0, 0})
    co_return failure(docker_errc::bad_answer,
                      "GET /_ping and /version at " + http_.where().url() + ": no API version (Api-Version)");
  if (have < std::pair{1, 24})
    co_return failure(docker_errc::too_old,
                      describe() + " speaks API " + api + "; tjob needs 1.24 or later (upgrade the daemon)");
  info.api_version = have > std::pair{1, 41} ? "1.41" : api;
  info_ = info;
  co_return info;
}

// images ---------------------------------------------------------------------

asio::awaitable<outcome<std::optional<json::object>>> docker_api::image_inspect(const std::string& image) {
  auto r = co_await call("GET", "/images/" + http::url_encode(image) + "/json");
  co_return inspected("inspecting image " + quote(image), r);
}

asio::awaitable<outcome<void>> docker_api::image_pull(const std::string& image,
                                                      std::function<void(const std::string&)> progress) {
  auto [repo, tag] = split_reference(image);
  std::string q = "/images/create?fromImage=" + http::url_encode(repo) +
                  (tag.empty() ? "" : "&tag=" + http::url_encode(tag));
  auto body = co_await stream("POST", std::move(q), "pulling image " + quote(image));
  if (!body) co_return body.error();
  http::line_splitter lines(1 << 20, "pulling image " + quote(image));
  std::vector<std::string> got;
  std::string last_error;
  auto handle = [&](const std::string& line) {
    if (line.empty()) return;
    boost::system::error_code ec;
    auto v = json::parse(line, ec);
    if (ec || !v.is_object()) return;
    auto& o = v.as_object();
    if (auto* e = o.if_contains("error"); e && e->is_string()) last_error = std::string(e->as_string());
    if (auto* s = o.if_contains("status"); s && s->is_string() && progress) {
      std::string text(s->as_string());
      if (auto* id = o.if_contains("id"); id && id->is_string())
        text = std::string(id->as_string()) + ": " + text;
      if (auto* p = o.if_contains("progress"); p && p->is_string()) text += " " + std::string(p->as_string());
      progress(text);
    }
  };
  for (;;) {
    auto piece = co_await body->read_some();
    if (!piece) co_return piece.error();
    if (!*piece) break;
    got.clear();
    if (auto fed = lines.feed(**piece, got); !fed) co_return fed.error();
    for (const auto& l : got) handle(l);
  }
  if (auto rest = lines.finish()) handle(*rest);
  if (!last_error.empty())
    co_return failure(docker_errc::pull_failed,
                      "pulling image " + quote(image) + ": " + describe() + ": " + last_error, last_error);
  co_return outcome<void>();
}

asio::awaitable<outcome<void>> docker_api::image_import(const std::string& tarball, const std::string& repo,
                                                        const std::string& tag) {
  std::ifstream in(tarball, std::ios::binary);
  if (!in) co_return failure(docker_errc::unreadable_input, "cannot read image tarball " + quote(tarball));
  std::ostringstream data;
  data << in.rdbuf();
  http::request r;
  r.method = "POST";
  r.target =
      path("/images/create?fromSrc=-&repo=" + http::url_encode(repo) + "&tag=" + http::url_encode(tag));
  r.body = std::move(data).str();
  r.content_type = "application/x-tar";
  r.timeout = std::max(timeout, std::chrono::milliseconds(120'000));
  auto resp = co_await http_.send(std::move(r));
  if (!resp) co_return resp.error();
  if (resp->status != 200) co_return refuse("importing " + quote(tarball), *resp);
  if (resp->body.find("\"error\"") != std::string::npos)
    co_return failure(docker_errc::pull_failed,
                      "importing " + quote(tarball) + ": " + describe() + ": " + daemon_message(resp->body),
                      resp->body);
  co_return outcome<void>();
}

// networks -------------------------------------------------------------------

asio::awaitable<outcome<std::string>> docker_api::network_create(
    const std::string& name, const std::map<std::string, std::string>& labels, bool internal) {
  json::object body{{"Name", name}, {"Driver", "bridge"}, {"Internal", internal}, {"CheckDuplicate", true}};
  json::object l;
  for (const auto& [k, v] : labels) l[k] = v;
  body["Labels"] = std::move(l);
  const auto text = json::serialize(body);
  auto r = co_await call("POST", "/networks/create", text);
  // Podman lists the host's interfaces to choose a free subnet, and answers
  // 500 when one goes away meanwhile (another daemon's bridge removed): a
  // race of the host's, before anything is made, so asking again is safe.
  for (int again = 0;
       again < 3 && r && r->status == 500 && r->body.find("no such network interface") != std::string::npos;
       ++again)
    r = co_await call("POST", "/networks/create", text);
  co_return created("creating network " + quote(name), r);
}

asio::awaitable<outcome<std::optional<json::object>>> docker_api::network_inspect(const std::string& id) {
  auto r = co_await call("GET", "/networks/" + http::url_encode(id));
  co_return inspected("inspecting network " + quote(id), r);
}

asio::awaitable<outcome<bool>> docker_api::network_remove(const std::string& id) {
  auto r = co_await call("DELETE", "/networks/" + http::url_encode(id));
  if (!r) co_return r.error();
  if (r->status == 404) co_return false;
  if (r->status != 204 && r->status != 200) co_return refuse("removing network " + quote(id), *r);
  co_return true;
}

// containers -----------------------------------------------------------------

asio::awaitable<outcome<std::string>> docker_api::container_create(const std::string& name,
                                                                   const json::object& body) {
  auto r = co_await call("POST", "/containers/create?name=" + http::url_encode(name), json::serialize(body));
  co_return created("creating container " + quote(name), r);
}

asio::awaitable<outcome<void>> docker_api::container_start(const std::string& id) {
  auto r = co_await call("POST", "/containers/" + http::url_encode(id) + "/start");
  if (!r) co_return r.error();
  if (r->status != 204 && r->status != 304 && r->status != 200)
    co_return refuse("starting container " + quote(id), *r);
  co_return outcome<void>();
}

asio::awaitable<outcome<std::optional<json::object>>> docker_api::container_inspect(const std::string& id) {
  const std::string target = "/containers/" + http::url_encode(id) + "/json";
  auto r = co_await read(target);  // the container may exit while it is inspected
  co_return inspected("inspecting container " + quote(id), r);
}

asio::awaitable<outcome<int>> docker_api::container_wait(const std::string& id) {
  auto what = "waiting for container " + quote(id);
  auto r = co_await call("POST", "/containers/" + http::url_encode(id) + "/wait");
  if (!r) co_return r.error();
  if (r->status != 200) co_return refuse(what, *r);
  auto v = parse_json(r->body, what);
  if (!v) co_return v.error();
  if (v->is_int64()) co_return static_cast<int>(v->as_int64());
  if (v->is_object())
    if (auto* c = v->as_object().if_contains("StatusCode"); c && c->is_number())
      co_return static_cast<int>(c->to_number<std::int64_t>());
  co_return failure(docker_errc::bad_answer, what + ": no StatusCode in the answer");
}

asio::awaitable<outcome<void>> docker_api::container_kill(const std::string& id, const std::string& signal) {
  auto r = co_await call("POST",
                         "/containers/" + http::url_encode(id) + "/kill?signal=" + http::url_encode(signal));
  if (!r) co_return r.error();
  // 409: not running (Docker); Podman answers 409, or 500 with "not running"
  // or "can only kill running containers" (a node between restarts)
  if (r->status == 204 || r->status == 200 || r->status == 404 || r->status == 409) co_return outcome<void>();
  auto said = daemon_message(r->body);
  if (said.find("not running") != std::string::npos ||
      said.find("can only kill running") != std::string::npos)
    co_return outcome<void>();
  co_return refuse("signalling container " + quote(id), *r);
}

asio::awaitable<outcome<void>> docker_api::container_stop(const std::string& id, int seconds) {
  auto saved = timeout;
  timeout = std::max(timeout, std::chrono::milliseconds((seconds + 30) * 1000));
  auto r =
      co_await call("POST", "/containers/" + http::url_encode(id) + "/stop?t=" + std::to_string(seconds));
  timeout = saved;
  if (!r) co_return r.error();
  if (r->status == 204 || r->status == 304 || r->status == 200 || r->status == 404) co_return outcome<void>();
  co_return refuse("stopping container " + quote(id), *r);
}

asio::awaitable<outcome<bool>> docker_api::container_remove(const std::string& id) {
  auto r = co_await call("DELETE", "/containers/" + http::url_encode(id) + "?force=1&v=1");
  if (!r) co_return r.error();
  if (r->status == 404) co_return false;
  if (r->status != 204 && r->status != 200) co_return refuse("removing container " + quote(id), *r);
  co_return true;
}

asio::awaitable<outcome<json::array>> docker_api::container_list(const std::vector<std::string>& labels) {
  json::array l;
  for (const auto& s : labels) l.emplace_back(s);
  json::object filters{{"label", std::move(l)}};
  const std::string target = "/containers/json?all=1&filters=" + http::url_encode(json::serialize(filters));
  auto r = co_await read(target);  // a container in the list may exit while it is listed
  if (!r) co_return r.error();
  if (r->status != 200) co_return refuse("listing containers", *r);
  auto v = parse_json(r->body, "listing containers");
  if (!v) co_return v.error();
  if (!v->is_array())
    co_return failure(docker_errc::bad_answer, "listing containers: the answer is not a list");
  co_return std::move(v->as_array());
}

asio::awaitable<outcome<http::body_stream>> docker_api::container_logs(const std::string& id, log_options o) {
  // (named, not temporaries in the co_await: g++ 12)
  std::string q =
      "/containers/" + http::url_encode(id) + "/logs?stdout=1&stderr=1" + (o.follow ? "&follow=1" : "") +
      (o.tail ? "&tail=" + std::to_string(*o.tail) : std::string()) + (o.timestamps ? "&timestamps=1" : "");
  if (o.since) {
    // seconds and nanoseconds, as the docker CLI sends it (Podman reads it too)
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(o.since->time_since_epoch()).count();
    if (ns > 0) q += fmt::format("&since={}.{:09}", ns / 1000000000, ns % 1000000000);
  }
  std::string what = "reading the log of container " + quote(id);
  auto body = co_await stream("GET", std::move(q), std::move(what));
  co_return body;
}

asio::awaitable<outcome<http::body_stream>> docker_api::events(const json::object& filters,
                                                               std::int64_t since, std::int64_t until) {
  std::string q = "/events?filters=" + http::url_encode(json::serialize(filters));
  if (since > 0) q += "&since=" + std::to_string(since);
  // Podman's file event log stops reading when `until` comes, even when it
  // has not read the file through yet: an `until` a few milliseconds ahead
  // (a call at the end of a second) returned none of a job's events. Not
  // streaming reads what is there and ends, which is what `until` is for.
  if (until > 0 && info_.kind == daemon_kind::podman)
    q += "&stream=false";
  else if (until > 0)
    q += "&until=" + std::to_string(until);
  auto body = co_await stream("GET", std::move(q), "reading events");
  co_return body;
}

}  // namespace tjob::container
