// What the daemon's list and inspect answers say of a container (Docker's
// and Podman's compat API, and libpod's names where they differ).
#include "adapters/container/container_impl.hpp"

#include "core/json_fields.hpp"
#include "core/times.hpp"

namespace tjob::container {

using detail::obj_of;
using detail::str_of;

std::map<std::string, std::string> labels_of(const json::object& o) {
  std::map<std::string, std::string> out;
  const json::object* l = obj_of(o, "Labels");
  if (!l) l = obj_of(o, "labels");
  if (!l)
    if (auto* cfg = obj_of(o, "Config")) l = obj_of(*cfg, "Labels");
  if (l)
    for (const auto& [k, v] : *l)
      if (v.is_string()) out[std::string(k)] = std::string(v.as_string());
  return out;
}

// A container as the daemon lists it (nullopt: not one of a job's).
std::optional<seen> seen_of(const json::object& o) {
  seen c;
  c.id = str_of(o, "Id");
  c.labels = labels_of(o);
  c.step = c.labels[label_step];
  if (auto* names = o.if_contains("Names");
      names && names->is_array() && !names->as_array().empty() && names->as_array()[0].is_string()) {
    c.name = std::string(names->as_array()[0].as_string());
    if (c.name.starts_with("/")) c.name.erase(0, 1);
  }
  c.state = str_of(o, "State");
  if (auto* cr = o.if_contains("Created"); cr && cr->is_number()) c.created = cr->to_number<std::int64_t>();
  if (c.id.empty() || c.labels[label_job].empty()) return std::nullopt;
  return c;
}

// What only the container's inspect says: its TTY, its state's details.
void read_inspected(const json::object& ins, seen& c) {
  if (auto* config = obj_of(ins, "Config"))
    if (auto* t = config->if_contains("Tty"); t && t->is_bool()) c.tty = t->as_bool();
  if (auto* st = obj_of(ins, "State")) {
    c.state = str_of(*st, "Status");
    if (auto* p = st->if_contains("Pid"); p && p->is_number()) c.pid = p->to_number<std::int64_t>();
    if (auto* oom = st->if_contains("OOMKilled"); oom && oom->is_bool()) c.oom = oom->as_bool();
    c.error = str_of(*st, "Error");
    c.started = detail::parse_rfc3339(str_of(*st, "StartedAt"));
    if (auto* n = ins.if_contains("RestartCount"); n && n->is_number())
      c.restarts = static_cast<int>(n->to_number<std::int64_t>());
    c.finished = detail::parse_rfc3339(str_of(*st, "FinishedAt"));
    if (c.state == "exited" || c.state == "dead" || c.state == "stopped")
      if (auto* x = st->if_contains("ExitCode"); x && x->is_number())
        c.exit_code = static_cast<int>(x->to_number<std::int64_t>());
  }
}

}  // namespace tjob::container
