// `tjob serve`: the engine as an HTTP service in the foreground (serve/).
#pragma once

#include <tjob/engine.hpp>

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace tjob::cli {

struct serve_options {
  std::vector<std::string> listen;
  std::string token_file, tls_cert, tls_key;
  std::size_t max_connections = 1024, max_pending_per_peer = 16;
  double idle_timeout = 60, header_timeout = 10;
  bool insecure = false, inherit_environment = false;
  std::size_t max_body_bytes = 1 << 20;
  bool detach = false;
};

void add_serve_options(CLI::App* cmd, serve_options& o);

/// Serves until SIGTERM or SIGINT, then drains; returns the exit status.
int run_serve(engine_config config, const serve_options& o);

}  // namespace tjob::cli
