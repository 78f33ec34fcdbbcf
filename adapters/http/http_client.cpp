#include "adapters/http/http_client.hpp"
#include "core/fail.hpp"

#include <tjob/error.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <openssl/x509v3.h>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <array>
#include <cctype>

#include <sys/un.h>

namespace tjob::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using asio::use_awaitable;
using generic_stream = beast::basic_stream<asio::generic::stream_protocol>;
using tls_stream = asio::ssl::stream<generic_stream>;

using detail::fail;
using detail::failure;

namespace {

// The names a certificate is for: its DNS and IP subject alternative names,
// else its common name ("DNS localhost, IP 127.0.0.1").
std::string names_of(X509* cert) {
  if (!cert) return "nothing (no certificate came)";
  std::string out;
  auto add = [&](std::string s) { out += (out.empty() ? "" : ", ") + s; };
  if (auto* sans = static_cast<GENERAL_NAMES*>(::X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr))) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      if (n->type == GEN_DNS) {
        add("DNS " + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                                 static_cast<std::size_t>(ASN1_STRING_length(n->d.dNSName))));
      } else if (n->type == GEN_IPADD) {
        const auto* b = ASN1_STRING_get0_data(n->d.iPAddress);
        const int len = ASN1_STRING_length(n->d.iPAddress);
        if (len == 4) {
          asio::ip::address_v4::bytes_type a;
          std::copy(b, b + 4, a.begin());
          add("IP " + asio::ip::address_v4(a).to_string());
        } else if (len == 16) {
          asio::ip::address_v6::bytes_type a;
          std::copy(b, b + 16, a.begin());
          add("IP " + asio::ip::address_v6(a).to_string());
        }
      }
    }
    GENERAL_NAMES_free(sans);
  }
  if (out.empty()) {
    char cn[256] = {0};
    if (::X509_NAME_get_text_by_NID(::X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) > 0)
      add("CN " + std::string(cn));
  }
  return out.empty() ? "no name" : out;
}


constexpr detail::code_info http_codes[] = {
    {"cannot connect", errc::backend_unavailable},
    {"timed out", errc::backend_unavailable},
    {"the connection closed early", errc::backend_unavailable},
    {"the exchange failed", errc::backend_unavailable},
    {"malformed answer", errc::protocol_error},
    {"answer over a limit", errc::protocol_error},
    {"stream closed", errc::shut_down},
    {"server certificate not trusted", errc::backend_error},
    {"request cannot be sent", errc::invalid_argument},
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The failure of an exchange with the peer at `ep`.
failure peer_failed(const endpoint& ep, const std::string& what, const boost::system::error_code& ec) {
  if (ec == beast::error::timeout) return {http_errc::timed_out, what + " at " + ep.url() + " timed out"};
  if (ec == bhttp::error::body_limit || ec == bhttp::error::header_limit)
    return {http_errc::too_large,
            what + " at " + ep.url() + ": the answer is over a limit (" + ec.message() + ")", ec.message()};
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_version).category())
    return {http_errc::malformed, what + " at " + ep.url() + ": malformed answer (" + ec.message() + ")",
            ec.message()};
  return {http_errc::exchange_failed, what + " at " + ep.url() + " failed: " + ec.message(), ec.message()};
}

// The request line's name for messages: "GET /containers/json".
std::string describe(const request& r) {
  auto q = r.target.find('?');
  return r.method + " " + r.target.substr(0, q);
}

}  // namespace

const boost::system::error_category& http_category() noexcept {
  static const detail::table_category instance("http", http_codes);
  return instance;
}

std::string endpoint::url() const {
  if (type == kind::unix_socket) return "unix://" + path;
  auto h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return (tls ? "https://" : "tcp://") + h + ":" + std::to_string(port);
}

endpoint parse_endpoint(std::string_view url) { return try_parse_endpoint(url).value(); }

