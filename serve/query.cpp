#include "serve/query.hpp"

#include <fmt/format.h>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

namespace tjob::serve {

namespace json = boost::json;

reply json_reply(int status, const json::value& v) {
  reply r;
  r.status = status;
  r.body = json::serialize(v) + "\n";
  return r;
}

void only(const query_map& q, std::initializer_list<const char*> allowed) {
  for (const auto& kv : q) {
    const auto& k = kv.first;  // (clang 14: a structured binding cannot be captured)
    bool ok = std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; });
    if (ok) continue;
    std::string names;
    for (auto* a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
    throw bad_request(
        k, "query parameter '" + k + "' is not known here; " +
               (names.empty() ? std::string("this route takes none") : "this route takes " + names));
  }
}

std::optional<std::string> param(const query_map& q, const char* key) {
  auto it = q.find(key);
  if (it == q.end()) return std::nullopt;
  return it->second;
}

bool flag_param(const query_map& q, const char* key) {
  auto v = param(q, key);
  if (!v) return false;
  if (*v == "1" || *v == "true" || v->empty()) return true;
  if (*v == "0" || *v == "false") return false;
  throw bad_request(key, std::string(key) + "=" + *v + ": give 1 or true, 0 or false");
}

std::optional<std::int64_t> int_param(const query_map& q, const char* key, std::int64_t lo, std::int64_t hi) {
  auto v = param(q, key);
  if (!v) return std::nullopt;
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || end != v->data() + v->size() || n < lo || n > hi)
    throw bad_request(key, fmt::format("{}={}: give a whole number from {} to {}", key, *v, lo, hi));
  return n;
}

std::optional<double> seconds_param(const query_map& q, const char* key, double hi) {
  auto v = param(q, key);
  if (!v) return std::nullopt;
  char* end = nullptr;
  double s = std::strtod(v->c_str(), &end);
  if (v->empty() || *end || !(s > 0) || s > hi)
    throw bad_request(key, fmt::format("{}={}: give seconds, more than 0 and at most {}", key, *v, hi));
  return s;
}

std::set<job_status> statuses_param(const query_map& q, const char* key) {
  std::set<job_status> out;
  auto v = param(q, key);
  if (!v) return out;
  std::size_t start = 0;
  while (start <= v->size()) {
    auto end = v->find(',', start);
    if (end == std::string::npos) end = v->size();
    auto item = v->substr(start, end - start);
    start = end + 1;
    std::optional<job_status> found;
    for (auto s : {job_status::created, job_status::running, job_status::complete, job_status::failed}) {
      auto name = to_string(s);
      if (std::equal(item.begin(), item.end(), name.begin(), name.end(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
          }))
        found = s;
    }
    if (!found)
      throw bad_request(
          key, std::string(key) + "=" + *v + ": '" + item +
                   "' is not a status; give a comma-separated list of Created, Running, Complete, Failed");
    out.insert(*found);
  }
  return out;
}

}  // namespace tjob::serve
