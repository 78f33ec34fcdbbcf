// tjob serve: listening (serve/listeners.cpp), accepting each connection
// within its listener's budget (serve/connection.hpp serves it), draining.
#include "serve/connection.hpp"

namespace tjob::serve {

template <class Acceptor, class Stream>
asio::awaitable<void> server::impl::accept_loop(Acceptor& acceptor, bool tcp) {
  auto self = shared_from_this();
  auto& budget = budgets.emplace_back();
  for (;;) {
    boost::system::error_code ec;
    auto socket = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
    if (stopping || ec == asio::error::operation_aborted) co_return;
    if (ec) {
      // Out of descriptors (EMFILE) and the like: the connection waits in
      // the backlog; try again shortly rather than spin.
      asio::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      continue;
    }
    std::string peer = tcp ? "tcp" : "unix";
    std::optional<asio::ip::address> address;
    if constexpr (!std::is_same_v<Stream, local_stream>) {
      boost::system::error_code aec;
      auto remote = socket.remote_endpoint(aec);
      if (aec) continue;  // gone already
      address = remote.address();
    }
    if (auto why = refusal(cfg, budget, address ? &*address : nullptr); !why.empty()) {
      if (refusing >= 64) continue;  // a flood: the socket closes as it goes out of scope
      ++refusing;
      auto done = [self](std::exception_ptr) {
        --self->refusing;
        self->wake_if_drained();
      };
      if constexpr (std::is_same_v<Stream, local_stream>)
        asio::co_spawn(acceptor.get_executor(),
                       refuse_connection(*this, local_stream(std::move(socket)), why), done);
      else
        asio::co_spawn(acceptor.get_executor(),
                       refuse_connection(*this, beast::tcp_stream(std::move(socket)), why), done);
      continue;
    }
    ++open;
    ++budget.open;
    stats.connection_opened();
    if constexpr (std::is_same_v<Stream, local_stream>) {
      asio::co_spawn(acceptor.get_executor(),
                     serve_connection(*this, local_stream(std::move(socket)), peer, budget, nullptr),
                     [self](std::exception_ptr) {});
    } else {
      auto slot = std::make_unique<pending_slot>(budget, *address);
      if (tls) {
        tls_stream s(beast::tcp_stream(std::move(socket)), *tls);
        asio::co_spawn(acceptor.get_executor(),
                       serve_connection(*this, std::move(s), peer, budget, std::move(slot)),
                       [self](std::exception_ptr) {});
      } else {
        asio::co_spawn(
            acceptor.get_executor(),
            serve_connection(*this, beast::tcp_stream(std::move(socket)), peer, budget, std::move(slot)),
            [self](std::exception_ptr) {});
      }
    }
  }
}

server::server(engine& e, server_config config) {
  if (config.listen.empty()) config.listen.push_back("unix://" + (e.home() / "tjob.sock").string());
  if (config.idempotency_dir.empty()) config.idempotency_dir = e.home() / "serve" / "idempotency";
  std::vector<listen_spec> specs;
  bool any_tcp = false;
  for (const auto& l : config.listen) {
    specs.push_back(parse_listen(l));
    any_tcp = any_tcp || !specs.back().unix_socket;
  }
  if (any_tcp && config.token.empty())
    throw error(errc::invalid_argument, "listening on TCP needs a token (--token-file); none was given");
  if (config.tls_cert.empty() != config.tls_key.empty())
    throw error(errc::invalid_argument, "TLS needs both --tls-cert and --tls-key");
  impl_ = std::make_shared<impl>(e, std::move(config));
  auto& s = *impl_;
  if (!s.cfg.tls_cert.empty()) {
    s.tls.emplace(asio::ssl::context::tls_server);
    s.tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                       asio::ssl::context::no_tlsv1_1);
    boost::system::error_code ec;
    s.tls->use_certificate_chain_file(s.cfg.tls_cert.string(), ec);
    if (!ec) s.tls->use_private_key_file(s.cfg.tls_key.string(), asio::ssl::context::pem, ec);
    if (ec)
      throw error(errc::invalid_argument, "--tls-cert " + s.cfg.tls_cert.string() + " / --tls-key " +
                                              s.cfg.tls_key.string() + ": " + ec.message());
  }
  for (const auto& l : specs) {
    if (l.unix_socket)
      s.bind_unix_at(l.path);
    else
      s.bind_tcp_at(l);
  }
}

server::~server() {
  std::error_code ec;
  if (impl_)
    for (const auto& f : impl_->socket_files) std::filesystem::remove(f, ec);
}

std::vector<std::string> server::addresses() const { return impl_->bound; }

asio::awaitable<void> server::run() {
  auto s = impl_;
  co_await s->hub.load();
  auto ex = s->eng.get_executor();
  std::size_t tasks = 0;
  asio::steady_timer tasks_done(ex);
  tasks_done.expires_at(asio::steady_timer::time_point::max());
  auto done = [&](std::exception_ptr e) {
    if (e && s->cfg.logger) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        s->cfg.logger->error("msg=\"server task failed\" error=\"{}\"", x.what());
      }
    }
    if (--tasks == 0) tasks_done.cancel();
  };
  ++tasks;
  asio::co_spawn(ex, s->hub.run(), done);
  for (auto& a : s->unix_acceptors) {
    ++tasks;
    asio::co_spawn(ex, s->accept_loop<asio::local::stream_protocol::acceptor, local_stream>(a, false), done);
  }
  for (auto& a : s->tcp_acceptors) {
    ++tasks;
    asio::co_spawn(ex, s->accept_loop<asio::ip::tcp::acceptor, beast::tcp_stream>(a, true), done);
  }
  ++tasks;
  asio::co_spawn(ex, s->measure_lag(), done);
  ++tasks;
  asio::co_spawn(ex, s->setup.run(), done);
  boost::system::error_code ec;
  co_await tasks_done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  // The listeners and the hub have ended (stop()); the connections, served
  // and refused, drain.
  if (!s->drained()) {
    s->all_closed.expires_at(asio::steady_timer::time_point::max());
    co_await s->all_closed.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

void server::stop() {
  auto& s = *impl_;
  if (s.stopping) return;
  s.stopping = true;
  s.routes.drain();
  boost::system::error_code ec;
  for (auto& a : s.unix_acceptors) a.close(ec);
  for (auto& a : s.tcp_acceptors) a.close(ec);
  s.hub.stop();
  s.lag_stop.emit(asio::cancellation_type::terminal);
  s.setup.stop();
  for (auto& sig : s.signals) sig.emit(asio::cancellation_type::terminal);
  s.wake_if_drained();
}

}  // namespace tjob::serve
