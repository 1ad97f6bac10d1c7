"""One job of ``bbb reproduce lora``: the LoRA adapters of one method on one few-shot set (one
backbone, task, K and seed), trained at each of its settings, then scored.

A job in the validation phase trains on 80% of the few-shot set (the held-out slice: 20%, at least
one image per class) and scores that slice; a job in the test phase trains on all of it, at the
setting its validation chose, and scores the test and out-of-distribution sets, with the NLL/ECE
curve along training and the reliability bins."""

from __future__ import annotations

import contextlib
import copy
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor, nn

from ...errors import UserError
from ...uncertainty import (
    auroc,
    brier_score,
    error_rate,
    expected_calibration_error,
    mutual_information,
    negative_log_likelihood,
    predictive_entropy,
    predictive_probs,
    reliability_bins,
)
from .backbones import LORA_TARGETS, NUM_CLASSES, Backbone, TaskData
from .settings import (
    ENSEMBLE_SIZE,
    IVON_HESS_INIT,
    IVON_WEIGHT_DECAY,
    LAPLACE_HESSIAN,
    LAPLACE_PREDICT_BATCH,
    MC_DROPOUT_P,
    TEST_SAMPLES,
    VAL_FRACTION,
    Arch,
    LoraMethod,
    Phase,
    Schedule,
    Setting,
    Task,
)

__all__ = ["Job", "few_shot", "run_job", "scores", "adapters_of", "map_job", "ADAPTERS_KEY",
           "ADAPTERS_SUFFIX"]

#: a ``map`` test job's result carries its trained adapters under this key (the runner stores them
#: beside the job's file for the ``laplace`` job: the same network, not trained again)
ADAPTERS_KEY = "_adapters"
#: the file beside a ``map`` test job's JSON that holds its adapters (``jobs/<job><suffix>``)
ADAPTERS_SUFFIX = ".adapters.pt"

#: the methods trained by Bayes by Backprop's ELBO
ELBO_METHODS = (LoraMethod.BBB_A, LoraMethod.BBB_AB)
#: the methods whose adapters carry a posterior in their layers (sampled at test, and at the mean)
BAYES = (*ELBO_METHODS, LoraMethod.IVON)


@dataclass(frozen=True)
class Job:
    arch: Arch
    task: Task
    shots: int
    seed: int
    method: LoraMethod
    phase: Phase
    settings: tuple[Setting, ...]

    @property
    def name(self) -> str:
        return f"{self.arch}-{self.task}-k{self.shots}-s{self.seed}-{self.method}-{self.phase}"

    @property
    def group(self) -> tuple[str, str, int]:
        return (str(self.arch), str(self.task), self.shots)


