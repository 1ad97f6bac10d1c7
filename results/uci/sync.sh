#!/bin/bash
# Carries the fourth UCI run's finished job files between sessions (a session's machine starts
# empty and the run needs more than one session's CPU): each dataset's finished jobs (OUT/jobs/
# DATASET-*.json: the populations' scores, not their resumable state, *.state.pt, which never
# leaves the machine) go into one xz archive under RESULTS, committed; a later session unpacks
# them into its OUT, `bbb reproduce uci` skips what they hold, and `--report` writes the tables
# from all of them.
#   sync.sh pack OUT [RESULTS]     # OUT/jobs -> RESULTS/DATASET.tar.xz for each dataset with no
#                                  # job still training (no DATASET-*.state.pt); an archive
#                                  # already there is rewritten only if OUT holds more files
#   sync.sh unpack OUT [RESULTS]   # RESULTS/*.tar.xz -> OUT/jobs, never over a file OUT has
# Each also carries the run's run.json (its settings and --seed, which --seed-runs compares) as
# RESULTS/run.carried.json (not run.json: a results folder with run.json holds its tables), never over one there.
# ONLY="VARIANT ..." packs only those variants' job files (e.g. the methods added after the fourth
# run, ONLY="laplace ensemble_heteroscedastic ensemble_local", into results/uci/new-methods/jobs:
# their archives then hold none of the fourth run's files, which unpack from its own archives).
# RESULTS defaults to results/uci/fourth-run/jobs (the run of --seed 0); the seed runs use
# results/uci/fourth-run/seed1 and seed2. The fourth run's archives left HEAD once its tables were
# written: `git checkout 21ef883 -- results/uci/fourth-run` brings them back.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-}; OUT=${2:-}; RESULTS=${3:-$here/fourth-run/jobs}
[ -n "$cmd" ] && [ -n "$OUT" ] || { echo "usage: sync.sh pack|unpack OUT [RESULTS]" >&2; exit 2; }
case "$cmd" in
  pack)
    [ -d "$OUT/jobs" ] || { echo "sync.sh: $OUT/jobs does not exist" >&2; exit 2; }
    mkdir -p "$RESULTS"
    if [ -f "$OUT/run.json" ] && [ ! -f "$RESULTS/run.carried.json" ]; then
      cp "$OUT/run.json" "$RESULTS/run.carried.json"; echo "sync.sh: copied $OUT/run.json to $RESULTS/run.carried.json"
    fi
    variants="heteroscedastic|local|learned|mc_dropout|deep_ensemble|laplace|ensemble_heteroscedastic|ensemble_local|ivon"
    [ -n "${ONLY:-}" ] && variants=$(echo "$ONLY" | tr ' ' '|')
    for d in $(ls "$OUT/jobs" | sed -En "s/^(.*)-($variants)-(validation|test)\.json$/\1/p" | sort -u); do
      if compgen -G "$OUT/jobs/$d-*.state.pt" > /dev/null; then
        echo "sync.sh: $d still has a job training; not packed"; continue
      fi
      files=$(cd "$OUT/jobs" && ls | grep -E "^$d-($variants)-(validation|test)\.json$")
      n=$(echo "$files" | wc -l)
      if [ -f "$RESULTS/$d.tar.xz" ] && [ "$(tar -tJf "$RESULTS/$d.tar.xz" | wc -l)" -ge "$n" ]; then
        continue
      fi
      # shellcheck disable=SC2086
      tar -C "$OUT/jobs" -cf - $files | xz -9 > "$RESULTS/$d.tar.xz.tmp"
      mv "$RESULTS/$d.tar.xz.tmp" "$RESULTS/$d.tar.xz"
      echo "sync.sh: packed $n job files of $d into $RESULTS/$d.tar.xz"
    done ;;
  unpack)
    mkdir -p "$OUT/jobs"
    if [ -f "$RESULTS/run.carried.json" ] && [ ! -f "$OUT/run.json" ]; then cp "$RESULTS/run.carried.json" "$OUT/run.json"; fi
    for a in "$RESULTS"/*.tar.xz; do
      [ -f "$a" ] || continue
      tar -C "$OUT/jobs" --skip-old-files -xJf "$a"
      echo "sync.sh: unpacked $(basename "$a") into $OUT/jobs"
    done ;;
  *) echo "usage: sync.sh pack|unpack OUT [RESULTS]" >&2; exit 2 ;;
esac
