// Reading fields of JSON answers (Docker, Kubernetes) that may be missing or
// of another type: absent is "" or nullptr, never an exception; whether a
// value's numbers are all finite (what JSON can carry); and the two small
// builders every codec uses (strings as an array, a string map as an object).
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::detail {

inline boost::json::array to_array(const std::vector<std::string>& v) {
  boost::json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

inline boost::json::object to_object(const std::map<std::string, std::string>& m) {
  boost::json::object o;
  for (const auto& [k, v] : m) o[k] = v;
  return o;
}

/// False when `v` holds a number beyond a double's range: Boost.JSON reads
/// 1e400 as an infinity and writes it as `Infinity`, which no JSON reader
/// takes back (fuzz_api_spec found it).
inline bool finite_numbers(const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::double_:
      return std::isfinite(v.get_double());
    case boost::json::kind::array:
      return std::all_of(v.get_array().begin(), v.get_array().end(),
                         [](const boost::json::value& x) { return finite_numbers(x); });
    case boost::json::kind::object:
      return std::all_of(v.get_object().begin(), v.get_object().end(),
                         [](const boost::json::key_value_pair& kv) { return finite_numbers(kv.value()); });
    default:
      return true;
  }
}

inline const boost::json::object* obj_of(const boost::json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  return v && v->is_object() ? &v->as_object() : nullptr;
}

inline const boost::json::array* arr_of(const boost::json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  return v && v->is_array() ? &v->as_array() : nullptr;
}

inline std::string str_of(const boost::json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  return v && v->is_string() ? std::string(v->as_string()) : std::string();
}

/// As above, "" when `o` is null (a parent object that was not there).
inline std::string str_of(const boost::json::object* o, std::string_view key) {
  return o ? str_of(*o, key) : std::string();
}

}  // namespace tjob::detail
