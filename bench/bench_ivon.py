"""IVON's cost beside Adam's and Bayes by Backprop's (issue 73, item 5): steps/s and peak memory of a
full training step on the paper's MLPs (784-400-400-10 and 784-1200-1200-10, batch 128), the
LeNet-5 of the IVON paper's Fashion-MNIST table (no padding: conv 6@5x5 - pool - conv 16@5x5 -
pool - 256-120-84-10, 44,426 weights, batch 128) and a ResNet-18 (bench/networks_models.py, batch
32), for four systems:

* ``adam``: the deterministic network, cross-entropy, fused ``torch.optim.Adam`` (the floor);
* ``ivon``: ``bbb.bayesianize`` (norm layers left deterministic and frozen: ``bbb.IVON`` trains
  Bayesian weights only) + ``bbb.IVON`` (lr 0.1, ess 50,000, hess_init 0.5; one sample a step);
* ``ivon-opt``: the published implementation (PyPI ``ivon-opt``, the bench extra) on the
  deterministic network, its README's loop (``sampled_params(train=True)``); not installed: a row
  that says so;
* ``bbb``: ``bbb.bayesianize`` (Gaussian N(0, 1) prior, closed-form KL) + ``bbb.ELBO`` +
  ``bbb.Engine('adam')``, one sample.

Random data of each network's input shape; every measurement in a child process of its own (no
compilation or allocator state shared; peak memory is the child's), warm-up first, then
``--repeats`` repeats of ``--steps`` steps, the median. Writes ``<out>/ivon-cost.json`` and
``ivon-cost.md``.

``--device cuda``: the data and the networks on the GPU, ``torch.cuda.synchronize()`` before each
clock read, and the peak memory ``torch.cuda.max_memory_allocated`` (each child's own) instead of
the process's resident memory; the Markdown names the GPU. ``--device cpu`` (the default): as
before.

Example:
    python bench/bench_ivon.py --threads 2 --out bench/results
    python bench/bench_ivon.py --tiny --steps 1 --repeats 1 --out /tmp/ivon-cost   # a smoke run
    PYTHONPATH=src python3 bench/bench_ivon.py --device cuda --out DIR             # on a GPU machine
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bbb/__init__.py: before torch loads

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

MARK = "BENCH_IVON_RESULT "
ARCHS = {"mlp400": 128, "mlp1200": 128, "lenet5": 128, "resnet18": 32}
SYSTEMS = ("adam", "ivon", "ivon-opt", "bbb")
#: issue 73's target: IVON's step time <= this x Adam's
TARGET = 1.15
IVON_SETTINGS = {"lr": 0.1, "ess": 50_000.0, "hess_init": 0.5}


def build_network(arch: str, tiny: bool):
    import torch.nn as nn

    if arch.startswith("mlp"):
        w = 16 if tiny else int(arch[3:])
        return nn.Sequential(nn.Linear(784, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(), nn.Linear(w, 10))
    if arch == "lenet5":
        return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84),
                             nn.ReLU(), nn.Linear(84, 10))
    from networks_models import build_network as other

    return other(arch, tiny)


def batch_of(arch: str, batch: int, tiny: bool, device: Any = "cpu"):
    """One random (input, label) minibatch of the architecture's shape, drawn on the CPU (the same
    numbers on every device), on ``device``."""
    import torch

    g = torch.Generator().manual_seed(0)
    if arch.startswith("mlp"):
        x = torch.rand(batch, 784, generator=g)
    elif arch == "lenet5":
        x = torch.rand(batch, 1, 28, 28, generator=g)
    else:
        from networks_models import make_batches

        return make_batches(arch, batch, torch.device(device), n=1, tiny=tiny)[0]
    return x.to(device), torch.randint(0, 10, (batch,), generator=g).to(device)


def build_step(system: str, arch: str, tiny: bool, device: Any = "cpu") -> tuple[Callable[[Any, Any], None], str]:
    """The training step of ``system`` on ``arch``, its network on ``device`` (moved there before
    its optimiser is built), and the version line of its row."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import bbb

    net = build_network(arch, tiny).train()
    if system in ("adam", "ivon-opt"):
        net.to(device)
    if system == "adam":
        opt = torch.optim.Adam(net.parameters(), lr=1e-3, fused=True)

        def step(x, y):
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return step, f"torch {torch.__version__}"
    if system == "ivon-opt":
        import ivon  # the bench extra; ModuleNotFoundError: the row says "not installed"

        ref = ivon.IVON(net.parameters(), **IVON_SETTINGS)

        def step(x, y):
            with ref.sampled_params(train=True):
                ref.zero_grad()
                F.cross_entropy(net(x), y).backward()
            ref.step()
        import importlib.metadata as md

        return step, f"ivon-opt {md.version('ivon-opt')}"
    norms = [nn.LayerNorm, nn.BatchNorm2d]
    if system == "ivon":
        bbb.bayesianize(net, skip=norms)
        for m in net.modules():
            if isinstance(m, tuple(norms)):
                m.requires_grad_(False)
        net.to(device)
        opt_i = bbb.IVON(net, **IVON_SETTINGS, seed=0)

        def step(x, y):
            with opt_i.sampling():
                loss = F.cross_entropy(net(x), y)
            opt_i.zero_grad()
            loss.backward()
            opt_i.step()
        how = "eager" if opt_i._update is bbb.ivon.ivon_update else "compiled"
        return step, f"bbb {bbb.__version__} (IVON, step {how})"
    bbb.bayesianize(net, prior=bbb.GaussianPrior(1.0), skip=norms)
    net.to(device)
    elbo = bbb.ELBO(net, "categorical", num_batches=391, kl_weighting="uniform")
    eng = bbb.Engine(net, "adam", lr=1e-3)

    def step(x, y):
        with eng.sampling():
            out = elbo(x, y, batch_index=0)
        eng.zero_grad()
        (out.loss / len(y)).backward()
        eng.step()
    return step, f"bbb {bbb.__version__} (Engine)"


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    import torch
    from child import peak_rss_mb, warmup_steps

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    device = torch.device(spec.get("device", "cpu"))
    on_gpu = device.type == "cuda"
    if on_gpu:  # (a fresh process; the reset says that its peak is this child's own)
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats(device)

    def sync() -> None:  # before each clock read: the GPU's queued work is part of the steps timed
        if on_gpu:
            torch.cuda.synchronize(device)

    res: dict[str, Any] = {"arch": spec["arch"], "system": spec["system"], "batch": spec["batch"]}
    try:
        step, version = build_step(spec["system"], spec["arch"], spec["tiny"], device)
    except ModuleNotFoundError as e:
        return {**res, "status": "not installed", "detail": str(e)}
    x, y = batch_of(spec["arch"], spec["batch"], spec["tiny"], device)
    warmup_steps(lambda i: step(x, y), spec["warmup"], sync=sync)
    rates = []
    for _ in range(spec["repeats"]):
        sync()
        t = time.perf_counter()
        for _ in range(spec["steps"]):
            step(x, y)
        sync()
        rates.append(spec["steps"] / (time.perf_counter() - t))
    rate = statistics.median(rates)
    out = {**res, "status": "ok", "version": version, "steps_per_s": rate, "ms_per_step": 1e3 / rate,
           "steps_per_s_all": rates, "peak_rss_mb": peak_rss_mb()}
    if on_gpu:
        out["peak_cuda_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


def memory_key(meta: dict[str, Any]) -> str:
    """The row field of peak memory: the GPU's allocations on CUDA, the process's resident memory
    on the CPU."""
    return "peak_cuda_mb" if meta.get("device") == "cuda" else "peak_rss_mb"


def run_child(spec: dict[str, Any], timeout: float = 900.0) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"arch": spec["arch"], "system": spec["system"], "status": "error", "detail": tail[:300]}


