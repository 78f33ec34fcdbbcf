#include "adapters/slurm/slurm_submit.hpp"

#include "core/driver.hpp"
#include "core/retry.hpp"

#include <fmt/format.h>

namespace tjob::slurm {

slurm_config config_of(const boost::json::object& config,
                       const std::function<std::string(std::string_view)>& name_of) {
  detail::config_reader r{config, name_of, "slurm"};
  r.only({"slurm_conf", "partition", "account", "qos", "sbatch_options", "shared_dir", "pack_nodes",
          "poll_interval_ms", "command_timeout_ms"});
  slurm_config c;
  if (auto v = r.text("slurm_conf")) c.slurm_conf = *v;
  if (auto v = r.text("partition")) c.partition = *v;
  if (auto v = r.text("account")) c.account = *v;
  if (auto v = r.text("qos")) c.qos = *v;
  if (auto v = r.texts("sbatch_options")) {
    for (const auto& o : *v)
      if (!o.starts_with("-"))
        r.bad("sbatch_options", "'" + o + "' is not an option; give each as --name=value");
    c.sbatch_options = *v;
  }
  if (auto v = r.text("shared_dir")) {
    if (!v->empty() && v->front() != '/')
      r.bad("shared_dir", *v + ": give an absolute path, the same on every node");
    c.shared_dir = *v;
  }
  if (auto v = r.flag("pack_nodes")) c.pack_nodes = *v;
  if (auto v = r.number("poll_interval_ms", 100)) c.poll_interval = std::chrono::milliseconds(*v);
  if (auto v = r.number("command_timeout_ms", 1000)) c.command_timeout = std::chrono::milliseconds(*v);
  return c;
}

std::string restart_plan(const retry_policy& p) {
  std::string codes;
  int retried = 0;
  for (int c = 1; c <= 255; ++c)
    if (detail::decide_retry(p, 1, c).delay) {
      codes += (codes.empty() ? "" : " ") + std::to_string(c);
      if (!retried) retried = c;
    }
  std::string out = codes + "\n";
  if (!retried) return out;
  for (int attempt = 1;; ++attempt) {
    auto d = detail::decide_retry(p, attempt, retried).delay;
    if (!d) break;
    out += fmt::format("{}.{:03}\n", d->count() / 1000, d->count() % 1000);
  }
  return out;
}

std::string time_limit_text(std::chrono::seconds s) {
  auto minutes = (s.count() + 59) / 60;
  return std::to_string(minutes < 1 ? 1 : minutes);
}

std::vector<std::string> sbatch_argv(const slurm_config& cfg, const submission& s) {
  std::vector<std::string> a{"sbatch", "--parsable", "--job-name=" + s.job_name, "--comment=" + s.comment,
                             // The batch script's own output (the nodes write theirs, node-<i>.log).
                             "--output=" + s.job_dir + "/batch.log", "--open-mode=append",
                             "--chdir=" + s.chdir, "--export=ALL",
                             // Requeued by Slurm (a node failed, or preemption) only
                             // when the job may restart.
                             s.requeue ? "--requeue" : "--no-requeue"};
  if (!cfg.partition.empty()) a.push_back("--partition=" + cfg.partition);
  if (!cfg.account.empty()) a.push_back("--account=" + cfg.account);
  if (!cfg.qos.empty()) a.push_back("--qos=" + cfg.qos);
  const auto n = std::to_string(s.num_nodes);
  if (cfg.pack_nodes) {
    a.push_back("--ntasks=" + n);
  } else {
    a.push_back("--nodes=" + n);
    a.push_back("--ntasks-per-node=1");
  }
  a.push_back("--cpus-per-task=" + std::to_string(s.cpus_per_task));
  if (s.memory_per_node > 0) {
    // --mem is per machine: packed nodes share theirs.
    auto bytes = s.memory_per_node * static_cast<std::uint64_t>(cfg.pack_nodes ? s.num_nodes : 1);
    a.push_back("--mem=" + std::to_string((bytes + (1u << 20) - 1) >> 20) + "M");
  }
  if (s.gpus_per_node > 0)
    a.push_back((cfg.pack_nodes ? "--gpus-per-task=" : "--gpus-per-node=") + std::to_string(s.gpus_per_node));
  if (s.time_limit.count() > 0) a.push_back("--time=" + time_limit_text(s.time_limit));
  if (s.nice != 0) a.push_back("--nice=" + std::to_string(s.nice));
  // Every step's processes, not the batch shell (no "B:"); Slurm may send it
  // up to a minute early, as its events are handled once a minute or so.
  if (s.warning)
    a.push_back("--signal=" + std::to_string(s.warning->signal) + "@" +
                std::to_string(s.warning->before.count()));
  if (s.begin_after.count() > 0) a.push_back("--begin=now+" + std::to_string(s.begin_after.count()));
  if (!s.dependency.empty()) {
    a.push_back("--dependency=" + s.dependency);
    a.push_back("--kill-on-invalid-dep=yes");
  }
  a.insert(a.end(), cfg.sbatch_options.begin(), cfg.sbatch_options.end());
  a.push_back(s.job_dir + "/" + batch_script_file);
  a.insert(a.end(), s.command.begin(), s.command.end());
  return a;
}

// The scripts are files of their own in adapters/slurm/scripts/, embedded
// by the build (cmake/embed_file.cmake).
extern const char* const batch_script_text;
extern const char* const node_script_text;
extern const char* const helper_script_text;

std::string_view batch_script() { return batch_script_text; }

std::string_view node_script() { return node_script_text; }

std::string_view helper_script() { return helper_script_text; }

}  // namespace tjob::slurm
