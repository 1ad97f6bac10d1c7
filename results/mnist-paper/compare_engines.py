"""Two checkouts' engines on the 2x1200 mixture network, side by side: do they train the same bits,
and how long does a step take (docs/performance.md, "The noise hash on int32").

Each checkout's ``src`` runs in its own child process (one thread, random inputs, the c0/c2
settings: Adam 1e-3, scale mixture pi 0.75, sigma1 1, sigma2 e^-8, Monte Carlo KL). ``same``
trains 4 steps with k = 2 samples, compiled and eager, and compares every parameter bit for bit;
``time`` prints the median and minimum of steps 11-45, for k = 1 and 2, alternating the two
checkouts twice. Time only on idle cores (pause the training jobs: ``kill -STOP``/``-CONT``):

    git worktree add --detach ../bbb-old <commit>
    python results/mnist-paper/compare_engines.py ../bbb-old/src src [--what same|time|both]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

CHILD = """
import math, sys, time, torch
from bbb.nn import BayesMLP
from bbb.elbo import ELBO
from bbb.distributions import ScaleMixturePrior
from bbb.engine import Engine
torch.set_num_threads(1)
k, steps, compile_, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
g = torch.Generator().manual_seed(1)
x, y = torch.randn(128, 784, generator=g), torch.randint(0, 10, (128,), generator=g)
torch.manual_seed(0)
net = BayesMLP(784, [1200, 1200], 10, prior=ScaleMixturePrior(0.75, 1.0, math.exp(-8)))
elbo = ELBO(net, num_batches=469, kl="mc", num_samples=k)
eng = Engine(net, "adam", lr=1e-3, kl="mc", num_samples=k, seed=4, compile=compile_)
ts = []
for i in range(steps):
    t = time.perf_counter()
    with eng.sampling():
        out = elbo(x, y, batch_index=i % 469)
    eng.zero_grad()
    (out.loss / 128).backward()
    eng.step()
    ts.append(time.perf_counter() - t)
assert eng.compiled == compile_
if path != "-":
    torch.save([p.detach().clone() for p in net.parameters()], path)
ts = sorted(ts[10:])
if ts:
    print(f"{1e3 * ts[len(ts) // 2]:.1f} {1e3 * ts[0]:.1f}")
"""


def child(src: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    r = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"the child with {src} failed:\n{r.stderr[-2000:]}")
    return r.stdout.strip()


def same(a: str, b: str) -> None:
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        for compile_ in ("1", "0"):
            pa, pb = os.path.join(tmp, "a.pt"), os.path.join(tmp, "b.pt")
            child(a, "2", "4", compile_, pa)
            child(b, "2", "4", compile_, pb)
            ta, tb = torch.load(pa, weights_only=True), torch.load(pb, weights_only=True)
            equal = all(torch.equal(p, q) for p, q in zip(ta, tb, strict=True))
            print(f"{'compiled' if compile_ == '1' else 'eager'}: 4 steps, k=2: the same bits: {equal}", flush=True)


def timing(a: str, b: str) -> None:
    for rep in (1, 2):
        for name, src in (("a", a), ("b", b)):
            for k in ("1", "2"):
                med, low = child(src, k, "45", "1", "-").split()
                print(f"round {rep}  {name} ({src})  k={k}: median {med} ms, min {low} ms", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="the first checkout's src folder")
    ap.add_argument("b", help="the second checkout's src folder")
    ap.add_argument("--what", choices=("same", "time", "both"), default="both")
    args = ap.parse_args()
    if args.what in ("same", "both"):
        same(args.a, args.b)
    if args.what in ("time", "both"):
        timing(args.a, args.b)


if __name__ == "__main__":
    main()
