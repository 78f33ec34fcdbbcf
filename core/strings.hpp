// Small text helpers shared by the engine and its adapters.
#pragma once

#include <cctype>
#include <string>
#include <string_view>
#include <vector>

namespace tjob::detail {

/// The items of a comma-separated list, each trimmed of surrounding spaces;
/// empty items are dropped ("a, b,,c" -> {"a", "b", "c"}).
inline std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    auto end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    auto item = s.substr(start, end - start);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.remove_prefix(1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

}  // namespace tjob::detail
