#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py; bench/README.md "The GPU check"): tests/cuda, the bench on CUDA
# at 2x1200 (deterministic, bbb's paper configuration, bayesian-torch where its wheel is carried),
# seconds per 2x1200 paper epoch; writes gpu.json and gpu.md into --out (default bench/results).
# From a checkout, nothing installed: bbb from src/, MNIST from $BBB_DATA (e.g. .gpu-data), the
# bayesian-torch wheel from .whl/ when there. --dry-run: the same on the CPU at tiny sizes.
#   bash bench/gpu_check.sh [--out DIR] [--dry-run]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${BBB_DATA:-}" ] && [ -d .gpu-data/mnist ]; then
    export BBB_DATA="$PWD/.gpu-data"
fi
shopt -s nullglob
wheels=(.whl/bayesian_torch-*.whl)
if [ "${#wheels[@]}" -gt 0 ] && ! "$PY" -c "import bayesian_torch" 2>/dev/null; then
    site="$(mktemp -d)/site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" "${wheels[@]}" \
        && export PYTHONPATH="$PYTHONPATH:$site" \
        || echo "gpu_check: could not install ${wheels[*]}: the bayesian-torch row is left out" >&2
fi
exec "$PY" bench/gpu_check.py "$@"
