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
  cp "$1"/{config.json,regret.csv,summary.csv,summary.json} "$2"/ || return  # (errexit is off inside && lists)
  cp "$1"/*.png "$2"/ 2> /dev/null || true
}
# stage NAME SETTING...: IVON alone on seeds 0-2 for 5,000 interactions, one process per SETTING ("RUN:its
# options"), all at once; a setting that diverges stops with its one-line error, kept as
# RESULTS/ivon/NAME/NAME-RUN.failed, and the others go on; every run's log is kept beside
stage() {
  local name=$1 s run pids=()
  shift
  mkdir -p "$OUT/$name" "$RESULTS/ivon/$name"
  for s in "$@"; do
    run=${s%%:*}
    # shellcheck disable=SC2086  # the options are separate words
    ( $PY -m bbb bandit --agents ivon --seeds 0 1 2 --steps 5000 ${s#*:} --out "$OUT/$name/$run" \
        > "$OUT/$name-$run.log" 2>&1 && keep "$OUT/$name/$run" "$RESULTS/ivon/$name/$run" ) \
      || echo "$run stopped: $(tail -1 "$OUT/$name-$run.log")" > "$RESULTS/ivon/$name/$name-$run.failed" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  cp "$OUT/$name"-*.log "$RESULTS/ivon/$name/"
}
case "${STAGE:?set STAGE=screen, temperature, clip or heldout}" in
  screen)  # stage 1 (IVON.md): (lr, hess_init), BBB's posterior (ivon_beta 1)
    stage screen "lr0.2-h0.5:--ivon-lr 0.2 --ivon-hess-init 0.5" "lr0.1-h0.1:--ivon-lr 0.1 --ivon-hess-init 0.1" \
      "lr0.1-h0.01:--ivon-lr 0.1 --ivon-hess-init 0.01" "lr0.1-h0.001:--ivon-lr 0.1 --ivon-hess-init 0.001" ;;
  temperature)  # stage 1b: IVON's temperature x lr, hess_init 0.01 (run with --beta, which the ivon agent
    # read then; --ivon-beta since: the same numbers)
    stage temperature "beta10000-lr0.03:--ivon-beta 10000 --ivon-lr 0.03 --ivon-hess-init 0.01" \
      "beta10000-lr0.01:--ivon-beta 10000 --ivon-lr 0.01 --ivon-hess-init 0.01" \
      "beta900-lr0.03:--ivon-beta 900 --ivon-lr 0.03 --ivon-hess-init 0.01" \
      "beta900-lr0.01:--ivon-beta 900 --ivon-lr 0.01 --ivon-hess-init 0.01" ;;
  clip)  # stage 1c: the update clipped (--ivon-clip 1) at 4 (lr, hess_init), ivon_beta 1
    stage clip "lr0.1-h0.01:--ivon-lr 0.1 --ivon-hess-init 0.01 --ivon-clip 1" \
      "lr1.0-h0.001:--ivon-lr 1.0 --ivon-hess-init 0.001 --ivon-clip 1" \
      "lr0.3-h0.01:--ivon-lr 0.3 --ivon-hess-init 0.01 --ivon-clip 1" \
      "lr0.1-h0.001:--ivon-lr 0.1 --ivon-hess-init 0.001 --ivon-clip 1" ;;
  heldout)
    $PY -m bbb bandit --agents ivon --seeds 8 9 10 11 12 --steps "${STEPS:-20000}" --workers 2 \
      --ivon-lr "${LR:?}" --ivon-hess-init "${H:?}" --ivon-beta "${BETA:-1}" --ivon-clip "${CLIP:-inf}" --out "$OUT/heldout"
    keep "$OUT/heldout" "$RESULTS/ivon/heldout" ;;
  *) echo "STAGE=screen, temperature, clip or heldout" >&2; exit 2 ;;
esac
