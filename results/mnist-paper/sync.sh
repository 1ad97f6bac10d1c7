#!/bin/bash
# Carries the paper budget's finished runs between the working folder OUT (run directories with
# their checkpoints, on one machine, not committed) and RESULTS/runs (committed: the small files
# of every finished run). A new machine starts without OUT; what was committed is not trained
# again.
#   sync.sh import  # RESULTS -> OUT: each finished run's config.json, metrics.csv, summary.json
#                   # (and diverged.json), so that `bbb reproduce` skips it (run.sh does this first)
#   sync.sh export  # OUT -> RESULTS: the same files of every run that has finished since, and its
#                   # checkpoints (ignored by git; Table 2 and Figures 3-4 need last.pt); commit
#                   # RESULTS/runs afterwards
# A run counts as finished when it has summary.json (written after its last epoch) or diverged.json.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/work/paper-runs/mnist-paper}
RESULTS=${RESULTS:-$here}
case "${1:-}" in
  import) from=$RESULTS/runs; to=$OUT/runs; files="config.json metrics.csv summary.json diverged.json" ;;
  export) from=$OUT/runs; to=$RESULTS/runs; files="config.json metrics.csv summary.json diverged.json last.pt best.pt" ;;
  *) echo "usage: $0 import|export  (OUT=$OUT RESULTS=$RESULTS)" >&2; exit 2 ;;
esac
[ -d "$from" ] || exit 0
for run in "$from"/*/; do
  name=$(basename "$run")
  [ -f "$run/summary.json" ] || [ -f "$run/diverged.json" ] || continue  # not finished
  # a run already finished at the destination is left alone (the same settings and seed train
  # the same run; a partial one there is replaced by the finished one)
  { [ -f "$to/$name/summary.json" ] || [ -f "$to/$name/diverged.json" ]; } && continue
  rm -rf "$to/$name.tmp"; mkdir -p "$to/$name.tmp"
  for f in $files; do [ -f "$run/$f" ] && cp -p "$run/$f" "$to/$name.tmp/"; done
  rm -rf "$to/$name"; mv "$to/$name.tmp" "$to/$name"
  echo "$1: $name"
done
