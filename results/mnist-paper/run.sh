#!/bin/bash
# The paper budget of Table 1 / Table 2 (issue 15), in the issue's order of work. Resumable:
# rerunning it continues every run from its last epoch and skips finished ones, those committed
# in results/mnist-paper/runs included (sync.sh import). Run it from a separate worktree of a
# landed commit so edits never reach a running job, with RESULTS pointing at the checkout where
# the finished runs and tables are committed, e.g. from the root of a clone:
#   git worktree add --detach ../bbb-paper main && cd ../bbb-paper && \
#     RESULTS=$OLDPWD/results/mnist-paper OUT=$HOME/paper-runs setsid nohup bash results/mnist-paper/run.sh >> paper-runs.log 2>&1 &
# CELLS=sgd:400,dropout:400 runs those cells only, and CANDIDATES=c2 only those candidates of them
# (for a time slot too short for a whole cell: a 2x1200 BBB candidate took about 1.5 h on a quiet
# 2-core Xeon, and 2.6 h on a 2-core AMD EPYC).
# Working run directories (with checkpoints): $OUT. After each step the finished runs are copied to
# $RESULTS/runs (sync.sh export: commit them), and the tables and figures are written in $RESULTS.
# Where the machine may be lost, OUT and all: before it goes, stop the jobs and
# `sync.sh pack FILE.tar` (the unfinished runs, checkpoints
# included, and the finished runs' last.pt), and carry FILE.tar off the machine (not through git);
# on the next machine `sync.sh unpack FILE.tar` before run.sh, and they resume.
set -x
here=$(cd "$(dirname "$0")" && pwd)
export OMP_WAIT_POLICY=PASSIVE MPLBACKEND=Agg  # data: --data-dir, then $BBB_DATA, then ~/.cache/bbb
export OUT=${OUT:-runs/mnist-paper} RESULTS=${RESULTS:-$here}
PY=${PY:-python}
export PYTHONPATH=$here/../../src
# no --quiet: the log gets one line per epoch and per run (--quiet would leave only the tables)
# THREADS=1: two single-thread jobs on 2 cores train 1.24x more epochs per hour than one 2-thread job
# (results/mnist-paper/README.md); the thread count does not change the results (MKL_CBWR, fixed-order sums)
O="--budget paper --out $OUT --device ${DEVICE:-cpu} --threads ${THREADS:-2}"
bash "$here/sync.sh" import
step() { $PY -m bbb reproduce mnist $O "$@"; bash "$here/sync.sh" export; }
if [ -n "${CELLS:-}" ]; then
  step --cells "$CELLS" ${CANDIDATES:+--candidates "$CANDIDATES"} --seeds 0
else
  step --cells bbb-mixture:1200 --seeds 0      # the headline first
  step --cells sgd:1200,dropout:1200
  step --cells bbb-mixture:400
  step --cells bbb-mixture:1200                # + the second seed
  step --cells bbb-mixture:800
  step --cells bbb-gaussian,sgd:400,sgd:800,dropout:400,dropout:800
fi
# from the checkout RESULTS lies in, so that the tables name the folder as the repository does
(cd "$RESULTS/../.." && $PY -m bbb reproduce mnist --budget paper --out "results/$(basename "$RESULTS")" --report)
