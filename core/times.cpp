#include "core/times.hpp"

#include <fmt/format.h>

#include <cctype>
#include <ctime>

namespace tjob::detail {

std::optional<clock::time_point> parse_rfc3339(std::string_view s) {
  // Fixed-width fields, each range-checked: a time from a server or a user
  // is data, and a year past 2261 does not fit the clock (found by fuzz_watch).
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
  if (s.size() < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
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
  std::size_t i = 19;
  if (s[i] == '.') {
    ++i;
    long frac = 0, scale = 1;
    const std::size_t digits = i;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i)
      if (scale < 1000000000) {  // nanoseconds; further digits are below the clock
        frac = frac * 10 + (s[i] - '0');
        scale *= 10;
      }
    if (i == digits) return std::nullopt;
    t += std::chrono::duration_cast<clock::duration>(std::chrono::nanoseconds(frac * (1000000000 / scale)));
  }
  if (i + 1 == s.size() && (s[i] == 'Z' || s[i] == 'z')) return t;
  if (i + 6 != s.size() || (s[i] != '+' && s[i] != '-') || s[i + 3] != ':') return std::nullopt;
  auto oh = field(i + 1, 2, 0, 23), om = field(i + 4, 2, 0, 59);
  if (!oh || !om) return std::nullopt;
  auto offset = std::chrono::minutes(*oh * 60 + *om);
  return s[i] == '+' ? t - offset : t + offset;
}

std::string format_rfc3339_nano(clock::time_point t) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  auto secs = ns / 1000000000, frac = ns % 1000000000;
  if (frac < 0) {
    frac += 1000000000;
    --secs;
  }
  std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

std::string peer_stamps::operator()(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  while (!text.empty()) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl == std::string_view::npos ? text.size() : nl + 1);
    text.remove_prefix(line.size());
    if (at_line_start_) {
      dropping_ = false;
      auto space = line.find(' ');
      auto t = space == std::string_view::npos ? std::nullopt : parse_rfc3339(line.substr(0, space));
      if (t) {
        dropping_ = since_ && *t < *since_;
        if (wanted_) out += format_rfc3339_nano(*t);
        line.remove_prefix(wanted_ ? space : space + 1);
      }
    }
    if (!dropping_) out.append(line);
    at_line_start_ = line.empty() || line.back() == '\n';
  }
  return out;
}

}  // namespace tjob::detail

namespace tjob {

std::optional<clock::time_point> parse_time(std::string_view rfc3339) {
  return detail::parse_rfc3339(rfc3339);
}

std::string format_time(clock::time_point t) { return detail::format_rfc3339_nano(t); }

}  // namespace tjob
