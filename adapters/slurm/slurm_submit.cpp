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
# How many restarts the job has had (a line each in restarts).
restarts() {
  if [ -f "$D/restarts" ]; then wc -l < "$D/restarts"; else echo 0; fi
}
# Moves attempt $1's node files (and an end it may have written as Slurm
# stopped it) into attempt-$1/, with where each node's log ended, so that the
# files beside this script are the current attempt's.
archive() {
  mkdir -p "$D/attempt-$1" || return 1
  for f in "$D"/node-*.start "$D"/node-*.exit "$D/end"; do
    [ -e "$f" ] && mv -f "$f" "$D/attempt-$1/"
  done
  for f in "$D"/node-*.log; do
    [ -e "$f" ] && wc -c < "$f" > "$D/attempt-$1/${f##*/}.size"
  done
  return 0
}
# After a failed attempt: returns 0 once it is time for the next one, when
# the blamed node's exit code is retried and restarts are left
# (restart-plan: line 1 the exit codes that are retried, line K+1 the seconds
# to wait before restart K); 1 when the job has failed.
restart() {
  [ -f "$D/restart-plan" ] && [ ! -f "$D/cancel" ] || return 1
  # Slurm is ending the job (a requeue, preemption, its time limit, an
  # scancel): not a failure of the job's own, and not restarted here.
  case "$(squeue -h -j "$SLURM_JOB_ID" -o %T 2>/dev/null)" in "" | RUNNING) ;; *) return 1 ;; esac
  code='' node='' first=''
  for f in "$D"/node-*.exit; do
    [ -e "$f" ] || continue
    read -r c t < "$f" || continue
    [ "$c" -ne 0 ] || continue
    if [ -z "$first" ] || [ "$t" -lt "$first" ]; then
      first=$t code=$c node=${f##*/}
    fi
  done
  [ -n "$code" ] || return 1
  case " $(sed -n 1p "$D/restart-plan") " in *" $code "*) ;; *) return 1 ;; esac
  wait=$(sed -n "$((attempt + 1))p" "$D/restart-plan")
  [ -n "$wait" ] || return 1
  printf '%s %s %s %s %s\n' "$attempt" "$code" "${node%.exit}" "$wait" "$(date +%s%N)" >> "$D/restarts"
  archive "$attempt"
  sleep "$wait"
  [ ! -f "$D/cancel" ]
}
# A cancel signals every process of the job: this one records how srun ended.
trap 'true' TERM INT
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && [ "$(cat "$D/requeues" 2>/dev/null)" != "$SLURM_RESTART_COUNT" ]; then
  # Slurm requeued the job itself (a node failed, or it was preempted): that
  # attempt is over, and counts.
  echo "$SLURM_RESTART_COUNT" > "$D/requeues"
  attempt=$(($(restarts) + 1))
  printf '%s - - 0 %s\n' "$attempt" "$(date +%s%N)" >> "$D/restarts"
  archive "$attempt"
  [ -n "$(sed -n "$((attempt + 1))p" "$D/restart-plan" 2>/dev/null)" ] || finish 1 requeued
fi
if [ -f "$D/setup.json" ] && [ ! -f "$D/setup.done" ]; then
  "$TJOB_PYTHON" "$D/tjob_slurm.py" setup "$D/setup.json" >> "$D/node-0.log" 2>&1 || finish $? setup
  : > "$D/setup.done"
fi
# Each attempt runs every node again, in this allocation (a gang restart).
while :; do
  attempt=$(($(restarts) + 1))
  TJOB_RESTART_COUNT=$((attempt - 1))
  export TJOB_RESTART_COUNT
  if [ -f "$D/torch" ]; then  # a fresh rendezvous for each attempt
    first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null | head -n 1)
    PET_MASTER_ADDR=${first:-$(hostname)}
    PET_MASTER_PORT=$("$TJOB_PYTHON" "$D/tjob_slurm.py" port) || finish $? setup
    PET_NNODES=$SLURM_NTASKS
    export PET_MASTER_ADDR PET_MASTER_PORT PET_NNODES
  fi
  srun --kill-on-bad-exit=1 --output="$D/node-%t.log" --open-mode=append /bin/sh "$D/node.sh" "$@"
  rc=$?
  [ "$rc" -eq 0 ] && finish 0 srun
  restart || finish $rc srun
done
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
# A warning before the time limit is for the command (every process of the
# step gets it), not for this script.
[ -z "${TJOB_STOP_SIGNAL:-}" ] || trap 'true' "$TJOB_STOP_SIGNAL"
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
