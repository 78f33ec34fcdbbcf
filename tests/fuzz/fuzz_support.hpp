// What the fuzz targets share: feeding an input in pieces whose sizes the
// input itself chooses, so the incremental parsers meet every split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tjob::fuzz {

/// Splits `data` after its first byte into pieces of 1..(seed % 61 + 1)
/// bytes, sizes varying with the bytes themselves, and calls `f` on each.
template <class F>
void in_pieces(const std::uint8_t* data, std::size_t size, F&& f) {
  if (size == 0) return;
  std::size_t most = data[0] % 61 + 1;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::size_t i = 0;
  while (!rest.empty()) {
    std::size_t n = 1 + (static_cast<unsigned char>(rest[0]) + i++) % most;
    if (n > rest.size()) n = rest.size();
    f(rest.substr(0, n));
    rest.remove_prefix(n);
  }
}

/// The input as text.
inline std::string_view text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace tjob::fuzz
