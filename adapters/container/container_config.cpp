#include "adapters/container/container_config.hpp"
#include "adapters/container/layout.hpp"
#include "core/driver.hpp"

#include <tjob/error.hpp>

#include <algorithm>
#include <cctype>

namespace tjob::container {

namespace {

bool same_nocase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

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
  for (auto p : {pull_policy::if_not_present, pull_policy::always, pull_policy::never})
    if (same_nocase(s, to_string(p))) return p;
  return std::nullopt;
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
  for (auto n : {container_network::job, container_network::host, container_network::none})
    if (s == to_string(n)) return n;
  return std::nullopt;
}

container_backend_config config_of(const boost::json::object& config,
                                   const std::function<std::string(std::string_view)>& name_of) {
  detail::config_reader r{config, name_of, "container"};
  r.only({"container_runtime", "container_host", "pull_policy", "auto_remove", "network", "image", "volumes",
          "env", "request_timeout_ms"});
  container_backend_config c;
  if (auto v = r.text("container_runtime")) {
    if (!v->empty() && *v != "docker" && *v != "podman") r.bad("container_runtime", *v + ": use docker or podman");
    c.container_runtime = *v;
  }
  if (auto v = r.text("container_host")) c.container_host = *v;
  if (auto v = r.text("pull_policy")) {
    auto p = parse_pull_policy(*v);
    if (!p) r.bad("pull_policy", *v + ": use IfNotPresent, Always or Never");
    c.pull = *p;
  }
  if (auto v = r.flag("auto_remove")) c.auto_remove = *v;
  if (auto v = r.text("network")) {
    auto n = parse_container_network(*v);
    if (!n) r.bad("network", *v + ": use job (a network per job), host or none");
    c.network = *n;
  }
  if (auto v = r.text("image")) c.image = *v;
  if (auto v = r.texts("volumes")) {
    for (const auto& vol : *v) check_volume(vol);
    c.volumes = *v;
  }
  if (auto v = r.texts("env"))
    for (const auto& e : *v) {
      auto eq = e.find('=');
      if (eq == std::string::npos || eq == 0 || e.find('\0') != std::string::npos)
        r.bad("env", "'" + e + "': expected NAME=VALUE (for example HTTPS_PROXY=http://proxy:3128)");
      c.env[e.substr(0, eq)] = e.substr(eq + 1);
    }
  if (auto v = r.number("request_timeout_ms", 1)) c.request_timeout = std::chrono::milliseconds(*v);
  return c;
}

}  // namespace tjob::container
