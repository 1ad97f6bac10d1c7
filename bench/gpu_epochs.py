"""The GPU check's three ``bbb train`` epoch children alone (bench/gpu_check.py, step 3): the 2x1200
paper configuration with ``--cuda-graph``, the deterministic MLP under the same capture, and the
eager epoch; their seconds and the ratio ``ratio_vs_deterministic_graph_2x1200`` -> ``$OUT/epochs.json``.

For a GPU session's last minutes, after ``gpu_check.sh`` (2026-11-30: its epoch children had met
the bug fixed in 2a2b402, data already on the device). From the checkout on the GPU machine:

    BBB_DATA=$PWD/.gpu-data PYTHONPATH=src python3 bench/gpu_epochs.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_check as G  # noqa: E402
import run as bench  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(prog="bench/gpu_epochs.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT"), help="folder for epochs.json (default $OUT)")
    args = ap.parse_args()
    if not args.out:
        ap.error("--out DIR (or $OUT) is needed")
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("bench/gpu_epochs.py: error: no CUDA device here")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, object] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        data, _ = bench.prepare_data(argparse.Namespace(random_data=False, data_dir=None), Path(tmp))
        base = {"threads": torch.get_num_threads(), "device": "cuda", "data": data, "batch": 128}
        job = {**base, "kind": "epoch", "system": G.OURS, "width": G.WIDTH, "recipe": bench.EPOCH_RECIPES[G.OURS],
               "epochs": bench.EPOCHS_RUN, "train_size": None}
        for name, spec in (("graph", {**job, "recipe": {**bench.EPOCH_RECIPES[G.OURS], "cuda_graph": True}}),
                           ("floor_graph", {**job, "system": G.FLOOR, "recipe": G.FLOOR_GRAPH_RECIPE}),
                           ("eager", job)):
            r = bench.run_child(spec, 60)
            res[name] = {k: r.get(k) for k in ("status", "detail", "epoch_seconds", "seconds_per_epoch",
                                               "train_images")}
            print(name, res[name], flush=True)
            (out / "epochs.json").write_text(json.dumps(res, indent=1) + "\n")
    g = res["graph"]["seconds_per_epoch"]  # type: ignore[index]
    f = res["floor_graph"]["seconds_per_epoch"]  # type: ignore[index]
    res["ratio_vs_deterministic_graph_2x1200"] = g / f if g and f else None
    print("ratio", res["ratio_vs_deterministic_graph_2x1200"])
    (out / "epochs.json").write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
