#!/bin/bash
# Carries the paper budget's runs between the working folder OUT (run directories with their
# checkpoints, on one machine, never committed) and the committed results folder RESULTS, and
# carries the checkpoints between machines in an archive (git never holds a checkpoint: a tracked
# file over 1 MB fails CI).
#   sync.sh import        # RESULTS -> OUT: each finished run's config.json, metrics.csv,
#                         # summary.json (and diverged.json), so that `bbb reproduce` skips it
#   sync.sh export        # OUT -> RESULTS: the same small files of every run finished since;
#                         # commit RESULTS/runs afterwards
#   sync.sh pack FILE     # OUT -> FILE (.tar): every unfinished run whole (config.json,
#                         # metrics.csv, last.pt, best.pt) and every finished run's last.pt, to
#                         # carry to the next machine by any means but git (scp, a shared disk, the
#                         # device tool's $OUT / carry)
#   sync.sh unpack FILE   # FILE -> OUT: each run of the archive that OUT lacks (no last.pt there),
#                         # so that an unfinished run resumes and --report --checkpoints OUT/runs
#                         # can rebuild Table 2 and Figures 3-4
# A run counts as finished when it has summary.json (written after its last epoch) or diverged.json.
# The checkpoints of the runs finished by 2026-11-25 are in git's history only: commit 86c2d0c
# holds the last.pt of the 2x1200 runs that Table 2 and Figures 3-4 read, e.g.
#   git show 86c2d0c:results/mnist-paper/runs/bbb_mixture_1200_c3/last.pt > last.pt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-runs/mnist-paper}
RESULTS=${RESULTS:-$here}
finished() { [ -f "$1/summary.json" ] || [ -f "$1/diverged.json" ]; }
# copy <files> of run <from> to <to> through a temporary folder, replacing what <to> held
copy_run() {
  local from=$1 to=$2; shift 2
  rm -rf "$to.tmp"; mkdir -p "$to.tmp"
  for f in "$@"; do [ -f "$from/$f" ] && cp -p "$from/$f" "$to.tmp/"; done
  rm -rf "$to"; mv "$to.tmp" "$to"
}
small="config.json metrics.csv summary.json diverged.json"
case "${1:-}" in
  import|export)
    if [ "$1" = import ]; then from=$RESULTS/runs; to=$OUT/runs; else from=$OUT/runs; to=$RESULTS/runs; fi
    [ -d "$from" ] || exit 0
    for run in "$from"/*/; do
      name=$(basename "$run")
      finished "$run" || continue       # not finished
      finished "$to/$name" && continue  # the one reported (a partial one there is replaced)
      copy_run "$run" "$to/$name" $small
      echo "$1: $name"
    done ;;
  pack)
    [ -n "${2:-}" ] || { echo "usage: $0 pack FILE.tar" >&2; exit 2; }
    list=$(mktemp)
    for run in "$OUT"/runs/*/; do
      name=$(basename "$run")
      [ -f "$run/last.pt" ] || continue  # not started (or no epoch yet): nothing to carry
      if finished "$run"; then files="last.pt"; else files="config.json metrics.csv last.pt best.pt"; fi
      for f in $files; do [ -f "$run/$f" ] && echo "$name/$f" >> "$list"; done
    done
    tar cf "$2.tmp" -C "$OUT/runs" -T "$list" && mv "$2.tmp" "$2"
    echo "pack: $(wc -l < "$list") files -> $2"; rm -f "$list" ;;
  unpack)
    [ -f "${2:-}" ] || { echo "usage: $0 unpack FILE.tar (an archive of 'sync.sh pack')" >&2; exit 2; }
    tmp=$(mktemp -d); tar xf "$2" -C "$tmp"; mkdir -p "$OUT/runs"
    for run in "$tmp"/*/; do
      name=$(basename "$run")
      [ -e "$OUT/runs/$name/last.pt" ] && continue  # OUT's copy is at least as far on
      mkdir -p "$OUT/runs/$name"; cp -p "$run"/* "$OUT/runs/$name/"
      echo "unpack: $name"
    done
    rm -rf "$tmp" ;;
  *) echo "usage: $0 import|export|pack FILE|unpack FILE  (OUT=$OUT RESULTS=$RESULTS)" >&2; exit 2 ;;
esac
exit 0
