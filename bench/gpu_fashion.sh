#!/usr/bin/env bash
# One GPU session's run of the Fashion-MNIST LeNet-5 table (bbb reproduce fashion, issue 73 item 4),
# from a checkout with nothing installed (../shared/gpu.md): tests/cuda beside it, the table's jobs
# (WORKERS jobs at once on the one GPU) for at most FASHION_SECONDS, then the tables of what is
# finished, then IVON's cost on CUDA (bench/bench_ivon.py --device cuda).
# A GPU machine sends back only a few files of OUT, each under 16 MB: so everything is written to a
# staging folder and comes back packed, OUT/gpu-run.tgz.partNN (the run folder: every job's JSON,
# the AdamW jobs' probs.pt (the ensembles' members) and the unfinished jobs' last.pt; the logs; the
# bench), beside OUT/summary.txt. To go on: put the parts in .gpu-data/ and run this again on the
# next GPU machine (it unpacks them first; finished jobs are kept, unfinished ones resume).
#   OUT=/tmp/o bash bench/gpu_fashion.sh            # on the GPU machine ($OUT is set there)
#   cat OUT/gpu-run.tgz.part* | tar xzf - -C DIR    # here: DIR/fashion, DIR/cuda-tests.txt, ...
#   OUT=/tmp/o CUDA_TESTS=0 FASHION_SECONDS=175 bash bench/gpu_fashion.sh  # the table only, no tests/cuda
#   OUT=/tmp/o PYTHON=.venv/bin/python FASHION_ARGS="--budget smoke --device cpu" bash bench/gpu_fashion.sh  # dry run
#     (with .gpu-data/gpu-run.tgz.part* moved aside first: it would resume the GPU run, whose jobs refuse the CPU)
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
S="$(mktemp -d)"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export BBB_DATA="${BBB_DATA:-$PWD/.gpu-data}"
export TORCHINDUCTOR_COMPILE_THREADS=1  # many workers compile at once: no pool of compile processes each
shopt -s nullglob
wheels=(.whl/*.whl)
if [ "${#wheels[@]}" -gt 0 ]; then
    site="$(mktemp -d)/site"
    for w in "${wheels[@]}"; do
        "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$w" \
            || echo "gpu_fashion: could not install $w" >&2
    done
    export PYTHONPATH="$PYTHONPATH:$site"
fi
{
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())"
start=$SECONDS
parts=(.gpu-data/gpu-run.tgz.part*)
if [ "${#parts[@]}" -gt 0 ]; then  # a run begun on an earlier GPU machine: go on from it
    cat "${parts[@]}" | tar xzf - -C "$S" ./fashion && echo "resumed: $(ls "$S"/fashion/jobs/*.json | wc -l) jobs finished before"
fi
# the CUDA suite beside the table (one process among the table's workers), killed at most
# TESTS_EXTRA_SECONDS after the table so that the run is always packed before the machine's limit
[ "${CUDA_TESTS:-1}" = 0 ] && echo "exit skipped (CUDA_TESTS=0)" > "$S/cuda-tests.txt" || ( timeout -s KILL "$(( ${FASHION_SECONDS:-400} + ${TESTS_EXTRA_SECONDS:-30} ))" "$PY" -m pytest tests/cuda -q -p no:cacheprovider \
    > "$S/cuda-tests.txt" 2>&1; echo "exit $?" >> "$S/cuda-tests.txt" ) &
tests=$!
# the table: killed after FASHION_SECONDS (each job checkpoints every epoch; the workers end with their parent)
timeout -s KILL "${FASHION_SECONDS:-400}" "$PY" -m bbb reproduce fashion --out "$S/fashion" --device cuda \
    --workers "${WORKERS:-12}" --threads 1 ${FASHION_ARGS:-} > "$S/fashion-log.txt" 2>&1
echo "fashion: exit $? after $((SECONDS - start)) s"
sleep 2
"$PY" -m bbb reproduce fashion --out "$S/fashion" --device cuda ${FASHION_ARGS:-} --report >> "$S/fashion-log.txt" 2>&1
grep -v "fashion epochs" "$S/fashion-log.txt" | grep -v "compil" | tail -n 40
cat "$S/fashion/table.md" 2>/dev/null
# a finished job's checkpoint is not needed again, nor any probs.pt but the AdamW jobs'
for j in "$S"/fashion/jobs/*.json; do rm -f "${j%.json}/last.pt"; done
for p in "$S"/fashion/jobs/*/probs.pt; do case "$p" in */test-adamw-*) ;; *) rm -f "$p" ;; esac; done
wait "$tests"
grep -E "^(FAILED|ERROR)|passed|failed" "$S/cuda-tests.txt" | tail -n 15
# IVON's cost on the GPU, alone on it
timeout -s KILL "${BENCH_SECONDS:-130}" "$PY" bench/bench_ivon.py --device cuda --archs lenet5 mlp1200 \
    --threads 1 --steps 50 --repeats 3 --out "$S/ivon-cost-cuda" ${BENCH_ARGS:-} > "$S/ivon-cost-log.txt" 2>&1
echo "bench: exit $? after $((SECONDS - start)) s"
cat "$S/ivon-cost-cuda/ivon-cost.md" 2>/dev/null || tail -n 5 "$S/ivon-cost-log.txt"
} 2>&1 | tee "$S/summary.txt"
cp "$S/summary.txt" "$OUT/summary.txt"
tar czf - -C "$S" . | split -b 15M -d - "$OUT/gpu-run.tgz.part"
ls -la "$OUT"
