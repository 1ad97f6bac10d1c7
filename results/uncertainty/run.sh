#!/usr/bin/env bash
# Regenerates results/uncertainty/: the BBB / MC dropout / SGD comparison on MNIST (2x400) and the
# Fashion-MNIST table. Run from the repository root: bash results/uncertainty/run.sh [RUNS_DIR]
# RESULTS (default results/uncertainty, the committed tables): where the tables and figures go, e.g.
# RESULTS=runs/uncertainty-tables bash results/uncertainty/run.sh to leave the committed ones alone.
# Same budget for every method: Adam 1e-3 with cosine decay, batch 128, 15 epochs (MNIST) or 10
# epochs (Fashion-MNIST, the seminar notebook's budget); model selection on validation (best.pt).
set -euo pipefail
RUNS=${1:-runs/uncertainty}
RESULTS=${RESULTS:-results/uncertainty}
mkdir -p "$RESULTS"
BBB="bbb"
COMMON=(--epochs 15 --lr 1e-3 --optimizer adam --lr-schedule cosine --batch-size 128 --quiet)
PRIOR=(--prior mixture --pi 0.25 --sigma1 1 --sigma2 0.000911882 --kl-weighting uniform --kl mc)
for m in bbb dropout sgd; do
  extra=(); [ "$m" = bbb ] && extra=("${PRIOR[@]}")
  [ -f "$RUNS/mnist-$m-400/summary.json" ] || \
    $BBB train --method $m --hidden 400 400 "${COMMON[@]}" "${extra[@]}" --out "$RUNS/mnist-$m-400" --resume
  $BBB evaluate "$RUNS/mnist-$m-400" --samples 10
  $BBB ood "$RUNS/mnist-$m-400" --ood fashion-mnist --samples 10
done
$BBB uncertain "$RUNS/mnist-bbb-400" --n 64 --samples 30
for h in 200 400 800; do
  [ -f "$RUNS/fashion-bbb-$h/summary.json" ] || \
    $BBB train --dataset fashion-mnist --method bbb --hidden $h $h "${COMMON[@]}" --epochs 10 "${PRIOR[@]}" \
      --out "$RUNS/fashion-bbb-$h" --resume
  $BBB evaluate "$RUNS/fashion-bbb-$h" --samples 10
done
$BBB compare "$RUNS"/mnist-{bbb,dropout,sgd}-400 --out "$RESULTS" --name comparison \
  --command "bash results/uncertainty/run.sh"
$BBB compare "$RUNS"/fashion-bbb-{200,400,800} --out "$RESULTS" --name fashion_mnist \
  --reference fashion-seminar --command "bash results/uncertainty/run.sh"
cp "$RUNS/mnist-bbb-400/uncertain.png" "$RESULTS/uncertain_bbb.png"
for m in bbb dropout sgd; do
  cp "$RUNS/mnist-$m-400/reliability.png" "$RESULTS/reliability_$m.png"
  cp "$RUNS/mnist-$m-400/ood.png" "$RESULTS/ood_$m.png"
done
