"""The side-by-side bench's child side: one measurement in a process of its own.

``bench/run.py`` (the parent) starts ``python bench/run.py --child SPEC`` for every (system,
width), time-to-accuracy run and ``bbb train`` epoch timing, so that peak memory is clean and
no state is shared between libraries; the child prints one ``BENCH_RESULT {json}`` line.
"""


import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bbb/__init__.py: before torch loads

import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from peers import NUM_BATCHES, NotInstalled, Pair, all_systems  # noqa: E402
from peers.ours import engine_info, engine_text  # noqa: E402

RESULT_MARK = "BENCH_RESULT "
EVAL_CHUNK = 2048
K_SAMPLES = 10
#: the warm-up goes on (up to this many times --warmup extra steps) while its last step took
#: more than this times its fastest one: a recompilation late in the warm-up stays untimed
WARMUP_SETTLE = 1.5
WARMUP_EXTRA_FACTOR = 4
PEER_K_IMAGES = 2048
#: our time-to-accuracy recipe: the demo's (scale mixture pi 0.25, sigma1 1, sigma2 e^-7, Monte
#: Carlo KL, Adam 1e-3, cosine decay over the epoch cap) with the paper's KL weighting (eq. 9).
#: Measured, 2x400, 6-epoch cap, one thread: uniform weighting 95.1/96.7/97.1/97.4/97.6/97.6%
#: after epochs 1-6; Blundell 95.3/97.1/97.5/97.8/97.9/98.0%.
TTA_RECIPE = {"kl_weighting": "blundell"}

# --------------------------------------------------------------------------------------------
# Child side: one system at one width, or one time-to-accuracy run
# --------------------------------------------------------------------------------------------


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # not Linux
        return float("nan")


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (the kernel's high-water mark lags the current
    value by a few pages, hence the max)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = peak / 2**20 if sys.platform == "darwin" else peak / 1024
    now = _rss_mb()
    return max(peak, now) if math.isfinite(now) else peak


def sync_device(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _load_data(path: str, device):
    import torch

    d = torch.load(path, weights_only=True)
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}


def _profile_steps(step, n: int) -> list[dict[str, Any]]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(n):
            step(i)
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows) or 1.0
    return [{"op": e.key, "ms_per_step": e.self_cpu_time_total / 1e3 / n, "share": e.self_cpu_time_total / total,
             "calls_per_step": e.count / n} for e in rows[:12]]


def warmup_steps(step, n: int, sync=lambda: None, settle: float = WARMUP_SETTLE,
                 extra: int | None = None) -> list[float]:
    """Run ``n`` untimed warm-up steps (lazy initialisation, our engine's compilation), then more,
    up to ``extra`` (default :data:`WARMUP_EXTRA_FACTOR` x n), while the last one took more than
    ``settle`` times the fastest: the timed steps start from the steady state. Returns each
    warm-up step's seconds."""
    extra = WARMUP_EXTRA_FACTOR * n if extra is None else extra
    times: list[float] = []
    i = 0
    while i < n or (i < n + extra and times[-1] > settle * min(times)):
        t = time.perf_counter()
        step(i)
        sync()
        times.append(time.perf_counter() - t)
        i += 1
    return times


def _engine_state(system, res: dict[str, Any]) -> None:
    """Our rows: the version with the engine's state (fused? compiled?) and that state itself."""
    refresh = getattr(system, "refresh_version", None)
    if refresh is not None:
        refresh()
        res["version"] = system.version
    engine = getattr(system, "engine", None)
    if callable(engine):
        res["engine"] = engine()


