"""Seconds per MNIST epoch: BBB 2x400 and 2x1200 against deterministic MLPs of the same shape.

BBB: the paper's configuration (scale-mixture prior pi 1/4, sigma1 1, sigma2 e^-7, Monte Carlo
KL, weight reparameterisation, 1 sample), batch 128, trained by the fused engine
(:class:`bbb.engine.Engine`, via :func:`bbb.runs.make_optimizer` and
:func:`bbb.runs.training_step`, as ``bbb train`` does). The deterministic MLP (method ``sgd``)
is the same loop with a plain ReLU network and the same optimiser: ``--optimizer adam`` (the
default, lr 1e-3; fused ``torch.optim.Adam``) or ``--optimizer sgd`` (plain SGD, momentum 0,
lr 0.1; ``torch.optim.SGD``). Real MNIST (50,000 training images) is used when it can be found
(``--data-dir`` / ``$BBB_DATA``), else random data of the same shape. Each configuration runs
``--steps`` minibatches after the warm-up, and the time is scaled to a full epoch of
ceil(50000 / 128) = 391 minibatches. The engine compiles its kernels (``torch.compile``) when it
is built and in its first step for networks of at least ``bbb.engine.COMPILE_MIN_NUMEL`` Bayesian
weights (both widths here): the warm-up (``--warmup`` steps, more while the last one is over
1.5x the fastest) keeps that out of the timed steps.

    python bench/bench_epoch.py                 # table on stdout, bench/results/epoch.json
    python bench/bench_epoch.py --optimizer sgd --out bench/results/epoch-sgd.json

``bench/run.py`` also times real epochs of ``bbb train`` (2x1200, Adam and plain SGD) in its
"Seconds per MNIST epoch" section; this script is the quick projection from a few steps.
Timings on a shared machine are only indicative: other jobs compete for the same cores.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bbb/__init__.py: set before torch loads

import argparse  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from bbb.elbo import ELBO  # noqa: E402
from bbb.io import atomic_write_json  # noqa: E402
from bbb.runs import TrainConfig, build_model, make_optimizer, training_step  # noqa: E402

N_TRAIN = 50_000
BATCH = 128


def load(data_dir: str | None) -> tuple[torch.Tensor, torch.Tensor, str]:
    try:
        from bbb.data import mnist_splits

        d = mnist_splits("mnist", data_dir=data_dir, download=False)
        return d["train_x"], d["train_y"], "mnist"
    except Exception as e:  # noqa: BLE001 - any failure: fall back to random data
        print(f"(real MNIST not available: {e}; using random data of the same shape)")
        g = torch.Generator().manual_seed(0)
        return torch.rand(N_TRAIN, 784, generator=g) * 2.0, torch.randint(0, 10, (N_TRAIN,), generator=g), "random"


def time_config(cfg: TrainConfig, x: torch.Tensor, y: torch.Tensor, steps: int, warmup: int,
                device: torch.device) -> tuple[float, dict[str, bool] | None]:
    """Seconds per epoch (391 minibatches), measured over ``steps`` minibatches, and whether the
    engine ran fused and compiled (None for the deterministic MLP)."""
    torch.manual_seed(0)
    model = build_model(cfg, 784, 10).to(device)
    m = math.ceil(x.shape[0] / BATCH)
    elbo = ELBO(model, "categorical", num_batches=m, kl_weighting=cfg.kl_weighting, num_samples=cfg.samples,
                kl=cfg.kl) if cfg.method == "bbb" else None
    opt = make_optimizer(cfg, model)
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0)).to(device)

    def step(i: int) -> None:
        idx = perm[(i % m) * BATCH:(i % m + 1) * BATCH]
        training_step(model, elbo, opt, x.index_select(0, idx), y.index_select(0, idx), i % m)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    # warm-up (the engine's compilation happens here): at least `warmup` steps, and up to 4x as
    # many more while the last one took over 1.5x the fastest
    times: list[float] = []
    i = 0
    while i < warmup or (i < 5 * warmup and times[-1] > 1.5 * min(times)):
        t = time.perf_counter()
        step(i)
        sync()
        times.append(time.perf_counter() - t)
        i += 1
    t0 = time.perf_counter()
    for j in range(i, i + steps):
        step(j)
    sync()
    engine = {"fused": bool(opt.fused), "compiled": bool(opt.compiled)} if hasattr(opt, "fused") else None
    return (time.perf_counter() - t0) / steps * m, engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--steps", type=int, default=100, help="timed minibatches per configuration")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (the engine compiles in the first)")
    ap.add_argument("--optimizer", choices=("adam", "sgd"), default="adam",
                    help="adam (lr 1e-3) or plain sgd (momentum 0, lr 0.1), on both sides (default adam)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "epoch.json"))
    args = ap.parse_args()
    device = torch.device(args.device)
    x, y, source = load(args.data_dir)
    x, y = x.to(device), y.to(device)
    opt_settings = ({"optimizer": "sgd", "momentum": 0.0, "lr": 0.1} if args.optimizer == "sgd"
                    else {"optimizer": "adam", "lr": 1e-3})
    rows = []
    for width in (400, 1200):
        for method in ("bbb", "sgd"):
            paper = (dict(prior="mixture", pi=0.25, sigma1=1.0, sigma2=math.exp(-7.0), kl="mc", estimator="reparam")
                     if method == "bbb" else {})  # the deterministic MLP reads none of them (refused)
            cfg = TrainConfig(method=method, hidden=[width, width], samples=1, batch_size=BATCH,
                              device=args.device, **paper, **opt_settings)
            sec, engine = time_config(cfg, x, y, args.steps, args.warmup, device)
            rows.append({"network": f"2x{width}", "method": "BBB" if method == "bbb" else "MLP",
                         "optimizer": args.optimizer, "seconds_per_epoch": sec, "engine": engine})
            how = "" if engine is None else " (engine " + ("fused" if engine["fused"] else "plain path") + (
                ", compiled)" if engine["compiled"] else ")")
            print(f"2x{width:<5} {rows[-1]['method']:<4} {sec:8.1f} s/epoch{how}", flush=True)
    for r in rows:
        det = next(q for q in rows if q["network"] == r["network"] and q["method"] == "MLP")
        r["ratio_to_mlp"] = r["seconds_per_epoch"] / det["seconds_per_epoch"]
    print()
    print(f"{'network':<8} {'method':<6} {'s/epoch':>9} {'x MLP':>7}")
    for r in rows:
        print(f"{r['network']:<8} {r['method']:<6} {r['seconds_per_epoch']:9.1f} {r['ratio_to_mlp']:7.2f}")
    result = {
        "rows": rows, "data": source, "device": str(device), "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(), "steps_timed": args.steps, "batch_size": BATCH, "optimizer": args.optimizer,
        "minibatches_per_epoch": math.ceil(x.shape[0] / BATCH), "torch": str(torch.__version__),
        "python": platform.python_version(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "note": "shared machine: other jobs may compete for the cores; numbers are indicative",
    }
    atomic_write_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