def markdown(summary: dict[str, Any]) -> str:
    meta = summary["meta"]
    if meta.get("device") == "cuda":
        where = (f"{meta['gpu']} (CUDA), host {meta['cpu']}; torch {meta['torch']}; torch.cuda.synchronize() "
                 "before each clock read; peak memory: torch.cuda.max_memory_allocated")
        memory = "ivon peak GPU MB / adam's"
    else:
        where = f"{meta['cpu']}, {meta['threads']} torch thread(s), CPU; torch {meta['torch']}"
        memory = "ivon peak MB / adam's"
    out = ["# IVON's cost beside Adam's and BBB's", "",
           f"{meta['date']}; {where}; "
           f"{meta['warmup']} warm-up steps, {meta['repeats']} repeat(s) of {meta['steps']} steps, median; "
           f"one child process per measurement; {meta['seconds']:.0f} s in all. One run on one machine.", "",
           f"Command: `{meta['command']}`", "",
           "| network | batch | " + " | ".join(f"{s} steps/s" for s in SYSTEMS)
           + f" | ivon x adam (step time) | ivon-opt x adam | bbb x adam | {memory} |",
           "|---|---:|" + "---:|" * (len(SYSTEMS) + 4)]

    def f(v: Any, fmt: str) -> str:
        return "-" if v is None else fmt.format(v)

    for e in summary["table"]:
        cells = [f(e["steps_per_s"].get(s), "{:.1f}") if e["steps_per_s"].get(s) else e["status"][s] for s in SYSTEMS]
        out.append(f"| {e['arch']} | {e['batch']} | " + " | ".join(cells)
                   + f" | {f(e['ivon_x_adam'], '{:.2f}x')} | {f(e['ivon-opt_x_adam'], '{:.2f}x')}"
                   + f" | {f(e['bbb_x_adam'], '{:.2f}x')} | {f(e['ivon_memory_x_adam'], '{:.2f}x')} |")
    verdict = {e["arch"]: "met" if e["ivon_x_adam"] is not None and e["ivon_x_adam"] <= TARGET else "missed"
               for e in summary["table"]}
    out += ["", f"Target (issue 73): IVON's step <= {TARGET:g}x Adam's on each network: "
            + ", ".join(f"{a} {v}" for a, v in verdict.items()) + ".", "",
            "Systems: " + "; ".join([
                "adam: the deterministic network, fused torch.optim.Adam",
                f"ivon: bbb.bayesianize + bbb.IVON({', '.join(f'{k}={v:g}' for k, v in IVON_SETTINGS.items())}), "
                "norm layers frozen",
                "ivon-opt: the same settings on the deterministic network, its README's loop",
                "bbb: bayesianize (Gaussian prior, closed-form KL) + ELBO + bbb.Engine('adam')"]) + "."]
    return "\n".join(out) + "\n"


