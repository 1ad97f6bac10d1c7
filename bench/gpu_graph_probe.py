"""What a CUDA graph buys the paper's step (issue 74, "GPU: the whole step as one graph"): a probe,
not bbb's trainer. The 2x1200 MNIST MLP's step written in plain torch (no bbb), with the data set
resident on the device and the minibatch chosen on the device (a step counter tensor), timed:

- ``det``: the deterministic MLP, Adam;
- ``bbb``: Bayes by Backprop in the paper's configuration (sigma = softplus(rho), one sample,
  scale-mixture prior, Monte Carlo KL through logsumexp, 1/M KL weight), Adam;
- ``pop8``: K = 8 such networks as one population (batched matrix products), each its own
  minibatch;

each eager, captured whole (forward, backward, fused capturable Adam, the epoch's loss sum) as one
``torch.cuda.CUDAGraph``, and captured with the loss function compiled by ``torch.compile`` first.
Seconds per epoch of 390 steps (the median of ``--epochs`` epochs), the ratios to ``det`` under the
same capture, and the population's epoch against one network's. ``--dry-run``: the eager rows on
the CPU at tiny sizes (no capture), so the script is checked before a GPU is lent.

Example:
    python3 bench/gpu_graph_probe.py --out /tmp/probe          # on a GPU machine
    python3 bench/gpu_graph_probe.py --dry-run --out /tmp/probe
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

B, STEPS = 128, 390
LOG_PI, LOG_1MPI = math.log(0.25), math.log(0.75)
S1, S2 = math.exp(-0.0), math.exp(-6.0)


def _mixture_logp(w: torch.Tensor) -> torch.Tensor:
    a = LOG_PI - math.log(S1) - 0.5 * (w / S1) ** 2
    b = LOG_1MPI - math.log(S2) - 0.5 * (w / S2) ** 2
    return torch.logaddexp(a, b).sum()


class Probe:
    """Parameters, the resident data and one step's function for a system and K networks."""

    def __init__(self, system: str, widths: list[int], k: int, n: int, device: str) -> None:
        g = torch.Generator(device="cpu").manual_seed(0)
        self.system, self.k, self.device = system, k, device
        self.x = torch.rand(n, widths[0], generator=g).to(device)
        self.y = torch.randint(0, widths[-1], (n,), generator=g).to(device)
        steps = n // B
        # each network its own permutation; batches as index rows [steps, k, B]
        perms = torch.stack([torch.randperm(n, generator=g)[: steps * B] for _ in range(k)])
        self.batches = perms.view(k, steps, B).transpose(0, 1).contiguous().to(device)
        self.steps = steps
        self.step = torch.zeros((), dtype=torch.long, device=device)
        self.loss_sum = torch.zeros((), device=device)
        self.params: list[torch.Tensor] = []
        self.shapes = list(zip(widths[:-1], widths[1:]))
        for fan_in, fan_out in self.shapes:
            mu_w = torch.randn(k, fan_in, fan_out, generator=g) / math.sqrt(fan_in)
            mu_b = torch.zeros(k, 1, fan_out)
            group = [mu_w, mu_b]
            if system == "bbb":
                group += [torch.full_like(mu_w, -5.0), torch.full_like(mu_b, -5.0)]
            self.params += [p.to(device).requires_grad_() for p in group]
        fused = device == "cuda"
        self.opt = torch.optim.Adam(self.params, lr=1e-3, fused=fused, capturable=fused)

    def loss(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.x[idx]                       # [k, B, in]
        y = self.y[idx]                       # [k, B]
        h, kl = x, x.new_zeros(())
        per = 4 if self.system == "bbb" else 2
        for i in range(len(self.shapes)):
            ps = self.params[per * i: per * (i + 1)]
            if self.system == "bbb":
                ws = []
                for mu, rho in ((ps[0], ps[2]), (ps[1], ps[3])):
                    sigma = F.softplus(rho)
                    eps = torch.randn_like(mu)
                    w = mu + sigma * eps
                    logq = (-0.5 * eps ** 2 - torch.log(sigma)).sum()   # log q(w) up to a constant
                    kl = kl + logq - _mixture_logp(w)
                    ws.append(w)
                wt, bias = ws
            else:
                wt, bias = ps
            h = torch.baddbmm(bias, h, wt)
            if i < len(self.shapes) - 1:
                h = torch.relu(h)
        nll = F.cross_entropy(h.reshape(-1, h.shape[-1]), y.reshape(-1), reduction="sum") / B
        return nll + kl / (self.steps * B)

    def make_step(self, loss_fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], None]:
        def step() -> None:
            idx = self.batches.index_select(0, self.step.view(1)).squeeze(0)   # on the device
            loss = loss_fn(idx)
            loss.backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=False)
            with torch.no_grad():
                self.loss_sum.add_(loss.detach())
                self.step.add_(1).remainder_(self.steps)
        return step


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_epochs(run_epoch: Callable[[], None], device: str, epochs: int) -> list[float]:
    out = []
    for _ in range(epochs):
        _sync(device)
        t = time.perf_counter()
        run_epoch()
        _sync(device)
        out.append(time.perf_counter() - t)
    return out


def measure(system: str, k: int, mode: str, widths: list[int], n: int, device: str,
            epochs: int) -> dict[str, Any]:
    torch.manual_seed(0)
    p = Probe(system, widths, k, n, device)
    loss_fn: Callable[[torch.Tensor], torch.Tensor] = p.loss
    t0 = time.perf_counter()
    if mode == "graph+compile":
        loss_fn = torch.compile(p.loss)
    step = p.make_step(loss_fn)
    if mode == "eager":
        step()
        run = lambda: [step() for _ in range(p.steps)]  # noqa: E731
    else:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        run = lambda: [graph.replay() for _ in range(p.steps)]  # noqa: E731
    setup = time.perf_counter() - t0
    times = time_epochs(run, device, epochs)
    finite = bool(torch.isfinite(p.loss_sum).item())
    mem = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    return {"system": system, "k": k, "mode": mode, "epoch_s": statistics.median(times),
            "epochs_s": times, "setup_s": setup, "loss_finite": finite, "peak_mb": mem,
            "steps": p.steps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Example:\n  python3 bench/gpu_graph_probe.py --out /tmp/probe")
    ap.add_argument("--out", type=Path, required=True, help="folder for probe.json")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true", help="the eager rows on the CPU, tiny sizes")
    args = ap.parse_args()
    device = "cpu" if args.dry_run else "cuda"
    widths, n = ([784, 32, 32, 10], 8 * B) if args.dry_run else ([784, 1200, 1200, 10], STEPS * B)
    modes = ["eager"] if args.dry_run else ["eager", "graph", "graph+compile"]
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    for mode in modes:
        for system, k in (("det", 1), ("bbb", 1), ("bbb", 8)):
            try:
                row = measure(system, k, mode, widths, n, device, args.epochs)
            except Exception as e:  # a probe: record and go on
                row = {"system": system, "k": k, "mode": mode, "error": f"{type(e).__name__}: {e}"[:400]}
            print(json.dumps(row), flush=True)
            rows.append(row)
            (args.out / "probe.json").write_text(json.dumps(
                {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                 "torch": torch.__version__, "widths": widths, "batch": B, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
