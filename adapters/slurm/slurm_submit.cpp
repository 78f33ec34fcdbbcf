#include "adapters/slurm/slurm_submit.hpp"

#include "core/driver.hpp"

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

std::string time_limit_text(std::chrono::seconds s) {
  auto minutes = (s.count() + 59) / 60;
  return std::to_string(minutes < 1 ? 1 : minutes);
}

std::vector<std::string> sbatch_argv(const slurm_config& cfg, const submission& s) {
  std::vector<std::string> a{"sbatch",
                             "--parsable",
                             "--job-name=" + s.job_name,
                             "--comment=" + s.comment,
                             // The batch script's own output (the nodes write theirs, node-<i>.log).
                             "--output=" + s.job_dir + "/batch.log",
                             "--open-mode=append",
                             "--chdir=" + s.chdir,
                             "--export=ALL",
                             "--no-requeue"};
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
  if (!s.dependency.empty()) {
    a.push_back("--dependency=" + s.dependency);
    a.push_back("--kill-on-invalid-dep=yes");
  }
  a.insert(a.end(), cfg.sbatch_options.begin(), cfg.sbatch_options.end());
  a.push_back(s.job_dir + "/" + batch_script_file);
  a.insert(a.end(), s.command.begin(), s.command.end());
  return a;
}

std::string_view batch_script() {
  return R"SH(#!/bin/sh
# Put here by tjob (adapters/slurm/slurm_submit.cpp): the same text for every
# job. The job's own data is in the files beside it, in the environment and
# in this script's arguments (the command every node runs), never in its text.
umask 077
D="$TJOB_JOB_DIR"
finish() {
  printf '%s %s\n' "$1" "$2" > "$D/end.tmp" && mv -f "$D/end.tmp" "$D/end"
  exit "$1"
}
# A cancel signals every process of the job: this one records how srun ended.
trap 'true' TERM INT
if [ -f "$D/setup.json" ]; then
  "$TJOB_PYTHON" "$D/tjob_slurm.py" setup "$D/setup.json" >> "$D/node-0.log" 2>&1 || finish $? setup
fi
if [ -f "$D/torch" ]; then
  first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | head -n 1)
  PET_MASTER_ADDR=${first:-$(hostname)}
  PET_MASTER_PORT=$("$TJOB_PYTHON" "$D/tjob_slurm.py" port) || finish $? setup
  PET_NNODES=$SLURM_NTASKS
  export PET_MASTER_ADDR PET_MASTER_PORT PET_NNODES
fi
srun --kill-on-bad-exit=1 --output="$D/node-%t.log" --open-mode=append /bin/sh "$D/node.sh" "$@"
finish $? srun
)SH";
}

std::string_view node_script() {
  return R"SH(#!/bin/sh
# Put here by tjob: runs one node's command (this script's arguments) and
# records when it started and how it ended, for tjob to read.
umask 077
D="$TJOB_JOB_DIR"
i=${SLURM_PROCID:-0}
if [ -n "${PET_NNODES:-}" ]; then
  PET_NODE_RANK=$i
  export PET_NODE_RANK
fi
date +%s%N > "$D/node-$i.start.tmp" && mv -f "$D/node-$i.start.tmp" "$D/node-$i.start"
trap 'true' TERM INT
"$@"
rc=$?
printf '%s %s\n' "$rc" "$(date +%s%N)" > "$D/node-$i.exit.tmp" && mv -f "$D/node-$i.exit.tmp" "$D/node-$i.exit"
exit $rc
)SH";
}

std::string_view helper_script() {
  return R"PY(# Put here by tjob (adapters/slurm/slurm_submit.cpp): a Slurm job's setup.
import json, os, random, socket, subprocess, sys


def port():
    # Drawn below the kernel's usual ephemeral range, so no connect() nearby
    # takes it between now and torchrun's bind.
    for _ in range(500):
        p = random.randint(20000, 32000)
        s = socket.socket()
        try:
            s.bind(("", p))
        except OSError:
            continue
        finally:
            s.close()
        print(p)
        return
    sys.exit("tjob: no free port for the rendezvous")


def setup(path):
    with open(path, encoding="utf-8") as f:
        s = json.load(f)
    venv = s["venv"]
    argv = [sys.executable, "-m", "venv", "--without-pip"]
    if s.get("system_site_packages"):
        argv.append("--system-site-packages")
    print("tjob: creating a virtual environment with %s in %s" % (sys.executable, venv), flush=True)
    if subprocess.call(argv + [venv]) != 0:
        sys.exit("tjob: cannot create the virtual environment " + venv)
    packages = s.get("packages") or []
    if not packages:
        return
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.update(s.get("pip_env") or {})  # the index URLs: not in pip's arguments, which ps shows
    print("tjob: installing %d package(s): %s" % (len(packages), " ".join(packages)), flush=True)
    rc = subprocess.call([os.path.join(venv, "bin", "python"), "-c", s["bootstrap"]] + s["pip_args"], env=env)
    if rc != 0:
        sys.exit("tjob: pip install failed (exit code %d)" % rc)


if sys.argv[1] == "port":
    port()
else:
    setup(sys.argv[2])
)PY";
}

}  // namespace tjob::slurm
