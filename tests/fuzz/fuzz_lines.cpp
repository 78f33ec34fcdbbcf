// JSON-lines and event streams: line_splitter in any split. The lines it
// hands out, joined with their '\n', are the input (a trailing '\r' dropped);
// a line over the limit is a protocol_error, never a line cut short.
#include "adapters/http/http_client.hpp"
#include "tests/fuzz/fuzz_support.hpp"

#include <tjob/error.hpp>

#include <cstdlib>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  tjob::http::line_splitter split(256, "fuzz");
  std::vector<std::string> lines;
  std::string input;
  bool refused = false;
  tjob::fuzz::in_pieces(data, size, [&](std::string_view piece) {
    input.append(piece);
    if (!refused) refused = !split.feed(piece, lines);
  });
  if (refused) return 0;  // a line over the bound: refused, never buffered
  if (auto rest = split.finish()) lines.push_back(*rest);
  std::string joined;
  for (const auto& l : lines) {
    if (l.size() > 256 || l.find('\n') != std::string::npos) std::abort();
    joined += l;
  }
  std::string expected;
  for (char c : input)
    if (c != '\n') expected.push_back(c);
  // '\r' before '\n' is dropped by the splitter; compare without any '\r' then.
  std::erase(joined, '\r');
  std::erase(expected, '\r');
  if (joined != expected) std::abort();
  return 0;
}
