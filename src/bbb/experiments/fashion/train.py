"""One job of ``bbb reproduce fashion``: the LeNet-5, the data (resident on the job's device), the
training loop of each method with a per-epoch resumable checkpoint, and the scores."""

from __future__ import annotations

import importlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from ...devices import deterministic_convolutions
from ...errors import UserError
from ...io import atomic_torch_save
from .settings import BATCH_SIZE, FashionMethod, Phase, Schedule, Setting

__all__ = ["Job", "lenet5", "load_data", "run_job", "scores", "eval_and_ood_probs", "NUM_WEIGHTS"]

#: LeNet-5 without padding: conv 6@5x5 - pool - conv 16@5x5 - pool - 256-120-84-10
NUM_WEIGHTS = 44_426


@dataclass(frozen=True)
class Job:
    method: FashionMethod
    seed: int
    phase: Phase
    setting: Setting

    @property
    def name(self) -> str:
        tag = self.setting.label().replace(" ", "_").replace("=", "")
        return f"{self.phase}-{self.method}-{tag}-s{self.seed}"


def lenet5(dropout: float = 0.0) -> nn.Sequential:
    """The LeNet-5 of the IVON paper's Fashion-MNIST table (44,426 weights); ``dropout`` > 0 puts
    dropout of that rate before each fully connected layer."""
    def drop() -> list[nn.Module]:
        return [nn.Dropout(dropout)] if dropout > 0 else []
    return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), *drop(), nn.Linear(256, 120), nn.ReLU(), *drop(),
                         nn.Linear(120, 84), nn.ReLU(), *drop(), nn.Linear(84, 10))


def load_data(phase: Phase, schedule: Schedule, data_dir: str | None, device: torch.device) -> dict[str, Tensor]:
    """The job's images as float tensors on ``device`` (N, 1, 28, 28), standardised by the training
    images' mean and standard deviation; labels int64. Validation: the training set less a fixed
    draw of ``schedule.val_size`` images (split seed 0), scored on those; test: all 60,000, scored on the
    10,000 test images, with MNIST's 10,000 test images as the out-of-distribution set."""
    from ...data.mnist import load_mnist

    xs, ys = load_mnist("train", "fashion-mnist", data_dir)
    x = xs.float().div_(255.0)
    mean, std = x.mean(), x.std()
    if phase is Phase.VALIDATION:
        if len(x) < 2 * schedule.val_size:
            raise UserError(f"Fashion-MNIST's training set has {len(x)} images, fewer than twice the "
                            f"{schedule.val_size} the validation phase holds out: is the data folder complete?")
        val_size = schedule.val_size
        perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
        val, train = perm[:val_size], perm[val_size:]
        parts = {"x_train": x[train], "y_train": ys[train], "x_eval": x[val], "y_eval": ys[val]}
    else:
        xt, yt = load_mnist("test", "fashion-mnist", data_dir)
        xo, _ = load_mnist("test", "mnist", data_dir)
        parts = {"x_train": x, "y_train": ys, "x_eval": xt.float().div_(255.0), "y_eval": yt,
                 "x_ood": xo.float().div_(255.0)}
    n = {"train": schedule.n_train, "eval": schedule.n_test, "ood": schedule.n_test}
    out = {}
    for k, v in parts.items():
        cap = n[k.split("_")[1]]
        v = v[:cap] if cap is not None else v
        if k.startswith("x"):
            v = ((v - mean) / std).unsqueeze(1)
        out[k] = v.contiguous().to(device)
    return out


