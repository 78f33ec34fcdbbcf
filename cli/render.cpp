#include "cli/render.hpp"

#include "cli/job_request.hpp"

#include <tjob/wire.hpp>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>
#include <boost/json.hpp>

#include <algorithm>
#include <type_traits>

namespace tjob::cli {

namespace json = boost::json;

std::string format_time(clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03d}Z", tm, static_cast<int>(ms % 1000));
}

std::string format_age(clock::time_point t, clock::time_point now) {
  auto s = std::chrono::duration_cast<std::chrono::seconds>(now - t).count();
  if (s < 0) s = 0;
  if (s < 120) return fmt::format("{}s", s);
  if (s < 120 * 60) return fmt::format("{}m", s / 60);
  if (s < 48 * 3600) return fmt::format("{}h", s / 3600);
  return fmt::format("{}d", s / 86400);
}

std::string format_duration(std::chrono::milliseconds d) {
  auto ms = d.count() < 0 ? 0 : d.count();
  if (ms < 1000) return fmt::format("{}ms", ms);
  auto s = ms / 1000;
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{}s", s / 60, s % 60);
  if (s < 86400) return fmt::format("{}h{}m", s / 3600, s % 3600 / 60);
  return fmt::format("{}d{}h", s / 86400, s % 86400 / 3600);
}

namespace {

// How long a job has run: to its end, or to now while it runs.
std::string ran_for(const train_job& j, clock::time_point now) {
  if (!j.start_time) return "-";
  auto until = j.end_time.value_or(now);
  return format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(until - *j.start_time));
}

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

// Bytes as Kubernetes writes them (4Gi, 512Mi), else plain.
std::string bytes_text(std::uint64_t b) {
  for (auto [unit, size] :
       {std::pair{"Ti", 1ULL << 40}, {"Gi", 1ULL << 30}, {"Mi", 1ULL << 20}, {"Ki", 1ULL << 10}})
    if (b >= size && b % size == 0) return std::to_string(b / size) + unit;
  return std::to_string(b);
}

// A job's status as a person reads it: "Created (Queued #3)" while it waits
// for admission.
std::string status_cell(const train_job& j) {
  std::string s(to_string(j.status));
  if (j.status == job_status::created && !j.reason.empty())
    s += " (" + j.reason + (j.queue_position ? " #" + std::to_string(*j.queue_position) : "") + ")";
  return s;
}

}  // namespace

namespace {

void emit(YAML::Emitter& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::object:
      out << YAML::BeginMap;
      for (const auto& kv : v.get_object()) {
        out << YAML::Key << std::string(kv.key());
        out << YAML::Value;
        emit(out, kv.value());
      }
      out << YAML::EndMap;
      break;
    case json::kind::array:
      out << YAML::BeginSeq;
      for (const auto& e : v.get_array()) emit(out, e);
      out << YAML::EndSeq;
      break;
    case json::kind::string:
      out << YAML::DoubleQuoted << std::string(v.get_string());
      break;
    case json::kind::int64:
      out << v.get_int64();
      break;
    case json::kind::uint64:
      out << v.get_uint64();
      break;
    case json::kind::double_:
      out << v.get_double();
      break;
    case json::kind::bool_:
      out << v.get_bool();
      break;
    case json::kind::null:
      out << YAML::Null;
      break;
  }
}

// Columns padded to their widest cell, as kubectl prints them.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], r[i].size());
    }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 3, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string pretty_json(const json::value& v) { return json::serialize(v) + "\n"; }

// The field `-o name` prints of each kind of item.
template <class T>
const char* name_field() {
  if constexpr (std::is_same_v<T, venv_cache_entry>)
    return "key";
  else if constexpr (std::is_same_v<T, event>)
    return "seq";
  else
    return "name";
}

// A list as JSON or YAML, the same shape in both: a bare list of objects, so
// that a script's paths (`.[0].status`) work on either.
template <class T>
std::string render_list(const std::vector<T>& items, output_format f) {
  if (f == output_format::name) {
    std::string out;
    for (const auto& i : items) {
      auto v = to_json(i);
      const auto& n = v.at(name_field<T>());
      out += (n.is_string() ? std::string(n.as_string()) : json::serialize(n)) + "\n";
    }
    return out;
  }
  json::array arr;
  for (const auto& i : items) arr.push_back(to_json(i));
  if (f == output_format::json) return pretty_json(arr);
  return to_yaml(arr);
}

}  // namespace

std::string to_yaml(const json::value& v) {
  YAML::Emitter out;
  emit(out, v);
  return std::string(out.c_str()) + "\n";
}