outcome<endpoint> try_parse_endpoint(std::string_view url) {
  endpoint ep;
  auto bad = [&](const std::string& why) -> failure {
    return detail::make_failure(errc::invalid_argument,
                                "cannot use host " + std::string(url) + ": " + why +
                                    " (write unix:///path/to/socket or tcp://host:port)");
  };
  if (url.starts_with("/"))
    ep.path = std::string(url);
  else if (url.starts_with("unix://"))
    ep.path = std::string(url.substr(7));
  else if (url.starts_with("tcp://") || url.starts_with("http://") || url.starts_with("https://")) {
    ep.type = endpoint::kind::tcp;
    ep.tls = url.starts_with("https://");
    auto rest = url.substr(url.find("://") + 3);
    if (auto slash = rest.find('/'); slash != std::string_view::npos) rest = rest.substr(0, slash);
    auto colon = rest.rfind(':');
    if (colon != std::string_view::npos && rest.find(']') != std::string_view::npos && colon < rest.find(']'))
      colon = std::string_view::npos;  // [::1] without a port
    if (colon == std::string_view::npos && ep.tls) {
      ep.host = std::string(rest);
      if (ep.host.size() > 2 && ep.host.front() == '[' && ep.host.back() == ']')
        ep.host = ep.host.substr(1, ep.host.size() - 2);
      ep.port = 443;
      if (ep.host.empty()) return bad("no host");
      return ep;
    }
    if (colon == std::string_view::npos) return bad("no port");
    ep.host = std::string(rest.substr(0, colon));
    if (ep.host.size() > 2 && ep.host.front() == '[' && ep.host.back() == ']')
      ep.host = ep.host.substr(1, ep.host.size() - 2);
    auto port = rest.substr(colon + 1);
    unsigned v = 0;
    if (port.empty() || port.size() > 5) return bad("bad port");
    for (char c : port) {
      if (c < '0' || c > '9') return bad("bad port");
      v = v * 10 + static_cast<unsigned>(c - '0');
    }
    if (v == 0 || v > 65535 || ep.host.empty()) return bad("bad host or port");
    ep.port = static_cast<std::uint16_t>(v);
    return ep;
  } else {
    return bad("unknown scheme");
  }
  if (ep.path.empty() || ep.path.front() != '/') return bad("the socket path must be absolute");
  if (ep.path.size() >= sizeof(sockaddr_un{}.sun_path)) return bad("the socket path is too long");
  return ep;
}

std::string response::header(std::string_view name) const {
  auto it = headers.find(lower(name));
  return it == headers.end() ? std::string() : it->second;
}

// ---------------------------------------------------------------------------

namespace {

asio::awaitable<outcome<generic_stream>> connect(asio::any_io_executor ex, const endpoint& ep,
                                                 std::chrono::milliseconds timeout) {
  generic_stream s(ex);
  s.expires_after(timeout);
  boost::system::error_code last;
  if (ep.type == endpoint::kind::unix_socket) {
    asio::local::stream_protocol::endpoint le(ep.path);
    asio::generic::stream_protocol::endpoint to(le);
    co_await s.async_connect(to, asio::redirect_error(use_awaitable, last));
  } else {
    asio::ip::tcp::resolver resolver(ex);
    auto port = std::to_string(ep.port);
    auto results = co_await resolver.async_resolve(ep.host, port, asio::redirect_error(use_awaitable, last));
    if (!last) last = asio::error::host_not_found;
    for (const auto& r : results) {
      boost::system::error_code ec;
      asio::generic::stream_protocol::endpoint to(r.endpoint());
      co_await s.async_connect(to, asio::redirect_error(use_awaitable, ec));
      if (!ec) {
        last = {};
        break;
      }
      last = ec;
      s.socket().close(ec);
    }
  }
  // (tagged: a basic_stream claims to be constructible from anything)
  using connected = outcome<generic_stream>;
  if (last == beast::error::timeout)
    co_return connected(boost::system::in_place_error, http_errc::timed_out,
                        "connecting to " + ep.url() + " timed out");
  if (last)
    co_return connected(boost::system::in_place_error, http_errc::connect_failed,
                        "cannot connect to " + ep.url() + ": " + last.message(), last.message());
  co_return connected(boost::system::in_place_value, std::move(s));
}

outcome<bhttp::request<bhttp::string_body>> make_request(const request& r, const endpoint& ep) {
  bhttp::verb v = bhttp::string_to_verb(r.method);
  if (v == bhttp::verb::unknown) return failure(http_errc::bad_request, "unknown HTTP method " + r.method);
  bhttp::request<bhttp::string_body> req{v, r.target, 11};
  req.set(bhttp::field::host, ep.type == endpoint::kind::tcp ? ep.host : std::string("localhost"));
  req.set(bhttp::field::user_agent, "tjob");
  for (const auto& [k, val] : r.headers) req.set(k, val);
  if (!r.body.empty() || v == bhttp::verb::post || v == bhttp::verb::put) {
    if (!r.body.empty())
      req.set(bhttp::field::content_type,
              r.content_type.empty() ? std::string("application/json") : r.content_type);
    req.body() = r.body;
    req.prepare_payload();
  }
  req.keep_alive(false);
  return req;
}

template <class Fields>
std::map<std::string, std::string> header_map(const Fields& f) {
  std::map<std::string, std::string> out;
  for (const auto& h : f) out[lower(std::string(h.name_string()))] = std::string(h.value());
  return out;
}

}  // namespace

