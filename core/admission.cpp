#include "core/admission.hpp"

#include "core/strings.hpp"
#include "core/yaml_guard.hpp"

#include <tjob/error.hpp>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace tjob::detail {

bool queue_before(const queue_row& a, const queue_row& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  return a.seq < b.seq;
}

namespace {

std::string plural(long n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// What keeps `n` out under `b` with `u` in use; empty when it fits.
std::string shortfall(const admission_need& n, const admission_budget& b, const admitted_usage& u) {
  std::vector<std::string> why;
  if (b.max_running > 0 && u.running + 1 > b.max_running)
    why.push_back(fmt::format("a running slot ({} of max_running {} in use)", u.running, b.max_running));
  if (b.cpus > 0 && u.cpus + n.cpus > b.cpus)
    why.push_back(fmt::format("{} ({} of {} in use)", plural(n.cpus, "CPU", "CPUs"), u.cpus, b.cpus));
  if (b.memory > 0 && n.memory > 0 && u.memory + n.memory > b.memory)
    why.push_back(fmt::format("{} of memory ({} of {} in use)", format_bytes(n.memory),
                              format_bytes(u.memory), format_bytes(b.memory)));
  if (n.gpus > 0 && u.gpus + n.gpus > b.gpus)
    why.push_back(fmt::format("{} GPU(s) ({} of {} in use)", n.gpus, u.gpus, b.gpus));
  std::string out;
  for (const auto& w : why) out += (out.empty() ? "" : ", ") + w;
  return out;
}

}  // namespace

void admitted_usage::add(const queue_row& r) {
  ++running;
  cpus += r.need.cpus;
  memory += r.need.memory;
  gpus += r.need.gpus;
  if (!r.group.empty()) ++groups[r.group];
}

admission_plan plan_admission(std::vector<queue_row> rows, const admission_budget& budget) {
  admitted_usage used;
  for (const auto& r : rows)
    if (r.admitted) used.add(r);
  std::erase_if(rows, [](const queue_row& r) { return r.admitted; });
  return plan_admission(std::move(rows), budget, std::move(used));
}

admission_plan plan_admission(std::vector<queue_row> rows, const admission_budget& budget,
                              admitted_usage used) {
  std::sort(rows.begin(), rows.end(), queue_before);
  admission_plan plan;
  std::string blocker;
  for (const auto& r : rows) {
    if (r.admitted) continue;
    auto group = r.group.empty() ? used.groups.end() : used.groups.find(r.group);
    const int group_running = group == used.groups.end() ? 0 : group->second;
    if (r.group_limit > 0 && group_running >= r.group_limit) {
      plan.queue.push_back(
          {r.job, 0, fmt::format("its array {}: {} of {} running", r.group, group_running, r.group_limit)});
      continue;
    }
    if (!blocker.empty()) {
      plan.queue.push_back({r.job, 0, "job " + blocker + " ahead of it"});
      continue;
    }
    auto why = shortfall(r.need, budget, used);
    if (why.empty()) {
      plan.admit.push_back(r.job);
      plan.queue.push_back({r.job, 0, {}});
      used.add(r);
      continue;
    }
    blocker = r.job;
    plan.queue.push_back({r.job, 0, why});
  }
  for (std::size_t i = 0; i < plan.queue.size(); ++i) plan.queue[i].position = static_cast<int>(i + 1);
  plan.blocker = blocker;
  return plan;
}

bool fits_regardless(const queue_row& r, const admission_budget& b) {
  // What shortfall() checks, with every admitted sum possible.
  return b.max_running <= 0 && b.cpus <= 0 && (b.memory == 0 || r.need.memory == 0) && r.need.gpus <= 0 &&
         r.group_limit <= 0;
}

std::string never_fits(const admission_need& need, const admission_budget& b) {
  std::vector<std::string> why;
  if (b.cpus > 0 && need.cpus > b.cpus)
    why.push_back(fmt::format("needs {}; the CPU budget is {}", plural(need.cpus, "CPU", "CPUs"), b.cpus));
  if (b.memory > 0 && need.memory > b.memory)
    why.push_back(fmt::format("needs {} of memory; the memory budget is {}", format_bytes(need.memory),
                              format_bytes(b.memory)));
  if (need.gpus > b.gpus) why.push_back(fmt::format("needs {} GPU(s); the engine has {}", need.gpus, b.gpus));
  std::string out;
  for (const auto& w : why) out += (out.empty() ? "" : "; ") + w;
  return out;
}

void note_judged_by(std::vector<queue_entry>& entries, const std::map<std::string, std::int64_t>& owner_of,
                    std::int64_t self_pid, const admission_budget& mine) {
  auto limit = [](auto v) { return v > 0 ? std::to_string(v) : std::string("none"); };
  const std::string budgets = "max_running " + limit(mine.max_running) + ", cpus " + limit(mine.cpus) +
                              ", memory " + (mine.memory > 0 ? format_bytes(mine.memory) : "none");
  for (auto& e : entries)
    if (auto it = owner_of.find(e.name); it != owner_of.end() && it->second != self_pid)
      e.waits_for += " (judged by this tjob's budgets, " + budgets + "; process " +
                     std::to_string(it->second) + ", which owns it, admits it by its own)";
}

std::vector<queue_entry> queue_entries(const admission_plan& plan, const std::vector<queue_row>& rows) {
  std::map<std::string_view, const queue_row*> by_name;
  for (const auto& r : rows) by_name[r.job] = &r;
  std::vector<queue_entry> out;
  for (const auto& w : plan.queue) {
    const auto& r = *by_name.at(w.job);
    queue_entry e;
    e.name = w.job;
    e.position = w.position;
    e.priority = r.priority;
    e.waits_for =
        w.waits_for.empty() ? "nothing: it fits, and starts when its owner next looks" : w.waits_for;
    e.since = clock::time_point(std::chrono::milliseconds(r.since_ms));
    e.cpus = r.need.cpus;
    e.memory = r.need.memory;
    e.gpus = r.need.gpus;
    out.push_back(std::move(e));
  }
  return out;
}

std::string dependency_verdict(std::string_view job, std::string_view kind, std::optional<job_status> status,
                               bool& met) {
  met = false;
  const auto dep = std::string(job);
  if (!status) return "job " + dep + " was deleted before it ended (" + std::string(kind) + ")";
  if (!is_terminal(*status)) return {};
  const bool ok = *status == job_status::complete;
  met = kind == "after_any" || (kind == "after_ok" && ok) || (kind == "after_not_ok" && !ok);
  if (met) return {};
  return "job " + dep + " ended " + std::string(to_string(*status)) + "; " + std::string(kind) +
         " needs it " + (kind == "after_ok" ? "Complete" : "Failed");
}

admission_need need_of(const train_request& r) {
  admission_need need;
  if (const auto* ct = std::get_if<command_trainer>(&r.job_trainer)) {
    need.cpus = ct->cpus;
    need.memory = ct->memory;
  } else {
    const auto& pt = std::get<python_trainer>(r.job_trainer);
    need.cpus = pt.procs_per_node * r.num_nodes;
    need.memory = pt.memory_limit * static_cast<std::uint64_t>(r.num_nodes);
    need.gpus = pt.gpus * r.num_nodes;
  }
  return need;
}

void check_fits(const std::string& who, const admission_need& need, const admission_budget& budget,
                const std::filesystem::path& home) {
  if (auto why = never_fits(need, budget); !why.empty())
    throw error(errc::invalid_argument,
                who + " " + why +
                    ", so it could never start; ask for less (--resources), or raise the budget "
                    "(--cpu-budget/--memory-budget, admission: in " +
                    (home / "config.yaml").string() + ")");
}

admission_budget machine_budget(int gpus) {
  admission_budget b;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    b.cpus = CPU_COUNT(&set);
  else
    b.cpus = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  while (in >> key) {
    if (key == "MemTotal:" && in >> kib) {
      b.memory = kib * 1024;
      break;
    }
    in.ignore(4096, '\n');
  }
  b.gpus = gpus;
  return b;
}

namespace {

[[noreturn]] void bad_config(const std::filesystem::path& file, const std::string& what) {
  throw error(errc::invalid_argument, file.string() + ": " + what);
}

// $TJOB_HOME/config.yaml's admission budgets, where set.
admission_config read_config(const std::filesystem::path& file) {
  admission_config out;
  std::ifstream in(file);
  if (!in) return out;
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().size() > 65536) bad_config(file, "is over 64 KiB; it holds a few settings");
  if (text.str().find_first_not_of(" \t\r\n") == std::string::npos) return out;
  if (auto problem = yaml_mapping_problem(text.str())) bad_config(file, *problem);
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& e) {
    bad_config(file, std::string("is not YAML: ") + e.what());
  }
  auto adm = root["admission"];
  if (!adm) return out;
  if (!adm.IsMap()) bad_config(file, "admission: give a mapping of max_running, cpus and memory");
  for (const auto& kv : adm) {
    auto key = kv.first.as<std::string>("");
    auto value = kv.second.IsScalar() ? kv.second.as<std::string>() : std::string();
    auto field = "admission." + key + " " + value;
    if (key == "max_running" || key == "cpus") {
      char* rest = nullptr;
      long n = std::strtol(value.c_str(), &rest, 10);
      if (value.empty() || *rest || n < 0 || n > 1'000'000)
        bad_config(file, field + ": give a whole number, 0 for no limit");
      (key == "cpus" ? out.cpus : out.max_running) = static_cast<int>(n);
    } else if (key == "memory") {
      if (value == "0") {
        out.memory = 0;
      } else {
        try {
          out.memory = parse_memory(value, "admission");
        } catch (const error&) {
          bad_config(file, field + ": give bytes with an optional unit (16Gi, 512Mi), 0 for no limit");
        }
      }
    } else {
      bad_config(file, "admission." + key + ": unknown setting; the settings are max_running, cpus, memory");
    }
  }
  return out;
}

}  // namespace