def child_speed(spec: dict[str, Any]) -> dict[str, Any]:
    """Train steps/s, peak memory and evaluation throughput of one system at one width."""
    import torch

    torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    system = all_systems()[spec["system"]]
    res: dict[str, Any] = {"system": system.name, "pair": system.pair.value, "library": system.library,
                           "optimizer": getattr(system, "optimizer", "adam"), "width": spec["width"],
                           "threads": torch.get_num_threads()}
    try:
        torch.manual_seed(0)
        t0 = time.perf_counter()
        system.build(spec["width"], device)
        res["build_seconds"] = time.perf_counter() - t0  # our engine compiles part of its kernels here
    except NotInstalled as e:
        return {**res, "status": "not installed", "detail": str(e)}
    res["version"] = system.version
    data = _load_data(spec["data"], device)
    x, y = data["train_x"], data["train_y"]
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(0)).to(device)
    bsz = spec["batch"]
    m = x.shape[0] // bsz

    def step(i: int) -> None:
        idx = perm[(i % m) * bsz:(i % m + 1) * bsz]
        system.step(x.index_select(0, idx), y.index_select(0, idx), i % NUM_BATCHES)

    rss0 = _rss_mb()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    warmup = max(1, spec["warmup"] // system.step_divisor) if spec["warmup"] else 0
    warm = warmup_steps(step, warmup, lambda: sync_device(device))
    warmup = len(warm)
    last = warm[-1] if warm else None
    res["warmup_seconds"] = time.perf_counter() - t0  # includes compilation, if any
    res.update(warmup_steps=warmup, warmup_step_seconds=warm[:50])
    # steps per repeat: --steps, fewer for slow systems so that a repeat lasts ~--repeat-seconds
    steps = max(1, spec["steps"] // system.step_divisor)
    if last is not None and spec.get("repeat_seconds"):
        floor = 3 if system.step_divisor == 1 else 2
        steps = min(steps, max(floor, math.ceil(spec["repeat_seconds"] / max(last, 1e-9))))
    rates = []
    i = warmup
    for _ in range(spec["repeats"]):
        sync_device(device)
        t = time.perf_counter()
        for _ in range(steps):
            step(i)
            i += 1
        sync_device(device)
        rates.append(steps / (time.perf_counter() - t))
    res.update(steps_timed=steps, repeats=len(rates), steps_per_s=statistics.median(rates),
               steps_per_s_all=rates, peak_rss_mb=peak_rss_mb(), rss_before_mb=rss0)
    _engine_state(system, res)  # after the steps: a compilation that failed has fallen back by now
    if device.type == "cuda":
        res["peak_cuda_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    if spec.get("profile"):
        res["profile"] = _profile_steps(step, spec["profile"])

    # evaluation: posterior mean and k sampled networks on the test images
    xt, yt = data["test_x"][: spec["eval_images"]], data["test_y"][: spec["eval_images"]]
    cap = getattr(system, "chunk", None)
    # k-sample throughput: ours on every image (the k = 10 target is about 10,000 images); the
    # peers, which loop over the k networks, on at most PEER_K_IMAGES (2 chunks for HiddenLayer,
    # which forms (chunk, in, out) tensors)
    n_k = xt.shape[0] if system.library.startswith("bbb") else min(xt.shape[0], PEER_K_IMAGES)
    if cap is not None:
        n_k = min(n_k, 2 * cap)
    with torch.no_grad():
        system.predict_mean(xt[:64])  # warm-up (lazy initialisation, allocator)
        sync_device(device)
        t = time.perf_counter()
        logits = torch.cat([system.predict_mean(xc) for xc in torch.split(xt, EVAL_CHUNK)])
        sync_device(device)
        res["eval_mean_images_per_s"] = xt.shape[0] / (time.perf_counter() - t)
        res["test_accuracy_mean"] = float((logits.argmax(-1) == yt).float().mean())
        if system.pair is not Pair.FLOOR:
            xk = xt[:n_k]
            system.predict_samples(xk[:64], 2)
            sync_device(device)
            t = time.perf_counter()
            probs = system.predict_probs_dataset(xk, K_SAMPLES, EVAL_CHUNK if cap is None else cap)
            sync_device(device)
            res["eval_k_images_per_s"] = xk.shape[0] / (time.perf_counter() - t)
            res["eval_k_images"] = int(xk.shape[0])
            res["test_accuracy_k"] = float((probs.argmax(-1) == yt[:n_k]).float().mean())
    res["eval_images"] = int(xt.shape[0])
    res["status"] = "ok"
    return res


def _tta_ours(spec: dict[str, Any], data: dict[str, Any], device) -> dict[str, Any]:
    """Our paper-faithful recipe through :func:`bbb.runs.train` (what ``bbb train`` runs)."""
    import inspect

    from bbb.cli import DEMO_SETTINGS
    from bbb.runs import TrainConfig, train

    settings = {**DEMO_SETTINGS, **TTA_RECIPE, **spec.get("recipe", {}), "epochs": spec["max_epochs"],
                "test_each_epoch": True,
                "device": device.type, "hidden": [spec["width"], spec["width"]]}
    cfg = TrainConfig.from_dict(settings)
    target_error = 1.0 - spec["target"]
    seen: list[dict[str, Any]] = []

    def on_epoch(row: dict[str, Any]) -> bool:
        seen.append(row)
        return row["test_error"] is not None and row["test_error"] <= target_error

    kwargs: dict[str, Any] = {"quiet": True, "log": lambda s: None}
    if "on_epoch" in inspect.signature(train).parameters:
        kwargs["on_epoch"] = on_epoch
    with tempfile.TemporaryDirectory() as run_dir:
        from bbb.runs import read_metrics

        train(cfg, Path(run_dir) / "run", data=data, **kwargs)
        rows = read_metrics(Path(run_dir) / "run")
    curve, total, reached = [], 0.0, None
    for r in rows:
        total += r["seconds"]
        acc = None if r["test_error"] is None else 1.0 - r["test_error"]
        curve.append({"epoch": r["epoch"], "seconds": total, "test_accuracy": acc})
        if reached is None and acc is not None and acc >= spec["target"]:
            reached = {"epoch": r["epoch"], "seconds": total}
    return {"recipe": {k: v for k, v in cfg.to_dict().items()
                       if k in ("prior", "pi", "sigma1", "sigma2", "lr", "lr_schedule", "kl_weighting", "kl",
                                "estimator", "batch_size", "samples", "epochs")},
            "curve": curve, "reached": reached}


def _tta_peer(spec: dict[str, Any], system, data: dict[str, Any], device) -> dict[str, Any]:
    """A peer's own recipe (its adapter's defaults), same data, batch 128, mean-weight test accuracy."""
    import torch

    x, y = data["train_x"], data["train_y"]
    xt, yt = data["test_x"], data["test_y"]
    gen = torch.Generator().manual_seed(0)
    bsz, n = spec["batch"], x.shape[0]
    curve, total, reached = [], 0.0, None
    for epoch in range(1, spec["max_epochs"] + 1):
        t = time.perf_counter()
        perm = torch.randperm(n, generator=gen).to(device)
        for i in range(math.ceil(n / bsz)):
            idx = perm[i * bsz:(i + 1) * bsz]
            system.step(x.index_select(0, idx), y.index_select(0, idx), i)
        with torch.no_grad():
            logits = torch.cat([system.predict_mean(xc) for xc in torch.split(xt, EVAL_CHUNK)])
        acc = float((logits.argmax(-1) == yt).float().mean())  # one synchronisation per epoch
        total += time.perf_counter() - t
        curve.append({"epoch": epoch, "seconds": total, "test_accuracy": acc})
        if acc >= spec["target"]:
            reached = {"epoch": epoch, "seconds": total}
            break
    return {"recipe": {"lr": getattr(system, "lr", None), "batch_size": bsz, "notes": type(system).__doc__ or ""},
            "curve": curve, "reached": reached}


def child_tta(spec: dict[str, Any]) -> dict[str, Any]:
    """Time to ``target`` test accuracy (2xH, real MNIST) of one system."""
    import torch

    torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    system = all_systems()[spec["system"]]
    res: dict[str, Any] = {"system": system.name, "library": system.library, "width": spec["width"],
                           "target": spec["target"], "max_epochs": spec["max_epochs"]}
    torch.manual_seed(0)
    data = _load_data(spec["data"], device)
    if spec.get("train_size"):
        data["train_x"], data["train_y"] = data["train_x"][: spec["train_size"]], data["train_y"][: spec["train_size"]]
    if system.library.startswith("bbb"):
        res.update(_tta_ours(spec, {k: v for k, v in data.items() if k != "source"}, device))
        res["version"] = __import__("bbb").__version__
    else:
        try:
            system.build(spec["width"], device)
        except NotInstalled as e:
            return {**res, "status": "not installed", "detail": str(e)}
        res["version"] = system.version
        res.update(_tta_peer(spec, system, data, device))
    res["status"] = "ok"
    return res


def child_epoch(spec: dict[str, Any]) -> dict[str, Any]:
    """Seconds per epoch of ``bbb train`` itself: :func:`bbb.runs.train` for ``epochs`` epochs
    of one recipe on the data, its ``metrics.csv`` ``seconds`` per epoch (training, the
    validation error, the checkpoints: what ``bbb train`` records). Epoch 1 includes the engine's
    compilation; the last epoch is the steady one."""
    import torch

    import bbb
    import bbb.runs as T
    import bbb.runs.loop as L

    torch.set_num_threads(spec["threads"])
    device = torch.device(spec["device"])
    settings = {**spec["recipe"], "hidden": [spec["width"], spec["width"]], "epochs": spec["epochs"],
                "device": device.type}
    res: dict[str, Any] = {"system": spec["system"], "width": spec["width"], "threads": torch.get_num_threads(),
                           "version": bbb.__version__, "epochs": spec["epochs"]}
    cfg = T.TrainConfig.from_dict(settings)
    res["recipe"] = {k: v for k, v in cfg.to_dict().items()
                     if k in ("method", "prior", "pi", "sigma1", "sigma2", "kl", "estimator", "samples", "optimizer",
                              "momentum", "lr", "lr_schedule", "kl_weighting", "batch_size", "rho_init",
                              "mu_init_scale", "hidden", "epochs")}
    if cfg.optimizer != "sgd":
        res["recipe"].pop("momentum")
    torch.manual_seed(0)
    data = {k: v for k, v in _load_data(spec["data"], device).items()
            if k in ("train_x", "train_y", "val_x", "val_y", "test_x", "test_y")}
    if spec.get("train_size"):
        data["train_x"], data["train_y"] = data["train_x"][: spec["train_size"]], data["train_y"][: spec["train_size"]]
    made: list[Any] = []
    make = L.make_optimizer

    def spy(cfg: Any, model: Any, *args: Any, **kwargs: Any) -> Any:  # did the engine run fused, compiled?
        made.append(make(cfg, model, *args, **kwargs))
        return made[-1]

    L.make_optimizer = spy
    try:
        with tempfile.TemporaryDirectory(prefix="bbb-bench-epoch-") as run_dir:
            t0 = time.perf_counter()
            T.train(cfg, Path(run_dir) / "run", data=data, quiet=True, log=lambda s: None)
            res["wall_seconds"] = time.perf_counter() - t0
            rows = T.read_metrics(Path(run_dir) / "run")
    finally:
        L.make_optimizer = make
    seconds = [r["seconds"] for r in rows]
    engine = engine_info(made[0]) if made else None
    n = int(data["train_x"].shape[0])
    res.update(epoch_seconds=seconds, seconds_epoch1=seconds[0] if seconds else None,
               seconds_per_epoch=seconds[-1] if len(seconds) > 1 else None, train_images=n,
               minibatches=math.ceil(n / cfg.batch_size), val_images=int(data["val_x"].shape[0]),
               val_error=rows[-1]["val_error"] if rows else None, engine=engine)
    text = engine_text(engine)
    if text:
        res["version"] += f" ({text})"
    res["status"] = "ok"
    return res


def child_main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    # every child (floors, peers and ours alike) runs with the allocator settings `bbb` uses,
    # so that the ratios compare the systems and not glibc's heap trimming (bbb.engine.malloc)
    from bbb.engine import tune_malloc

    tune_malloc()
    try:
        kind = spec["kind"]
        res = child_tta(spec) if kind == "tta" else child_epoch(spec) if kind == "epoch" else child_speed(spec)
    except Exception as e:  # noqa: BLE001 - reported in the table, never a crash of the bench
        res = {"system": spec.get("system"), "width": spec.get("width"), "status": "error",
               "detail": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300],
               "traceback": traceback.format_exc()[-2000:]}
    print(RESULT_MARK + json.dumps(res), flush=True)
    return 0
