"""Side-by-side speed bench beyond MLPs: a LeNet, a small LSTM and a small Transformer.

For each architecture, steps/s of a full training step (forward, loss, backward, optimiser
step) on random data of the architecture's shape, for four systems: the deterministic network
with fused ``torch.optim.Adam`` and cross-entropy (the floor); bbb (``bbb.bayesianize`` with a
Gaussian N(0, 1) prior and closed-form KL, bayesian-torch's objective, trained by
``bbb.Engine``, one sample, reparameterisation); ``bbb-mixture`` (the same with bayesianize's
default prior, the paper's scale mixture with Monte Carlo KL); and bayesian-torch's
``dnn_to_bnn`` (Reparameterization, its README's prior dict) with ``torch.optim.Adam`` and
``get_kl_loss`` added, one sample. Every measurement runs in a child process of its own (no
compilation or library state leaks between them), warm-up first, then ``--repeats`` repeats of
``--steps`` steps, the median reported. Where ``dnn_to_bnn`` fails or leaves a share of the
weights deterministic, the row reads "does not convert" and no ratio is taken against it.
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

RESULT_MARK = "BENCH_NETWORKS_RESULT "
NUM_CLASSES = 10
LR = 1e-3
#: minibatches per epoch given to bbb's ELBO (uniform KL weighting: only scales the KL term)
NUM_BATCHES = 469
#: distinct random minibatches each child cycles through (made before the timing)
DATA_BATCHES = 4
#: bayesian-torch's README prior dict for ``dnn_to_bnn`` (Reparameterization, no MOPED)
BT_PRIOR = {"prior_mu": 0.0, "prior_sigma": 1.0, "posterior_mu_init": 0.0, "posterior_rho_init": -3.0,
            "type": "Reparameterization", "moped_enable": False, "moped_delta": 0.5}
#: below this share of Bayesian weights a conversion is "does not convert" (the contract of
#: tests/core/test_model_zoo.py: more than 95% of the weights Bayesian)
CONVERT_MIN_SHARE = 0.95
#: targets of the issue: bbb steps/s >= this x bayesian-torch's where it converts; the converted
#: CNN's step time <= this x the deterministic step
TARGET_PEER_SPEEDUP = 2.0
TARGET_CNN_FLOOR = 1.3
TARGET_CNN = "lenet"
#: the bbb rows the targets are checked for (``bbb``: bayesian-torch's objective)
OURS = ("bbb", "bbb-mixture")
PEER = "bayesian-torch"
FLOOR = "deterministic"

ARCHS: dict[str, dict[str, Any]] = {
    "lenet": {"batch": 128, "text": "LeNet-5 as examples/fashion_cnn.py: conv 1-6 5x5 (pad 2), max-pool, conv 6-16 "
                                    "5x5, max-pool, 400-120-84-10 with ReLU and dropout 0.1; 1x28x28 images"},
    "lstm": {"batch": 64, "text": "1-layer LSTM, 32 features -> 128 hidden, batch_first, over 32 steps; the last "
                                  "step -> Linear(128, 10)"},
    "transformer": {"batch": 64, "text": "Embedding(1000, 64) + 2 TransformerEncoderLayer(64, 4 heads, ff 128, "
                                         "dropout 0.1, batch_first) + mean over 32 tokens + Linear(64, 10)"},
}
SYSTEMS: dict[str, str] = {
    "deterministic": "the same network, cross-entropy, fused torch.optim.Adam (lr 1e-3)",
    "bbb": "bbb.bayesianize(prior=GaussianPrior(1.0), skip=[nn.LayerNorm]) + bbb.ELBO (categorical, uniform KL "
           "weighting, 1 sample) + bbb.Engine('adam', lr=1e-3): Gaussian prior, closed-form KL, reparameterisation",
    "bbb-mixture": "the same with bayesianize's default prior (scale mixture pi 1/4, sigma1 1, sigma2 e^-7; "
                   "Monte Carlo KL)",
    "bayesian-torch": "bayesian_torch dnn_to_bnn (Reparameterization, prior N(0, 1), rho0 -3) + torch.optim.Adam "
                      "(lr 1e-3); loss = cross_entropy + get_kl_loss(model) / batch (its README)",
}

# --------------------------------------------------------------------------------------------
# The networks and their random data
# --------------------------------------------------------------------------------------------


def build_network(arch: str):
    import torch.nn as nn

    if arch == "lenet":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, NUM_CLASSES))

    class LSTMClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(32, 128, batch_first=True)
            self.head = nn.Linear(128, NUM_CLASSES)

        def forward(self, x):
            out, _ = self.lstm(x)
            return self.head(out[:, -1])

    class TextTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(1000, 64)
            layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.1, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(64, NUM_CLASSES)

        def forward(self, tokens):
            return self.head(self.encoder(self.emb(tokens)).mean(1))

    if arch == "lstm":
        return LSTMClassifier()
    if arch == "transformer":
        return TextTransformer()
    raise ValueError(f"unknown architecture {arch!r}")


def make_batches(arch: str, batch: int, device, n: int = DATA_BATCHES, seed: int = 0):
    """``n`` random (input, label) minibatches of the architecture's shape."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        if arch == "lenet":
            x = torch.rand(batch, 1, 28, 28, generator=g)
        elif arch == "lstm":
            x = torch.randn(batch, 32, 32, generator=g)
        else:
            x = torch.randint(0, 1000, (batch, 32), generator=g)
        y = torch.randint(0, NUM_CLASSES, (batch,), generator=g)
        out.append((x.to(device), y.to(device)))
    return out


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

    net = build_network(arch).to(device).train()
    opt = _adam(net.parameters())
    n = sum(p.numel() for p in net.parameters())

    def step(x, y, i: int) -> None:
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, {"total_weights": n, "bayesian_weights": 0, "bayesian_share": 0.0,
                  "optimizer": f"torch.optim.Adam(fused={bool(opt.defaults.get('fused'))})"}