struct client::tls_state {
  asio::ssl::context ctx{asio::ssl::context::tls_client};
  tls_config cfg;
};

namespace {

// The OpenSSL error queue as text (certificate and key problems), emptied.
std::string ssl_errors() {
  std::string out;
  while (unsigned long e = ::ERR_get_error()) {
    char buf[256];
    ::ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out;
}

bool is_ip_address(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

}  // namespace

/// One connection, plain or TLS: the operations below pick the layer.
struct transport {
  std::optional<generic_stream> plain;
  std::optional<tls_stream> tls;
  generic_stream& lowest() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
};

struct body_stream::impl {
  endpoint ep;
  std::string what;
  transport stream;
  beast::flat_buffer buf;
  bhttp::response_parser<bhttp::buffer_body> parser;
  std::map<std::string, std::string> headers;
  std::array<char, 1 << 16> chunk{};
  bool closed = false;

  impl(endpoint e, std::string w, transport s) : ep(std::move(e)), what(std::move(w)), stream(std::move(s)) {}
};

namespace {

template <class Op>
asio::awaitable<void> on_stream(transport& t, Op op) {
  if (t.tls)
    co_await op(*t.tls);
  else
    co_await op(*t.plain);
}

}  // namespace

body_stream::body_stream(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
body_stream::body_stream(body_stream&&) noexcept = default;
body_stream& body_stream::operator=(body_stream&&) noexcept = default;
body_stream::~body_stream() {
  if (impl_) close();
}

unsigned body_stream::status() const { return impl_->parser.get().result_int(); }

std::string body_stream::header(std::string_view name) const {
  auto it = impl_->headers.find(lower(name));
  return it == impl_->headers.end() ? std::string() : it->second;
}

const std::map<std::string, std::string>& body_stream::headers() const { return impl_->headers; }

void body_stream::close() {
  if (!impl_ || impl_->closed) return;
  impl_->closed = true;
  boost::system::error_code ec;
  auto& low = impl_->stream.lowest();
  low.socket().shutdown(asio::socket_base::shutdown_both, ec);
  low.close();
}

asio::awaitable<outcome<std::optional<std::string>>> body_stream::read_some() {
  auto& p = *impl_;
  for (;;) {
    if (p.closed) co_return failure(http_errc::closed, p.what + " was closed");
    if (p.parser.is_done()) co_return std::optional<std::string>();
    auto& body = p.parser.get().body();
    body.data = p.chunk.data();
    body.size = p.chunk.size();
    boost::system::error_code ec;
    p.stream.lowest().expires_never();
    co_await on_stream(p.stream, [&](auto& s) -> asio::awaitable<void> {
      co_await bhttp::async_read_some(s, p.buf, p.parser, asio::redirect_error(use_awaitable, ec));
    });
    std::size_t got = p.chunk.size() - body.size;
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec == asio::ssl::error::stream_truncated) ec = bhttp::error::partial_message;
    if (ec) {
      if (p.closed) co_return failure(http_errc::closed, p.what + " was closed");
      if (ec == bhttp::error::partial_message || ec == asio::error::eof ||
          ec == asio::error::connection_reset)
        co_return failure(http_errc::closed_early, p.what + " at " + p.ep.url() +
                                                       ": the connection closed in the middle of the answer");
      co_return peer_failed(p.ep, p.what, ec);
    }
    if (got > 0) co_return std::optional<std::string>(std::in_place, p.chunk.data(), got);
  }
}

asio::awaitable<outcome<std::string>> body_stream::read_all(std::size_t limit) {
  std::string out;
  for (;;) {
    auto piece = co_await read_some();
    if (!piece) co_return piece.error();
    if (!*piece) co_return out;
    if (out.size() + (*piece)->size() > limit)
      co_return failure(http_errc::too_large, impl_->what + " at " + impl_->ep.url() +
                                                  ": the answer is over " + std::to_string(limit) + " bytes");
    out += **piece;
  }
}

client::client(asio::any_io_executor ex, endpoint ep, std::size_t max_body, std::optional<tls_config> tls)
    : ex_(std::move(ex)), ep_(std::move(ep)), max_body_(max_body) {
  if (!ep_.tls) return;
  auto st = std::make_shared<tls_state>();
  st->cfg = tls.value_or(tls_config{});
  const auto& c = st->cfg;
  auto from = c.source.empty() ? std::string() : " (" + c.source + ")";
  ::ERR_clear_error();
  boost::system::error_code ec;
  st->ctx.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                      asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                      asio::ssl::context::no_tlsv1_1);
  if (!c.insecure_skip_verify) {
    st->ctx.set_verify_mode(asio::ssl::verify_peer, ec);
    if (!c.ca_pem.empty()) {
      st->ctx.add_certificate_authority(asio::buffer(c.ca_pem), ec);
      if (ec)
        fail(errc::invalid_argument, "the certificate authority for " + ep_.url() + from +
                                         " is not a PEM certificate: " + ssl_errors());
    } else {
      st->ctx.set_default_verify_paths(ec);
    }
  } else {
    st->ctx.set_verify_mode(asio::ssl::verify_none, ec);
  }
  if (!c.client_cert_pem.empty() || !c.client_key_pem.empty()) {
    st->ctx.use_certificate_chain(asio::buffer(c.client_cert_pem), ec);
    if (ec)
      fail(errc::invalid_argument,
           "the client certificate for " + ep_.url() + from + " is not a PEM certificate: " + ssl_errors());
    st->ctx.use_private_key(asio::buffer(c.client_key_pem), asio::ssl::context::pem, ec);
    if (ec)
      fail(errc::invalid_argument,
           "the client key for " + ep_.url() + from + " is not a PEM private key matching its certificate");
  }
  tls_ = std::move(st);
}

namespace {

// The TLS handshake on a connection made: the server's name and certificate
// checked (unless the config says not to), a failure told as what it is.
asio::awaitable<outcome<void>> tls_handshake(transport& t, const endpoint& ep, const tls_config& cfg,
                                             std::chrono::milliseconds timeout) {
  const auto& name = cfg.server_name.empty() ? ep.host : cfg.server_name;
  auto* ssl = t.tls->native_handle();
  if (!is_ip_address(name)) ::SSL_set_tlsext_host_name(ssl, name.c_str());
  auto peer_names = std::make_shared<std::string>();
  if (!cfg.insecure_skip_verify) {
    // What the server's own certificate names, kept for the message of a
    // mismatch (the certificate is gone once the handshake has failed).
    t.tls->set_verify_callback([peer_names](bool preverified, asio::ssl::verify_context& vc) {
      auto* store = vc.native_handle();
      if (::X509_STORE_CTX_get_error_depth(store) == 0 && peer_names->empty())
        *peer_names = names_of(::X509_STORE_CTX_get_current_cert(store));
      return preverified;
    });
    // OpenSSL's own check of the name (RFC 6125), so that a mismatch is
    // told as one (X509_V_ERR_HOSTNAME_MISMATCH), not as an unspecified error.
    auto* param = ::SSL_get0_param(ssl);
    ::X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (is_ip_address(name))
      ::X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
    else
      ::X509_VERIFY_PARAM_set1_host(param, name.c_str(), name.size());
  }
  boost::system::error_code hec;
  t.lowest().expires_after(timeout);
  co_await t.tls->async_handshake(asio::ssl::stream_base::client, asio::redirect_error(use_awaitable, hec));
  if (hec) {
    long v = ::SSL_get_verify_result(t.tls->native_handle());
    // Not backend_unavailable: trying again will not make the certificate right.
    if ((v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH) &&
        !cfg.insecure_skip_verify)
      co_return failure(http_errc::untrusted,
                        "the server certificate of " + ep.url() + " is not for " + name + ": it names " +
                            (peer_names->empty() ? std::string("nothing") : *peer_names) +
                            "; connect by one of those names, or give the server a certificate for " + name,
                        ::X509_verify_cert_error_string(v));
    if (v != X509_V_OK && !cfg.insecure_skip_verify)
      co_return failure(http_errc::untrusted,
                        "cannot verify the server certificate of " + ep.url() + ": " +
                            ::X509_verify_cert_error_string(v) + "; check the certificate authority" +
                            (cfg.source.empty() ? std::string() : " in " + cfg.source) +
                            " (or name the right one)",
                        ::X509_verify_cert_error_string(v));
    if (hec == beast::error::timeout)
      co_return failure(http_errc::timed_out, "the TLS handshake with " + ep.url() + " timed out");
    co_return failure(http_errc::exchange_failed,
                      "the TLS handshake with " + ep.url() + " failed: " + hec.message(), hec.message());
  }
  co_return outcome<void>();
}

}  // namespace

asio::awaitable<outcome<response>> client::send(request r) {
  auto body = co_await open(r);
  if (!body) co_return body.error();
  response out;
  out.status = body->status();
  out.headers = body->headers();
  auto text = co_await body->read_all(max_body_);
  if (!text) co_return text.error();
  out.body = std::move(*text);
  co_return out;
}

asio::awaitable<outcome<body_stream>> client::open(request r) {
  auto what = describe(r);
  auto req = make_request(r, ep_);
  if (!req) co_return req.error();
  auto connected = co_await connect(ex_, ep_, r.timeout);
  if (!connected) co_return connected.error();
  transport t;
  t.plain.emplace(std::move(*connected));
  if (ep_.tls) {
    if (!tls_) co_return failure(http_errc::bad_request, "no TLS settings for " + ep_.url());
    t.tls.emplace(std::move(*t.plain), tls_->ctx);
    t.plain.reset();
    auto shaken = co_await tls_handshake(t, ep_, tls_->cfg, r.timeout);
    if (!shaken) co_return shaken.error();
  }
  auto p = std::make_unique<body_stream::impl>(ep_, what, std::move(t));
  p->parser.body_limit(boost::none);
  p->parser.header_limit(64 * 1024);
  boost::system::error_code ec;
  p->stream.lowest().expires_after(r.timeout);
  co_await on_stream(p->stream, [&](auto& s) -> asio::awaitable<void> {
    co_await bhttp::async_write(s, *req, asio::redirect_error(use_awaitable, ec));
  });
  if (ec) co_return peer_failed(ep_, what, ec);
  co_await on_stream(p->stream, [&](auto& s) -> asio::awaitable<void> {
    co_await bhttp::async_read_header(s, p->buf, p->parser, asio::redirect_error(use_awaitable, ec));
  });
  if (ec == asio::ssl::error::stream_truncated) ec = bhttp::error::partial_message;
  if (ec) {
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof || ec == bhttp::error::partial_message ||
        ec == asio::error::connection_reset)
      co_return failure(http_errc::closed_early,
                        what + " at " + ep_.url() + ": the connection closed before an answer");
    co_return peer_failed(ep_, what, ec);
  }
  p->headers = header_map(p->parser.get().base());
  co_return body_stream(std::move(p));
}

// ---------------------------------------------------------------------------

line_splitter::line_splitter(std::size_t max_line, std::string what)
    : max_(max_line), what_(std::move(what)) {}

outcome<void> line_splitter::feed(std::string_view bytes, std::vector<std::string>& out) {
  while (!bytes.empty()) {
    auto nl = bytes.find('\n');
    auto piece = bytes.substr(0, nl);
    if (buf_.size() + piece.size() > max_)
      return failure(http_errc::too_large,
                     what_ + ": a line is longer than " + std::to_string(max_) + " bytes");
    buf_.append(piece);
    if (nl == std::string_view::npos) return {};
    if (!buf_.empty() && buf_.back() == '\r') buf_.pop_back();
    out.push_back(std::move(buf_));
    buf_.clear();
    bytes.remove_prefix(nl + 1);
  }
  return {};
}

std::optional<std::string> line_splitter::finish() {
  if (buf_.empty()) return std::nullopt;
  std::string rest = std::move(buf_);
  buf_.clear();
  return rest;
}

std::string url_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace tjob::http
