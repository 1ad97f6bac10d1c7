#!/bin/bash
# The reported run of issue 45: `bbb bandit`'s defaults (the recipe chosen in SELECTION.md, stage 3)
# on the held-out seeds 8-12, which never influenced the choice, with the paper's protocol (BBB,
# greedy, 1% and 5% greedy, 50,000 interactions each). The full protocol takes longer than one
# 3-hour session on 2 cores (bench/README.md), and a session's files outside git do not reach the
# next, so it runs as three parts that split the agents, each within a session, merged at the end
# (projected on 2 idle cores by `bench/bench_bandit.py --workers 2 --agents ...`: BBB alone 88 min,
# 1% + 5% greedy 74-76 min, the four together 203-225 min; greedy alone follows part 1 in the same
# session):
#   PART=1   --agents bbb
#   PART=2   --agents greedy
#   PART=3   --agents egreedy_0.01 egreedy_0.05
#   PART=merge   `bbb bandit --merge` of the three into $RESULTS (this folder)
# Within a seed every agent faces the same mushrooms and coin flips from the same initial weights,
# whichever part it runs in.
# Each part is resumable within its session (the same command continues from its checkpoints; keep
# WORKERS the same). A finished part's results (not its checkpoints) are copied into
# $RESULTS/parts/partN/: commit them, so that the merge can run in a later session. Start a part
# from a worktree of a landed commit at the start of a session, e.g. from the root of a clone
# (the data through $BBB_DATA, else ~/.cache/bbb):
#   git worktree add --detach ../bbb-heldout main && cd ../bbb-heldout && \
#     PART=1 setsid nohup bash results/bandit/heldout.sh >> bandit-heldout.log 2>&1 &
# `python results/bandit/tables.py results/bandit` then prints the README's tables.
set -ex -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
export OMP_WAIT_POLICY=PASSIVE MPLBACKEND=Agg
PY=${PY:-python}
export PYTHONPATH=$here/../../src
OUT=${OUT:-runs/bandit-heldout}
RESULTS=${RESULTS:-$here}
# SEEDS and STEPS only for a smoke test of this script, on other seeds than the held-out 8-12
SEEDS=${SEEDS:-8 9 10 11 12}
case "${PART:?set PART=1, 2, 3 or merge}" in
  1) agents="bbb" ;;
  2) agents="greedy" ;;
  3) agents="egreedy_0.01 egreedy_0.05" ;;
  merge)
    $PY -m bbb bandit --out "$RESULTS" --merge "$RESULTS"/parts/part{1,2,3} 2>&1 \
      | tee "$RESULTS/merge.log"
    exit 0 ;;
  *) echo "PART must be 1, 2, 3 or merge" >&2; exit 2 ;;
esac
run="$OUT-part$PART"
mkdir -p "$(dirname "$run")"
# shellcheck disable=SC2086  # the agents are separate words
$PY -m bbb bandit --out "$run" --agents $agents --seeds $SEEDS --steps "${STEPS:-50000}" \
  --workers "${WORKERS:-2}" 2>&1 | tee -a "$run.log"
[ -f "$run/summary.json" ] || { echo "not finished: rerun this script to continue" >&2; exit 1; }
dest="$RESULTS/parts/part$PART"
mkdir -p "$dest"
for f in config.json regret.csv regret.png eating.png summary.csv summary.json; do
  [ -f "$run/$f" ] && cp "$run/$f" "$dest/$f"
done
cp "$run.log" "$dest/run.log"
