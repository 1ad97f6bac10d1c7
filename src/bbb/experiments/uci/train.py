"""One job of the UCI benchmark: a population of networks of one method's variant
(:mod:`~bbb.experiments.uci.models`), one member per (split, grid point), trained on one dataset
in one phase, scored at the schedule's checkpoints.

The members of a population never interact: a member sees only its split's rows, standardised
with that split's fitting rows, and trains with its own grid point and its own random numbers
(:mod:`~bbb.experiments.uci.streams`, keyed by :func:`network_key`: initialisation, data order,
weight noise or dropout masks, the predictive's samples), so its scores are the same whatever
trains beside it (other splits, grid points, methods, datasets, workers). The job saves its state
at every checkpoint (and every ``SAVE_SECONDS``) and resumes from it exactly (the parameters, the
optimiser's moments; the random numbers are a function of the epoch and step).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...data import Standardizer
from ...data.uci import UCIData, validation_split
from ...errors import UserError
from ...io import atomic_torch_save, atomic_write_json
from ...runs.jobs import read_json
from ...uncertainty import gaussian_mixture_log_prob, regression_metrics
from .models import build_regressor
from .settings import (
    DROPOUT_NOISE_SDS,
    LAPLACE_NOISE_SCALES,
    NOISE_SCALES,
    Phase,
    Schedule,
    Setting,
    UCIConfig,
    Variant,
    copies_of,
)
from .streams import ORDER, TRAIN, MemberStreams, eval_stream, member_key

__all__ = ["Job", "JobData", "job_data", "run_job", "score", "full_metrics", "scales_of", "SAVE_SECONDS",
           "network_key", "job_streams"]

#: a running job also saves its state after this many seconds without a checkpoint
SAVE_SECONDS = 60.0
#: the random numbers a saved state continues (2: per network, :mod:`~bbb.experiments.uci.streams`)
STATE_STREAMS = 2


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
    (:data:`DROPOUT_NOISE_SDS`, standardised units), for the Laplace a multiplier of its marginal
    likelihood's noise sd (:data:`LAPLACE_NOISE_SCALES`), else a multiplier of the noise as trained
    (:data:`NOISE_SCALES`)."""
    if variant.likelihood == "laplace":
        return LAPLACE_NOISE_SCALES
    return DROPOUT_NOISE_SDS if variant.likelihood == "fixed" else NOISE_SCALES


def network_key(dataset: str, variant: Variant, phase: Phase, split: int, setting: Setting, copy: int,
                seed: int) -> int:
    """The key of one network's random numbers: its identity (dataset, method, variant, phase,
    split, grid point by value, ensemble copy, seed) and nothing else."""
    return member_key("uci", dataset, variant.method.value, variant.name, phase.value, split,
                      repr(sorted(asdict(setting).items())), copy, seed)


def job_streams(job: Job, seed: int, pad: int = 0) -> MemberStreams:
    """The streams of a job's networks in the population's order (network ``e * members + m``
    is copy e of member m), and ``pad`` networks after them (copy -1, -2, ...; see :func:`run_job`)."""
    copies = copies_of(job.variant)
    split, g = job.members[0]
    return MemberStreams([network_key(job.dataset, job.variant, job.phase, split, job.variant.grid[g], e, seed)
                          for e in range(copies) for split, g in job.members]
                         + [network_key(job.dataset, job.variant, job.phase, split, job.variant.grid[g], -1 - i, seed)
                            for i in range(pad)])


def refuse_replacing(path: Path, members: Sequence[Sequence[int]] | None, job: Job) -> None:
    """Refuse to train ``job`` over ``path``, a job's file or state of (split, grid point)
    ``members``, where it holds splits ``job`` leaves out (an earlier call's ``--splits``):
    training would replace them (a one-line :class:`~bbb.errors.UserError`)."""
    kept = sorted({int(m[0]) for m in members or ()} - set(job.splits))
    if kept:
        both = " ".join(map(str, sorted(set(kept) | set(job.splits))))
        raise UserError(f"{path} holds split(s) {', '.join(map(str, kept))} that this call's --splits leave out; "
                        f"training would replace them: give --splits {both} (a split's rows do not depend on the "
                        "others), or another --out")