namespace {

// "42%", or "-" before any report.
std::string progress_cell(const train_job& j) {
  return j.progress_percent ? std::to_string(*j.progress_percent) + "%" : "-";
}

// The estimated time left as reported ("3m12s"), or "-".
std::string eta_cell(const train_job& j) {
  // An ended job has nothing left: its last report's estimate no longer holds.
  return j.estimated_remaining_seconds && !is_terminal(j.status)
             ? format_duration(std::chrono::seconds(*j.estimated_remaining_seconds))
             : "-";
}

}  // namespace

std::string render_jobs(const std::vector<train_job>& jobs, output_format f) {
  bool wide = f == output_format::wide;
  if (f != output_format::table && !wide) return render_list(jobs, f);
  std::vector<std::vector<std::string>> rows{{"NAME", "STATUS", "RUNTIME", "STEPS", "PROGRESS", "AGE"}};
  if (wide) rows[0].insert(rows[0].end(), {"NODES", "STARTED", "DURATION", "ETA", "REASON", "ARRAY"});
  auto now = clock::now();
  for (const auto& j : jobs) {
    auto done =
        std::count_if(j.steps.begin(), j.steps.end(), [](const step& s) { return is_terminal(s.status); });
    rows.push_back({j.name, status_cell(j), or_dash(j.runtime), fmt::format("{}/{}", done, j.steps.size()),
                    progress_cell(j), format_age(j.creation_timestamp, now)});
    if (wide)
      rows.back().insert(rows.back().end(),
                         {std::to_string(j.num_nodes), j.start_time ? format_time(*j.start_time) : "-",
                          ran_for(j, now), eta_cell(j), or_dash(j.reason), or_dash(j.array)});
  }
  return table(rows);
}

std::string render_job(const train_job& job, output_format f) {
  if (f == output_format::json) return pretty_json(to_json(job));
  if (f == output_format::yaml) return to_yaml(to_json(job));
  if (f == output_format::name) return job.name + "\n";
  std::vector<std::vector<std::string>> head{
      {"NAME", "STATUS", "RUNTIME", "NODES", "CREATED"},
      {job.name, status_cell(job), or_dash(job.runtime), std::to_string(job.num_nodes),
       format_time(job.creation_timestamp)}};
  if (f == output_format::wide) {
    head[0].insert(head[0].end(), {"STARTED", "ENDED", "DURATION"});
    head[1].insert(head[1].end(),
                   {job.start_time ? format_time(*job.start_time) : "-",
                    job.end_time ? format_time(*job.end_time) : "-", ran_for(job, clock::now())});
  }
  std::string out = table(head);
  // What its code last reported (train_job::progress_percent), once it has.
  if (job.progress_percent || job.estimated_remaining_seconds || !job.metrics.empty()) {
    std::string metrics;
    for (const auto& [name, value] : job.metrics)
      metrics += (metrics.empty() ? "" : " ") + name + "=" + value;
    std::vector<std::vector<std::string>> progress{
        {"PROGRESS", "ETA", "UPDATED", "METRICS"},
        {progress_cell(job), eta_cell(job), job.progress_updated ? format_time(*job.progress_updated) : "-",
         or_dash(metrics)}};
    out += "\n" + table(progress);
  }
  // ATTEMPT only for a job that has restarted (train_request::retry)
  const bool restarted =
      std::any_of(job.steps.begin(), job.steps.end(), [](const step& s) { return s.attempt > 1; });
  std::vector<std::vector<std::string>> rows{{"STEP", "STATUS", "EXIT CODE", "REASON"}};
  if (restarted) rows[0].insert(rows[0].begin() + 2, "ATTEMPT");
  for (const auto& s : job.steps) {
    rows.push_back({s.name, std::string(to_string(s.status)),
                    s.exit_code ? std::to_string(*s.exit_code) : "-", s.reason});
    if (restarted) rows.back().insert(rows.back().begin() + 2, std::to_string(s.attempt));
  }
  return out + "\n" + table(rows);
}

std::string render_job_list(const std::vector<train_job>& jobs, output_format f) {
  if (jobs.size() == 1) return render_job(jobs.front(), f);
  if (f != output_format::table && f != output_format::wide) return render_list(jobs, f);
  std::string out;
  for (const auto& j : jobs) out += (out.empty() ? "" : "\n") + render_job(j, f);
  return out;
}

std::string render_events(const std::vector<event>& events, output_format f) {
  if (f != output_format::table && f != output_format::wide) return render_list(events, f);
  std::vector<std::vector<std::string>> rows{{"TIME", "STEP", "REASON", "MESSAGE"}};
  for (const auto& e : events)
    rows.push_back({format_time(e.time), e.step.empty() ? "-" : e.step, e.reason, e.message});
  return table(rows);
}

