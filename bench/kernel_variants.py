"""The engine's fused step with one part taken out, to see what each part of the fused kernel costs
in place (issue 74): ``engine.step()`` milliseconds (median and minimum over 40 steps after 5) of
the paper's MLP 784-W-W-10, the kernel compiled with the part replaced before compiling:

- ``base``: the kernel as it is;
- ``no_noise``: the next sample's counter-based noise not drawn (the last step's reused: wrong
  numbers, a measurement only);
- ``no_klsum``: the KL's sum over all weights replaced by one term;
- ``plain_sum``: the KL summed by ``torch.sum`` in float32 (one fused reduction, its rounding then
  dependent on the thread count: a measurement only);
- ``fixed_sum``: the KL summed in a fixed order (``kernels.fixed_order_sum``: a pass of its own over
  the written terms), as the engine did before ``kernels.kl_sum`` (float64 accumulation, fused);
- ``recompute_sigma``: sigma and sigmoid(rho) not stored by the sampling step but computed again
  from rho in the update (16 bytes a weight less traffic, one exp and one log more; the same
  numbers: the sum of every mu printed at the end is base's). Slower on a CPU, whose step is
  bound by its arithmetic as much as by its memory; a GPU's is bound by memory alone.

One variant per process (each compiles its own kernel). Run on idle cores, each variant a few
times (this machine's steps vary by 2x between runs; the minimum is the steadier number)::

    python bench/kernel_variants.py base --width 1200 --threads 2 --prior paper

On a GPU (``--device cuda``: each step timed between two synchronisations)::

    for v in base recompute_sigma base recompute_sigma; do
        PYTHONPATH=src python3 bench/kernel_variants.py $v --device cuda --prior paper; done
"""

from __future__ import annotations

import argparse
import inspect
import math
import statistics
import time

import torch

import bbb
import bbb.engine.kernels as kernels
from bbb.distributions import GaussianPrior, ScaleMixturePrior


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Example:\n  python bench/kernel_variants.py no_noise --width 1200 --threads 2")
    ap.add_argument("variant", choices=["base", "no_noise", "no_klsum", "recompute_sigma", "plain_sum",
                                                "fixed_sum"])
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--prior", choices=["paper", "gauss"], default="paper",
                    help="paper: scale mixture, Monte Carlo KL; gauss: N(0, e^-2), closed form")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    if args.variant == "no_noise":
        def reuse(noise, index, hp, w, kl_extra):  # type: ignore[no-untyped-def]
            rows = w.shape[0] + kl_extra
            return noise.view(-1)[: rows * w.shape[1]].view(rows, w.shape[1])
        kernels._sample_noise = reuse  # type: ignore[assignment]
    elif args.variant == "plain_sum":
        kernels.kl_sum = lambda t: t.sum()
    elif args.variant == "fixed_sum":
        kernels.kl_sum = kernels.fixed_order_sum
    elif args.variant == "no_klsum":
        kernels.kl_sum = lambda t: t[:1].sum()
    elif args.variant == "recompute_sigma":
        update = kernels.update
        # the sampling step as it is, less its two stores of sigma and sigmoid(rho)
        src = inspect.getsource(kernels.resample).replace("sig.copy_(s)\n", "pass\n").replace("sr.copy_(r)\n", "pass\n")
        scope: dict[str, object] = {}
        exec(compile(src, kernels.__file__, "exec"), vars(kernels), scope)

        def update_from_rho(mu, rho, g, eps, sig, sr, dlp, m, c, hp, state, **kw):  # type: ignore[no-untyped-def]
            s, r = kernels.softplus_and_sigmoid(rho)
            return update(mu, rho, g, eps, s, r, dlp, m, c, hp, state, **kw)
        kernels.resample = scope["resample"]  # type: ignore[assignment]
        kernels.update = update_from_rho  # type: ignore[assignment]
    prior, kl = ((ScaleMixturePrior(0.25, 1.0, math.exp(-7)), "mc") if args.prior == "paper"
                 else (GaussianPrior(math.exp(-1)), "closed"))
    torch.manual_seed(0)
    dev = torch.device(args.device)
    net = bbb.BayesMLP(784, [args.width, args.width], 10, prior=prior).to(dev)
    engine = bbb.Engine(net, "adam", lr=1e-3, kl=kl, num_samples=1, seed=0)
    elbo = bbb.ELBO(net, num_batches=469, kl=kl)
    x, y = torch.randn(128, 784, device=dev), torch.randint(0, 10, (128,), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = []
    for _ in range(45):
        with engine.sampling():
            out = elbo(x, y, batch_index=0)
        engine.zero_grad()
        (out.loss / 128).backward()
        sync()
        t = time.perf_counter()
        engine.step()
        sync()
        times.append(time.perf_counter() - t)
    ms = [1e3 * t for t in times[5:]]
    mu_sum = float(sum(p.detach().sum() for n, p in net.named_parameters() if n.endswith("_mu")))
    print(f"{args.variant} {args.prior} {dev.type} 784-{args.width}-{args.width}-10, {args.threads} thread(s): "
          f"engine.step median {statistics.median(ms):.2f} ms, min {min(ms):.2f} ms; "
          f"sum of every mu after 45 steps {mu_sum:.6f}", flush=True)


if __name__ == "__main__":
    main()