def few_shot(data: TaskData, job: Job) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``shots`` images per class drawn from the pool (seeded by task, K and seed), split into
    the training part and the held-out slice (``VAL_FRACTION``, at least one per class):
    ``(train_x, train_y, val_x, val_y)``. The test phase trains on both parts."""
    g = torch.Generator().manual_seed(10_000 * job.seed + 100 * job.shots + (0 if job.task is Task.DIGITS else 1))
    n_val = max(1, round(VAL_FRACTION * job.shots))
    tr, va = [], []
    for c in range(NUM_CLASSES):
        idx = (data.pool_y == c).nonzero().flatten()
        pick = idx[torch.randperm(len(idx), generator=g)[:job.shots]]
        va.append(pick[:n_val])
        tr.append(pick[n_val:])
    t, v = torch.cat(tr), torch.cat(va)
    return data.pool[t], data.pool_y[t], data.pool[v], data.pool_y[v]


def _lora_model(bb: Backbone, method: LoraMethod, rank: int, alpha: int, init_seed: int,
                setting: Setting) -> nn.Module:
    """A fresh copy of the frozen body with peft LoRA adapters (seeded initialisation); for BBB the
    adapters converted by :func:`bbb.bayesianize` (A, or A and B; flipout, as BLoB: in training its
    signs per token of the ViT's sequences, as BLoB's code; predictions draw whole adapters; the Gaussian
    prior of ``setting``; the means start at peft's initialisation, sigma at bbb's default); for
    IVON A and B converted with the reparameterisation estimator (IVON's Hessian estimate needs each
    sampled weight's gradient; sigma at the start is IVON's). The adapters are every trainable
    parameter for each method (peft freezes the body, the head included: it carries adapters), so
    IVON, which trains Bayesian weights only, trains what the other methods train."""
    from peft import LoraConfig, get_peft_model

    body = copy.deepcopy(bb.body)
    torch.manual_seed(init_seed)
    cfg = LoraConfig(r=rank, lora_alpha=alpha, target_modules=LORA_TARGETS[bb.arch],
                     lora_dropout=MC_DROPOUT_P if method is LoraMethod.MC_DROPOUT else 0.0)
    model: nn.Module = get_peft_model(body, cfg)
    if method in ELBO_METHODS:
        import bbb

        model = bbb.bayesianize(model, prior=bbb.GaussianPrior(setting.prior_sigma), estimator="flipout",
                                lora="A" if method is LoraMethod.BBB_A else "AB")
    elif method is LoraMethod.IVON:
        import bbb

        model = bbb.bayesianize(model, estimator="reparam", lora="AB")  # the prior is IVON's own
    return model


def _prior_l2(model: nn.Module, sigma: float) -> Tensor:
    """-log N(theta; 0, sigma^2) of the trainable adapter weights, up to a constant (MAP's L2)."""
    return sum((p.pow(2).sum() for p in model.parameters() if p.requires_grad), torch.zeros(())) / (2 * sigma ** 2)


class _Objective:
    """The per-example loss of one method at one setting on a training set of ``n`` images (IVON's:
    the mean NLL, its prior being in its update)."""

    def __init__(self, model: nn.Module, method: LoraMethod, setting: Setting, n: int, batch: int) -> None:
        self.model, self.method, self.setting, self.n = model, method, setting, n
        self.elbo = None
        if method in ELBO_METHODS:
            import bbb

            # loss = NLL summed over the batch + beta * KL / M; divided by the batch: NLL/B + kl_weight * KL / (M B),
            # M B being N rounded up to whole minibatches (every minibatch of the stream is full)
            self.elbo = bbb.ELBO(model, "categorical", num_batches=max(1, math.ceil(n / batch)),
                                 kl_weighting="uniform", beta=setting.kl_weight)

    def __call__(self, x: Tensor, y: Tensor) -> Tensor:
        if self.elbo is not None:
            return self.elbo(x, y).loss / len(y)
        loss = nn.functional.cross_entropy(self.model(x), y)
        if self.method is LoraMethod.MAP:
            loss = loss + _prior_l2(self.model, self.setting.prior_sigma) / self.n
        return loss


@torch.no_grad()
def predictive_logits(models: list[nn.Module], method: LoraMethod, x: Tensor, seed: int,
                      samples: int = TEST_SAMPLES, mode: str = "sample", batch: int = 500) -> Tensor:
    """The method's predictive as logits (k, B, C): one network (MLE, MAP), the ensemble's members,
    ``samples`` dropout masks (MC dropout: only peft's lora_dropout on) or ``samples`` adapters
    drawn from the posterior (BBB, IVON: :func:`bbb.uncertainty.predict`; ``mode="mean"``: the mean)."""
    if method in BAYES:
        from ...uncertainty import predict

        return predict(models[0], x, num_samples=samples, mode=mode, batch_size=batch, generator=seed)
    outs = []
    for m in models:
        m.eval()
        k = 1
        if method is LoraMethod.MC_DROPOUT:
            k = samples
            for name, mod in m.named_modules():
                if name.endswith("lora_dropout.default"):
                    mod.train()
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            for _ in range(k):
                outs.append(torch.cat([m(x[i:i + batch]) for i in range(0, len(x), batch)]))
        m.eval()
    return torch.stack(outs)


def scores(logits: Tensor, labels: Tensor) -> dict[str, float]:
    """Accuracy, ECE (15 bins), NLL of the averaged probabilities and Brier score."""
    p = predictive_probs(logits.double())
    return {"acc": 1.0 - error_rate(p, labels), "ece": expected_calibration_error(p, labels, 15),
            "nll": negative_log_likelihood(p, labels), "brier": brier_score(p, labels)}


def _train(models: list[nn.Module], objectives: list[_Objective], x: Tensor, y: Tensor, sched: Schedule,
           seed: int, progress: Callable[[int], None], on_step: Callable[[int], None] | None = None) -> None:
    """``sched.steps`` AdamW steps (no weight decay; MAP's prior is in its loss) on minibatches of
    shuffled epochs, the parameter groups of :func:`bbb.lora.optim_groups` (the posteriors' rho at
    10x the learning rate, docs/bayesian_lora.md; every other trainable parameter at ``sched.lr``);
    IVON: as many :class:`bbb.IVON` steps (the setting's lr and ess, one sample a step, noise seeded
    by ``seed``); ``on_step(step)`` before the first step and after the chosen ones."""
    from ...lora import optim_groups

    ivon = _ivon(models, objectives, seed)
    opt = ivon if ivon is not None else torch.optim.AdamW(
        [g for m in models for g in optim_groups(m, sched.lr)], lr=sched.lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    batch = min(sched.batch_size, len(y))
    order: list[int] = []
    for m in models:
        m.train()
    if on_step is not None:
        on_step(0)
    with warnings.catch_warnings():  # BLoB's recipe: flipout's signs per token, as its code draws them
        warnings.filterwarnings("ignore", message=".*flipout estimator flips its noise's signs per position.*",
                                category=UserWarning)
        _steps(models, objectives, x, y, sched, opt, ivon, g, batch, order, progress, on_step)


def _steps(models: list[nn.Module], objectives: list[_Objective], x: Tensor, y: Tensor, sched: Schedule, opt: Any,
           ivon: Any, g: torch.Generator, batch: int, order: list[int], progress: Callable[[int], None],
           on_step: Callable[[int], None] | None) -> None:
    """The training steps of :func:`_train`."""
    done = 0
    for step in range(1, sched.steps + 1):
        if len(order) < batch:
            order += torch.randperm(len(y), generator=g).tolist()
        idx, order = order[:batch], order[batch:]
        with ivon.sampling() if ivon is not None else contextlib.nullcontext():
            loss = sum((obj(x[idx], y[idx]) for obj in objectives), torch.zeros(()))
        opt.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[union-attr]
        opt.step()
        if on_step is not None:
            on_step(step)
        if step % 50 == 0 or step == sched.steps:
            progress((step - done) * len(models))  # an ensemble's members each take the step
            done = step


def _ivon(models: list[nn.Module], objectives: list[_Objective], seed: int) -> Any:
    """IVON's optimiser of the (one) model at its setting, or None for the other methods."""
    if objectives[0].method is not LoraMethod.IVON:
        return None
    from ...ivon import IVON

    (model,), setting = models, objectives[0].setting
    return IVON(model, lr=setting.lr, ess=setting.ess, hess_init=IVON_HESS_INIT, weight_decay=IVON_WEIGHT_DECAY,
                seed=seed)


class _Curve:
    """Test NLL, ECE and accuracy of the method's predictive on the first ``n_curve`` test images
    at ``curve_points`` steps from 0 to the last (called by the training loop after each step)."""

    def __init__(self, models: list[nn.Module], job: Job, data: TaskData, sched: Schedule) -> None:
        self.models, self.job = models, job
        self.x, self.y = data.test[:sched.n_curve], data.test_y[:sched.n_curve]
        self.marks = {round(i * sched.steps / (sched.curve_points - 1)) for i in range(sched.curve_points)}
        self.points: list[dict[str, float]] = []

    def __call__(self, step: int) -> None:
        if step not in self.marks:
            return
        with warnings.catch_warnings():
            if step == 0:  # peft's B = 0 before the first step: bbb's "identical samples" warning is expected
                warnings.filterwarnings("ignore", message=".*B is 0.*", category=UserWarning)
            s = scores(predictive_logits(self.models, self.job.method, self.x, seed=self.job.seed), self.y)
        self.points.append({"step": step, "nll": s["nll"], "ece": s["ece"], "acc": s["acc"]})
        for m in self.models:
            m.train()


def map_job(job: Job) -> Job:
    """The ``map`` job whose network a ``laplace`` job's posterior is of (the same few-shot set and setting)."""
    return replace(job, method=LoraMethod.MAP)


def adapters_of(model: nn.Module) -> dict[str, Tensor]:
    """The trainable parameters (the adapters) of a LoRA model, by name, detached copies."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _laplace(job: Job, bb: Backbone, setting: Setting, tx: Tensor, ty: Tensor, sched: Schedule, rank: int,
             alpha: int, progress: Callable[[int], None], map_adapters: dict[str, Tensor] | None,
             ) -> tuple[nn.Module, Any, dict[str, Any]]:
    """Laplace-LoRA: ``map``'s network at ``setting`` (its adapters from the ``map`` job,
    ``map_adapters``; without them trained here by ``map``'s recipe: the same seed, initialisation,
    batches and steps), then a KFAC Laplace over every adapter parameter (those with requires_grad),
    its prior precision by the marginal likelihood. Returns the network, the fitted posterior and
    what the result records of it."""
    from ...laplace import fit_laplace

    init = 1000 * job.seed + 7
    model = _lora_model(bb, LoraMethod.MAP, rank, alpha, init, setting)
    if map_adapters is not None:
        names = {n for n, p in model.named_parameters() if p.requires_grad}
        if set(map_adapters) != names:
            raise UserError(f"{job.name}: the stored adapters of the map job are not this network's; delete "
                            f"jobs/{map_job(job).name}{ADAPTERS_SUFFIX} to train the MAP network here")
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in names:
                    p.copy_(map_adapters[n])
    else:
        _train([model], [_Objective(model, LoraMethod.MAP, setting, len(ty), sched.batch_size)], tx, ty, sched,
               job.seed, progress)
    model.eval()
    start = time.perf_counter()
    post = fit_laplace(model, (tx, ty), weights="all", likelihood="classification", hessian=LAPLACE_HESSIAN,
                       batch_size=sched.batch_size)
    info = {"prior_precision": post.prior_precision, "map_prior_precision": 1.0 / setting.prior_sigma ** 2,
            "laplace_params": post.n_params, "fit_seconds": round(time.perf_counter() - start, 3),
            "map_reused": map_adapters is not None}
    return model, post, info


def _laplace_logits(post: Any, x: Tensor) -> Tensor:
    """The GLM predictive's probit probabilities as (1, B, C) logits (their log: the scores and
    entropies read them through a softmax, which gives the probabilities back)."""
    probs = post.predict(x, batch_size=LAPLACE_PREDICT_BATCH).double()
    return probs.clamp_min(torch.finfo(probs.dtype).tiny).log().unsqueeze(0)


def _predict(models: list[nn.Module], job: Job, post: Any, x: Tensor) -> Tensor:
    """The job's predictive at ``x`` as logits (k, B, C): the Laplace's where fitted."""
    return predictive_logits(models, job.method, x, seed=job.seed) if post is None else _laplace_logits(post, x)


def run_job(job: Job, bb: Backbone, data: TaskData, sched: Schedule, rank: int, alpha: int,
            progress: Callable[[int], None], map_adapters: dict[str, Tensor] | None = None) -> dict[str, Any]:
    """Train and score one job; returns its JSON-able result (per setting in validation). A
    ``map`` test job's result carries its adapters under :data:`ADAPTERS_KEY` (tensors: the
    runner stores them apart); a ``laplace`` job reuses ``map_adapters`` where given."""
    start = time.perf_counter()
    tx, ty, vx, vy = few_shot(data, job)
    if job.phase is Phase.TEST:
        tx, ty = torch.cat([tx, vx]), torch.cat([ty, vy])
    n_members = ENSEMBLE_SIZE if job.method is LoraMethod.ENSEMBLE else 1
    result: dict[str, Any] = {"job": job.name, "n_train": len(ty), "settings": {}}
    for setting in job.settings:
        init = 1000 * job.seed + 7
        post: Any = None
        extra: dict[str, Any] = {}
        if job.method is LoraMethod.LAPLACE:  # the test phase only (its setting is map's choice)
            model, post, extra = _laplace(job, bb, setting, tx, ty, sched, rank, alpha, progress, map_adapters)
            models, curve = [model], None
        else:
            models = [_lora_model(bb, job.method, rank, alpha, init + j, setting) for j in range(n_members)]
            objectives = [_Objective(m, job.method, setting, len(ty), sched.batch_size) for m in models]
            curve = _Curve(models, job, data, sched) if job.phase is Phase.TEST else None
            _train(models, objectives, tx, ty, sched, job.seed, progress, curve)
        if job.phase is Phase.VALIDATION:
            result["settings"][setting.label()] = {
                **setting.record(), **scores(predictive_logits(models, job.method, vx, seed=job.seed), vy)}
            continue
        if job.method is LoraMethod.MAP:
            result[ADAPTERS_KEY] = adapters_of(models[0])
        logits = _predict(models, job, post, data.test)
        probs = predictive_probs(logits.double())
        row: dict[str, Any] = {**setting.record(), **scores(logits, data.test_y), **extra,
                               "curve": curve.points if curve else [], "confidence": float(probs.max(-1).values.mean())}
        bins = reliability_bins(probs, data.test_y, 15)
        row["bins"] = {"count": bins["count"].tolist(),
                       "conf_sum": (bins["confidence"] * bins["count"]).tolist(),
                       "acc_sum": (bins["accuracy"] * bins["count"]).tolist()}
        in_ent = predictive_entropy(logits.double())
        in_mi = mutual_information(logits.double()) if logits.shape[0] > 1 else None
        for name, ox in data.ood.items():
            ol = _predict(models, job, post, ox).double()
            row[f"auroc_entropy_{name}"] = auroc(in_ent, predictive_entropy(ol))
            row[f"auroc_mi_{name}"] = None if in_mi is None else auroc(in_mi, mutual_information(ol))
        if job.method in BAYES or post is not None:  # BLoB's N = 0: the posterior mean (Laplace's: the MAP network)
            mean = scores(predictive_logits(models, job.method if post is None else LoraMethod.MAP, data.test,
                                            seed=job.seed, mode="mean"), data.test_y)
            row.update({f"mean_{k}": v for k, v in mean.items()})
        result["settings"][setting.label()] = row
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result
