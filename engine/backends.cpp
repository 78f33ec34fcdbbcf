#include <tjob/backends.hpp>

#include <algorithm>
#include <cctype>

namespace tjob {

namespace {
bool same_nocase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool same(std::string_view a, std::string_view b) { return a == b; }

// The value among `all` whose name `matches` s.
template <class E>
std::optional<E> parse_among(std::string_view s, std::initializer_list<E> all,
                             bool (*matches)(std::string_view, std::string_view)) {
  for (auto v : all)
    if (matches(s, to_string(v))) return v;
  return std::nullopt;
}
}  // namespace

std::string_view to_string(backend_kind k) noexcept {
  switch (k) {
    case backend_kind::local:
      return "local";
    case backend_kind::container:
      return "container";
    case backend_kind::kubernetes:
      return "kubernetes";
    case backend_kind::remote:
      return "remote";
  }
  return "local";
}

std::optional<backend_kind> parse_backend_kind(std::string_view s) noexcept {
  return parse_among(
      s, {backend_kind::local, backend_kind::container, backend_kind::kubernetes, backend_kind::remote},
      same);
}

std::string_view to_string(pull_policy p) noexcept {
  switch (p) {
    case pull_policy::if_not_present:
      return "IfNotPresent";
    case pull_policy::always:
      return "Always";
    case pull_policy::never:
      return "Never";
  }
  return "IfNotPresent";
}

std::optional<pull_policy> parse_pull_policy(std::string_view s) noexcept {
  return parse_among(s, {pull_policy::if_not_present, pull_policy::always, pull_policy::never}, same_nocase);
}

std::string_view to_string(container_network n) noexcept {
  switch (n) {
    case container_network::job:
      return "job";
    case container_network::host:
      return "host";
    case container_network::none:
      return "none";
  }
  return "job";
}

std::optional<container_network> parse_container_network(std::string_view s) noexcept {
  return parse_among(s, {container_network::job, container_network::host, container_network::none}, same);
}

}  // namespace tjob