class _Method:
    """A method's network, optimiser, training step and predictive (probabilities of the eval images)."""

    def __init__(self, job: Job, num_batches: int, device: torch.device) -> None:
        import bbb

        torch.manual_seed(job.seed)
        m, s = job.method, job.setting
        self.job = job
        self.net = lenet5(s.dropout or 0.0).to(device)
        self.ref: Any = None
        if m in (FashionMethod.ADAMW, FashionMethod.MC_DROPOUT):
            from .settings import ADAMW_RECIPE

            wd = ADAMW_RECIPE["weight_decay"] if s.weight_decay is None else s.weight_decay
            self.opt: Any = torch.optim.AdamW(self.net.parameters(), lr=ADAMW_RECIPE["lr"], weight_decay=wd)
        elif m is FashionMethod.IVON:
            from .settings import IVON_RECIPE

            bbb.bayesianize(self.net)
            self.opt = bbb.IVON(self.net, **IVON_RECIPE, seed=job.seed)
        elif m is FashionMethod.IVON_OPT:
            from .settings import IVON_RECIPE

            try:  # the published package (GPL): the bench extra, imported for this row only
                ivon = importlib.import_module("ivon")
            except ImportError:
                raise UserError("the ivon_opt row needs the published package: pip install ivon-opt==0.1.3 "
                                "(or leave it out: --methods without ivon_opt)") from None
            r = IVON_RECIPE
            self.opt = ivon.IVON(self.net.parameters(), lr=r["lr"], ess=r["ess"], hess_init=r["hess_init"],
                                 beta1=r["beta1"], beta2=r["beta2"], weight_decay=r["weight_decay"])
        else:
            bbb.bayesianize(self.net, prior=bbb.GaussianPrior(1.0), estimator=s.estimator or "reparam")
            self.elbo = bbb.ELBO(self.net, "categorical", num_batches=num_batches, kl_weighting="uniform",
                                 beta=1.0 if s.beta is None else s.beta)
            fused = None if s.estimator in (None, "reparam") else False  # flipout: the plain path, no warning
            self.opt = bbb.Engine(self.net, "adam", lr=1e-3, seed=job.seed, fused=fused)

    def step(self, x: Tensor, y: Tensor, i: int) -> Tensor:
        m, net, opt = self.job.method, self.net, self.opt
        if m in (FashionMethod.ADAMW, FashionMethod.MC_DROPOUT):
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        elif m is FashionMethod.IVON:
            with opt.sampling():
                loss = F.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        elif m is FashionMethod.IVON_OPT:
            with opt.sampled_params(train=True):
                opt.zero_grad()
                loss = F.cross_entropy(net(x), y)
                loss.backward()
            opt.step()
        else:
            with opt.sampling():
                out = self.elbo(x, y, batch_index=i)
            opt.zero_grad(set_to_none=True)
            loss = out.loss / len(y)
            loss.backward()
            opt.step()
        return loss.detach()

    @torch.no_grad()
    def probs(self, x: Tensor, samples: int, seed: int) -> Tensor:
        """Predictive probabilities (N, 10): the mean of ``samples`` softmaxes for the Bayesian
        methods and MC dropout, the network's softmax for AdamW."""
        from ...uncertainty import predict, predictive_probs

        m, net = self.job.method, self.net
        chunks = torch.split(x, 1000)
        if m is FashionMethod.ADAMW:
            net.eval()
            return torch.cat([F.softmax(net(c), -1) for c in chunks])
        if m in (FashionMethod.IVON, FashionMethod.BBB):
            return predictive_probs(predict(net, x, num_samples=samples, batch_size=250, generator=seed))
        torch.manual_seed(seed)
        total = torch.zeros(len(x), 10, device=x.device)
        if m is FashionMethod.MC_DROPOUT:
            net.train()
            for _ in range(samples):
                total += torch.cat([F.softmax(net(c), -1) for c in chunks])
            net.eval()
        else:
            net.eval()
            for _ in range(samples):
                with self.opt.sampled_params():
                    total += torch.cat([F.softmax(net(c), -1) for c in chunks])
        return total / samples


def eval_and_ood_probs(method: Any, data: dict[str, Tensor], samples: int, seed: int) -> tuple[Tensor, Tensor | None]:
    """The predictive probabilities of the evaluation images and of the OOD images (None without
    ``x_ood``), each from ``method.probs`` at the same ``seed``: the same sampled networks score both
    sets (other draws for the OOD set would give each set a Monte Carlo predictive of its own, and
    a set scored against itself an AUROC off 0.5)."""
    eval_probs = method.probs(data["x_eval"], samples, seed)
    return eval_probs, method.probs(data["x_ood"], samples, seed) if "x_ood" in data else None


def scores(probs: Tensor, labels: Tensor, ood_probs: Tensor | None = None) -> dict[str, float]:
    """Accuracy (%), NLL, ECE (15 bins), Brier and, with the OOD set's probabilities, the AUROC of
    the predictive entropy separating in- from out-of-distribution images."""
    from ...uncertainty import auroc, brier_score, entropy, expected_calibration_error, negative_log_likelihood

    p, y = probs.double().cpu(), labels.cpu()
    out = {"acc": 100.0 * float((p.argmax(-1) == y).double().mean()), "nll": negative_log_likelihood(p, y),
           "ece": expected_calibration_error(p, y), "brier": brier_score(p, y)}
    if ood_probs is not None:
        out["ood_auroc"] = auroc(entropy(p), entropy(ood_probs.double().cpu()))
    return out


def _rng_state(device: torch.device) -> dict[str, Any]:
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def run_job(job: Job, schedule: Schedule, data_dir: str | None, device: torch.device, folder: Path,
            progress: Callable[[int], None] = lambda n: None, *, allow_device_change: bool = False) -> dict[str, Any]:
    """Train ``job`` (resuming from ``folder/<name>/last.pt`` when there), score it, save its
    predictive probabilities (``probs.pt``: the ensembles are made of them); returns the result row.

    A job resumes bit for bit on the device type it started on. Started on another one, it stops
    with a one-line error unless ``allow_device_change``: then it goes on here from its epoch, its
    later random draws from this host's (or this device's) generators, and its row says where each
    epoch ran (``devices``). On CUDA it trains and predicts with cuDNN's deterministic algorithms
    (:func:`bbb.devices.deterministic_convolutions`): without them the same job, never stopped,
    ends with other weights at each run."""
    with deterministic_convolutions():
        return _run_job(job, schedule, data_dir, device, folder, progress, allow_device_change)


