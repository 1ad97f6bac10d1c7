#!/bin/bash
# The bandit recipe's selection (issue 17), on seeds 0-2 only, runs of 20,000 steps. Seeds 3-7 are
# never run here: they are the held-out seeds of the full protocol. Resumable: every `bbb bandit`
# run continues from its checkpoint, finished runs are skipped. Run it from a separate worktree of
# a landed commit, with OUT pointing at the checkout where the finished runs are committed, e.g.
# from the root of a clone (the data through $BBB_DATA, else ~/.cache/bbb):
#   git worktree add --detach ../bbb-select main && cd ../bbb-select && \
#     OUT=$OLDPWD/results/bandit/selection setsid nohup bash results/bandit/select.sh >> bandit-select.log 2>&1 &
# A run is finished when its folder has summary.json; commit those folders (their checkpoint/ is
# ignored by git). A new machine then skips them and starts the others afresh.
# The plan and the criteria are fixed in SELECTION.md before any of it runs.
set -ex
export OMP_WAIT_POLICY=PASSIVE MPLBACKEND=Agg
PY=${PY:-python}
export PYTHONPATH=$(pwd)/src
OUT=${OUT:-$(cd "$(dirname "$0")" && pwd)/selection}
# WORKERS=1 leaves the other core to another job; STEPS only for a smoke test of this script
S="--seeds 0 1 2 --steps ${STEPS:-20000} --workers ${WORKERS:-2}"
done_or_run() { local dir=$1; shift; [ -f "$OUT/$dir/summary.json" ] || $PY -m bbb bandit --out "$OUT/$dir" "$@"; }

# Stage 1: the learner every agent shares, judged on the 5%-greedy agent (learner check) and greedy
for L in "adam 1e-3" "adam 1e-4" "sgd 1e-2" "sgd 1e-3"; do set -- $L
  done_or_run "learner-$1-$2" $S --agents greedy egreedy_0.05 --optimizer "$1" --lr "$2"
done
LEARNER=$($PY "$(dirname "$0")/choose.py" "$OUT" --learner)
echo "stage 1 chose: $LEARNER"

# Stage 2: the BBB recipe on that learner, untempered KL (beta 1); the likelihood noise is the
# temperature knob (a KL scale c at noise 1 is the same objective as noise sqrt(c))
B="$S $LEARNER --agents bbb --beta 1"
G="--prior gaussian --prior-sigma 1"
done_or_run b1-noise1-buffer     $B $G --noise-sigma 1   --kl-data buffer --sigma-init 0.05
done_or_run b2-noise01-buffer    $B $G --noise-sigma 0.1 --kl-data buffer --sigma-init 0.05
done_or_run b3-noise01-seen      $B $G --noise-sigma 0.1 --kl-data seen   --sigma-init 0.05
done_or_run b4-noise01-seen-s0067 $B $G --noise-sigma 0.1 --kl-data seen  --sigma-init 0.0067
done_or_run b5-noise03-seen      $B $G --noise-sigma 0.3 --kl-data seen   --sigma-init 0.05
done_or_run b6-noise01-seen-blundell $B $G --noise-sigma 0.1 --kl-data seen --sigma-init 0.05 --kl-weighting blundell
done_or_run b7-mixture-noise01-seen $B --prior mixture --pi 0.5 --sigma1 1 --sigma2 0.0025 --noise-sigma 0.1 \
  --kl-data seen --sigma-init 0.05
# b8, added after b1-b6 had finished (SELECTION.md): b4's sigma0 and b6's KL weighting together
done_or_run b8-noise01-seen-blundell-s0067 $B $G --noise-sigma 0.1 --kl-data seen --sigma-init 0.0067 --kl-weighting blundell

# The table SELECTION.md quotes and both stages' choices
$PY "$(dirname "$0")/choose.py" "$OUT"
