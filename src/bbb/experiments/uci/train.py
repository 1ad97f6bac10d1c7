"""One job of the UCI benchmark: a population of BBB networks, one member per split, trained on
one dataset with one variant in one phase, scored at the schedule's checkpoints.

The members of a population never interact (:class:`bbb.nn.BayesPopulation`): member s sees only
split s's rows, standardised with that split's fitting rows, and has its own learned noise. The
job saves its state at every checkpoint (and every ``SAVE_SECONDS``) and resumes from it exactly
(the engine's counter noise, the data order's generator, the optimiser's moments).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...data import Standardizer
from ...data.uci import UCIData, validation_split
from ...distributions import GaussianPrior, inverse_softplus, normal_log_prob, softplus
from ...elbo import HeteroscedasticGaussian
from ...engine import Engine
from ...io import atomic_torch_save, atomic_write_json
from ...nn import BayesPopulation, SampleRecorder, model_kl, sampling
from ...uncertainty import gaussian_mixture_log_prob, regression_metrics
from .settings import NOISE_SCALES, Phase, Schedule, UCIConfig, Variant

__all__ = ["Job", "JobData", "PopulationModel", "job_data", "run_job", "score", "full_metrics", "SAVE_SECONDS"]

#: a running job also saves its state after this many seconds without a checkpoint
SAVE_SECONDS = 60.0

#: samples drawn per chunk when scoring (bounds the memory of k x members x rows)
CHUNK = 25


@dataclass(frozen=True)
class Job:
    """What one population trains: ``targets`` (test phase only) maps a split to the (epoch,
    noise scale) pairs at which the full metrics (coverage) are computed."""

    dataset: str
    variant: Variant
    phase: Phase
    splits: tuple[int, ...]
    schedule: Schedule
    targets: dict[int, list[tuple[int, float]]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.dataset}-{self.variant.name}-{self.phase.value}"


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
    for k in splits:
        xtr, ytr, xte, yte = data.split(k)
        if phase is Phase.VALIDATION:
            fit, val = validation_split(xtr.shape[0], 0.2, seed=seed * 1000 + k)
            xtr, ytr, xte, yte = xtr[fit], ytr[fit], xtr[val], ytr[val]
        sx, sy = Standardizer.fit(xtr), Standardizer.fit(ytr)
        parts.append((sx.transform(xtr), sy.transform(ytr), sx.transform(xte), sy.transform(yte),
                      torch.as_tensor(sy.mean, dtype=torch.float64).reshape(()),
                      torch.as_tensor(sy.std, dtype=torch.float64).reshape(())))
    cols = list(zip(*parts))
    x_fit, y_fit, x_eval, y_eval = (torch.stack(c).float() for c in cols[:4])
    return JobData(x_fit, y_fit, x_eval, y_eval, torch.stack(cols[4]), torch.stack(cols[5]))


class PopulationModel:
    """The population, its noise and its engine for one variant."""

    def __init__(self, variant: Variant, members: int, features: int, hidden: int, cfg: UCIConfig,
                 seed: int) -> None:
        torch.manual_seed(seed)
        self.hetero = variant.likelihood == "heteroscedastic"
        self.pop = BayesPopulation(features, [hidden], 2 if self.hetero else 1, bayesian=members,
                                   prior=GaussianPrior(cfg.prior_sigma), estimator=variant.estimator)
        self.lik = HeteroscedasticGaussian() if self.hetero else None
        raw = float(inverse_softplus(float(cfg.noise_init)))
        self.raw_noise = torch.nn.Parameter(torch.full((members,), raw))
        extra = [] if self.hetero else [self.raw_noise]
        self.engine = Engine(self.pop.bayes, "adam", lr=cfg.lr, seed=seed, params=extra,
                             fused=None if variant.estimator == "reparam" else False)

    def mean_sd(self, out: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, noise sd) of outputs (..., S, R, out) in standardised units."""
        if self.lik is not None:
            return self.lik.split(out)
        return out[..., 0], softplus(self.raw_noise).view(-1, 1).expand(out.shape[:-1])

    def state(self) -> dict[str, Any]:
        return {"pop": self.pop.state_dict(), "raw_noise": self.raw_noise.detach().clone(),
                "engine": self.engine.state_dict()}

    def load(self, st: dict[str, Any]) -> None:
        self.pop.load_state_dict(st["pop"])
        with torch.no_grad():
            self.raw_noise.copy_(st["raw_noise"])
        self.engine.load_state_dict(st["engine"])


