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

const char* const begin_time_forms =
    "now+N[s|m|h|d] (now+90, now+30m, now+2hours), HH:MM[:SS] (the next time the clock shows it), "
    "YYYY-MM-DD[THH:MM[:SS]] (local time), or RFC 3339 with a zone (2026-12-24T18:00:00Z)";

namespace {

// Digits only, none too many: the number, else nullopt.
std::optional<long long> whole(std::string_view s, std::size_t max_digits = 9) {
  if (s.empty() || s.size() > max_digits) return std::nullopt;
  long long v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// "now+N[unit]" → the time N units after `now`.
std::optional<clock::time_point> after_now(std::string_view s, clock::time_point now) {
  std::size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  auto n = whole(s.substr(0, digits), 7);
  if (!n) return std::nullopt;
  const auto unit = s.substr(digits);
  static constexpr std::pair<std::string_view, long long> units[] = {
      {"", 1},        {"s", 1},        {"sec", 1},     {"second", 1},   {"seconds", 1},
      {"m", 60},      {"min", 60},     {"minute", 60}, {"minutes", 60}, {"h", 3600},
      {"hour", 3600}, {"hours", 3600}, {"d", 86400},   {"day", 86400},  {"days", 86400}};
  for (const auto& [name, seconds] : units)
    if (unit == name) {
      if (*n * seconds > 366LL * 86400 * 10) return std::nullopt;  // ten years at most
      return now + std::chrono::seconds(*n * seconds);
    }
  return std::nullopt;
}

// "HH:MM[:SS]" into tm's hour, minute and second.
bool clock_time(std::string_view s, std::tm& tm) {
  if (s.size() != 5 && s.size() != 8) return false;
  if (s[2] != ':' || (s.size() == 8 && s[5] != ':')) return false;
  auto h = whole(s.substr(0, 2)), m = whole(s.substr(3, 2));
  auto sec = s.size() == 8 ? whole(s.substr(6, 2)) : std::optional<long long>(0);
  if (!h || !m || !sec || *h > 23 || *m > 59 || *sec > 59) return false;
  tm.tm_hour = static_cast<int>(*h);
  tm.tm_min = static_cast<int>(*m);
  tm.tm_sec = static_cast<int>(*sec);
  return true;
}

// A local time as a time point; nullopt when mktime cannot make it one or
// changed the fields (the 31st of a 30-day month).
std::optional<clock::time_point> local_time(std::tm tm) {
  const std::tm asked = tm;
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1) || tm.tm_mday != asked.tm_mday || tm.tm_mon != asked.tm_mon)
    return std::nullopt;
  return clock::from_time_t(t);
}

}  // namespace

std::optional<clock::time_point> parse_begin_time(std::string_view s, clock::time_point now) {
  if (s.starts_with("now+")) return after_now(s.substr(4), now);
  if (s == "now") return now;
  if (auto t = parse_time(s)) return t;
  const std::time_t now_t = clock::to_time_t(now);
  std::tm tm{};
  ::localtime_r(&now_t, &tm);
  if (s.find('-') == std::string_view::npos) {  // HH:MM[:SS], the next time the clock shows it
    if (!clock_time(s, tm)) return std::nullopt;
    auto t = local_time(tm);
    if (t && *t < now) {
      tm.tm_mday += 1;
      tm.tm_isdst = -1;
      const std::time_t next = std::mktime(&tm);  // (mktime carries the day into the month)
      if (next == static_cast<std::time_t>(-1)) return std::nullopt;
      return clock::from_time_t(next);
    }
    return t;
  }
  // YYYY-MM-DD[THH:MM[:SS]]
  if (s.size() < 10 || s[4] != '-' || s[7] != '-') return std::nullopt;
  auto y = whole(s.substr(0, 4)), mo = whole(s.substr(5, 2)), d = whole(s.substr(8, 2));
  if (!y || !mo || !d || *y < 1970 || *y > 2261 || *mo < 1 || *mo > 12 || *d < 1 || *d > 31)
    return std::nullopt;
  tm = std::tm{};
  tm.tm_year = static_cast<int>(*y - 1900);
  tm.tm_mon = static_cast<int>(*mo - 1);
  tm.tm_mday = static_cast<int>(*d);
  if (s.size() > 10 && ((s[10] != 'T' && s[10] != ' ') || !clock_time(s.substr(11), tm))) return std::nullopt;
  return local_time(tm);
}

}  // namespace tjob