def summarise(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    table = []
    for arch in meta["archs"]:
        by = {r["system"]: r for r in rows if r["arch"] == arch}
        rate = {s: by[s]["steps_per_s"] if by.get(s, {}).get("status") == "ok" else None for s in SYSTEMS}
        mem = {s: by[s].get(memory_key(meta)) if s in by else None for s in SYSTEMS}
        adam = rate["adam"]
        batch = next((r.get("batch") for r in by.values() if r.get("batch")), ARCHS[arch])
        entry: dict[str, Any] = {"arch": arch, "batch": batch, "steps_per_s": rate,
                                 "status": {s: by.get(s, {}).get("status", "not run") for s in SYSTEMS}}
        for s in ("ivon", "ivon-opt", "bbb"):
            entry[f"{s}_x_adam"] = adam / rate[s] if adam and rate[s] else None
        entry["ivon_memory_x_adam"] = mem["ivon"] / mem["adam"] if mem["ivon"] and mem["adam"] else None
        table.append(entry)
    return {"meta": meta, "table": table, "rows": rows}


def _without_out(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            out.append(a)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Example:\n  python bench/bench_ivon.py --threads 2 --out bench/results")
    ap.add_argument("--archs", nargs="+", default=list(ARCHS), choices=list(ARCHS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--tiny", action="store_true", help="tiny networks (a smoke run; no meaningful number)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the data and networks live (cuda: synchronised clock reads, the GPU's peak memory)")
    ap.add_argument("--out", type=Path, default=None, help="folder for ivon-cost.json and ivon-cost.md (required)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(MARK + json.dumps(measure(json.loads(args.child))), flush=True)
        return 0
    if args.out is None:
        ap.error("--out DIR is required")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: CUDA is not available here (run on a GPU machine, or leave --device out)")
    t0 = time.perf_counter()
    rows = []
    for arch in args.archs:
        for system in SYSTEMS:
            spec = {"arch": arch, "system": system, "batch": 4 if args.tiny else ARCHS[arch], "tiny": args.tiny,
                    "threads": args.threads, "steps": args.steps, "repeats": args.repeats, "warmup": args.warmup,
                    "device": args.device}
            rows.append(run_child(spec))
            print(f"{arch} {system}: {rows[-1].get('status')} {rows[-1].get('steps_per_s', '')}", flush=True)
    meta = {"archs": args.archs, "threads": args.threads, "steps": args.steps, "repeats": args.repeats,
            "warmup": args.warmup, "tiny": args.tiny, "torch": torch.__version__, "cpu": platform.processor() or
            platform.machine(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "seconds": time.perf_counter() - t0, "device": args.device,
            "command": " ".join(["python bench/bench_ivon.py", *_without_out(list(argv or sys.argv[1:])), "--out DIR"])}
    if args.device == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(0)
    summary = summarise(rows, meta)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ivon-cost.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out / "ivon-cost.md").write_text(markdown(summary))
    print(f"wrote {args.out / 'ivon-cost.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