def build_bbb(arch: str, device, spec: dict[str, Any], mixture: bool) -> tuple[Callable, dict[str, Any]]:
    import torch.nn as nn

    import bbb

    prior = None if mixture else bbb.GaussianPrior(1.0)
    net = bbb.bayesianize(build_network(arch), prior=prior, skip=[nn.LayerNorm]).to(device).train()
    elbo = bbb.ELBO(net, "categorical", num_batches=NUM_BATCHES, num_samples=1, kl_weighting="uniform")
    engine = bbb.Engine(net, "adam", lr=LR, compile=False if spec.get("no_compile") else None)
    summary = bbb.layer_summary(net)

    def step(x, y, i: int) -> None:
        with engine.sampling():
            out = elbo(x, y, batch_index=i % NUM_BATCHES)
        engine.zero_grad()
        (out.loss / len(y)).backward()
        engine.step()

    info = {"total_weights": summary.total_weights, "bayesian_weights": summary.bayesian_weights,
            "bayesian_share": summary.bayesian_share, "prior": "scale mixture (default)" if mixture else "gaussian",
            "deterministic_modules": [f"{r[0]} ({r[1]})" for r in summary.rows if not r[2]],
            "engine_object": engine}
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
    net = build_network(arch)
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
    if share["bayesian_share"] < CONVERT_MIN_SHARE:
        raise DoesNotConvert(f"dnn_to_bnn left {1 - share['bayesian_share']:.1%} of the weights deterministic: "
                             + ", ".join(share["deterministic_modules"]), share)
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
    if system in ("bbb", "bbb-mixture"):
        return build_bbb(arch, device, spec, mixture=system == "bbb-mixture")
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
    batches = make_batches(arch, spec["batch"], device)

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


def _row(rows: Sequence[dict[str, Any]], arch: str, system: str) -> dict[str, Any] | None:
    return next((r for r in rows if r.get("arch") == arch and r.get("system") == system), None)


def _rate(rows: Sequence[dict[str, Any]], arch: str, system: str) -> float | None:
    r = _row(rows, arch, system)
    return r["steps_per_s"] if r is not None and r.get("status") == "ok" else None


def _why(rows: Sequence[dict[str, Any]], arch: str, system: str) -> str:
    r = _row(rows, arch, system)
    return "not run" if r is None else str(r.get("status"))


def _why_pair(rows: Sequence[dict[str, Any]], arch: str, a: str, b: str) -> str:
    return f"{a}: {_why(rows, arch, a)}, {b}: {_why(rows, arch, b)}"


