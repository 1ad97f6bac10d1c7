"""Side-by-side speed bench beyond MLPs: LeNet, LSTM, Transformer, a BERT-style encoder, ResNet-18.

For each architecture (bench/networks_models.py), steps/s of a full training step (forward, loss,
backward, optimiser step) on random data of the architecture's shape, for five systems: the
deterministic network with fused ``torch.optim.Adam`` and cross-entropy (the floor); bbb
(``bbb.bayesianize`` with a Gaussian N(0, 1) prior and closed-form KL, bayesian-torch's
objective, trained by ``bbb.Engine``, one sample, reparameterisation); ``bbb-optim`` (the same
network and ELBO on fused ``torch.optim.Adam``, no Engine); ``bbb-mixture`` (as bbb with
bayesianize's default prior, the paper's scale mixture with Monte Carlo KL); and bayesian-torch's
``dnn_to_bnn`` (Reparameterization, its README's prior dict) with ``torch.optim.Adam`` and
``get_kl_loss`` added, one sample. Every measurement runs in a child process of its own (no
compilation or library state leaks between them), warm-up first, then ``--repeats`` repeats of
``--steps`` steps, the median reported; ``--rounds N`` measures everything N times, the systems in
alternating order, and reports the median of the rounds. Where ``dnn_to_bnn`` fails, the row
reads "does not convert" and no ratio is taken against it; where it leaves part of the weights
deterministic, the row is timed and says so (bench/networks_report.py: systems, targets, tables).
Results: ``<out>/<stem>.json`` (every number) and ``<out>/<stem>.md`` (the tables, targets).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bbb/__init__.py: before torch loads

import argparse  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from networks_models import ARCHS, TINY_BATCH, build_network, make_batches  # noqa: E402
from networks_report import (  # noqa: E402
    CONVERT_MIN_SHARE,
    SYSTEMS,
    markdown,
    merge_rounds,
    summarise,
)

__all__ = ["ARCHS", "SYSTEMS", "main", "measure", "run_child", "run_in_process"]

RESULT_MARK = "BENCH_NETWORKS_RESULT "
LR = 1e-3
#: minibatches per epoch given to bbb's ELBO (uniform KL weighting: only scales the KL term)
NUM_BATCHES = 469
#: bayesian-torch's README prior dict for ``dnn_to_bnn`` (Reparameterization, no MOPED)
BT_PRIOR = {"prior_mu": 0.0, "prior_sigma": 1.0, "posterior_mu_init": 0.0, "posterior_rho_init": -3.0,
            "type": "Reparameterization", "moped_enable": False, "moped_delta": 0.5}


# --------------------------------------------------------------------------------------------
# The systems: each build returns (step(x, y, i), info)
# --------------------------------------------------------------------------------------------


class DoesNotConvert(Exception):
    """bayesian-torch's converter fails on the network or leaves part of it deterministic."""


def _adam(params, fused: bool = True):
    import torch

    params = list(params)
    if fused:
        try:
            return torch.optim.Adam(params, lr=LR, fused=True)
        except (RuntimeError, TypeError, ValueError):  # pragma: no cover - older torch, other devices
            pass
    return torch.optim.Adam(params, lr=LR)


def build_deterministic(arch: str, device, spec: dict[str, Any]) -> tuple[Callable, dict[str, Any]]:
    import torch.nn.functional as F

    net = build_network(arch, spec.get("tiny", False)).to(device).train()
    opt = _adam(net.parameters())
    n = sum(p.numel() for p in net.parameters())

    def step(x, y, i: int) -> None:
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, {"total_weights": n, "bayesian_weights": 0, "bayesian_share": 0.0,
                  "optimizer": f"torch.optim.Adam(fused={bool(opt.defaults.get('fused'))})"}


