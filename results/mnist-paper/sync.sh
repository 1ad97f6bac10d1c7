#!/bin/bash
# Carries the paper budget's runs between the working folder OUT (run directories with their
# checkpoints, on one machine, not committed) and the committed results folder RESULTS. A new
# machine starts without OUT (a sitting may find a fresh machine: only what is committed
# survives it); what was committed is not trained again, and a parked run resumes.
#   sync.sh import  # RESULTS -> OUT: each finished run's config.json, metrics.csv, summary.json
#                   # (and diverged.json), so that `bbb reproduce` skips it, and each parked run
#                   # (below) that OUT lacks, whole, so that it resumes (run.sh does this first)
#   sync.sh export  # OUT -> RESULTS: the same files of every run that has finished since, and its
#                   # checkpoints (ignored by git, except the last.pt of the 2x1200 mixture, SGD and
#                   # dropout runs, which Table 2 and Figures 3-4 read); commit RESULTS/runs
#                   # afterwards. A finished run's parked copy is removed.
#   sync.sh park    # OUT -> RESULTS/inflight/<OUT's name>: every run not finished, whole (config.json,
#                   # metrics.csv, last.pt, best.pt; git keeps these checkpoints): stop the jobs,
#                   # park, and commit RESULTS/inflight at the end of a sitting
# A run counts as finished when it has summary.json (written after its last epoch) or diverged.json.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/work/paper-runs/mnist-paper}
RESULTS=${RESULTS:-$here}
parked=$RESULTS/inflight/$(basename "$OUT")
finished() { [ -f "$1/summary.json" ] || [ -f "$1/diverged.json" ]; }
# copy <files> of run <from> to <to> through a temporary folder, replacing what <to> held
copy_run() {
  local from=$1 to=$2; shift 2
  rm -rf "$to.tmp"; mkdir -p "$to.tmp"
  for f in "$@"; do [ -f "$from/$f" ] && cp -p "$from/$f" "$to.tmp/"; done
  rm -rf "$to"; mv "$to.tmp" "$to"
}
case "${1:-}" in
  import) from=$RESULTS/runs; to=$OUT/runs; files="config.json metrics.csv summary.json diverged.json" ;;
  export) from=$OUT/runs; to=$RESULTS/runs; files="config.json metrics.csv summary.json diverged.json last.pt best.pt" ;;
  park) from=$OUT/runs; to=$parked; files="config.json metrics.csv last.pt best.pt" ;;
  *) echo "usage: $0 import|export|park  (OUT=$OUT RESULTS=$RESULTS)" >&2; exit 2 ;;
esac
if [ -d "$from" ]; then
  for run in "$from"/*/; do
    name=$(basename "$run")
    if [ "$1" = park ]; then
      { finished "$run" || [ ! -f "$run/last.pt" ]; } && continue  # finished (export it) or not started
      cmp -s "$run/last.pt" "$to/$name/last.pt" && continue         # parked as it is
    else
      finished "$run" || continue  # not finished
      # a run already finished at the destination is left alone (it is the one reported; a partial
      # one there is replaced by the finished one)
      finished "$to/$name" && continue
    fi
    copy_run "$run" "$to/$name" $files
    echo "$1: $name"
  done
fi
case "$1" in
  import)  # parked runs that OUT does not hold yet (a run OUT holds is at least as far on this machine)
    for run in "$parked"/*/; do
      [ -d "$run" ] || continue
      name=$(basename "$run")
      { finished "$RESULTS/runs/$name" || [ -e "$OUT/runs/$name/last.pt" ] || finished "$OUT/runs/$name"; } && continue
      copy_run "$run" "$OUT/runs/$name" config.json metrics.csv last.pt best.pt
      echo "import: $name (parked)"
    done ;;
  export)  # a parked copy of a run that has finished is not needed any more
    for run in "$parked"/*/; do
      [ -d "$run" ] || continue
      name=$(basename "$run")
      finished "$RESULTS/runs/$name" && rm -rf "$run" && echo "export: $name (parked copy removed)"
    done ;;
esac
exit 0
