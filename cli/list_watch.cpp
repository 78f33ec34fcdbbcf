#include "cli/list_watch.hpp"

#include "cli/run_job.hpp"

#include <tjob/wire.hpp>

#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include <map>

namespace tjob::cli {

// list -w: the list, then each job again as it changes, woken by the
// backend's own signals (the store's commits, the daemon's events, the
// cluster's watches), never by polling.
void watch_list(trainer_client& client, const std::string& runtime, const std::set<job_status>& statuses,
                output_format fmt) {
  auto which = runtime.empty() ? std::nullopt : std::optional(runtime);
  auto shown = [&](const train_job& j) { return statuses.empty() || statuses.count(j.status) > 0; };
  // One line per job in JSON (a stream of objects, not one array), a
  // document per job in YAML, the table's rows without their header.
  auto one = [&](const train_job& j, bool header) {
    if (fmt == output_format::json) return boost::json::serialize(to_json(j)) + "\n";
    if (fmt == output_format::yaml) return "---\n" + to_yaml(to_json(j));
    auto text = render_jobs({j}, fmt);
    if (fmt == output_format::name || header) return text;
    return text.substr(text.find('\n') + 1);
  };
  auto known = client.list_jobs(which);
  bool header = true;
  for (const auto& j : known)
    if (shown(j) && write_out(one(j, header))) header = false;
  if (header && (fmt == output_format::table || fmt == output_format::wide))
    write_out(render_jobs({}, fmt));  // the header alone: the watch has begun
  for (;;) {
    auto now = client.wait_for_jobs_change(known, which, std::chrono::hours(1));
    std::map<std::string, const train_job*> before;
    for (const auto& j : known) before[j.name] = &j;
    bool ok = true;
    for (const auto& j : now) {
      auto it = before.find(j.name);
      bool changed = it == before.end() || !same_state(*it->second, j);
      if (it != before.end()) before.erase(it);
      if (changed && shown(j)) ok = ok && write_out(one(j, false));
    }
    for (const auto& [name, j] : before) {  // gone: deleted
      if (!shown(*j)) continue;
      if (fmt == output_format::json)
        ok = ok &&
             write_out(boost::json::serialize(boost::json::object{{"name", name}, {"deleted", true}}) + "\n");
      else if (fmt == output_format::yaml)
        ok = ok && write_out("---\nname: " + name + "\ndeleted: true\n");
      else if (fmt == output_format::name)
        ok = ok && write_out(name + "\n");
      else
        ok = ok && write_out(name + "   Deleted\n");
    }
    if (!ok) return;  // nobody reads any more (`| head`)
    known = std::move(now);
  }
}

}  // namespace tjob::cli