def summarise(rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """Per architecture: each system's steps/s, bbb's step time / the deterministic one, bbb's
    steps/s / bayesian-torch's; then the targets."""
    table, targets = [], []
    for arch in meta["archs"]:
        det, peer = _rate(rows, arch, FLOOR), _rate(rows, arch, PEER)
        peer_row = _row(rows, arch, PEER)
        entry: dict[str, Any] = {"arch": arch, "steps_per_s": {s: _rate(rows, arch, s) for s in meta["systems"]},
                                 "status": {s: _why(rows, arch, s) for s in meta["systems"]},
                                 "peer_bayesian_share": None if peer_row is None else peer_row.get("bayesian_share")}
        for ours in OURS:
            mine = _rate(rows, arch, ours)
            entry[f"{ours}_x_deterministic"] = det / mine if det and mine else None
            entry[f"{ours}_over_peer"] = mine / peer if peer and mine else None
            if ours not in meta["systems"]:
                continue
            # peer target: where bayesian-torch converts (a "does not convert" row has no target)
            if peer_row is not None and peer_row.get("status") == "does not convert":
                targets.append({"target": f"{arch}: {ours} steps/s >= {TARGET_PEER_SPEEDUP:g}x bayesian-torch's",
                                "measured": None, "limit": TARGET_PEER_SPEEDUP, "met": None,
                                "note": "bayesian-torch does not convert this network: no comparison"})
            elif PEER in meta["systems"]:
                value = entry[f"{ours}_over_peer"]
                note = "" if value is not None else _why_pair(rows, arch, ours, PEER)
                targets.append({"target": f"{arch}: {ours} steps/s >= {TARGET_PEER_SPEEDUP:g}x bayesian-torch's",
                                "measured": value, "limit": TARGET_PEER_SPEEDUP,
                                "met": value is not None and value >= TARGET_PEER_SPEEDUP, "note": note})
            if arch == TARGET_CNN and FLOOR in meta["systems"]:
                value = entry[f"{ours}_x_deterministic"]
                note = "" if value is not None else _why_pair(rows, arch, ours, FLOOR)
                targets.append({"target": f"{arch}: {ours} step time <= {TARGET_CNN_FLOOR:g}x the deterministic step",
                                "measured": value, "limit": TARGET_CNN_FLOOR,
                                "met": value is not None and value <= TARGET_CNN_FLOOR, "note": note})
        table.append(entry)
    return {"meta": meta, "table": table, "targets": targets, "rows": rows}


def _f(v: Any, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _cell(entry: dict[str, Any], system: str) -> str:
    v = entry["steps_per_s"].get(system)
    return _f(v, "{:.1f}") if v is not None else entry["status"].get(system, "not run")


def markdown(summary: dict[str, Any]) -> str:
    meta, rows = summary["meta"], summary["rows"]
    systems = meta["systems"]
    out = ["# Speed beyond MLPs: LeNet, LSTM, Transformer", "",
           f"{meta['date']}; {meta['cpu']} ({meta['cpu_count']} cores), {meta['threads']} torch thread(s), "
           f"device {meta['device']}; torch {meta['torch']}, bbb {meta['bbb']}, "
           f"bayesian-torch {meta['bayesian_torch']}; "
           f"{meta['warmup']} warm-up steps (more while the last is over {meta['warmup_settle']}x the fastest), "
           f"{meta['repeats']} repeat(s) of {meta['steps']} steps, median; one child process per measurement; "
           f"{meta['wall_seconds']:.0f} s in all. {meta['note']}", "",
           f"Command: `{meta['command']}`", "",
           "## Steps/s (training steps per second: forward, loss, backward, optimiser step)", "",
           "| architecture | batch | " + " | ".join(systems)
           + " | bbb x deterministic (step time) | bbb / bayesian-torch (steps/s) "
             "| bbb-mixture x deterministic | bbb-mixture / bayesian-torch |",
           "|---|---:|" + "---:|" * len(systems) + "---:|---:|---:|---:|"]
    for e in summary["table"]:
        peer_note = ("does not convert" if e["status"].get(PEER) == "does not convert" else None)
        out.append(f"| {e['arch']} | {ARCHS[e['arch']]['batch']} | " + " | ".join(_cell(e, s) for s in systems)
                   + f" | {_f(e['bbb_x_deterministic'], '{:.2f}x')} | {peer_note or _f(e['bbb_over_peer'], '{:.2f}x')}"
                   + f" | {_f(e['bbb-mixture_x_deterministic'], '{:.2f}x')}"
                   + f" | {peer_note or _f(e['bbb-mixture_over_peer'], '{:.2f}x')} |")
    out += ["", "## Every row", "",
            "| architecture | system | status | steps/s | ms/step | repeats (steps/s) | Bayesian share | warm-up s "
            "| build s | peak MB | version / detail |",
            "|---|---|---|---:|---:|---|---:|---:|---:|---:|---|"]
    for r in rows:
        reps = ", ".join(f"{v:.1f}" for v in r.get("steps_per_s_all", []))
        share = r.get("bayesian_share")
        share_text = "-" if share is None or r.get("system") == FLOOR else f"{share:.1%}"
        text = r.get("version", "")
        if r.get("status") != "ok":
            text = f"{text}: {r.get('detail', '')}".strip(": ")
        out.append(f"| {r.get('arch')} | {r.get('system')} | {r.get('status')} | {_f(r.get('steps_per_s'), '{:.1f}')} "
                   f"| {_f(r.get('ms_per_step'), '{:.1f}')} | {reps or '-'} | {share_text} "
                   f"| {_f(r.get('warmup_seconds'), '{:.1f}')} | {_f(r.get('build_seconds'), '{:.1f}')} "
                   f"| {_f(r.get('peak_rss_mb'), '{:.0f}')} | {text.replace('|', '/')} |")
    out += ["", "## Targets", "", "| target | measured | limit | met |", "|---|---:|---:|---|"]
    for t in summary["targets"]:
        met = "n/a" if t["met"] is None else ("yes" if t["met"] else "**no**")
        meas = _f(t["measured"], "{:.2f}x")
        if t.get("note"):
            meas = f"{meas} ({t['note']})" if t["measured"] is not None else t["note"]
        out.append(f"| {t['target']} | {meas} | {t['limit']:g}x | {met} |")
    out += ["", "## The networks and systems", ""]
    out += [f"* **{a}** (batch {ARCHS[a]['batch']}): {ARCHS[a]['text']}." for a in meta["archs"]]
    out += [f"* **{s}**: {SYSTEMS[s]}." for s in systems]
    out += ["", "Random data of each network's input shape (a few minibatches made before the timing, cycled); "
            "10 classes. Bayesian share: the share of the weights with a posterior (a weight counted once). "
            "bayesian-torch's `dnn_to_bnn` replaces every module whose class name contains Conv, Linear or LSTM; "
            "its LSTMReparameterization runs a Python loop over the time steps with two LinearReparameterization "
            "layers that draw a new weight sample, and compute their KL, at every step, and `get_kl_loss` counts "
            "the LSTM's KL once for the LSTM and once for its inner layers: what its converter gives. On the "
            "Transformer it recurses into `nn.MultiheadAttention` and fails on its `out_proj` "
            "(`NonDynamicallyQuantizableLinear`, no Bayesian twin); attention's `in_proj_weight` and the "
            "embedding have no Bayesian layer in it either."]
    return "\n".join(out)


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
               "  .venv/bin/python bench/bench_networks.py --quick --out runs/nb  # smoke run, meaningless numbers\n"
               "  .venv/bin/python bench/bench_networks.py --archs lenet --systems deterministic,bbb\n\n"
               "Architectures: " + ", ".join(ARCHS) + ". Systems: " + ", ".join(SYSTEMS) + ".")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 warm-up step, 1 repeat of 2 steps; writes <out>/networks-quick.{json,md}")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of every child (default 2)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per repeat (default 30, quick 2)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timed repeats, the median is reported (default 3, quick 1)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed steps first (default 5, quick 1); bbb's engine compiles its step in the first; "
                         "more follow (up to 4x as many) while the last is over 1.5x the fastest")
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
    steps = args.steps or (2 if quick else 30)
    repeats = args.repeats or (1 if quick else 3)
    warmup = args.warmup if args.warmup is not None else (1 if quick else 5)
    if steps < 1 or repeats < 1 or warmup < 0 or args.threads < 1:
        raise SystemExit("bench/bench_networks.py: error: steps, repeats, threads must be >= 1 and warmup >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench/bench_networks.py: error: --device cuda but no CUDA device is available")
    archs = _csv(args.archs, list(ARCHS), "architecture")
    systems = _csv(args.systems, list(SYSTEMS), "system")
    stem = args.stem or ("networks-quick" if quick else "networks")
    runner = run_in_process if args.in_process else run_child

    from child import WARMUP_SETTLE

    t_start = time.perf_counter()
    rows = []
    for arch in archs:
        for system in systems:
            spec = {"arch": arch, "system": system, "batch": ARCHS[arch]["batch"], "threads": args.threads,
                    "device": args.device, "steps": steps, "repeats": repeats, "warmup": warmup,
                    "no_compile": args.no_compile}
            t = time.perf_counter()
            r = runner(spec, args.job_timeout)
            rows.append(r)
            what = (f"{r['steps_per_s']:8.1f} steps/s" if r.get("status") == "ok"
                    else f"{r.get('status')}: {r.get('detail', '')}")
            print(f"{arch:<12} {system:<15} {what}  ({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
    from run import cpu_name, write_report  # the side-by-side bench's report writer and machine name

    try:
        import importlib.metadata as md

        bt_version = md.version("bayesian-torch")
    except Exception:  # noqa: BLE001
        bt_version = "not installed"
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [Path(sys.argv[0]).as_posix() if argv is None
                                                      else "bench/bench_networks.py",
                                                      *(argv if argv is not None else sys.argv[1:])]),
        "cpu": cpu_name(), "cpu_count": os.cpu_count(), "threads": args.threads, "device": args.device,
        "torch": str(torch.__version__), "bbb": __import__("bbb").__version__, "bayesian_torch": bt_version,
        "python": platform.python_version(), "archs": archs, "systems": systems,
        "batches": {a: ARCHS[a]["batch"] for a in archs}, "arch_text": {a: ARCHS[a]["text"] for a in archs},
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
