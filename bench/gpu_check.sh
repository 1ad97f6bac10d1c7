#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py; bench/README.md "The GPU check"): tests/cuda, the bench on CUDA
# at 2x1200 (deterministic, bbb's paper configuration, bayesian-torch where its wheel is carried),
# seconds per 2x1200 paper epoch; writes gpu.json and gpu.md into --out (default bench/results).
# From a checkout, nothing installed: bbb from src/, MNIST from $BBB_DATA (e.g. .gpu-data), the
# wheels in .whl/ when there (bayesian-torch for its bench row, ivon-opt for tests/cuda's comparison
# with it). --dry-run: the same on the CPU at tiny sizes.
#   bash bench/gpu_check.sh [--out DIR] [--dry-run]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${BBB_DATA:-}" ] && [ -d .gpu-data/mnist ]; then
    export BBB_DATA="$PWD/.gpu-data"
fi
# every wheel carried in .whl/ (bayesian-torch, ivon-opt: pure Python), each into one temporary site
# folder unless its top-level modules already import; one line for each that does not install
shopt -s nullglob
site=""
for wheel in .whl/*.whl; do
    mods="$("$PY" -c 'import sys, zipfile
names = {n.split("/")[0] for n in zipfile.ZipFile(sys.argv[1]).namelist()}
print(" ".join(sorted(n.removesuffix(".py") for n in names if not n.endswith((".dist-info", ".data")))))' "$wheel" \
        2>/dev/null)" || mods=""
    # shellcheck disable=SC2086  # (one argument per module)
    if [ -n "$mods" ] && "$PY" -c 'import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in sys.argv[1:]))' $mods 2>/dev/null; then
        continue
    fi
    site="${site:-$(mktemp -d)/site}"
    if ! err="$("$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheel" 2>&1)"; then
        err="$(printf '%s' "$err" | tail -n 1)"
        echo "gpu_check: could not install $wheel (${err:-pip failed}): what needs it is left out" >&2
    fi
done
if [ -n "$site" ] && [ -d "$site" ]; then
    export PYTHONPATH="$PYTHONPATH:$site"
fi
exec "$PY" bench/gpu_check.py "$@"
