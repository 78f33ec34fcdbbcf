#include "serve/listeners.hpp"

#include <tjob/error.hpp>

#include <fmt/format.h>
#include <openssl/crypto.h>

#include <sys/stat.h>
#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace tjob::serve {

namespace asio = boost::asio;

listen_spec parse_listen(const std::string& s) {
  listen_spec l;
  if (s.rfind("unix://", 0) == 0) {
    l.path = s.substr(7);
    if (l.path.empty() || l.path[0] != '/')
      throw error(errc::invalid_argument, "--listen " + s + ": give unix:///absolute/path/to/socket");
    return l;
  }
  if (s.rfind("tcp://", 0) == 0) {
    l.unix_socket = false;
    auto rest = s.substr(6);
    auto colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw error(errc::invalid_argument,
                  "--listen " + s + ": give tcp://HOST:PORT, as tcp://127.0.0.1:8080");
    l.host = rest.substr(0, colon);
    if (l.host.size() > 2 && l.host.front() == '[' && l.host.back() == ']')
      l.host = l.host.substr(1, l.host.size() - 2);
    auto port = rest.substr(colon + 1);
    char* end = nullptr;
    long p = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end || p < 0 || p > 65535)
      throw error(errc::invalid_argument, "--listen " + s + ": the port must be 0 to 65535");
    l.port = static_cast<std::uint16_t>(p);
    return l;
  }
  throw error(errc::invalid_argument, "--listen " + s + ": give unix:///path/to/socket or tcp://HOST:PORT");
}

asio::local::stream_protocol::acceptor bind_unix(const asio::any_io_executor& ex, const std::string& path) {
  asio::local::stream_protocol::endpoint ep(path);
  if (std::filesystem::exists(std::filesystem::symlink_status(path))) {
    // A live server answers on it; a stale socket file of a dead one is replaced.
    asio::local::stream_protocol::socket probe(ex);
    boost::system::error_code ec;
    probe.connect(ep, ec);
    if (!ec)
      throw error(
          errc::invalid_argument,
          "unix://" + path + ": another tjob serve is listening there; stop it or give another --listen");
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode))
      throw error(
          errc::invalid_argument,
          "unix://" + path + ": the path is a file that is not a socket; remove it or give another --listen");
    std::filesystem::remove(path);
  }
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  asio::local::stream_protocol::acceptor a(ex);
  a.open(ep.protocol());
  // Owner only from the start: no window in which others could connect.
  auto old = ::umask(0177);
  boost::system::error_code ec;
  a.bind(ep, ec);
  ::umask(old);
  if (ec) throw error(errc::invalid_argument, "unix://" + path + ": cannot listen: " + ec.message());
  ::chmod(path.c_str(), 0600);
  a.listen(asio::socket_base::max_listen_connections);
  return a;
}

asio::ip::tcp::acceptor bind_tcp(const asio::any_io_executor& ex, const listen_spec& l, bool tls,
                                 bool insecure, std::string& bound) {
  asio::ip::tcp::resolver resolver(ex);
  boost::system::error_code ec;
  auto results = resolver.resolve(l.host, std::to_string(l.port), asio::ip::tcp::resolver::passive, ec);
  if (ec || results.empty())
    throw error(errc::invalid_argument, "tcp://" + l.host + ": cannot resolve the host: " + ec.message());
  auto ep = results.begin()->endpoint();
  if (!tls && !insecure && !ep.address().is_loopback())
    throw error(
        errc::invalid_argument,
        fmt::format("tcp://{}:{}: {} is not a loopback address, and without TLS the token and every job "
                    "would cross the network in clear; give --tls-cert and --tls-key, or --insecure to "
                    "serve plain HTTP there anyway",
                    l.host, l.port, ep.address().to_string()));
  asio::ip::tcp::acceptor a(ex);
  a.open(ep.protocol());
  a.set_option(asio::socket_base::reuse_address(true));
  a.bind(ep, ec);
  if (ec)
    throw error(errc::invalid_argument,
                fmt::format("tcp://{}:{}: cannot listen: {}", l.host, l.port, ec.message()));
  a.listen(asio::socket_base::max_listen_connections);
  auto local = a.local_endpoint();
  auto host = local.address().is_v6() ? "[" + local.address().to_string() + "]" : local.address().to_string();
  bound = fmt::format("{}://{}:{}", tls ? "https" : "tcp", host, local.port());
  return a;
}

bool same_token(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string refusal(const server_config& cfg, const listener_budget& b, const asio::ip::address* peer) {
  if (b.open >= cfg.max_connections)
    return fmt::format("the server has {} connections open, its limit; retry later", cfg.max_connections);
  if (!peer) return {};
  const auto most = std::max<std::size_t>(1, cfg.max_connections / 4);
  if (b.pending >= most)
    return fmt::format("{} connections are open that have not sent the token, the limit; retry later", most);
  auto it = b.pending_by_peer.find(*peer);
  if (it != b.pending_by_peer.end() && it->second >= cfg.max_pending_per_peer)
    return fmt::format(
        "{} connections from {} have not sent the token, the limit for one address; send "
        "requests with it, or retry later",
        cfg.max_pending_per_peer, peer->to_string());
  return {};
}

pending_slot::pending_slot(listener_budget& b, asio::ip::address peer) : b_(&b), peer_(std::move(peer)) {
  ++b_->pending;
  ++b_->pending_by_peer[peer_];
}

void pending_slot::release() {
  if (!b_) return;
  --b_->pending;
  if (auto it = b_->pending_by_peer.find(peer_); it != b_->pending_by_peer.end() && --it->second == 0)
    b_->pending_by_peer.erase(it);
  b_ = nullptr;
}

std::string log_quoted(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace tjob::serve
