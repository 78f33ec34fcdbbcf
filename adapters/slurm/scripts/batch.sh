#!/bin/sh
# Put here by tjob (adapters/slurm/scripts/batch.sh): the same text for every
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
