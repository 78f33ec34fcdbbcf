// The remote backend (remote_backend.hpp): each operation is one request to
// a running `tjob serve`.
#include "adapters/remote/remote_impl.hpp"

namespace tjob::remote {

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
  if (options.checkpoint) query += (query.empty() ? "" : "&") + std::string("checkpoint=1");
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
