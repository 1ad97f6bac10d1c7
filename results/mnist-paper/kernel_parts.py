"""Time the compiled parts of the engine's step kernel over the 2x1200 network's weights, one
thread (docs/performance.md, "The noise hash on int32"): the counter-based noise and its hash
alone, each on int64 and on int32 (the engine's since e38b3f1), the
int64->float and int32->float conversions, Box-Muller, the scale mixture's log_prob_and_grad,
softplus with sigmoid. Run it on idle cores:

    python results/mnist-paper/kernel_parts.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from bbb.distributions import ScaleMixturePrior
from bbb.engine.kernels import softplus_and_sigmoid
from bbb.random import hash_pairs, key_tensor, normal_pairs

N = 2395210  # the weights of 784-1200-1200-10


def noise(idx, keys, out):
    z0, z1 = normal_pairs(idx, keys)
    out.copy_(torch.stack([z0, z1]))


def hash_only(idx, keys, out):
    h1, h2 = hash_pairs(idx, keys)
    out.copy_(torch.stack([h1.to(torch.float32), h2.to(torch.float32)]))


def to_float(iv, out):
    out.copy_(torch.stack([(iv >> 8).to(torch.float32), (iv >> 9).to(torch.float32)]))


def box_muller(u, out):
    u1 = (u.to(torch.float32) + 0.5) * (1.0 / 16777216.0)
    th = u.to(torch.float32) * (2 * math.pi / 16777216.0)
    r = torch.sqrt(-2.0 * torch.log(u1))
    out.copy_(torch.stack([r * torch.cos(th), r * torch.sin(th)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15, help="timed calls per part; the minimum is printed")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    half = N // 2 + 1
    idx = {dt: torch.arange(half, dtype=dt) for dt in (torch.int64, torch.int32)}
    keys = {dt: key_tensor(0, 1, dtype=dt) for dt in (torch.int64, torch.int32)}
    out, o1, o2 = torch.empty(2, half), torch.empty(N), torch.empty(N)
    prior = ScaleMixturePrior(0.75, 1.0, math.exp(-8))

    def mixture(w, a, b):
        lp, g = prior.log_prob_and_grad(w)
        a.copy_(lp)
        b.copy_(g)

    def softplus(r, a, b):
        s, q = softplus_and_sigmoid(r)
        a.copy_(s)
        b.copy_(q)

    g = torch.Generator().manual_seed(0)
    w = torch.randn(N, generator=g) * 0.05
    rho = torch.full((N,), -3.25) + 0.01 * torch.randn(N, generator=g)
    r64 = torch.randint(0, 2**32, (half,), dtype=torch.int64, generator=g)
    r32 = torch.randint(0, 2**24, (half,), dtype=torch.int32, generator=g)
    i64, i32 = torch.int64, torch.int32
    parts = {"noise, int64 (normal_pairs)": (noise, (idx[i64], keys[i64], out)),
             "its hash, to float, int64": (hash_only, (idx[i64], keys[i64], out)),
             "noise, int32 (normal_pairs)": (noise, (idx[i32], keys[i32], out)),
             "its hash, to float, int32": (hash_only, (idx[i32], keys[i32], out)),
             "int64 -> float": (to_float, (r64, out)), "int32 -> float": (to_float, (r32, out)),
             "Box-Muller from int32": (box_muller, (r32, out)),
             "mixture log_prob_and_grad": (mixture, (w, o1, o2)), "softplus + sigmoid": (softplus, (rho, o1, o2))}
    for name, (fn, a) in parts.items():
        f = torch.compile(fn, fullgraph=True, dynamic=False)
        f(*a)
        f(*a)
        ts = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            f(*a)
            ts.append(time.perf_counter() - t)
        print(f"{name:28s} min {1e3 * min(ts):6.2f} ms", flush=True)


if __name__ == "__main__":
    main()
