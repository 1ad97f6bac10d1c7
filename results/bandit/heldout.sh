#!/bin/bash
# The reported run of issue 17: the recipe chosen in SELECTION.md (bbb bandit's defaults once it is
# chosen) on the held-out seeds 3-7, which never influenced the choice, with the paper's protocol
# (greedy, 1% and 5% greedy and BBB, 50,000 interactions each). Resumable: the same command
# continues from the checkpoints after a kill (keep WORKERS the same: the worker split is part of a
# run's settings). Run it from a separate worktree of a landed commit, e.g.
#   git worktree add --detach /work/wt-heldout main && cd /work/wt-heldout && \
#     WORKERS=1 setsid nohup bash results/bandit/heldout.sh >> /work/bandit-heldout.log 2>&1 &
# Working folder (with checkpoints): $OUT. When the run has finished, its results (not its
# checkpoints) are copied into $RESULTS (default: this folder), replacing the previous run's; commit them.
# `python results/bandit/tables.py results/bandit` then prints the README's tables from them.
set -ex -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
export BBB_DATA=${BBB_DATA:-/work/shared/data} OMP_WAIT_POLICY=PASSIVE MPLBACKEND=Agg
PY=${PY:-/work/main/.venv/bin/python}
export PYTHONPATH=$here/../../src
OUT=${OUT:-/work/bandit-runs/heldout}
RESULTS=${RESULTS:-$here}
mkdir -p "$(dirname "$OUT")"
# STEPS only for a smoke test of this script
$PY -m bbb bandit --out "$OUT" --seeds 3 4 5 6 7 --steps ${STEPS:-50000} --workers "${WORKERS:-2}" 2>&1 | tee -a "$OUT.log"
[ -f "$OUT/summary.json" ] || { echo "not finished: rerun this script to continue" >&2; exit 1; }
for f in config.json regret.csv regret.png eating.png summary.csv summary.json; do
  [ -f "$OUT/$f" ] && cp "$OUT/$f" "$RESULTS/$f"
done
cp "$OUT.log" "$RESULTS/run.log"