std::string render_runtimes(const std::vector<runtime>& runtimes, output_format f) {
  if (f != output_format::table && f != output_format::wide) return render_list(runtimes, f);
  std::vector<std::vector<std::string>> rows{{"NAME", "FRAMEWORK", "TRAINER", "PACKAGES"}};
  for (const auto& r : runtimes) {
    std::string pk;
    for (const auto& p : r.trainer.packages) pk += (pk.empty() ? "" : ",") + p;
    rows.push_back({r.name, r.trainer.framework, r.trainer.trainer_type, pk.empty() ? "-" : pk});
  }
  return table(rows);
}

std::string render_queue(const std::vector<queue_entry>& entries, output_format f) {
  if (f != output_format::table && f != output_format::wide) return render_list(entries, f);
  std::vector<std::vector<std::string>> rows{
      {"POSITION", "NAME", "PRIORITY", "WAITING", "NEEDS", "WAITS FOR"}};
  auto now = clock::now();
  for (const auto& e : entries) {
    std::string needs = fmt::format("cpu={}", e.cpus);
    if (e.memory) needs += ",memory=" + bytes_text(e.memory);
    if (e.gpus) needs += fmt::format(",gpu={}", e.gpus);
    rows.push_back({std::to_string(e.position), e.name, std::to_string(e.priority), format_age(e.since, now),
                    needs, e.waits_for});
  }
  return table(rows);
}

std::string render_store_check(const store_check& c) {
  std::string out;
  if (c.problems.empty()) {
    out = "store " + c.store + ": sound\n";
  } else {
    out = fmt::format("store {}: {} problem(s){}\n", c.store, c.problems.size(),
                      c.repaired ? ", repaired" : "");
    for (const auto& p : c.problems) out += "  " + p + "\n";
    out += c.meaning + "\n";
  }
  if (c.unrecorded_dirs.empty()) return out;
  out += fmt::format(
      "{} job director{} with no record in the store (a store that was lost or replaced, a removal "
      "that did not finish); each keeps its name from new jobs. Move aside what you want to keep "
      "and remove the rest:\n",
      c.unrecorded_dirs.size(), c.unrecorded_dirs.size() == 1 ? "y" : "ies");
  for (const auto& d : c.unrecorded_dirs) out += "  " + d + "\n";
  return out;
}

std::string render_venv_cache(const std::vector<venv_cache_entry>& entries, output_format f) {
  if (f != output_format::table && f != output_format::wide) return render_list(entries, f);
  std::vector<std::vector<std::string>> rows{{"KEY", "PYTHON", "PACKAGES", "SIZE", "LAST USED", "STATE"}};
  auto now = clock::now();
  for (const auto& e : entries) {
    std::string pk;
    for (const auto& p : e.packages) pk += (pk.empty() ? "" : ",") + p;
    if (e.system_site_packages) pk += pk.empty() ? "(system site)" : " (+system site)";
    rows.push_back(
        {e.key, e.python_version.empty() ? e.python : e.python_version, pk.empty() ? "-" : pk,
         e.bytes < (1u << 20) ? fmt::format("{:.0f} KiB", static_cast<double>(e.bytes) / 1024)
                              : fmt::format("{:.1f} MiB", static_cast<double>(e.bytes) / (1 << 20)),
         format_age(e.last_used, now) + " ago", e.problem.empty() ? "ok" : "broken: " + e.problem});
  }
  return table(rows);
}

output_format parse_format(const std::string& s) {
  if (s == "table") return output_format::table;
  if (s == "json") return output_format::json;
  if (s == "yaml") return output_format::yaml;
  if (s == "name") return output_format::name;
  if (s == "wide") return output_format::wide;
  throw usage_error("-o " + s + ": unknown output format; use table, wide, name, json or yaml");
}

std::set<job_status> parse_statuses(const std::string& list) {
  std::set<job_status> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    auto end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    auto item = list.substr(start, end - start);
    // Statuses are matched without regard to case: failed, FAILED, Failed.
    std::optional<job_status> st;
    for (auto s : {job_status::created, job_status::running, job_status::complete, job_status::failed})
      if (std::equal(item.begin(), item.end(), to_string(s).begin(), to_string(s).end(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
          }))
        st = s;
    if (!st)
      throw usage_error("--status '" + item +
                        "': not a status; use a comma-separated list of Created, Running, "
                        "Complete, Failed");
    out.insert(*st);
    start = end + 1;
  }
  return out;
}

}  // namespace tjob::cli
