"""A population's training step against one network's (issue 74, item 3; ``make gpu-check``'s
``population_ratio_k8_2x1200``): what K networks of one recipe cost when trained together.

- ``one``: one 784-H-H-10 ``bbb.nn.BayesMLP`` in the paper's configuration (scale-mixture prior
  pi 1/4, sigma1 1, sigma2 e^-7, Monte Carlo KL, reparameterisation, one sample, uniform KL
  weighting) on ``bbb.Engine("adam", lr 1e-3)``: the step ``bbb train`` takes
  (``bbb.runs.training_step``);
- ``population``: K such networks as one ``bbb.nn.BayesPopulation`` (batched matrix products)
  under one ``bbb.Engine`` (one fused kernel over the K networks' weights, each member its own
  gradient: tests/core/test_engine_population.py), each member on its own minibatch of 128 (its
  own permutation of the training rows): ``with engine.sampling(): elbo(x (K, 128, 784), y)``,
  backward of the free energy per row of one member, ``engine.step()``.

- ``grid`` (``--grid``): the same population as a grid, each member its own prior (pi and sigma2 of
  the paper's grid, :func:`grid_members`) and learning rate (x 1/2, 1, 2): a
  ``bbb.distributions.MemberPrior`` and ``Engine(member_lr_scale=...)``, whose kernel looks each
  weight's constants up in a table; ``grid_ratio`` is its step against the population's.

The training rows are 50,000 random images resident on the device (the time does not depend on
the pixels). Seconds per step (the median of ``--repeats`` repeats of ``--steps`` steps after
``--warmup`` steps, which absorb the engine's compilation), seconds per epoch (391 steps), the
population's epoch against one network's (``ratio``: K networks for ``ratio`` times one network's
time) and networks trained per second of one network's time (``K / ratio``).

Example:
    python bench/bench_population.py --device cuda --width 1200 --members 8 --out /tmp/pop
    python bench/bench_population.py --threads 2 --width 400 --members 8 --out bench/results
    python bench/bench_population.py --threads 2 --width 1200 --members 8 --grid --out /tmp/pop
    python bench/bench_population.py --dry-run --out /tmp/pop      # the CPU, tiny sizes
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bbb/__init__.py: before torch loads

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

#: minibatches of 128 in an epoch of 50,000 MNIST training images (bench/run.py's s/epoch)
EPOCH_STEPS = 391
TRAIN_ROWS, IN_FEATURES, CLASSES, BATCH = 50_000, 784, 10, 128
#: the paper's configuration (bench/peers/ours.py's bbb-paper; TrainConfig's names)
PAPER: dict[str, Any] = {"method": "bbb", "prior": "mixture", "pi": 0.25, "sigma1": 1.0, "sigma2": math.exp(-7.0),
                         "kl": "mc", "estimator": "reparam", "samples": 1, "optimizer": "adam", "lr": 1e-3,
                         "batch_size": BATCH, "kl_weighting": "uniform"}
RESULT_MARK = "BBB_POPULATION_RESULT "


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(step: Callable[[int], None], device: Any, warmup: int, steps: int, repeats: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    for i in range(warmup):
        step(i)
    _sync(device)
    warm = time.perf_counter() - t0
    per_step, i = [], warmup
    for _ in range(repeats):
        _sync(device)
        t = time.perf_counter()
        for _ in range(steps):
            step(i)
            i += 1
        _sync(device)
        per_step.append((time.perf_counter() - t) / steps)
    s = statistics.median(per_step)
    return {"step_s": s, "step_s_all": per_step, "epoch_s": s * EPOCH_STEPS, "warmup_s": warm}


def _graphed(opt: Any, step: Callable[[Any], None], device: Any, batches: int) -> Callable[[int], None]:
    """``step(index)`` (the minibatch index a device tensor) replayed from CUDA graphs
    (``bbb.runs.cuda_graph.StepGraphs``, as ``--cuda-graph`` trains), as a ``step(i)`` to time."""
    import torch

    from bbb.runs.cuda_graph import StepGraphs

    index = torch.zeros(1, dtype=torch.int64, device=device)

    def device_step() -> None:
        step(index)
        index.add_(1).remainder_(batches)

    graphs = StepGraphs(opt, device_step, device, capture=True)
    graphs.begin()

    def timed(i: int) -> None:
        graphs()  # (the warm-up's side stream joins at the capture; _time synchronises the device)

    return timed


def _one_network(cfg: Any, data: tuple[Any, Any, Any], device: Any, timing: tuple[int, int, int],
                 graph: bool = False) -> dict[str, Any]:
    """One network's steps, as ``bbb train`` takes them, on member 0's minibatches."""
    import torch

    from bbb.elbo import ELBO
    from bbb.runs import build_model, kl_weight_table, make_optimizer, training_step

    x, y, perms = data
    batches = perms.shape[1] // BATCH
    torch.manual_seed(0)
    net = build_model(cfg).to(device)
    elbo = ELBO(net, "categorical", num_batches=batches, kl_weighting=cfg.kl_weighting, num_samples=1, kl=cfg.kl)
    opt = make_optimizer(cfg, net)

    def step(i: int) -> None:
        idx = perms[0, (i % batches) * BATCH:(i % batches + 1) * BATCH]
        training_step(net, elbo, opt, x.index_select(0, idx), y.index_select(0, idx), i % batches)

    table, rows = kl_weight_table(elbo, net, device), perms[0, : batches * BATCH].view(batches, BATCH)

    def indexed(index: Any) -> None:
        idx = rows.index_select(0, index).view(BATCH)
        training_step(net, elbo, opt, x.index_select(0, idx), y.index_select(0, idx), 0,
                      table.index_select(0, index).view(()))

    run = _graphed(opt, indexed, device, batches) if graph else step
    return {**_time(run, device, *timing), "fused": bool(opt.fused), "compiled": bool(opt.compiled)}


def grid_members(members: int) -> tuple[Any, tuple[float, ...]]:
    """A grid's members: (a ``MemberPrior`` of the paper's pi in {1/4, 1/2, 3/4} and sigma2 in
    {e^-6, e^-7, e^-8}, each member the next point; the learning rates x 1/2, 1, 2 in turn)."""
    from bbb.distributions import MemberPrior, ScaleMixturePrior

    points = [(pi, s2) for s2 in (6.0, 7.0, 8.0) for pi in (0.25, 0.5, 0.75)]
    priors = [ScaleMixturePrior(points[j % 9][0], 1.0, math.exp(-points[j % 9][1])) for j in range(members)]
    return MemberPrior(priors), tuple((0.5, 1.0, 2.0)[j % 3] for j in range(members))


def _population(cfg: Any, data: tuple[Any, Any, Any], device: Any, timing: tuple[int, int, int],
                graph: bool = False, grid: bool = False) -> dict[str, Any]:
    """The population's steps: each member on its own minibatches, one engine; ``grid``: each member
    its own prior and learning rate (:func:`grid_members`)."""
    import torch

    from bbb.elbo import ELBO
    from bbb.engine import Engine
    from bbb.nn import BayesPopulation
    from bbb.runs import kl_weight_table

    x, y, perms = data
    members, batches = perms.shape[0], perms.shape[1] // BATCH
    width = cfg.hidden[0]
    torch.manual_seed(0)
    prior, scale = grid_members(members) if grid else (cfg.make_prior(), None)
    pop = BayesPopulation(IN_FEATURES, [width, width], CLASSES, bayesian=members, prior=prior,
                          rho_init=cfg.rho_init, mu_init_scale=cfg.mu_init_scale, estimator=cfg.estimator,
                          device=device)
    elbo = ELBO(pop, "categorical", num_batches=batches, kl_weighting=cfg.kl_weighting, num_samples=1, kl=cfg.kl)
    engine = Engine(elbo, "adam", lr=cfg.lr, seed=0, member_lr_scale=scale)

    def step(i: int) -> None:
        idx = perms[:, (i % batches) * BATCH:(i % batches + 1) * BATCH].reshape(-1)  # each member its own rows
        xb = x.index_select(0, idx).view(members, BATCH, IN_FEATURES)
        yb = y.index_select(0, idx).view(members, BATCH)
        with engine.sampling():
            res = elbo(xb, yb, batch_index=i % batches)
        engine.zero_grad()
        (res.loss / BATCH).backward()  # the sum over members of each one's free energy per row
        engine.step()

    table, rows = kl_weight_table(elbo, pop, device), perms[:, : batches * BATCH].view(members, batches, BATCH)

    def indexed(index: Any) -> None:
        idx = rows.index_select(1, index).reshape(-1)
        xb = x.index_select(0, idx).view(members, BATCH, IN_FEATURES)
        yb = y.index_select(0, idx).view(members, BATCH)
        with engine.sampling():
            res = elbo(xb, yb, kl_weight=table.index_select(0, index).view(()))
        engine.zero_grad()
        (res.loss / BATCH).backward()
        engine.step()

    run = _graphed(engine, indexed, device, batches) if graph else step
    return {**_time(run, device, *timing), "fused": bool(engine.fused), "compiled": bool(engine.compiled)}


def measure(width: int, members: int, device_name: str, threads: int, warmup: int, steps: int, repeats: int,
            rows: int = TRAIN_ROWS, graph: bool = False, grid: bool = False) -> dict[str, Any]:
    """Both systems, one after the other in this process: their step times and the ratio; ``graph``:
    each step replayed from CUDA graphs (``--cuda-graph``); ``grid``: the grid too (``--grid``)."""
    import torch

    from bbb.runs import TrainConfig

    torch.set_num_threads(threads)
    device = torch.device(device_name)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(rows, IN_FEATURES, generator=g).to(device)
    y = torch.randint(0, CLASSES, (rows,), generator=g).to(device)
    batches = rows // BATCH
    perms = torch.stack([torch.randperm(rows, generator=g)[: batches * BATCH] for _ in range(members)]).to(device)
    cfg = TrainConfig(**{**PAPER, "hidden": [width, width]})
    timing = (warmup, steps, repeats)
    out: dict[str, Any] = {"width": width, "members": members, "device": device_name, "threads": threads,
                           "cuda_graph": graph, "one": _one_network(cfg, (x, y, perms), device, timing, graph),
                           "population": _population(cfg, (x, y, perms), device, timing, graph)}
    if device.type == "cuda":
        out["peak_cuda_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    ratio = out["population"]["step_s"] / out["one"]["step_s"]
    out.update(ratio=ratio, networks_per_one_network_time=members / ratio)
    if grid:
        out["grid"] = _population(cfg, (x, y, perms), device, timing, graph, grid=True)
        out["grid_ratio"] = out["grid"]["step_s"] / out["population"]["step_s"]
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# A population of {res['members']} networks against one (2x{res['width']}, paper configuration"
             + (", steps replayed from CUDA graphs)" if res.get("cuda_graph") else ")"),
             "", f"`{res['command']}` on {res['date']}: {res['device_name']}, torch {res['torch']}, "
             f"{res['threads']} thread(s).", "",
             "| system | s/step (median) | s/epoch (391 steps) | fused, compiled |", "|---|---:|---:|---|"]
    for key, label in (("one", "one network (bbb train's step)"),
                       ("population", f"population of {res['members']} (one Engine)"),
                       ("grid", f"the {res['members']} as a grid (a prior and learning rate each)")):
        r = res.get(key)
        if r is None:
            continue
        lines.append(f"| {label} | {r['step_s']:.4g} | {r['epoch_s']:.3g} | {r['fused']}, {r['compiled']} |")
    lines += ["", f"The population's step is **{res['ratio']:.2f}x** one network's: "
              f"{res['networks_per_one_network_time']:.2f} networks in one network's time."]
    if "grid_ratio" in res:
        lines += ["", f"The grid's step is **{res['grid_ratio']:.2f}x** the population's (the members' constants "
                  "looked up in the kernel)."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/bench_population.py", description=__doc__.split("\n\n")[0],
                                 epilog="example: python bench/bench_population.py --device cuda --out /tmp/pop",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    ap.add_argument("--width", type=int, default=1200, help="hidden units per layer (default 1200)")
    ap.add_argument("--members", type=int, default=8, help="networks in the population (default 8)")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default torch's)")
    ap.add_argument("--warmup", type=int, default=5, help="steps before timing (default 5)")
    ap.add_argument("--steps", type=int, default=20, help="steps per repeat (default 20)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats; the median is reported (default 3)")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="replay both systems' steps from CUDA graphs, as bbb train --cuda-graph (CUDA only)")
    ap.add_argument("--grid", action="store_true",
                    help="time the population as a grid too: each member its own prior and learning rate")
    ap.add_argument("--dry-run", action="store_true", help="the CPU, width 16, 3 members, a few steps, 1,024 rows")
    ap.add_argument("--out", default=None, help="folder for population-<device>-2x<width>-k<members>.json and "
                    ".md (default: print only)")
    # gpu_check.py (bench/run.py's run_child): --child '{"width": ..., "members": ..., ...}' (these
    # options by name), one result line after RESULT_MARK on stdout
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    import torch

    if args.child is not None:
        for key, value in json.loads(args.child).items():
            setattr(args, key, value)
    if args.dry_run:
        args.device, args.width, args.members, args.warmup, args.steps, args.repeats = "cpu", 16, 3, 1, 2, 1
        # the eager kernels (the same numbers): compiling them for the CPU took most of the dry run's
        # time and checks nothing of a GPU's (Triton) kernels (bench/README.md); the compiled
        # population is tests/core/test_engine_population.py's (an explicit BBB_COMPILE wins)
        os.environ.setdefault("BBB_COMPILE", "0")
    for name in ("width", "members", "steps", "repeats"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("no CUDA device here (--device cpu, or --dry-run)")
    if args.cuda_graph and not args.device.startswith("cuda"):
        ap.error("--cuda-graph captures the steps on a GPU: add --device cuda")
    threads = args.threads or torch.get_num_threads()
    res = measure(args.width, args.members, args.device, threads, args.warmup, args.steps, args.repeats,
                  rows=1024 if args.dry_run else TRAIN_ROWS, graph=args.cuda_graph, grid=bool(args.grid))
    res.update({
        "dry_run": args.dry_run, "torch": str(torch.__version__), "python": platform.python_version(),
        "device_name": torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda")
        else f"cpu ({platform.processor() or platform.machine()})",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(["python bench/bench_population.py", *(argv if argv is not None else sys.argv[1:])]),
    })
    if args.child is not None:
        print(RESULT_MARK + json.dumps({**res, "status": "ok"}))
        return 0
    text = markdown(res)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        stem = (f"population-{torch.device(args.device).type}-2x{args.width}-k{args.members}"
                + ("-graph" if args.cuda_graph else "") + ("-grid" if args.grid else ""))
        (out / f"{stem}.json").write_text(json.dumps(res, indent=1) + "\n")
        (out / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