def _nll(model: PopulationModel, xb: Tensor, yb: Tensor) -> Tensor:
    mean, sd = model.mean_sd(model.pop(xb))
    return -normal_log_prob(yb, mean, sd).sum()


@torch.no_grad()
def _predict(model: PopulationModel, x: Tensor, samples: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """k sampled (mean, noise sd) per member and row: (k, S, R) each, float64."""
    means, sds = [], []
    with sampling(model.pop, "sample"), SampleRecorder(generator):
        for start in range(0, samples, CHUNK):
            k = min(CHUNK, samples - start)
            m, s = model.mean_sd(model.pop(x, num_samples=k))
            means.append(m.double())
            sds.append(s.double())
    return torch.cat(means), torch.cat(sds)


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


def run_job(job: Job, data: UCIData, cfg: UCIConfig, folder: Path,
            progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Train and score ``job`` (resuming from ``folder/<job>.state.pt``), write
    ``folder/<job>.json`` and return its content."""
    done = folder / f"{job.name}.json"
    state_path = folder / f"{job.name}.state.pt"
    jd = job_data(data, job.splits, job.phase, cfg.seed)
    members, n, d = jd.x_fit.shape
    seed = cfg.seed * 1_000_003 + zlib.crc32(job.name.encode())
    model = PopulationModel(job.variant, members, d, cfg.hidden_for(job.dataset), cfg, seed)
    order = torch.Generator().manual_seed(seed)
    sched = job.schedule
    batch = min(sched.batch_size, n)
    steps = math.ceil(n / batch)
    record: dict[str, Any] = {"epochs": [], "scores": [], "full": {}}
    epoch, elapsed = 0, 0.0
    if state_path.is_file():
        st = torch.load(state_path, map_location="cpu", weights_only=True)
        model.load(st["model"])
        order.set_state(st["order"])
        epoch, elapsed, record = int(st["epoch"]), float(st["elapsed"]), st["record"]
        if progress is not None:
            progress(epoch)
    start, last_save = time.perf_counter(), time.perf_counter()
    eval_gen = torch.Generator()

    def save() -> None:
        atomic_torch_save(state_path, {"model": model.state(), "order": order.get_state(), "epoch": epoch,
                                       "elapsed": elapsed + time.perf_counter() - start, "record": record})

    while epoch < sched.epochs:
        model.pop.train()
        with model.engine.sampling():
            perm = torch.argsort(torch.rand(members, n, generator=order), dim=1)
            for i in range(steps):
                idx = perm[:, i * batch:(i + 1) * batch]
                xb = torch.gather(jd.x_fit, 1, idx.unsqueeze(-1).expand(-1, -1, d))
                yb = torch.gather(jd.y_fit, 1, idx)
                # uniform KL weighting: each minibatch carries KL / M, the epoch the whole KL
                loss = _nll(model, xb, yb) + model_kl(model.pop.bayes) * (idx.shape[1] / n)
                model.engine.zero_grad()
                loss.backward()
                model.engine.step()
        epoch += 1
        if progress is not None:
            progress(1)
        if epoch in sched.checkpoints:
            model.pop.eval()
            eval_gen.manual_seed(cfg.seed * 1_000_003 + epoch)
            means, sds = _predict(model, jd.x_eval, cfg.samples, eval_gen)
            record["epochs"].append(epoch)
            record["scores"].append(score(means, sds, jd))
            for j, split in enumerate(job.splits):
                for e, c in job.targets.get(split, []):
                    if e == epoch:
                        record["full"][f"{split}:{e}:{c:g}"] = full_metrics(means, sds, jd, j, c)
            save()
            last_save = time.perf_counter()
        elif time.perf_counter() - last_save > SAVE_SECONDS:
            save()
            last_save = time.perf_counter()
    result = {"dataset": job.dataset, "variant": job.variant.name, "phase": job.phase.value,
              "splits": list(job.splits), "batch_size": batch, "noise_scales": list(NOISE_SCALES),
              "seconds": round(elapsed + time.perf_counter() - start, 1), **record}
    atomic_write_json(done, result)
    state_path.unlink(missing_ok=True)
    return result
