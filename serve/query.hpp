// The pieces of a request the routes read: query parameters (each checked,
// naming itself on a bad value), JSON replies, and the 400 of a bad request.
#pragma once

#include "serve/api.hpp"

#include <tjob/status.hpp>

#include <boost/json/value.hpp>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>

namespace tjob::serve {

using query_map = std::map<std::string, std::string>;

/// An error of the request itself (a query parameter, the body): 400.
struct bad_request : std::runtime_error {
  bad_request(std::string field, std::string message, std::string code = "bad_request")
      : std::runtime_error(std::move(message)), field(std::move(field)), code(std::move(code)) {}
  std::string field, code;
};

/// A JSON answer: the value and a newline.
reply json_reply(int status, const boost::json::value& v);

/// Refuses a query parameter the route does not take, by name.
void only(const query_map& q, std::initializer_list<const char*> allowed);
std::optional<std::string> param(const query_map& q, const char* key);
/// 1, true or empty: true; 0 or false: false; absent: false.
bool flag_param(const query_map& q, const char* key);
std::optional<std::int64_t> int_param(const query_map& q, const char* key, std::int64_t lo, std::int64_t hi);
/// Seconds, more than 0 and at most `hi`.
std::optional<double> seconds_param(const query_map& q, const char* key, double hi);
/// A comma-separated list of statuses, any case.
std::set<job_status> statuses_param(const query_map& q, const char* key);

}  // namespace tjob::serve
