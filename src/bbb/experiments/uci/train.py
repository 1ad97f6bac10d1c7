"""One job of the UCI benchmark: a population of networks of one method's variant
(:mod:`~bbb.experiments.uci.models`), one member per (split, grid point), trained on one dataset
in one phase, scored at the schedule's checkpoints.

The members of a population never interact: a member sees only its split's rows, standardised
with that split's fitting rows, and trains with its own grid point. The job saves its state at
every checkpoint (and every ``SAVE_SECONDS``) and resumes from it exactly (the random streams,
the data order's generator, the optimiser's moments).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...data import Standardizer
from ...data.uci import UCIData, validation_split
from ...io import atomic_torch_save, atomic_write_json
from ...uncertainty import gaussian_mixture_log_prob, regression_metrics
from .models import build_regressor
from .settings import DROPOUT_NOISE_SDS, ENSEMBLE_SIZE, NOISE_SCALES, Phase, Schedule, Setting, UCIConfig, Variant

__all__ = ["Job", "JobData", "job_data", "run_job", "score", "full_metrics", "scales_of", "SAVE_SECONDS"]

#: a running job also saves its state after this many seconds without a checkpoint
SAVE_SECONDS = 60.0


@dataclass(frozen=True)
class Job:
    """What one population trains: ``members`` its (split, index into the variant's grid)
    pairs (validation: every split with every grid point; test: each split once, at the grid
    point its validation chose); ``targets`` (test phase only) maps a split to the (epoch, noise
    scale) pairs at which the full metrics (coverage) are computed."""

    dataset: str
    variant: Variant
    phase: Phase
    members: tuple[tuple[int, int], ...]
    schedule: Schedule
    targets: dict[int, list[tuple[int, float]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.dataset}-{self.variant.name}-{self.phase.value}"

    @property
    def splits(self) -> tuple[int, ...]:
        """Each member's split."""
        return tuple(s for s, _ in self.members)

    @property
    def settings(self) -> list[Setting]:
        """Each member's grid point."""
        return [self.variant.grid[g] for _, g in self.members]


@dataclass
class JobData:
    """The rows of every member, standardised per member: fit (S, n, D) / (S, n), scored (S, m, D)
    / (S, m), and each member's target shift and scale (the fitting rows' mean and sd)."""

    x_fit: Tensor
    y_fit: Tensor
    x_eval: Tensor
    y_eval: Tensor
    shift: Tensor
    scale: Tensor


def job_data(data: UCIData, splits: Sequence[int], phase: Phase, seed: int = 0) -> JobData:
    """The members' rows: in the validation phase 80% of each split's training rows fit and the
    other 20% are scored (a seeded partition per split); in the test phase the training rows fit
    and the test rows are scored. Inputs and target standardised with the fitting rows."""
    parts: list[tuple[Tensor, ...]] = []
    cache: dict[int, tuple[Tensor, ...]] = {}
    for k in splits:
        if k in cache:
            parts.append(cache[k])
            continue
        xtr, ytr, xte, yte = data.split(k)
        if phase is Phase.VALIDATION:
            fit, val = validation_split(xtr.shape[0], 0.2, seed=seed * 1000 + k)
            xtr, ytr, xte, yte = xtr[fit], ytr[fit], xtr[val], ytr[val]
        sx, sy = Standardizer.fit(xtr), Standardizer.fit(ytr)
        parts.append((sx.transform(xtr), sy.transform(ytr), sx.transform(xte), sy.transform(yte),
                      torch.as_tensor(sy.mean, dtype=torch.float64).reshape(()),
                      torch.as_tensor(sy.std, dtype=torch.float64).reshape(())))
        cache[k] = parts[-1]
    cols = list(zip(*parts))
    x_fit, y_fit, x_eval, y_eval = (torch.stack(c).float() for c in cols[:4])
    return JobData(x_fit, y_fit, x_eval, y_eval, torch.stack(cols[4]), torch.stack(cols[5]))


def score(means: Tensor, sds: Tensor, data: JobData, scales: Sequence[float] = NOISE_SCALES) -> dict[str, Any]:
    """Per member: RMSE and, for each noise scale, the mean test log-likelihood of the k-sample
    Gaussian mixture, both in the target's units; the mean noise sd (target units)."""
    k, s, r = means.shape
    y = data.y_eval.double()
    pred = means.mean(0)
    rmse = ((pred - y) ** 2).mean(1).sqrt() * data.scale
    lls = []
    for c in scales:
        lp = gaussian_mixture_log_prob(y.reshape(-1), means.reshape(k, -1), (sds * c).reshape(k, -1))
        lls.append(lp.view(s, r).mean(1) - torch.log(data.scale))
    return {"rmse": rmse.tolist(), "ll": torch.stack(lls, 1).tolist(),
            "noise_sd": (sds.mean((0, 2)) * data.scale).tolist()}


def full_metrics(means: Tensor, sds: Tensor, data: JobData, member: int, scale: float) -> dict[str, float]:
    """Every regression metric of one member at one noise scale (target units)."""
    return regression_metrics(means[:, member], sds[:, member] * scale, data.y_eval[member].double(),
                              shift=float(data.shift[member]), scale=float(data.scale[member]))


def scales_of(variant: Variant) -> tuple[float, ...]:
    """What validation chooses the predictive noise from: for MC dropout its noise sd
    (:data:`DROPOUT_NOISE_SDS`, standardised units), else a multiplier of the noise as trained
    (:data:`NOISE_SCALES`)."""
    return DROPOUT_NOISE_SDS if variant.likelihood == "fixed" else NOISE_SCALES


def run_job(job: Job, data: UCIData, cfg: UCIConfig, folder: Path,
            progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Train and score ``job`` (resuming from ``folder/<job>.state.pt``), write
    ``folder/<job>.json`` and return its content."""
    done = folder / f"{job.name}.json"
    state_path = folder / f"{job.name}.state.pt"
    jd = job_data(data, job.splits, job.phase, cfg.seed)
    members, n, d = jd.x_fit.shape
    seed = cfg.seed * 1_000_003 + zlib.crc32(job.name.encode())
    copies = ENSEMBLE_SIZE if job.variant.estimator == "ensemble" else 1
    x_fit, y_fit = jd.x_fit.repeat(copies, 1, 1), jd.y_fit.repeat(copies, 1)
    x_range = (x_fit.amax(1) - x_fit.amin(1)) if copies > 1 else None
    model = build_regressor(job.variant, job.settings, d, cfg.hidden_for(job.dataset), noise_init=cfg.noise_init,
                            adversarial_eps=cfg.adversarial_eps, x_range=x_range, seed=seed)
    nets = members * model.copies
    order = torch.Generator().manual_seed(seed)
    sched = job.schedule
    batch = min(sched.batch_size, n)
    steps = math.ceil(n / batch)
    scales = scales_of(job.variant)
    record: dict[str, Any] = {"epochs": [], "scores": [], "full": {}}
    epoch, elapsed = 0, 0.0
    if state_path.is_file():
        st = torch.load(state_path, map_location="cpu", weights_only=True)
        model.load(st["model"])
        order.set_state(st["order"])
        torch.set_rng_state(st["rng"])
        epoch, elapsed, record = int(st["epoch"]), float(st["elapsed"]), st["record"]
        if progress is not None:
            progress(epoch)
    start, last_save = time.perf_counter(), time.perf_counter()
    eval_gen = torch.Generator()

    def save() -> None:
        atomic_torch_save(state_path, {"model": model.state(), "order": order.get_state(), "rng": torch.get_rng_state(),
                                       "epoch": epoch, "elapsed": elapsed + time.perf_counter() - start,
                                       "record": record})

    while epoch < sched.epochs:
        perm = torch.argsort(torch.rand(nets, n, generator=order), dim=1)
        for i in range(steps):
            idx = perm[:, i * batch:(i + 1) * batch]
            xb = torch.gather(x_fit, 1, idx.unsqueeze(-1).expand(-1, -1, d))
            yb = torch.gather(y_fit, 1, idx)
            model.train_step(xb, yb, n)
        epoch += 1
        if progress is not None:
            progress(1)
        if epoch in sched.checkpoints:
            eval_gen.manual_seed(cfg.seed * 1_000_003 + epoch)
            means, sds = model.predict(jd.x_eval, cfg.samples, eval_gen)
            record["epochs"].append(epoch)
            record["scores"].append(score(means, sds, jd, scales))
            for j, split in enumerate(job.splits):
                for e, c in job.targets.get(split, []):
                    if e == epoch:
                        record["full"][f"{split}:{e}:{c:g}"] = full_metrics(means, sds, jd, j, c)
            save()
            last_save = time.perf_counter()
        elif time.perf_counter() - last_save > SAVE_SECONDS:
            save()
            last_save = time.perf_counter()
    result = {"dataset": job.dataset, "variant": job.variant.name, "method": job.variant.method.value,
              "phase": job.phase.value, "splits": list(job.splits), "members": [list(m) for m in job.members],
              "grid": [asdict(g) for g in job.variant.grid], "batch_size": batch, "noise_scales": list(scales),
              "seconds": round(elapsed + time.perf_counter() - start, 1), **record}
    atomic_write_json(done, result)
    state_path.unlink(missing_ok=True)
    return result
