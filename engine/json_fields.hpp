// Reading fields of JSON answers (Docker, Kubernetes) that may be missing or
// of another type: absent is "" or nullptr, never an exception.
#pragma once

#include <boost/json/object.hpp>

#include <string>
#include <string_view>

namespace tjob::detail {

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
