#!/bin/bash
# The ivon agent on the Mushroom bandit (IVON.md): its two settings chosen on seeds 0-2, then run
# on the held-out seeds 8-12 beside the committed run of the paper's agents (same mushrooms,
# coin flips and starting networks within a seed). From the root of a clone, the data through
# $BBB_DATA (else ~/.cache/bbb):
#   STAGE=screen bash results/bandit/ivon.sh    # 4 settings x seeds 0-2 x 5,000 steps, 4 processes
#   STAGE=temperature bash results/bandit/ivon.sh   # stage 1b: 4 more (IVON.md), the same way
#   STAGE=clip bash results/bandit/ivon.sh          # stage 1c: 4 more, the update clipped
#   python results/bandit/ivon_tables.py screen results/bandit/ivon/clip   # the table and the choice
#   STAGE=heldout LR=... H=... BETA=... CLIP=... bash results/bandit/ivon.sh   # seeds 8-12, STEPS (default 20,000)
#   python results/bandit/ivon_tables.py heldout results/bandit/ivon/heldout results/bandit
# Each run resumes from its checkpoint (the same command continues it; a held-out run of 20,000
# steps continues to 50,000 with STEPS=50000); the finished runs' files, without their checkpoints,
# are copied into RESULTS/ivon/.
set -ex -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
export OMP_WAIT_POLICY=PASSIVE MPLBACKEND=Agg
PY=${PY:-python}
export PYTHONPATH=$here/../../src
OUT=${OUT:-runs/bandit-ivon}
RESULTS=${RESULTS:-$here}
keep() {  # a finished run's files into RESULTS, without its checkpoint
  mkdir -p "$2"
  cp "$1"/{config.json,regret.csv,summary.csv,summary.json} "$2"/
  cp "$1"/*.png "$2"/ 2> /dev/null || true
}
case "${STAGE:?set STAGE=screen or heldout}" in
  screen)
    pids=()
    mkdir -p "$OUT/screen"
    for s in "0.2 0.5" "0.1 0.1" "0.1 0.01" "0.1 0.001"; do
      set -- $s
      name="lr$1-h$2"
      # a setting that diverges stops with its one-line error; the others go on
      ( $PY -m bbb bandit --agents ivon --seeds 0 1 2 --steps 5000 --ivon-lr "$1" --ivon-hess-init "$2" \
          --out "$OUT/screen/$name" > "$OUT/screen-$name.log" 2>&1 && keep "$OUT/screen/$name" \
          "$RESULTS/ivon/screen/$name" ) || echo "$name stopped: $(tail -1 "$OUT/screen-$name.log")" \
          > "$OUT/screen-$name.failed" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    mkdir -p "$RESULTS/ivon/screen"
    cp "$OUT"/screen-*.failed "$RESULTS/ivon/screen/" 2> /dev/null || true ;;
  temperature)  # stage 1b (IVON.md): IVON's temperature beta noise^2 (--beta, read then by the ivon
    # agent; --ivon-beta since: the same numbers) x lr, hess_init 0.01
    pids=()
    mkdir -p "$OUT/temperature"
    for s in "10000 0.03" "10000 0.01" "900 0.03" "900 0.01"; do
      set -- $s
      name="beta$1-lr$2"
      ( $PY -m bbb bandit --agents ivon --seeds 0 1 2 --steps 5000 --beta "$1" --ivon-lr "$2" \
          --ivon-hess-init 0.01 --out "$OUT/temperature/$name" > "$OUT/temperature-$name.log" 2>&1 && keep \
          "$OUT/temperature/$name" "$RESULTS/ivon/temperature/$name" ) || echo "$name stopped: $(tail -1 \
          "$OUT/temperature-$name.log")" > "$OUT/temperature-$name.failed" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    mkdir -p "$RESULTS/ivon/temperature"
    cp "$OUT"/temperature-*.failed "$RESULTS/ivon/temperature/" 2> /dev/null || true ;;
  clip)  # stage 1c (IVON.md): IVON's update clipped (--ivon-clip 1) at 4 (lr, hess_init), ivon_beta 1
    pids=()
    mkdir -p "$OUT/clip"
    for s in "0.1 0.01" "1.0 0.001" "0.3 0.01" "0.1 0.001"; do
      set -- $s
      name="lr$1-h$2"
      ( $PY -m bbb bandit --agents ivon --seeds 0 1 2 --steps 5000 --ivon-lr "$1" --ivon-hess-init "$2" \
          --ivon-clip 1 --out "$OUT/clip/$name" > "$OUT/clip-$name.log" 2>&1 && keep "$OUT/clip/$name" \
          "$RESULTS/ivon/clip/$name" ) || echo "$name stopped: $(tail -1 "$OUT/clip-$name.log")" \
          > "$OUT/clip-$name.failed" &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    mkdir -p "$RESULTS/ivon/clip"
    cp "$OUT"/clip-*.failed "$RESULTS/ivon/clip/" 2> /dev/null || true ;;
  heldout)
    $PY -m bbb bandit --agents ivon --seeds 8 9 10 11 12 --steps "${STEPS:-20000}" --workers 2 \
      --ivon-lr "${LR:?}" --ivon-hess-init "${H:?}" --ivon-beta "${BETA:-1}" --ivon-clip "${CLIP:-inf}" --out "$OUT/heldout"
    keep "$OUT/heldout" "$RESULTS/ivon/heldout" ;;
  *) echo "STAGE=screen or heldout" >&2; exit 2 ;;
esac
