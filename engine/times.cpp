#include "engine/times.hpp"

#include <cctype>
#include <ctime>

namespace tjob::detail {

std::optional<clock::time_point> parse_rfc3339(std::string_view s) {
  // Fixed-width fields, each range-checked: a time from a server is data, and
  // a year past 2261 does not fit the clock (found by fuzz_watch).
  auto field = [&](std::size_t at, std::size_t width, int lo, int hi) -> std::optional<int> {
    if (s.size() < at + width) return std::nullopt;
    int v = 0;
    for (std::size_t i = at; i < at + width; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
      v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi) return std::nullopt;
    return v;
  };
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      s[13] != ':' || s[16] != ':')
    return std::nullopt;
  auto y = field(0, 4, 1970, 2261), mo = field(5, 2, 1, 12), d = field(8, 2, 1, 31), h = field(11, 2, 0, 23),
       mi = field(14, 2, 0, 59), sec = field(17, 2, 0, 60);
  if (!y || !mo || !d || !h || !mi || !sec) return std::nullopt;
  std::tm tm{};
  tm.tm_year = *y - 1900;
  tm.tm_mon = *mo - 1;
  tm.tm_mday = *d;
  tm.tm_hour = *h;
  tm.tm_min = *mi;
  tm.tm_sec = *sec;
  auto t = clock::from_time_t(::timegm(&tm));
  if (s.size() > 20 && s[19] == '.') {
    std::size_t i = 20;
    long frac = 0, scale = 1;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && scale < 1000000000) {
      frac = frac * 10 + (s[i] - '0');
      scale *= 10;
      ++i;
    }
    t += std::chrono::duration_cast<clock::duration>(std::chrono::nanoseconds(frac * (1000000000 / scale)));
  }
  return t;
}

}  // namespace tjob::detail
