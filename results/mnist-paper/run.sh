#!/bin/bash
# The paper budget of Table 1 / Table 2 (issue 15), in the order of work. Resumable:
# rerunning it continues every run from its last epoch and skips finished ones. Run it from a
# separate worktree of a landed commit so edits never reach a running job, e.g.
#   git worktree add --detach /work/wt-paper main && cd /work/wt-paper && \
#     setsid nohup bash results/mnist-paper/run.sh >> /work/paper-runs/log.txt 2>&1 &
# Run directories: /work/paper-runs/mnist-paper/runs (checkpoints are not committed).
set -x
export BBB_DATA=${BBB_DATA:-/work/shared/data} OMP_WAIT_POLICY=PASSIVE MPLBACKEND=Agg
PY=${PY:-/work/main/.venv/bin/python}
export PYTHONPATH=$(pwd)/src
# no --quiet: the log gets one line per epoch and per run (--quiet would leave only the tables)
# THREADS=1: two single-thread jobs on 2 cores train 1.24x more epochs per hour than one 2-thread job
# (results/mnist-paper/README.md); the thread count does not change the results (MKL_CBWR, fixed-order sums)
O="--budget paper --out /work/paper-runs/mnist-paper --device cpu --threads ${THREADS:-2}"
$PY -m bbb reproduce mnist $O --cells bbb-mixture:1200 --seeds 0      # the headline first
$PY -m bbb reproduce mnist $O --cells bbb-mixture:400                 # its c2 stopped at epoch 121
$PY -m bbb reproduce mnist $O --cells sgd:1200,dropout:1200
$PY -m bbb reproduce mnist $O --cells bbb-mixture:1200                # + the second seed
$PY -m bbb reproduce mnist $O --cells bbb-mixture:800
$PY -m bbb reproduce mnist $O --cells bbb-gaussian,sgd:400,sgd:800,dropout:400,dropout:800
$PY -m bbb reproduce mnist --budget paper --out /work/paper-runs/mnist-paper --report