admission_budget home_budget(const admission_config& cfg, const std::filesystem::path& home, int gpus) {
  auto b = machine_budget(gpus);
  auto file = read_config(home / "config.yaml");
  if (file.max_running) b.max_running = *file.max_running;
  if (file.cpus) b.cpus = *file.cpus;
  if (file.memory) b.memory = *file.memory;
  if (cfg.max_running) b.max_running = *cfg.max_running;
  if (cfg.cpus) b.cpus = *cfg.cpus;
  if (cfg.memory) b.memory = *cfg.memory;
  return b;
}

std::vector<std::string> gpu_devices(const engine_config& cfg) {
  if (!cfg.gpu_devices.empty()) return cfg.gpu_devices;
  if (const char* env = std::getenv("TJOB_GPU_DEVICES"); env && *env) return split_list(env);
  std::vector<std::string> out;
  for (int n = 0; n < 64; ++n)
    if (std::filesystem::exists("/dev/nvidia" + std::to_string(n))) out.push_back(std::to_string(n));
  return out;
}

budget_reader::refreshed budget_reader::refresh() {
  const auto file = home_ / "config.yaml";
  std::tuple<std::int64_t, std::int64_t, std::uint64_t> stamp{0, 0, 0};  // none: the machine's budgets
  if (struct stat st{}; ::stat(file.c_str(), &st) == 0)
    stamp = {std::int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec, std::int64_t(st.st_size),
             std::uint64_t(st.st_ino)};
  if (stamp == stamp_) return {};
  const bool first = std::get<0>(stamp_) < 0;
  stamp_ = stamp;
  try {
    budget_ = home_budget(cfg_, home_, gpus_);
  } catch (const error& e) {
    if (first) throw;
    return {false, std::string(e.what()) + "; the budgets read before stay until it is fixed"};
  }
  return {!first, {}};
}

std::string describe_need(const admission_need& need) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
  if (need.cpus) add(plural(need.cpus, "CPU", "CPUs"));
  if (need.memory) add(format_bytes(need.memory));
  if (need.gpus) add(plural(need.gpus, "GPU", "GPUs"));
  return out.empty() ? "nothing" : out;
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::pair<const char*, std::uint64_t> units[] = {
      {"Ti", 1ULL << 40}, {"Gi", 1ULL << 30}, {"Mi", 1ULL << 20}, {"Ki", 1ULL << 10}};
  for (const auto& [unit, size] : units)
    if (bytes >= size && bytes % size == 0) return std::to_string(bytes / size) + unit;
  return std::to_string(bytes);
}

}  // namespace tjob::detail
