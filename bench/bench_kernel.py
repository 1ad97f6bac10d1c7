"""Where a Bayesian training step's time goes, per weight (issue 74, items 1 and 4): nanoseconds per
weight of each part of the paper's step on the MLPs 784-H-H-10 (H = 400, 1200; batch 128), beside
the deterministic step's and fused Adam's.

Whole steps, each part timed on its own (medians over ``--steps`` after warm-up, one process):

- ``deterministic``: the ``nn.Linear`` MLP's forward, backward and fused ``torch.optim.Adam`` step;
- ``bbb``: the paper's configuration (scale-mixture prior, Monte Carlo KL, reparameterisation, one
  sample) and the Gaussian prior's (closed-form KL) on ``bbb.Engine("adam")``: forward with the ELBO,
  backward, ``engine.step()`` (the engine's one kernel: the KL's gradient, Adam on mu and rho, the next
  sample's noise, sigma and prior gradient);
- ``bbb.IVON``: ``bbb.bayesianize`` of the same MLP and ``bbb.IVON`` (lr 0.1, ess 50,000, hess_init
  0.5; one sample): its forward includes the step's draw (the counter-based noise over the flat
  vector and the sample's addcmul), ``step()`` the compiled update (mu, the momentum, h, sigma and
  the layers' rho) and the gradient's zeroing.

The kernel's parts, each compiled alone over the same number of weights (what ``engine.step()``
fuses): the counter-based noise (``bbb.random.normal_pairs``), torch's own ``normal_`` (for scale),
softplus with sigmoid, the mixture's log density and gradient, the Gaussian closed-form KL and its
gradients, Adam's update of two tensors (mu and rho), a copy of one float32 tensor (8 bytes per
weight moved), and the fused step's memory traffic alone: 10 float32 tensors read and 12 written
(88 bytes per weight, what ``engine.step()`` moves with Adam and the Gaussian prior's closed form;
the arithmetic a sum and a product); IVON's update (``bbb.ivon_math.ivon_flat_math``, compiled as
``bbb.IVON`` compiles it) and, of it, the layers' rho = log(expm1(sigma)) alone.

glibc's allocator is set as the ``bbb`` command sets it (:func:`bbb.engine.tune_malloc`), so the
times are those of ``bbb train``'s steps; a script of your own without it pays page faults for
every temporary buffer a step frees.

Run it on idle cores (another job halves every number)::

    python bench/bench_kernel.py --threads 2 --out bench/results
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

import bbb
from bbb.distributions import GaussianPrior, ScaleMixturePrior
from bbb.engine.kernels import softplus_and_sigmoid
from bbb.ivon_math import inverse_softplus, ivon_flat_math
from bbb.random import key_tensor, normal_pairs

BATCH = 128
PAPER_PRIOR = ScaleMixturePrior(0.25, 1.0, math.exp(-7))


def _median_ms(fn: Callable[[], Any], steps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ts)


def _mlp(width: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(784, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


def _phases(forward: Callable[[], torch.Tensor], zero: Callable[[], None], step: Callable[[], None],
            steps: int, warmup: int) -> dict[str, float]:
    """Median ms of forward, backward and the optimiser step, each timed alone in the same steps."""
    for _ in range(warmup):
        zero()
        forward().backward()
        step()
    parts: dict[str, list[float]] = {"forward": [], "backward": [], "step": []}
    for _ in range(steps):
        zero()
        t0 = time.perf_counter()
        loss = forward()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        step()
        t3 = time.perf_counter()
        parts["forward"].append(t1 - t0)
        parts["backward"].append(t2 - t1)
        parts["step"].append(t3 - t2)
    out = {k: 1e3 * statistics.median(v) for k, v in parts.items()}
    out["total"] = sum(out.values())
    return out


def whole_steps(width: int, steps: int, warmup: int) -> dict[str, dict[str, float]]:
    torch.manual_seed(0)
    x, y = torch.randn(BATCH, 784), torch.randint(0, 10, (BATCH,))
    det = _mlp(width)
    adam = torch.optim.Adam(det.parameters(), lr=1e-3, fused=True)
    rows = {"deterministic": _phases(lambda: F.cross_entropy(det(x), y), lambda: adam.zero_grad(), adam.step,
                                     steps, warmup)}
    for name, prior, kl in (("bbb paper (mixture, MC KL)", PAPER_PRIOR, "mc"),
                            ("bbb Gaussian (closed-form KL)", GaussianPrior(math.exp(-1)), "closed")):
        net = bbb.BayesMLP(784, [width, width], 10, prior=prior)
        engine = bbb.Engine(net, "adam", lr=1e-3, kl=kl, num_samples=1, seed=0)
        elbo = bbb.ELBO(net, num_batches=469, kl=kl)

        def forward(net=net, engine=engine, elbo=elbo) -> torch.Tensor:
            with engine.sampling():
                return elbo(x, y, batch_index=0).loss / BATCH

        rows[name] = _phases(forward, engine.zero_grad, engine.step, steps, warmup)
    inet = _mlp(width)
    bbb.bayesianize(inet)
    ivon = bbb.IVON(inet, lr=0.1, ess=50_000, hess_init=0.5, seed=0)

    def ivon_forward() -> torch.Tensor:
        with ivon.sampling():
            return F.cross_entropy(inet(x), y)

    rows["bbb.IVON (its forward draws the sample)"] = _phases(ivon_forward, lambda: ivon.zero_grad(set_to_none=True),
                                                              ivon.step, steps, warmup)
    return rows


def kernel_parts(n: int, steps: int, warmup: int) -> dict[str, float]:
    """Milliseconds of each compiled part over ``n`` weights."""
    g = torch.Generator().manual_seed(0)
    half = (n + 1) // 2
    idx, keys = torch.arange(half, dtype=torch.int32), key_tensor(0, 1)
    noise = torch.empty(2, half)
    w = torch.randn(n, generator=g) * 0.05
    rho = torch.full((n,), -5.0) + 0.01 * torch.randn(n, generator=g)
    a, b, c, d = (torch.empty(n) for _ in range(4))
    m1, v1, m2, v2 = (torch.rand(n, generator=g) * 1e-3 for _ in range(4))
    gauss = GaussianPrior(math.exp(-1))

    def counter_noise() -> None:
        z0, z1 = normal_pairs(idx, keys)
        noise.copy_(torch.stack([z0, z1]))

    def softplus() -> None:
        s, q = softplus_and_sigmoid(rho)
        a.copy_(s)
        b.copy_(q)

    def mixture() -> None:
        lp, gr = PAPER_PRIOR.log_prob_and_grad(w)
        a.copy_(lp)
        b.copy_(gr)

    def closed() -> None:
        out = gauss.kl_closed_form(w, a)
        assert out is not None
        c.copy_(out[0])
        d.copy_(out[1])

    def adam2() -> None:  # Adam on mu and rho, as the engine's update (the gradients given: w and rho)
        for p, gr, m, v in ((a, w, m1, v1), (b, rho, m2, v2)):
            nm = m + 0.1 * (gr - m)
            nv = 0.999 * v + 0.001 * gr * gr
            m.copy_(nm)
            v.copy_(nv)
            p.copy_(p - 1e-3 * (nm / (torch.sqrt(nv) / 0.5 + 1e-8)))

    def copy() -> None:
        c.copy_(w)

    reads = [torch.rand(n, generator=g) for _ in range(10)]
    writes = [torch.empty(n) for _ in range(12)]

    def traffic() -> None:
        s = reads[0]
        for t in reads[1:]:
            s = s + t
        for i, o in enumerate(writes):
            o.copy_(s * float(i + 1))

    out = {}
    for name, fn in (("counter noise (normal_pairs)", counter_noise), ("softplus + sigmoid", softplus),
                     ("mixture log_prob_and_grad", mixture), ("Gaussian closed-form KL", closed),
                     ("Adam on mu and rho", adam2), ("copy one tensor (8 bytes a weight)", copy),
                     ("the step's traffic alone (88 bytes a weight)", traffic)):
        f = torch.compile(fn, fullgraph=True, dynamic=False)
        out[name] = _median_ms(f, steps, warmup + 2)
    out["torch normal_ (not counter-based)"] = _median_ms(lambda: noise.normal_(generator=g), steps, warmup)
    # IVON's update as bbb.IVON compiles it (dynamic sizes; the gradient's zeroing apart)
    mu, mom, grad, eps = (torch.randn(n, generator=g) * 0.05 for _ in range(4))
    hess, sig, rho_out = torch.full((n,), 0.5), torch.full((n,), 0.006), torch.empty(n)
    hp = torch.tensor([0.9, 0.99999, 1e-4, 0.1, 0.1, 5e4, math.inf], dtype=torch.float64)
    update = torch.compile(ivon_flat_math, dynamic=True)
    out["IVON update (ivon_flat_math)"] = _median_ms(lambda: update(mu, mom, hess, grad, eps, sig, rho_out, hp),
                                                     steps, warmup + 2)
    rho_of = torch.compile(lambda: rho_out.copy_(inverse_softplus(sig)), dynamic=True)
    out["IVON's rho = log(expm1(sigma)) alone"] = _median_ms(rho_of, steps, warmup + 2)
    return out


def _markdown(res: dict[str, Any]) -> str:
    lines = ["# Where the Bayesian step's time goes, per weight", "",
             f"{res['when']}; {res['machine']}, {res['threads']} torch thread(s); torch {res['torch']}; "
             f"medians of {res['steps']} steps after {res['warmup']} warm-up; {res['seconds']:.0f} s in all. "
             "One run on one machine: compare within it.", "", f"Command: `{res['command']}`", ""]
    for width, r in res["widths"].items():
        n = r["weights"]
        lines += [f"## 784-{width}-{width}-10 ({n:,} weights, batch {BATCH})", "",
                  "| system | forward ms | backward ms | optimiser step ms | step ns/weight | total ms "
                  "| x deterministic |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        floor = r["steps"]["deterministic"]["total"]
        for name, p in r["steps"].items():
            lines.append(f"| {name} | {p['forward']:.2f} | {p['backward']:.2f} | {p['step']:.2f} | "
                         f"{1e6 * p['step'] / n:.1f} | {p['total']:.2f} | {p['total'] / floor:.2f}x |")
        lines += ["", "| kernel part (compiled alone) | ms | ns/weight |", "|---|---:|---:|"]
        for name, ms in r["parts"].items():
            lines.append(f"| {name} | {ms:.3f} | {1e6 * ms / n:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Example:\n  python bench/bench_kernel.py --threads 2 --out bench/results",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", type=int, nargs="+", default=[400, 1200])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True, help="folder for kernel.json and kernel.md")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    from bbb.engine import tune_malloc  # the allocator settings of the bbb command and the bench's children

    tune_malloc()
    start = time.perf_counter()
    res: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": platform.machine(),
                           "threads": args.threads, "torch": torch.__version__, "steps": args.steps,
                           "warmup": args.warmup, "widths": {},
                           "command": f"python bench/bench_kernel.py --threads {args.threads} --out DIR"}
    for width in args.widths:
        n = sum(p.numel() for p in _mlp(width).parameters())
        res["widths"][str(width)] = {"weights": n, "steps": whole_steps(width, args.steps, args.warmup),
                                     "parts": kernel_parts(n, args.steps, args.warmup)}
        print(f"width {width}: done", flush=True)
    res["seconds"] = time.perf_counter() - start
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kernel.json").write_text(json.dumps(res, indent=1) + "\n")
    (args.out / "kernel.md").write_text(_markdown(res))
    print(_markdown(res))


if __name__ == "__main__":
    main()
