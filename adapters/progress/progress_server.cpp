#include "adapters/progress/progress_server.hpp"

#include <tjob/error.hpp>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>

#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>

namespace tjob::progress {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using tls_stream = beast::ssl_stream<beast::tcp_stream>;

namespace {

constexpr std::size_t max_body = 1 << 20;  // 10,000 metrics fit; Kubeflow's client sends at most 256
constexpr std::size_t max_header = 8 << 10;
constexpr std::size_t max_connections = 256;
// Connections that have not shown a job's token yet: at most this many, each
// given header_time to send its header (TLS handshake included), so a flood
// of strangers leaves room for the jobs' own reports.
constexpr std::size_t max_pending = 64;
constexpr auto header_time = std::chrono::seconds(10);
constexpr std::size_t max_ended = 4096;  // ended jobs remembered (their reports get 409, not 404)
constexpr auto idle = std::chrono::seconds(30);

constexpr std::string_view prefix = "/v1/jobs/";
constexpr std::string_view suffix = "/progress";

struct reply {
  unsigned status = 200;
  std::string body;
  int retry_after = 0;
};

reply error_reply(unsigned status, std::string_view code, const std::string& message) {
  json::object o;
  o["error"] = code;
  o["message"] = message;
  return {status, json::serialize(o) + "\n"};
}

bool same_token(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

struct server::impl : std::enable_shared_from_this<server::impl> {
  asio::any_io_executor ex;
  std::shared_ptr<spdlog::logger> log;
  std::optional<tcp::acceptor> acceptor;
  tls_files files;
  std::optional<asio::ssl::context> tls;
  std::string tls_error;
  int port = 0;
  bool stopping = false;
  std::size_t open = 0, pending_count = 0;
  struct job_entry {
    std::string token;
    sink to;
    std::string ended;  // how it ended; empty while it runs
    detail::progress_gate gate;
  };
  std::map<std::string, job_entry, std::less<>> jobs;
  std::deque<std::string> ended_order;
  std::vector<std::weak_ptr<tls_stream>> streams;

  impl(asio::any_io_executor e, std::shared_ptr<spdlog::logger> l, detail::task_group& t)
      : ex(std::move(e)), log(std::move(l)), tasks(t) {}
  detail::task_group& tasks;  // the owner's: its shutdown joins the accept loop and the connections

  asio::ssl::context* context() {
    if (tls || !tls_error.empty()) return tls ? &*tls : nullptr;
    try {
      asio::ssl::context c(asio::ssl::context::tls_server);
      c.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                    asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                    asio::ssl::context::no_tlsv1_1);
      c.use_certificate_chain_file(files.server_cert.string());
      c.use_private_key_file(files.server_key.string(), asio::ssl::context::pem);
      tls.emplace(std::move(c));
    } catch (const std::exception& e) {
      tls_error = e.what();
      log->error("the progress endpoint cannot set up TLS from {}: {}", files.server_cert.string(), e.what());
    }
    return tls ? &*tls : nullptr;
  }

  // Who may send this request's body: the job it names, if its token is
  // right; else the refusal to send instead, before any of the body is read.
  // A stranger learns nothing: a wrong token and a job that is not here are
  // both 401.
  template <class Header>
  std::optional<reply> refuse_header(const Header& req, std::string& job) const {
    std::string_view target = req.target();
    if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    if (target.substr(0, prefix.size()) != prefix || target.size() <= prefix.size() + suffix.size() ||
        target.substr(target.size() - suffix.size()) != suffix)
      return error_reply(404, "not_found",
                         "reports go to POST /v1/jobs/<job>/progress (KUBEFLOW_TRAINER_SERVER_URL)");
    job = std::string(target.substr(prefix.size(), target.size() - prefix.size() - suffix.size()));
    if (req.method() != http::verb::post && req.method() != http::verb::put && req.method() != http::verb::patch)
      return error_reply(405, "method_not_allowed", "report with POST");
    auto auth = req[http::field::authorization];
    bool bearer = auth.size() > 7 && beast::iequals(auth.substr(0, 7), "Bearer ");
    if (!bearer)
      return error_reply(401, "unauthorized",
                         "a report needs Authorization: Bearer <token> (the file KUBEFLOW_TRAINER_SERVER_TOKEN "
                         "names)");
    std::string_view given(auth.data() + 7, auth.size() - 7);
    auto it = jobs.find(job);
    if (it == jobs.end() || !same_token(given, it->second.token)) {
      for (const auto& [other, e] : jobs)
        if (same_token(given, e.token))
          return error_reply(403, "forbidden",
                             "TrainJob " + job + ": this token is TrainJob " + other +
                                 "'s; a job reports only its own progress");
      return error_reply(401, "unauthorized", "the bearer token is not that of the job the URL names");
    }
    return std::nullopt;
  }

  // A report whose header refuse_header let through, body and all.
  asio::awaitable<reply> handle(const http::request<http::string_body>& req) {
    std::string job;
    if (auto refused = refuse_header(req, job)) co_return std::move(*refused);  // (it went while the body came)
    auto it = jobs.find(job);
    auto& e = it->second;
    if (!e.ended.empty())
      co_return error_reply(409, "ended",
                            "TrainJob " + job + " has ended (" + e.ended + "); its progress is final");
    auto parsed = detail::parse_progress_body(req.body());
    if (!parsed.report) co_return error_reply(400, "bad_request", "TrainJob " + job + ": " + parsed.error);
    auto now = std::chrono::steady_clock::now();
    if (!e.gate.take(now)) {
      auto r =
          error_reply(429, "too_many_requests",
                      fmt::format("TrainJob {}: at most {} reports a second (a burst of {}); this one is "
                                  "dropped, send the next later",
                                  job, detail::progress_gate::per_second, detail::progress_gate::burst));
      r.retry_after = std::max(1, e.gate.retry_after());
      co_return r;
    }
    bool record = e.gate.record(now, detail::progress_json(*parsed.report).size());
    std::string refused, failed;
    // (the entry may go while the sink works: only copies are used after it)
    auto to = e.to;
    try {
      // (named, not a temporary in the co_await: docs/architecture.md's g++ 12 rule)
      auto taking = to(job, std::move(*parsed.report), record);
      refused = co_await std::move(taking);
    } catch (const std::exception& x) {
      failed = x.what();
    }
    if (!failed.empty()) {
      log->warn("job {}: its progress report was not stored: {}", job, failed);
      co_return error_reply(503, "unavailable", "TrainJob " + job + ": the report was not stored: " + failed);
    }
    if (!refused.empty()) co_return error_reply(409, "ended", "TrainJob " + job + ": " + refused);
    json::object o;
    o["status"] = "ok";
    o["event"] = record;
    if (parsed.dropped)
      o["dropped_metrics"] = parsed.dropped;  // past Kubeflow's 256, as its client truncates
    reply ok{200, json::serialize(o) + "\n"};
    co_return ok;
  }

  // `pending`: the connection has not shown a token yet (it holds one of
  // max_pending places until it does, or ends).
  asio::awaitable<void> serve(std::shared_ptr<tls_stream> stream, std::shared_ptr<bool> pending) {
    auto self = shared_from_this();
    beast::error_code ec;
    beast::get_lowest_layer(*stream).expires_after(header_time);
    co_await stream->async_handshake(asio::ssl::stream_base::server,
                                     asio::redirect_error(asio::use_awaitable, ec));
    beast::flat_buffer buffer;
    while (!ec && !stopping) {
      http::request_parser<http::string_body> parser;
      parser.header_limit(static_cast<std::uint32_t>(max_header));
      parser.body_limit(max_body);
      beast::get_lowest_layer(*stream).expires_after(*pending ? std::chrono::seconds(header_time) : idle);
      co_await http::async_read_header(*stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
      if (stopping) break;
      reply r;
      bool keep = false;
      std::string job;
      if (ec == http::error::body_limit) {
        r = error_reply(413, "too_large", fmt::format("a report's body may have at most {} bytes", max_body));
      } else if (ec == http::error::header_limit) {
        r = error_reply(431, "headers_too_large", "the request's headers are too large");
      } else if (ec) {
        break;  // closed, timed out, or not HTTP
      } else if (auto refused = refuse_header(parser.get(), job)) {
        r = std::move(*refused);  // (the body unread: the connection closes after the answer)
        log->debug("progress report refused ({}): {}", r.status, r.body);
      } else {
        if (*pending) {
          *pending = false;
          --pending_count;
        }
        beast::get_lowest_layer(*stream).expires_after(idle);
        if (!parser.is_done())
          co_await http::async_read(*stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
        if (stopping) break;
        if (ec == http::error::body_limit) {
          r = error_reply(413, "too_large", fmt::format("a report's body may have at most {} bytes", max_body));
        } else if (ec) {
          break;
        } else {
          const auto& req = parser.get();
          keep = req.keep_alive();
          r = co_await handle(req);
          if (r.status != 200 && r.status != 429)
            log->debug("progress report refused ({}): {}", r.status, r.body);
        }
      }
      http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
      res.set(http::field::content_type, "application/json");
      if (r.retry_after) res.set(http::field::retry_after, std::to_string(r.retry_after));
      res.keep_alive(keep);
      res.body() = std::move(r.body);
      res.prepare_payload();
      beast::get_lowest_layer(*stream).expires_after(idle);
      co_await http::async_write(*stream, res, asio::redirect_error(asio::use_awaitable, ec));
      if (!keep) break;
    }
    if (!ec) {
      beast::get_lowest_layer(*stream).expires_after(std::chrono::seconds(2));
      co_await stream->async_shutdown(asio::redirect_error(asio::use_awaitable, ec));
    }
    beast::get_lowest_layer(*stream).close();
  }

  asio::awaitable<void> accept_loop() {
    auto self = shared_from_this();
    for (;;) {
      beast::error_code ec;
      tcp::socket socket = co_await acceptor->async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (stopping) co_return;
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        continue;  // (EMFILE and the like: the next accept may do)
      }
      auto* ctx = context();
      if (!ctx || open >= max_connections || pending_count >= max_pending) continue;  // the socket closes here
      ++open;
      ++pending_count;
      auto pending = std::make_shared<bool>(true);
      auto stream = std::make_shared<tls_stream>(beast::tcp_stream(std::move(socket)), *ctx);
      std::erase_if(streams, [](const auto& w) { return w.expired(); });
      streams.push_back(stream);
      tasks.spawn(serve(stream, pending), "a progress connection", [self, pending](std::exception_ptr) {
        --self->open;
        if (*pending) --self->pending_count;
      });
    }
  }
};

server::server(asio::any_io_executor ex, std::shared_ptr<spdlog::logger> log, detail::task_group& tasks)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(log), tasks)) {}

server::~server() { stop(); }

bool server::started() const { return impl_->acceptor.has_value(); }

void server::start(const tls_files& tls) {
  auto& s = *impl_;
  if (s.acceptor || s.stopping) return;
  s.files = tls;
  beast::error_code ec;
  tcp::acceptor a(s.ex);
  tcp::endpoint at(asio::ip::make_address_v4("127.0.0.1"), 0);
  a.open(at.protocol(), ec);
  if (!ec) a.bind(at, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw error(errc::backend_unavailable,
                "cannot listen for progress reports on 127.0.0.1: " + ec.message());
  s.port = a.local_endpoint().port();
  s.acceptor.emplace(std::move(a));
  s.tasks.spawn(s.accept_loop(), "the progress endpoint");
}

std::string server::add(const std::string& job, const std::string& token, sink to) {
  auto& s = *impl_;
  auto [it, added] = s.jobs.try_emplace(job);
  // Only a job that ended before (a retry's next attempt) is in ended_order:
  // a new one skips the scan of up to max_ended names (a profile showed it as
  // 8 % of the reactor's time per job).
  if (!added && !it->second.ended.empty()) std::erase(s.ended_order, job);
  it->second = impl::job_entry{token, std::move(to), {}, {}};
  return url(job);
}

std::string server::url(const std::string& job) const {
  return fmt::format("https://127.0.0.1:{}{}{}{}", impl_->port, prefix, job, suffix);
}

void server::end(const std::string& job, std::string how) {
  auto& s = *impl_;
  auto it = s.jobs.find(job);
  if (it == s.jobs.end() || !it->second.ended.empty()) return;
  it->second.ended = how.empty() ? "ended" : std::move(how);
  it->second.to = {};
  s.ended_order.push_back(job);
  while (s.ended_order.size() > max_ended) {
    s.jobs.erase(s.ended_order.front());
    s.ended_order.pop_front();
  }
}

void server::forget(const std::string& job) {
  auto it = impl_->jobs.find(job);
  if (it == impl_->jobs.end()) return;
  if (!it->second.ended.empty()) std::erase(impl_->ended_order, job);
  impl_->jobs.erase(it);
}

void server::stop() {
  auto& s = *impl_;
  if (s.stopping) return;
  s.stopping = true;
  s.jobs.clear();
  beast::error_code ec;
  if (s.acceptor) s.acceptor->close(ec);
  for (auto& w : s.streams)
    if (auto st = w.lock()) beast::get_lowest_layer(*st).cancel();
}

std::string new_token() {
  // The kernel's generator, as OpenSSL's own is seeded from it: OpenSSL's
  // first RAND_bytes loads its configuration and seeds a DRBG, 1.4-1.7 ms
  // that every `tjob run` paid for its one job's token.
  unsigned char bytes[32];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    auto n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw error(errc::backend_unavailable,
                  std::string("cannot make a random token: ") + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
  return fmt::format("{:02x}", fmt::join(bytes, ""));
}

std::map<std::string, std::string> job_environment(const std::string& url, const std::string& ca_path,
                                                   const std::string& token_path) {
  return {{url_variable, url}, {ca_variable, ca_path}, {token_variable, token_path}};
}

}  // namespace tjob::progress
