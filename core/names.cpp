#include "core/names.hpp"

#include <cstdio>
#include <random>

namespace tjob::detail {

std::string generate_job_name() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char hex[] = "0123456789abcdef";
  std::string name;
  name.push_back(static_cast<char>('a' + rng() % 26));
  for (int i = 0; i < 11; ++i) name.push_back(hex[rng() % 16]);
  return name;
}

std::optional<std::string> name_problem(std::string_view name) {
  if (name.empty()) return "it is empty";
  if (name.size() > 63) return "it is " + std::to_string(name.size()) + " characters long; the limit is 63";
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return "it may hold only lowercase letters, digits and '-'";
  }
  if (!(name.front() >= 'a' && name.front() <= 'z')) return "it must start with a lowercase letter";
  if (name.back() == '-') return "it must end with a letter or digit";
  return std::nullopt;
}

std::string printable(std::string_view s, std::size_t max) {
  std::string out;
  for (unsigned char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

std::string quote(std::string_view s) {
  std::string out(1, '\'');
  out += printable(s);
  out.push_back('\'');
  return out;
}

}  // namespace tjob::detail

namespace tjob {

std::optional<std::string> job_name_problem(std::string_view name) { return detail::name_problem(name); }

}  // namespace tjob
