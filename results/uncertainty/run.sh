#!/usr/bin/env bash
# Regenerates results/uncertainty/: BBB, MC dropout, SGD, IVON and the last-layer Laplace posterior of
# the SGD network, a deep ensemble of 5 SGD networks, an ensemble of 5 BBB networks and one of the 5
# SGD networks' Laplace posteriors on MNIST (2x400), and the Fashion-MNIST table. Run from the
# repository root: bash results/uncertainty/run.sh [RUNS_DIR]
# RESULTS (default results/uncertainty, the committed tables): where the tables and figures go, e.g.
# RESULTS=runs/uncertainty-tables bash results/uncertainty/run.sh to leave the committed ones alone.
# JOBS (default 2): trainings at once, each on THREADS (default 1) torch threads.
# Same budget for every method: batch 128, cosine decay, 15 epochs (MNIST) or 10 epochs
# (Fashion-MNIST, the seminar notebook's budget); model selection on validation (best.pt). Adam
# 1e-3 for BBB, dropout and SGD; IVON its own defaults (`bbb train --method ivon`: lr 0.5).
set -euo pipefail
RUNS=${1:-runs/uncertainty}
RESULTS=${RESULTS:-results/uncertainty}
JOBS=${JOBS:-2}
THREADS=${THREADS:-1}
mkdir -p "$RESULTS" "$RUNS"
BBB="bbb"
COMMON=(--epochs 15 --lr-schedule cosine --batch-size 128 --quiet --threads "$THREADS")
ADAM=(--lr 1e-3 --optimizer adam)
PRIOR=(--prior mixture --pi 0.25 --sigma1 1 --sigma2 0.000911882 --kl-weighting uniform --kl mc)

resume() {  # --resume where OUT holds a run begun (a killed one); nothing for a new run
  [ -f "$1/config.json" ] && echo --resume || true
}

train() {  # train METHOD OUT [options...]: once (a finished run is kept, a killed one resumes)
  local method=$1 out=$2; shift 2
  [ -f "$out/summary.json" ] || \
    $BBB train --method "$method" --hidden 400 400 "${COMMON[@]}" "$@" --out "$out" $(resume "$out")
}

# MNIST: one run of each method (seed 0), and seeds 1-4 of SGD and BBB for the ensembles
pids=()
for job in "bbb 0" "dropout 0" "sgd 0" "ivon 0" "bbb 1" "bbb 2" "bbb 3" "bbb 4" "sgd 1" "sgd 2" "sgd 3" "sgd 4"; do
  set -- $job
  m=$1 s=$2
  out="$RUNS/mnist-$m-400"; [ "$s" = 0 ] || out="$out-s$s"
  case $m in
    bbb) extra=("${ADAM[@]}" "${PRIOR[@]}") ;;
    ivon) extra=() ;;
    *) extra=("${ADAM[@]}") ;;
  esac
  train "$m" "$out" --seed "$s" "${extra[@]}" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
done
for p in "${pids[@]}"; do wait "$p"; done
for s in 0 1 2 3 4; do  # each SGD run's last-layer Laplace posterior (nothing trained again)
  sfx=""; [ "$s" = 0 ] || sfx="-s$s"
  [ -f "$RUNS/mnist-laplace-400$sfx/posterior.pt" ] || \
    $BBB laplace "$RUNS/mnist-sgd-400$sfx" --out "$RUNS/mnist-laplace-400$sfx"
done
for m in bbb dropout sgd ivon laplace; do
  $BBB evaluate "$RUNS/mnist-$m-400" --samples 10
  $BBB ood "$RUNS/mnist-$m-400" --ood fashion-mnist --samples 10
done
for m in bbb sgd laplace; do  # the ensembles of 5: their folders hold eval.json and ood.json
  members=("$RUNS/mnist-$m-400" "$RUNS"/mnist-$m-400-s{1,2,3,4})
  $BBB evaluate "${members[@]}" --samples 10 --out "$RUNS/mnist-$m-400-ensemble"
  $BBB ood "${members[@]}" --ood fashion-mnist --samples 10 --out "$RUNS/mnist-$m-400-ensemble"
done
$BBB uncertain "$RUNS/mnist-bbb-400" --n 64 --samples 30
for h in 200 400 800; do
  [ -f "$RUNS/fashion-bbb-$h/summary.json" ] || \
    $BBB train --dataset fashion-mnist --method bbb --hidden $h $h "${COMMON[@]}" "${ADAM[@]}" --epochs 10 \
      "${PRIOR[@]}" --out "$RUNS/fashion-bbb-$h" $(resume "$RUNS/fashion-bbb-$h")
  $BBB evaluate "$RUNS/fashion-bbb-$h" --samples 10
done
$BBB compare "$RUNS"/mnist-{bbb,dropout,sgd,ivon,laplace}-400 "$RUNS"/mnist-{sgd,bbb,laplace}-400-ensemble --out "$RESULTS" \
  --name comparison --command "bash results/uncertainty/run.sh"
$BBB compare "$RUNS"/fashion-bbb-{200,400,800} --out "$RESULTS" --name fashion_mnist \
  --reference fashion-seminar --command "bash results/uncertainty/run.sh"
cp "$RUNS/mnist-bbb-400/uncertain.png" "$RESULTS/uncertain_bbb.png"
for m in bbb dropout sgd ivon; do
  cp "$RUNS/mnist-$m-400/reliability.png" "$RESULTS/reliability_$m.png"
done
for m in bbb dropout sgd ivon laplace; do
  cp "$RUNS/mnist-$m-400/ood.png" "$RESULTS/ood_$m.png"
done
for m in bbb sgd laplace; do
  cp "$RUNS/mnist-$m-400-ensemble/ood.png" "$RESULTS/ood_${m}_ensemble.png"
done