def _run_job(job: Job, schedule: Schedule, data_dir: str | None, device: torch.device, folder: Path,
             progress: Callable[[int], None], allow_device_change: bool) -> dict[str, Any]:
    data = load_data(job.phase, schedule, data_dir, device)
    n = len(data["y_train"])
    num_batches = math.ceil(n / BATCH_SIZE)
    method = _Method(job, num_batches, device)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(method.opt, T_max=schedule.epochs)
    order = torch.Generator().manual_seed(job.seed)
    work = folder / job.name
    ckpt = work / "last.pt"
    epoch, seconds, losses = 0, 0.0, []
    segments: list[list[Any]] = []  # [device type, first epoch, last epoch] of each stretch of the training
    if ckpt.is_file():
        state = torch.load(ckpt, map_location=device, weights_only=True)
        segments = [list(s) for s in state.get("segments", [[state["device"], 1, state["epoch"]]])]
        if state["device"] != device.type and not allow_device_change:
            raise UserError(f"{job.name} was started on {state['device']} and cannot go on on {device.type} bit for "
                            f"bit (its random streams are the device's): rerun with --device {state['device']}, "
                            f"pass --allow-device-change to go on here from epoch {state['epoch']}, or delete "
                            f"{work} to train it again here")
        method.net.load_state_dict(state["model"])
        method.opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        # the generators' states are host byte tensors: map_location moved them to the device
        order.set_state(state["order"].cpu())
        torch.set_rng_state(state["rng"]["cpu"].cpu())
        if "cuda" in state["rng"] and device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"].cpu(), device)
        elif device.type == "cuda":  # moved here from the host: a stream of its own, from the job and epoch
            torch.cuda.manual_seed(job.seed * 1000 + state["epoch"])
        epoch, seconds, losses = state["epoch"], state["seconds"], list(state["losses"])
        if job.method is FashionMethod.IVON_OPT:  # its step count (debiasing) is not in its state_dict
            method.opt.current_step = epoch * num_batches
        progress(epoch)
    while epoch < schedule.epochs:
        method.net.train()
        t = time.perf_counter()
        perm = torch.randperm(n, generator=order).to(device)
        total = torch.zeros((), device=device)
        for i, idx in enumerate(torch.split(perm, BATCH_SIZE)):
            total += method.step(data["x_train"][idx], data["y_train"][idx], i)
        mean_loss = float(total) / num_batches
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds += time.perf_counter() - t
        if not math.isfinite(mean_loss):
            raise UserError(f"{job.name}: the training loss is {mean_loss} at epoch {epoch + 1}")
        sched.step()
        epoch += 1
        losses.append(mean_loss)
        if segments and segments[-1][0] == device.type:
            segments[-1][2] = epoch
        else:
            segments.append([device.type, epoch, epoch])
        atomic_torch_save(ckpt, {"segments": segments, "model": method.net.state_dict(),
                                 "optimizer": method.opt.state_dict(),
                                 "scheduler": sched.state_dict(), "order": order.get_state(),
                                 "rng": _rng_state(device), "device": device.type, "epoch": epoch,
                                 "seconds": seconds, "losses": losses})
        progress(1)
    t = time.perf_counter()
    eval_probs, ood_probs = eval_and_ood_probs(method, data, schedule.test_samples, job.seed)
    result = {"job": job.name, "method": str(job.method), "seed": job.seed, "phase": str(job.phase),
              "setting": job.setting.label(), "beta": job.setting.beta, "estimator": job.setting.estimator,
              "dropout": job.setting.dropout, "epochs": epoch, "n_train": n, "n_eval": len(data["y_eval"]),
              "train_seconds": round(seconds, 2), "seconds_per_epoch": round(seconds / max(epoch, 1), 3),
              "eval_seconds": round(time.perf_counter() - t, 2), "final_train_loss": losses[-1] if losses else None,
              "test_samples": schedule.test_samples if job.method is not FashionMethod.ADAMW else 1,
              "device": str(device), "devices": ", ".join(f"{d} (epochs {a}-{b})" for d, a, b in segments),
              "torch": torch.__version__,
              **scores(eval_probs, data["y_eval"], ood_probs)}
    atomic_torch_save(work / "probs.pt", {"eval": eval_probs.cpu(), "labels": data["y_eval"].cpu(),
                                          **({"ood": ood_probs.cpu()} if ood_probs is not None else {})})
    return result
