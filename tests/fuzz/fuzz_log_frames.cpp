// Docker/Podman log streams: the 8-byte frame headers and their payloads, in
// any split, raw (TTY) or multiplexed. A bad header is a protocol_error; the
// payload handed out never exceeds what came in and never crosses a frame.
#include "adapters/container/docker_api.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <tjob/error.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  bool raw = data[0] & 0x80;
  tjob::container::frame_decoder dec(raw, 4096);
  std::size_t in = 0, out = 0;
  bool refused = false;
  tjob::fuzz::in_pieces(data, size, [&](std::string_view piece) {
    if (refused) return;
    in += piece.size();
    refused = !dec.feed(piece, [&](int stream, std::string_view payload) {
      if (stream < 0 || stream > 2) std::abort();
      out += payload.size();
      if (payload.size() > 4096) std::abort();
    });
  });
  if (refused) return 0;
  if (out > in) std::abort();
  if (raw && out != in) std::abort();
  return 0;
}
