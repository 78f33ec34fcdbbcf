#!/bin/sh
# Put here by tjob (adapters/slurm/scripts/node.sh): runs one node's command
# (this script's arguments) and records when it started and how it ended, for
# tjob to read.
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
