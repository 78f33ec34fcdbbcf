// The remote backend (remote_backend.hpp): each operation is one request to
// a running `tjob serve`.
#include "adapters/remote/remote_backend.hpp"

#include "adapters/http/http_client.hpp"
#include "adapters/python/python_plan.hpp"
#include "core/backoff.hpp"
#include "core/fail.hpp"
#include "core/log_stream_impl.hpp"
#include "core/secrets.hpp"
#include "core/names.hpp"
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

namespace {

std::string env_or(const std::string& given, const char* name) {
  if (!given.empty()) return given;
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string read_text(const std::filesystem::path& file, const char* what, const char* fix) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  if (in) ss << in.rdbuf();
  if (!in || in.bad())
    fail(errc::invalid_argument, std::string(what) + " " + file.string() + " cannot be read; " + fix);
  return ss.str();
}

// The token: given, else $TJOB_TOKEN, else the token file's first line.
std::string token_of(const remote_backend_config& c) {
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

std::string query_of(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string q;
  for (const auto& [k, v] : params) q += (q.empty() ? "?" : "&") + k + "=" + http::url_encode(v);
  return q;
}

}  // namespace

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
    throw error(errc::backend_unavailable,
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

namespace {

// One waiter on the watch stream: on one job (by its name), or on every job
// (no name); registered for as long as it lives.
class stream_waiter {
 public:
  stream_waiter(std::shared_ptr<backend::impl> b, const std::string& name)
      : b_(std::move(b)), signal_(b_->ex) {
    b_->waiters.add(&signal_, name);
  }
  stream_waiter(const stream_waiter&) = delete;
  stream_waiter& operator=(const stream_waiter&) = delete;
  ~stream_waiter() { b_->waiters.remove(&signal_); }

  backend::impl& server() const { return *b_; }
  asio::awaitable<bool> changed(steady::time_point deadline) {
    if (!b_->feed_running && !b_->stopping) co_await b_->await_feed(stale_);  // it was lost: open it again
    co_return co_await signal_.wait_until(deadline);
  }

 private:
  std::shared_ptr<backend::impl> b_;
  const bool stale_ = true;  ///< (a named value for co_await's argument)
  detail::wake_signal signal_;
};

// Wakes on any change of one job.
class remote_job_watch final : public detail::job_watch {
 public:
  remote_job_watch(std::shared_ptr<backend::impl> b, std::string name)
      : name_(std::move(name)), waiter_(std::move(b), name_) {}

  asio::awaitable<std::optional<train_job>> current() override {
    auto r = waiter_.server().make("GET", "/v1/jobs/" + name_);
    auto v = co_await waiter_.server().call_json(std::move(r));
    co_return job_from_json(v);
  }
  asio::awaitable<bool> changed(steady::time_point deadline) override {
    co_return co_await waiter_.changed(deadline);
  }
  std::string trouble() const override { return waiter_.server().trouble(); }

 private:
  std::string name_;
  stream_waiter waiter_;
};

// Wakes on any change of any job.
class remote_change_watch final : public detail::change_watch {
 public:
  explicit remote_change_watch(std::shared_ptr<backend::impl> b) : waiter_(std::move(b), {}) {}

  asio::awaitable<bool> changed(steady::time_point deadline) override {
    co_return co_await waiter_.changed(deadline);
  }

 private:
  stream_waiter waiter_;
};

// A step's log as the server streams it.
class remote_log final : public detail::piecewise_log {
 public:
  explicit remote_log(http::body_stream s) : stream_(std::move(s)) {}

 protected:
  asio::awaitable<bool> read_piece(std::string& out) override {
    auto piece = co_await stream_.read_some();
    if (!piece) detail::raise(piece.error());
    if (!*piece) co_return false;
    out += **piece;
    co_return true;
  }

 private:
  http::body_stream stream_;
};

}  // namespace

backend::backend(detail::backend_context ctx) : detail::backend(std::move(ctx)) {
  const auto c = config_of(ctx_.cfg.backend_config, [](std::string_view m) { return std::string(m); });
  auto url = env_or(c.server, "TJOB_SERVER");
  if (url.empty())
    fail(errc::invalid_argument,
         "the remote backend needs the URL of a running tjob serve: --server unix:///path/tjob.sock or "
         "https://host:port (or $TJOB_SERVER)");
  auto ep = http::try_parse_endpoint(url);
  if (!ep)
    fail(errc::invalid_argument, "--server " + url + ": " + ep.error().message +
                                     "; give unix:///path/tjob.sock, https://host:port or tcp://host:port");
  if (ep->type == http::endpoint::kind::tcp && !ep->tls && !c.insecure && !detail::is_loopback_host(ep->host))
    fail(errc::invalid_argument,
         "--server " + url + ": plain HTTP to a host that is not this machine would send the token, and every "
         "job, in clear; serve TLS there (tjob serve --tls-cert/--tls-key) and give https://" + ep->host + ":" +
             std::to_string(ep->port) + ", or add --insecure if you trust every network between");
  std::optional<http::tls_config> tls;
  if (ep->tls) {
    tls.emplace();
    auto ca = c.ca_file.empty() ? std::filesystem::path(env_or({}, "TJOB_SERVER_CA")) : c.ca_file;
    if (!ca.empty())
      tls->ca_pem = read_text(ca, "the server's CA file", "give a PEM file (--server-ca or $TJOB_SERVER_CA)");
    tls->source = ca.empty() ? "the system's trust store" : "--server-ca " + ca.string();
  }
  impl_ = std::make_shared<impl>(ctx_, *ep, std::move(tls), token_of(c));
}

backend::~backend() = default;

asio::awaitable<std::string> backend::train(detail::checked_request request) {
  auto& req = request.request;
  if (auto* p = std::get_if<python_trainer>(&req.job_trainer); p && !p->source_file.empty()) {
    auto who = detail::who(req.name);
    python_trainer& pt = *p;
    auto source = python::check_python_code(who, pt);  // the local wording for a file not there
    if (impl_->http.where().type != http::endpoint::kind::unix_socket) {
      // The server may be on another machine: the spec carries the code itself.
      if (source.empty()) source = python::read_source(who, pt.source_file);
      pt.source = std::move(source);
      pt.source_file.clear();
    }
    // On the unix socket the server is on this machine and runs the file
    // where it is, as a local job does (its directory's modules import).
  }
  for (int attempt = 0;; ++attempt) {
    auto body = json::serialize(to_json(req));
    auto r = impl_->make("POST", "/v1/jobs", std::move(body));
    try {
      auto v = co_await impl_->call_json(std::move(r));
      auto job = job_from_json(v);
      co_return job.name;
    } catch (const error& e) {
      // a generated name that is taken: another one, as the local backend does
      if (!request.generated_name || e.code() != errc::duplicate_name || attempt >= 3) throw;
    }
    req.name = detail::generate_job_name();
  }
}

asio::awaitable<train_job> backend::get_job(std::string name) {
  auto r = impl_->make("GET", "/v1/jobs/" + name);
  auto v = co_await impl_->call_json(std::move(r));
  co_return job_from_json(v);
}

asio::awaitable<std::vector<train_job>> backend::list_jobs(std::optional<std::string> runtime) {
  std::vector<std::pair<std::string, std::string>> params;
  if (runtime) params.emplace_back("runtime", *runtime);
  auto r = impl_->make("GET", "/v1/jobs" + query_of(params));
  auto v = co_await impl_->call_json(std::move(r));
  std::vector<train_job> out;
  for (const auto& item : impl::items_of(v, "GET /v1/jobs")) out.push_back(job_from_json(item));
  co_return out;
}

asio::awaitable<log_stream> backend::get_job_logs(std::string name, log_options options) {
  std::vector<std::pair<std::string, std::string>> params{{"step", options.step}};
  if (options.tail) params.emplace_back("tail", std::to_string(*options.tail));
  if (options.follow) params.emplace_back("follow", "1");
  if (options.timestamps) params.emplace_back("timestamps", "1");
  if (options.since) params.emplace_back("since", format_time(*options.since));
  if (options.attempt) params.emplace_back("attempt", std::to_string(*options.attempt));
  auto r = impl_->make("GET", "/v1/jobs/" + name + "/logs" + query_of(params));
  auto stream = co_await impl_->open(std::move(r));
  co_return log_stream(std::make_unique<remote_log>(std::move(stream)));
}

asio::awaitable<std::unique_ptr<detail::job_watch>> backend::watch_job(std::string name) {
  auto w = std::make_unique<remote_job_watch>(impl_, name);
  const bool stale = false;  // a new waiter reads its job after this
  co_await impl_->await_feed(stale);
  co_await get_job(name);  // says not found, as the contract asks
  co_return std::move(w);
}

asio::awaitable<std::unique_ptr<detail::change_watch>> backend::watch_all() {
  auto w = std::make_unique<remote_change_watch>(impl_);
  const bool stale = false;
  co_await impl_->await_feed(stale);
  co_return std::move(w);
}

asio::awaitable<void> backend::cancel_job(std::string name, cancel_options options) {
  std::string query;
  if (options.force) query += "force=1";
  if (options.grace)
    query += (query.empty() ? "" : "&") + ("grace_ms=" + std::to_string(options.grace->count()));
  auto target = "/v1/jobs/" + name + "/cancel" + (query.empty() ? "" : "?" + query);
  auto r = impl_->make("POST", std::move(target));
  co_await impl_->call(std::move(r));
}

asio::awaitable<void> backend::delete_job(std::string name) {
  auto r = impl_->make("DELETE", "/v1/jobs/" + name);
  co_await impl_->call(std::move(r));
}

asio::awaitable<std::vector<event>> backend::get_job_events(std::string name) {
  auto r = impl_->make("GET", "/v1/jobs/" + name + "/events");
  auto v = co_await impl_->call_json(std::move(r));
  std::vector<event> out;
  for (const auto& item : impl::items_of(v, "GET /v1/jobs/" + name + "/events"))
    out.push_back(event_from_json(item));
  co_return out;
}

asio::awaitable<std::shared_ptr<const detail::runtime_catalog>> backend::runtimes(bool) {
  // The server's catalog: its runtime directories, not this machine's.
  auto r = impl_->make("GET", "/v1/runtimes");
  auto v = co_await impl_->call_json(std::move(r));
  detail::runtime_catalog cat;
  for (const auto& item : impl::items_of(v, "GET /v1/runtimes")) {
    cat.runtimes.push_back(runtime_from_json(item));
    cat.sources.push_back(impl_->where());
  }
  if (const auto* problems = v.as_object().if_contains("problems"); problems && problems->is_array())
    for (const auto& p : problems->as_array())
      if (p.is_string()) cat.problems.emplace_back(p.as_string());
  cat.how_to_add = "add a ClusterTrainingRuntime manifest to a runtime directory of " + impl_->where();
  co_return std::make_shared<const detail::runtime_catalog>(std::move(cat));
}

asio::awaitable<std::vector<venv_cache_entry>> backend::list_venv_cache() {
  auto r = impl_->make("GET", "/v1/venv-cache");
  auto v = co_await impl_->call_json(std::move(r));
  std::vector<venv_cache_entry> out;
  for (const auto& item : impl::items_of(v, "GET /v1/venv-cache"))
    out.push_back(venv_cache_entry_from_json(item));
  co_return out;
}

asio::awaitable<std::vector<venv_cache_entry>> backend::prune_venv_cache(std::chrono::seconds unused_for) {
  auto r = impl_->make("POST", "/v1/venv-cache/prune?unused_for=" + std::to_string(unused_for.count()));
  auto v = co_await impl_->call_json(std::move(r));
  std::vector<venv_cache_entry> out;
  for (const auto& item : impl::items_of(v, "POST /v1/venv-cache/prune"))
    out.push_back(venv_cache_entry_from_json(item));
  co_return out;
}

asio::awaitable<std::vector<queue_entry>> backend::queue() {
  auto r = impl_->make("GET", "/v1/queue");
  auto v = co_await impl_->call_json(std::move(r));
  std::vector<queue_entry> out;
  for (const auto& item : impl::items_of(v, "GET /v1/queue")) out.push_back(queue_entry_from_json(item));
  co_return out;
}

asio::awaitable<backend_capabilities> backend::job_backend() {
  if (!impl_->server_backend) {
    auto r = impl_->make("GET", "/healthz");
    auto v = co_await impl_->call_json(std::move(r));
    const auto* o = v.if_object();
    const auto* c = o ? o->if_contains("capabilities") : nullptr;
    if (!c) fail(errc::protocol_error, impl_->where() + ": GET /healthz does not say what the server's backend does");
    impl_->server_backend = capabilities_from_json(*c);
  }
  co_return *impl_->server_backend;
}

namespace {

backend_capabilities capabilities_of() {
  backend_capabilities c;
  c.id = "remote";
  c.forwards = true;
  return c;
}

}  // namespace

backend_capabilities backend::capabilities() const { return capabilities_of(); }

remote_backend_config config_of(const boost::json::object& config,
                                const std::function<std::string(std::string_view)>& name_of) {
  detail::config_reader r{config, name_of, "remote"};
  r.only({"server", "insecure", "token", "token_file", "server_ca", "request_timeout_ms"});
  remote_backend_config c;
  if (auto v = r.text("server")) c.server = *v;
  if (auto v = r.flag("insecure")) c.insecure = *v;
  if (auto v = r.text("token")) c.token = *v;
  if (auto v = r.text("token_file")) c.token_file = *v;
  if (auto v = r.text("server_ca")) c.ca_file = *v;
  if (auto v = r.number("request_timeout_ms", 1)) c.request_timeout = std::chrono::milliseconds(*v);
  return c;
}

detail::backend_registration registration() {
  using kind = backend_option::value_kind;
  detail::backend_registration r;
  r.description.id = "remote";
  r.description.summary = "a running tjob serve";
  r.description.capabilities = capabilities_of();
  backend_option server{"server", "--server",
                        "Be a client of a running tjob serve: unix:///path/tjob.sock, https://host:port or "
                        "tcp://host:port ($TJOB_SERVER); the server's backend runs the jobs, and the server owns "
                        "them",
                        kind::text};
  server.selects_backend = true;
  server.env = "TJOB_SERVER";
  server.value_name = "URL";
  r.description.options = {
      server,
      {"token_file", "--token-file",
       "With --server over TCP: the file of the server's bearer token ($TJOB_HOME/serve.token there); "
       "$TJOB_TOKEN gives the token itself",
       kind::path},
      {"insecure", "--insecure",
       "With a tcp:// --server off loopback: send the token over plain HTTP anyway (anyone on the path reads "
       "it); without it such a server is refused: use https://",
       kind::flag},
      {"server_ca", "--server-ca",
       "With an https --server: the PEM file of the CA that signed its certificate ($TJOB_SERVER_CA; default: "
       "the system's trust store)",
       kind::path},
  };
  r.check = [](const boost::json::object& c, const std::function<std::string(std::string_view)>& name_of) {
    config_of(c, name_of);
  };
  r.make = [](detail::backend_context ctx) -> std::shared_ptr<detail::backend> {
    return std::make_shared<backend>(std::move(ctx));
  };
  return r;
}

asio::awaitable<void> backend::shutdown() {
  auto self = impl_;
  self->stopping = true;
  if (self->feed) self->feed->close();
  self->retry_timer.cancel();
  self->ready.notify_all();
  co_await self->tasks.join();
}

}  // namespace tjob::remote