def build_bbb(arch: str, device, spec: dict[str, Any], mixture: bool, engine: bool = True
              ) -> tuple[Callable, dict[str, Any]]:
    """bbb's network and ELBO, trained by the Engine (``engine``) or by fused torch.optim.Adam."""
    import torch.nn as nn

    import bbb

    prior = None if mixture else bbb.GaussianPrior(1.0)
    net = bbb.bayesianize(build_network(arch, spec.get("tiny", False)), prior=prior,
                          skip=[nn.LayerNorm, nn.BatchNorm2d]).to(device).train()
    elbo = bbb.ELBO(net, "categorical", num_batches=NUM_BATCHES, num_samples=1, kl_weighting="uniform")
    opt = (bbb.Engine(net, "adam", lr=LR, compile=False if spec.get("no_compile") else None) if engine
           else _adam(net.parameters()))
    sampling = opt.sampling if engine else contextlib.nullcontext
    summary = bbb.layer_summary(net)

    def step(x, y, i: int) -> None:
        with sampling():
            out = elbo(x, y, batch_index=i % NUM_BATCHES)
        opt.zero_grad()
        (out.loss / len(y)).backward()
        opt.step()

    info = {"total_weights": summary.total_weights, "bayesian_weights": summary.bayesian_weights,
            "bayesian_share": summary.bayesian_share, "prior": "scale mixture (default)" if mixture else "gaussian",
            "deterministic_modules": [f"{r[0]} ({r[1]})" for r in summary.rows if not r[2]]}
    if engine:
        info["engine_object"] = opt
    else:
        info["optimizer"] = f"torch.optim.Adam(fused={bool(opt.defaults.get('fused'))})"
    return step, info


def bayesian_torch_share(model) -> dict[str, Any]:
    """Weights under a bayesian-torch variational layer (a weight counted once, its ``mu``) and
    every other parameter, with the modules on each side."""
    from bayesian_torch.layers.base_variational_layer import BaseVariationalLayer_

    bayes, det, converted, left = 0, 0, [], []

    def walk(mod, name: str) -> None:
        nonlocal bayes, det
        if isinstance(mod, BaseVariationalLayer_):
            bayes += sum(p.numel() for n, p in mod.named_parameters() if n.rsplit(".", 1)[-1].startswith("mu_"))
            converted.append(f"{name} ({type(mod).__name__})")
            return
        own = sum(p.numel() for p in mod.parameters(recurse=False))
        if own:
            det += own
            left.append(f"{name or '(model)'} ({type(mod).__name__})")
        for child_name, child in mod.named_children():
            walk(child, f"{name}.{child_name}" if name else child_name)

    walk(model, "")
    total = bayes + det
    return {"bayesian_weights": bayes, "total_weights": total, "bayesian_share": bayes / max(total, 1),
            "converted_modules": converted, "deterministic_modules": left}


