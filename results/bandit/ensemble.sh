#!/bin/bash
# The ensemble agent on the Mushroom bandit (ENSEMBLE.md): `bbb bandit --agents ensemble` at its
# defaults, chosen before any run (5 networks, every network on every interaction, the greedy
# agents' recipe), on the held-out seeds 8-12 beside the committed run of the paper's agents (same
# mushrooms, coin flips and, for its first network, starting weights within a seed). From the root
# of a clone, the data through $BBB_DATA (else ~/.cache/bbb):
#   bash results/bandit/ensemble.sh          # seeds 8-12, STEPS (default 10,000), 2 workers
#   python results/bandit/ivon_tables.py heldout results/bandit/ensemble results/bandit
# The run resumes from its checkpoint (the same command continues it, within a session); its files,
# without the checkpoint, are copied into RESULTS/ensemble/.
set -ex -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
export OMP_WAIT_POLICY=PASSIVE MPLBACKEND=Agg
PY=${PY:-python}
export PYTHONPATH=$here/../../src
OUT=${OUT:-runs/bandit-ensemble}
RESULTS=${RESULTS:-$here}
# SEEDS only for a smoke test of this script, on other seeds than the held-out 8-12
SEEDS=${SEEDS:-8 9 10 11 12}
mkdir -p "$(dirname "$OUT")"
# shellcheck disable=SC2086  # the seeds are separate words
$PY -m bbb bandit --out "$OUT" --agents ensemble --seeds $SEEDS --steps "${STEPS:-10000}" \
  --workers "${WORKERS:-2}" 2>&1 | tee -a "$OUT.log"
[ -f "$OUT/summary.json" ] || { echo "not finished: rerun this script to continue" >&2; exit 1; }
dest="$RESULTS/ensemble"
mkdir -p "$dest"
cp "$OUT"/{config.json,regret.csv,summary.csv,summary.json} "$dest"/
cp "$OUT"/*.png "$dest"/ 2> /dev/null || true
cp "$OUT.log" "$dest/run.log"
