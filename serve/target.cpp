#include "serve/target.hpp"

namespace tjob::serve {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      c = ' ';
    }
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return std::nullopt;
    out.push_back(c);
  }
  return out;
}

std::optional<request_target> parse_target(std::string_view raw, std::string& problem,
                                           std::size_t max_segments, std::size_t max_params) {
  if (raw.empty() || raw[0] != '/') {
    problem = "the request target must be a path that begins with '/'";
    return std::nullopt;
  }
  for (char c : raw) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      problem = "the request target has a space, a control byte or a non-ASCII byte; percent-encode it";
      return std::nullopt;
    }
  }
  if (raw.find('#') != std::string_view::npos) {
    problem = "the request target has a fragment ('#'); leave it out";
    return std::nullopt;
  }
  request_target t;
  auto q = raw.find('?');
  auto path = raw.substr(0, q);
  std::size_t start = 1;
  while (start <= path.size()) {
    auto end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (t.segments.size() == max_segments) {
      problem = "the path has too many segments";
      return std::nullopt;
    }
    auto seg = percent_decode(path.substr(start, end - start), false);
    if (!seg) {
      problem = "the path has a bad percent escape or an encoded control byte";
      return std::nullopt;
    }
    t.segments.push_back(std::move(*seg));
    start = end + 1;
  }
  // "/v1/jobs/" is "/v1/jobs"; "/" has no segments
  if (!t.segments.empty() && t.segments.back().empty()) t.segments.pop_back();
  if (q == std::string_view::npos) return t;
  auto query = raw.substr(q + 1);
  std::size_t params = 0;
  start = 0;
  while (start < query.size()) {
    auto end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    auto part = query.substr(start, end - start);
    start = end + 1;
    if (part.empty()) continue;
    if (++params > max_params) {
      problem = "the query has too many parameters";
      return std::nullopt;
    }
    auto eq = part.find('=');
    auto key = percent_decode(part.substr(0, eq), true);
    auto value = eq == std::string_view::npos ? std::optional<std::string>("")
                                              : percent_decode(part.substr(eq + 1), true);
    if (!key || !value || key->empty()) {
      problem = "the query has an empty name, a bad percent escape or an encoded control byte";
      return std::nullopt;
    }
    t.query[std::move(*key)] = std::move(*value);
  }
  return t;
}

}  // namespace tjob::serve