def build_bayesian_torch(arch: str, device, spec: dict[str, Any]) -> tuple[Callable, dict[str, Any]]:
    import torch.nn as nn
    import torch.nn.functional as F

    try:
        from bayesian_torch.models.dnn_to_bnn import dnn_to_bnn, get_kl_loss
    except ImportError as e:
        raise ModuleNotFoundError(f"bayesian-torch: {e}") from None
    net = build_network(arch, spec.get("tiny", False))
    # its LSTMReparameterization is one unidirectional layer over batch-first input, whatever the
    # nn.LSTM it replaces says: a conversion of anything else would be silently wrong
    for name, m in net.named_modules():
        if isinstance(m, nn.LSTM) and (m.num_layers != 1 or m.bidirectional or not m.batch_first or m.proj_size):
            raise DoesNotConvert(f"{name}: LSTMReparameterization is 1-layer, unidirectional, batch-first")
    try:
        dnn_to_bnn(net, dict(BT_PRIOR))
    except Exception as e:  # noqa: BLE001 - the converter's own failure is the result
        share = bayesian_torch_share(net)  # what it had replaced (in place) when it stopped
        raise DoesNotConvert(f"dnn_to_bnn raised {type(e).__name__}: {str(e).splitlines()[0][:200]}",
                             share) from None
    share = bayesian_torch_share(net)
    if share["bayesian_share"] < CONVERT_MIN_SHARE:  # timed all the same, the row says so
        share = {**share, "partial": True,
                 "detail": f"partial: dnn_to_bnn left {1 - share['bayesian_share']:.1%} of the weights "
                           "deterministic: " + ", ".join(share["deterministic_modules"])[:300]}
    net = net.to(device).train()
    opt = _adam(net.parameters(), fused=False)  # its README: torch.optim.Adam's default implementation

    def step(x, y, i: int) -> None:
        out = net(x)
        loss = F.cross_entropy(out, y) + get_kl_loss(net) / len(y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, {**share, "optimizer": "torch.optim.Adam (default implementation)"}


def build_system(system: str, arch: str, device, spec: dict[str, Any]) -> tuple[Callable, dict[str, Any]]:
    if system == "deterministic":
        return build_deterministic(arch, device, spec)
    if system in ("bbb", "bbb-mixture", "bbb-optim"):
        return build_bbb(arch, device, spec, mixture=system == "bbb-mixture", engine=system != "bbb-optim")
    if system == "bayesian-torch":
        return build_bayesian_torch(arch, device, spec)
    raise ValueError(f"unknown system {system!r}")


def _version(system: str) -> str:
    import importlib.metadata as md

    import torch

    if system.startswith("bbb"):
        return f"bbb {__import__('bbb').__version__}"
    if system == "bayesian-torch":
        try:
            return f"bayesian-torch {md.version('bayesian-torch')}"
        except md.PackageNotFoundError:
            return "bayesian-torch (not installed)"
    return f"torch {torch.__version__}"


# --------------------------------------------------------------------------------------------
# Child side: one (architecture, system) measurement
# --------------------------------------------------------------------------------------------


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Steps/s of one system on one architecture (run in a child process by :func:`main`)."""
    import torch
    from child import peak_rss_mb, sync_device, warmup_steps
    from peers.ours import engine_info, engine_text

    torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    arch, system = spec["arch"], spec["system"]
    res: dict[str, Any] = {"arch": arch, "system": system, "batch": spec["batch"], "threads": torch.get_num_threads(),
                           "version": _version(system)}
    torch.manual_seed(0)
    t0 = time.perf_counter()
    try:
        step_fn, info = build_system(system, arch, device, spec)
    except DoesNotConvert as e:
        extra = e.args[1] if len(e.args) > 1 else {}
        return {**res, **extra, "status": "does not convert", "detail": e.args[0]}
    except ModuleNotFoundError as e:
        return {**res, "status": "not installed", "detail": str(e)}
    res["build_seconds"] = time.perf_counter() - t0  # the engine compiles its sampling kernels here
    engine = info.pop("engine_object", None)
    res.update(info)
    batches = make_batches(arch, spec["batch"], device, tiny=spec.get("tiny", False))

    def step(i: int) -> None:
        x, y = batches[i % len(batches)]
        step_fn(x, y, i)

    t0 = time.perf_counter()
    warm = warmup_steps(step, spec["warmup"], lambda: sync_device(device)) if spec["warmup"] else []
    res.update(warmup_seconds=time.perf_counter() - t0, warmup_steps=len(warm), warmup_step_seconds=warm[:50])
    rates = []
    i = len(warm)
    for _ in range(spec["repeats"]):
        sync_device(device)
        t = time.perf_counter()
        for _ in range(spec["steps"]):
            step(i)
            i += 1
        sync_device(device)
        rates.append(spec["steps"] / (time.perf_counter() - t))
    rate = statistics.median(rates)
    res.update(steps_timed=spec["steps"], repeats=len(rates), steps_per_s=rate, ms_per_step=1e3 / rate,
               steps_per_s_all=rates, peak_rss_mb=peak_rss_mb())
    if engine is not None:  # after the steps: a compilation that failed has fallen back by now
        res["engine"] = engine_info(engine)
        res["version"] += f" ({engine_text(res['engine'])})"
    if device.type == "cuda":
        res["peak_cuda_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    res["status"] = "ok"
    return res


def child_main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    from bbb.engine import tune_malloc  # the allocator settings bbb uses, in every child alike

    tune_malloc()
    try:
        res = measure(spec)
    except Exception as e:  # noqa: BLE001 - reported in the table, never a crash of the bench
        res = {"arch": spec.get("arch"), "system": spec.get("system"), "status": "error",
               "detail": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300],
               "traceback": traceback.format_exc()[-2000:]}
    print(RESULT_MARK + json.dumps(res), flush=True)
    return 0


# --------------------------------------------------------------------------------------------
# Parent side: run the children, summarise, write
# --------------------------------------------------------------------------------------------


def run_child(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One child process of this script (run.py's runner, with this bench's result line)."""
    from run import run_child as run_script

    return run_script(spec, timeout, script=Path(__file__), mark=RESULT_MARK, ident=("arch", "system"))


def run_in_process(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``--in-process`` (tests): the same measurement without a child process (this process's
    torch thread count is put back afterwards)."""
    import torch

    threads = torch.get_num_threads()
    try:
        return measure(spec)
    except Exception as e:  # noqa: BLE001
        return {"arch": spec["arch"], "system": spec["system"], "status": "error",
                "detail": f"{type(e).__name__}: {e}"[:300]}
    finally:
        torch.set_num_threads(threads)


def _csv(value: str | None, choices: Sequence[str], what: str) -> list[str]:
    if not value:
        return list(choices)
    picked = [t.strip() for t in value.split(",") if t.strip()]
    bad = [t for t in picked if t not in choices]
    if bad:
        raise SystemExit(f"bench/bench_networks.py: error: unknown {what} {', '.join(bad)}; choose from "
                         f"{', '.join(choices)}")
    return list(dict.fromkeys(picked))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="bench/bench_networks.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Example:\n"
               "  .venv/bin/python bench/bench_networks.py --threads 2            # the full bench: bench/results\n"
               "  .venv/bin/python bench/bench_networks.py --threads 2 --archs bert,resnet18 --rounds 3 \\\n"
               "      --stem networks-53                                          # issue 53's networks\n"
               "  .venv/bin/python bench/bench_networks.py --quick --out runs/nb  # smoke run, meaningless numbers\n"
               "  .venv/bin/python bench/bench_networks.py --archs lenet --systems deterministic,bbb\n\n"
               "Architectures: " + ", ".join(ARCHS) + ". Systems: " + ", ".join(SYSTEMS) + ".")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 warm-up step, 1 repeat of 2 steps; writes <out>/networks-quick.{json,md}")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of every child (default 2)")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps per repeat (default 30, bert and resnet18 10; quick 2)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed repeats, the median is reported (default 3, quick 1)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed steps first (default 5, quick 1); bbb's engine compiles its step in the first; "
                         "more follow (up to 4x as many) while the last is over 1.5x the fastest")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure every (architecture, system) this many times, the systems in alternating order "
                         "(reversed every other round); the median of the rounds is reported (default 1)")
    ap.add_argument("--tiny", action="store_true",
                    help=f"each network at a tiny width and input, batch {TINY_BATCH} (the bench's tests)")
    ap.add_argument("--archs", default=None, help="comma-separated subset of " + ", ".join(ARCHS))
    ap.add_argument("--systems", default=None, help="comma-separated subset of " + ", ".join(SYSTEMS))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="default cpu")
    ap.add_argument("--out", default=str(HERE / "results"), help="results folder (default bench/results)")
    ap.add_argument("--stem", default=None, help="file names <stem>.json/.md (default networks, quick networks-quick)")
    ap.add_argument("--job-timeout", type=float, default=900.0, help="seconds per child process (default 900)")
    ap.add_argument("--no-compile", action="store_true",
                    help="bbb's engine without torch.compile (its eager fused kernels; for smoke tests)")
    ap.add_argument("--in-process", action="store_true",
                    help="measure in this process instead of a child per measurement (tests; state leaks)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child is not None:
        return child_main(args.child)
    import torch

    quick = args.quick

    def steps_of(arch: str) -> int:
        return args.steps or (2 if quick else int(ARCHS[arch].get("steps", 30)))

    steps = steps_of("lenet")
    repeats = args.repeats or (1 if quick else 3)
    warmup = args.warmup if args.warmup is not None else (1 if quick else 5)
    if steps < 1 or repeats < 1 or warmup < 0 or args.threads < 1 or args.rounds < 1:
        raise SystemExit("bench/bench_networks.py: error: steps, repeats, rounds, threads must be >= 1 and "
                         "warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench/bench_networks.py: error: --device cuda but no CUDA device is available")
    archs = _csv(args.archs, list(ARCHS), "architecture")
    systems = _csv(args.systems, list(SYSTEMS), "system")
    stem = args.stem or ("networks-quick" if quick else "networks")
    runner = run_in_process if args.in_process else run_child

    from child import WARMUP_SETTLE

    batches = {a: TINY_BATCH if args.tiny else ARCHS[a]["batch"] for a in archs}
    t_start = time.perf_counter()
    measured: dict[tuple[str, str], list[dict[str, Any]]] = {(a, s): [] for a in archs for s in systems}
    for rnd in range(args.rounds):
        for arch in archs:
            for system in systems if rnd % 2 == 0 else systems[::-1]:  # alternating: drift cancels
                spec = {"arch": arch, "system": system, "batch": batches[arch], "threads": args.threads,
                        "device": args.device, "steps": steps_of(arch), "repeats": repeats, "warmup": warmup,
                        "no_compile": args.no_compile, "tiny": args.tiny}
                t = time.perf_counter()
                r = runner(spec, args.job_timeout)
                measured[arch, system].append(r)
                what = (f"{r['steps_per_s']:8.1f} steps/s" if r.get("status") == "ok"
                        else f"{r.get('status')}: {r.get('detail', '')}")
                print(f"round {rnd + 1}/{args.rounds} {arch:<12} {system:<15} {what}  "
                      f"({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
    rows = [merge_rounds(measured[a, s]) for a in archs for s in systems]
    from run import cpu_name, write_report  # the side-by-side bench's report writer and machine name

    try:
        import importlib.metadata as md

        bt_version = md.version("bayesian-torch")
    except Exception:  # noqa: BLE001
        bt_version = "not installed"
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in ["bench/bench_networks.py",
                                                      *(argv if argv is not None else sys.argv[1:])]),
        "cpu": cpu_name(), "cpu_count": os.cpu_count(), "threads": args.threads, "device": args.device,
        "torch": str(torch.__version__), "bbb": __import__("bbb").__version__, "bayesian_torch": bt_version,
        "python": platform.python_version(), "archs": archs, "systems": systems,
        "batches": batches, "rounds": args.rounds, "tiny": args.tiny,
        "heavy_steps": args.steps or (2 if quick else int(ARCHS["bert"]["steps"])),
        "arch_text": {a: ARCHS[a]["text"] for a in archs},
        "system_text": {s: SYSTEMS[s] for s in systems}, "steps": steps, "repeats": repeats, "warmup": warmup,
        "warmup_settle": WARMUP_SETTLE, "quick": quick, "no_compile": args.no_compile, "in_process": args.in_process,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "bt_prior": BT_PRIOR,
        "convert_min_share": CONVERT_MIN_SHARE, "wall_seconds": time.perf_counter() - t_start,
        "note": ("Quick smoke run: too few steps for the numbers to mean anything." if quick else
                 "One run on one machine; on a shared machine other jobs compete for the cores."),
    }
    summary = summarise(rows, meta)
    j, m = write_report(summary, Path(args.out), stem, render=markdown)
    print(markdown(summary))
    print(f"\nwrote {j} and {m} ({meta['wall_seconds']:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
