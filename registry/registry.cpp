// The registry: the one place that names the backends. Each backend registers
// itself by its folder's registration() (its id, what it does, its options,
// its config check, its factory); a program may add its own
// (detail::register_backend: the tests' in-memory backend). Everything else
// asks a backend's capabilities.
//
// Adding a backend: its folder under adapters/ with its registration(), one
// line in builtins() below, its library in CMakeLists.txt (docs/architecture.md).
#include "adapters/container/container_backend.hpp"
#include "adapters/kubernetes/kube_backend.hpp"
#include "adapters/local/local_backend.hpp"
#include "adapters/remote/remote_backend.hpp"
#include "adapters/slurm/slurm_backend.hpp"
#include "core/driver.hpp"

#include <tjob/error.hpp>

#include <algorithm>
#include <cctype>
#include <mutex>

namespace tjob {

namespace detail {

namespace {

std::vector<backend_registration> builtins() {
  std::vector<backend_registration> all;
  all.push_back(local::registration());
  all.push_back(container::registration());
  all.push_back(kube::registration());
  all.push_back(remote::registration());
  all.push_back(slurm::registration());
  return all;
}

struct registry {
  std::mutex m;
  std::vector<backend_registration> backends = builtins();

  const backend_registration* find(std::string_view id) {
    for (const auto& r : backends)
      if (r.description.id == id) return &r;
    return nullptr;
  }
};

registry& the_registry() {
  static registry r;
  return r;
}

std::string ids(registry& r) {
  std::string out;
  for (std::size_t i = 0; i < r.backends.size(); ++i)
    out += (i == 0 ? "" : i + 1 == r.backends.size() ? " or " : ", ") + r.backends[i].description.id;
  return out;
}

const backend_registration& registration_of(registry& r, std::string_view id) {
  if (auto* found = r.find(id)) return *found;
  throw error(errc::invalid_argument, "backend '" + std::string(id) + "': no such backend; use " + ids(r));
}

}  // namespace

void register_backend(backend_registration reg) {
  auto& r = the_registry();
  std::lock_guard lock(r.m);
  const auto& id = reg.description.id;
  if (id.empty() || !std::all_of(id.begin(), id.end(), [](char c) {
        return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
               c == '-';
      }))
    throw error(errc::invalid_argument, "backend id '" + id + "': use lowercase letters, digits and '-'");
  if (r.find(id)) throw error(errc::invalid_argument, "backend id '" + id + "' is registered already");
  if (!reg.check || !reg.make) throw error(errc::invalid_argument, "backend '" + id + "': no check or no make");
  reg.description.capabilities.id = id;
  r.backends.push_back(std::move(reg));
}

std::shared_ptr<backend> make_backend(backend_context ctx) {
  auto& r = the_registry();
  std::function<std::shared_ptr<backend>(backend_context)> make;
  {
    std::lock_guard lock(r.m);
    const auto& reg = registration_of(r, ctx.cfg.backend);
    reg.check(ctx.cfg.backend_config, [](std::string_view m) { return std::string(m); });
    make = reg.make;
  }
  return make(std::move(ctx));
}

}  // namespace detail

std::vector<backend_description> registered_backends() {
  auto& r = detail::the_registry();
  std::lock_guard lock(r.m);
  std::vector<backend_description> out;
  for (const auto& b : r.backends) out.push_back(b.description);
  return out;
}

std::optional<backend_description> find_backend(std::string_view id) {
  auto& r = detail::the_registry();
  std::lock_guard lock(r.m);
  if (auto* found = r.find(id)) return found->description;
  return std::nullopt;
}

void check_backend_config(std::string_view id, const boost::json::object& config,
                          const std::function<std::string(std::string_view)>& name_of) {
  auto& r = detail::the_registry();
  std::function<void(const boost::json::object&, const std::function<std::string(std::string_view)>&)> check;
  {
    std::lock_guard lock(r.m);
    check = detail::registration_of(r, id).check;
  }
  if (name_of)
    check(config, name_of);
  else
    check(config, [](std::string_view m) { return std::string(m); });
}

}  // namespace tjob