def run_job(job: Job, data: UCIData, cfg: UCIConfig, folder: Path,
            progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Train and score ``job`` (resuming from ``folder/<job>.state.pt``), write
    ``folder/<job>.json`` and return its content.

    A population of one network trains beside a second one (its own key, its scores dropped):
    torch multiplies a batch of one matrix by another kernel (matrix-vector products) than a
    batch of several, so a lone network would round differently from the same network beside
    others."""
    done = folder / f"{job.name}.json"
    state_path = folder / f"{job.name}.state.pt"
    members = [list(m) for m in job.members]
    if done.is_file():
        refuse_replacing(done, (read_json(done) or {}).get("members"), job)
    copies = copies_of(job.variant)
    pad = 1 if len(job.members) * copies == 1 else 0
    jd = job_data(data, job.splits + job.splits[:pad], job.phase, cfg.seed)
    _, n, d = jd.x_fit.shape
    x_fit, y_fit = jd.x_fit.repeat(copies, 1, 1), jd.y_fit.repeat(copies, 1)
    x_range = (x_fit.amax(1) - x_fit.amin(1)) if job.variant.estimator == "ensemble" else None
    streams = job_streams(job, cfg.seed, pad)
    model = build_regressor(job.variant, job.settings + job.settings[:pad], d, cfg.hidden_for(job.dataset),
                            noise_init=cfg.noise_init, adversarial_eps=cfg.adversarial_eps, x_range=x_range,
                            streams=streams, n_fit=n)
    sched = job.schedule
    batch = min(sched.batch_size, n)
    steps = math.ceil(n / batch)
    scales = scales_of(job.variant)
    record: dict[str, Any] = {"epochs": [], "scores": [], "full": {}}
    epoch, elapsed = 0, 0.0
    if state_path.is_file():
        st = torch.load(state_path, map_location="cpu", weights_only=True)
        if st.get("streams") != STATE_STREAMS:
            raise UserError(f"{state_path} was saved by an older bbb (one random stream per job, not per network); "
                            "delete it to train that job again")
        refuse_replacing(state_path, st.get("members"), job)
        if st.get("members", members) == members:  # (else of fewer splits: this job trains them anew beside others)
            model.load(st["model"])
            epoch, elapsed, record = int(st["epoch"]), float(st["elapsed"]), st["record"]
            if progress is not None:
                progress(epoch)
    start, last_save = time.perf_counter(), time.perf_counter()

    def save() -> None:
        atomic_torch_save(state_path, {"model": model.state(), "streams": STATE_STREAMS, "members": members,
                                       "epoch": epoch, "elapsed": elapsed + time.perf_counter() - start,
                                       "record": record})

    while epoch < sched.epochs:
        perm = streams.order(ORDER, epoch, n)
        for i in range(steps):
            idx = perm[:, i * batch:(i + 1) * batch]
            xb = torch.gather(x_fit, 1, idx.unsqueeze(-1).expand(-1, -1, d))
            yb = torch.gather(y_fit, 1, idx)
            model.train_step(xb, yb, n, model.draw(streams, TRAIN, epoch * steps + i, 1, batch))
        epoch += 1
        if progress is not None:
            progress(1)
        if epoch in sched.checkpoints:
            model.prepare(jd.x_fit, jd.y_fit)  # a post-hoc posterior (the Laplace's), on the fitting rows only
            means, sds = model.predict(jd.x_eval, cfg.samples, streams, eval_stream(epoch))
            record["epochs"].append(epoch)
            got = {**score(means, sds, jd, scales), **model.fitted()}
            record["scores"].append({k: v[:len(job.members)] for k, v in got.items()})
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
              "phase": job.phase.value, "splits": list(job.splits), "members": members,
              "grid": [asdict(g) for g in job.variant.grid], "batch_size": batch, "noise_scales": list(scales),
              "seconds": round(elapsed + time.perf_counter() - start, 1), **record}
    atomic_write_json(done, result)
    state_path.unlink(missing_ok=True)
    return result
