// The remote backend: a running `tjob serve`, spoken to over its API v1
// (docs/serve.md) on a unix socket, TCP or https. The server's own backend
// runs and keeps the jobs; this one only asks. Jobs, events and runtimes come
// back through the public JSON codec (tjob/wire.hpp), so a job read here is the
// job the server read. The server's errors come back as the tjob::error they
// were there (the same code and words), so a front end cannot tell the two
// apart, save that the server owns the jobs.
//
// Changes reach waiters through one /v1/watch stream per backend, opened when
// the first waiter comes and kept while any waits (watch_job, watch_all): each
// line wakes the waiters of its job and of every job; a lost stream wakes them
// all (they read again) and is opened again from the last sequence number.
//
// Threading: the engine's executor only.
// Cancellation: shutdown() closes the watch stream and awaits its reader.
// Errors: a server that cannot be reached is backend_unavailable, naming its
//   URL; an answer that is not the API's is protocol_error.
#pragma once

#include "core/driver.hpp"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

namespace tjob::remote {

/// A running `tjob serve` (docs/serve.md): every operation is a request to
/// its API v1, and the server's own backend runs the jobs. The server owns
/// them: this process may end at any time.
struct remote_backend_config {
  /// unix:///path/to/tjob.sock, https://host:port, or tcp://host:port (plain
  /// HTTP: refused for a host that is not this machine's loopback unless
  /// `insecure`). Empty: $TJOB_SERVER.
  std::string server;
  /// Send the token over plain HTTP (tcp://) to a host off loopback, where
  /// anyone on the path reads it.
  bool insecure = false;
  /// The bearer token a TCP listener asks for. Empty: $TJOB_TOKEN, else the
  /// first line of `token_file` (refused when others may read it, as ssh
  /// refuses such a key).
  std::string token;
  std::filesystem::path token_file;
  /// PEM certificates of the CAs that sign the server's certificate (https).
  /// Empty: $TJOB_SERVER_CA, else the system's trust store.
  std::filesystem::path ca_file;
  /// Timeout of each request (log streams, watches and waits are not bounded).
  std::chrono::milliseconds request_timeout{30'000};
};

/// Its configuration from its JSON config (members: server, insecure, token,
/// token_file, server_ca, request_timeout_ms); throws tjob::error naming a
/// member (by `name_of`) that is unknown or bad.
remote_backend_config config_of(const boost::json::object& config,
                                const std::function<std::string(std::string_view)>& name_of);

/// The remote backend's registration: id "remote", chosen by its option
/// `server` (--server, $TJOB_SERVER).
detail::backend_registration registration();

class backend final : public detail::backend {
 public:
  /// Throws invalid_argument when no server URL is given or the URL, the CA
  /// file or the token file cannot be used. Connects to nothing yet.
  explicit backend(detail::backend_context ctx);
  ~backend() override;

  /// Its own: it forwards; job_backend() says what the server's backend does.
  backend_capabilities capabilities() const override;
  boost::asio::awaitable<std::string> train(detail::checked_request request) override;
  boost::asio::awaitable<train_job> get_job(std::string name) override;
  boost::asio::awaitable<std::vector<train_job>> list_jobs(std::optional<std::string> runtime) override;
  boost::asio::awaitable<log_stream> get_job_logs(std::string name, log_options options) override;
  boost::asio::awaitable<std::unique_ptr<detail::job_watch>> watch_job(std::string name) override;
  boost::asio::awaitable<std::unique_ptr<detail::change_watch>> watch_all() override;
  boost::asio::awaitable<void> cancel_job(std::string name, cancel_options options) override;
  boost::asio::awaitable<void> delete_job(std::string name) override;
  boost::asio::awaitable<std::vector<event>> get_job_events(std::string name) override;
  boost::asio::awaitable<std::shared_ptr<const detail::runtime_catalog>> runtimes(bool report) override;
  boost::asio::awaitable<std::vector<venv_cache_entry>> list_venv_cache() override;
  boost::asio::awaitable<std::vector<venv_cache_entry>> prune_venv_cache(
      std::chrono::seconds unused_for) override;
  boost::asio::awaitable<std::vector<queue_entry>> queue() override;
  boost::asio::awaitable<backend_capabilities> job_backend() override;
  boost::asio::awaitable<void> shutdown() override;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace tjob::remote
