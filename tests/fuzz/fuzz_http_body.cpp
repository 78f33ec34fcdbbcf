// HTTP answers as a daemon or API server sends them, through the client's own
// code: a unix socket in this process serves the input as the answer; the
// client opens it and reads the body piecewise (chunked, sized or until EOF)
// and whole. A malformed, oversized or cut answer is a tjob::error.
#include "adapters/http/http_client.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <tjob/error.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <unistd.h>
#include <cstdlib>
#include <string>

namespace asio = boost::asio;
using local = asio::local::stream_protocol;

namespace {

std::string socket_path() {
  static std::string path = "/tmp/tjob-fuzz-http-" + std::to_string(::getpid()) + ".sock";
  return path;
}

asio::awaitable<void> serve(local::acceptor& acceptor, std::string answer) {
  boost::system::error_code ec;
  auto peer = co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
  if (ec) co_return;
  co_await asio::async_write(peer, asio::buffer(answer), asio::redirect_error(asio::use_awaitable, ec));
  peer.shutdown(local::socket::shutdown_both, ec);
}

asio::awaitable<void> fetch(tjob::http::client& c, local::acceptor& acceptor, bool whole, std::size_t& got) {
  tjob::http::request r;
  r.target = "/fuzz";
  r.timeout = std::chrono::seconds(5);
  // A failure is an answer here; only a crash or a sanitizer report is a find.
  if (whole) {
    auto resp = co_await c.send(r);
    if (resp) got = resp->body.size();
  } else {
    auto body = co_await c.open(r);
    while (body) {
      auto piece = co_await body->read_some();
      if (!piece || !*piece) break;
      got += (*piece)->size();
    }
  }
  boost::system::error_code ec;
  acceptor.close(ec);  // a server still waiting for a connection gives up
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  bool whole = data[0] & 1;
  std::string answer(tjob::fuzz::text(data + 1, size - 1));
  asio::io_context ctx(1);
  ::unlink(socket_path().c_str());
  local::acceptor acceptor(ctx, local::endpoint(socket_path()));
  tjob::http::endpoint ep;
  ep.path = socket_path();
  tjob::http::client c(ctx.get_executor(), ep, 1 << 16);
  std::size_t got = 0;
  asio::co_spawn(ctx, serve(acceptor, answer), asio::detached);
  asio::co_spawn(ctx, fetch(c, acceptor, whole, got), asio::detached);
  ctx.run();
  if (got > answer.size()) std::abort();  // no byte is made up
  return 0;
}
