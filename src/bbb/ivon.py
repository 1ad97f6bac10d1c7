"""IVON (Shen et al., "Variational Learning is Effective for Large Deep Networks", ICML 2024) on
bbb's Bayesian layers: the same diagonal-Gaussian posterior as Bayes by Backprop, learned by a
natural-gradient (variational online Newton) update at about Adam's cost.

Written from the algorithm as its paper gives it; the published implementation (``ivon-opt``, GPL) is
only compared against, in a test that runs where it is installed.

The posterior lives in the layers: after every step each Bayesian weight's ``*_mu`` is IVON's mean
m and its ``*_rho`` holds sigma = 1 / sqrt(ess (h + weight_decay)) (sigma = softplus(rho)), so
``bbb.uncertainty.predict``, ``bbb.prune``, ``torch.save`` / ``load_state_dict`` and every ``bbb``
command read it as they read a network trained by Bayes by Backprop. The optimiser keeps the
Hessian estimate h, the momentum and its noise generator (``state_dict``: a resumed run continues
bit for bit).

One step::

    opt = bbb.IVON(net, lr=0.1, ess=len(train_set))
    for x, y in loader:
        with opt.sampling():                    # the layers use theta = m + sigma * eps
            loss = F.cross_entropy(net(x), y)   # the mean loss over the minibatch: no KL term
        opt.zero_grad()
        loss.backward()                         # the gradient G at theta, one backward pass
        opt.step()                              # h, momentum, m; sigma from h

The prior is IVON's own: a Gaussian of precision ``weight_decay`` per weight, weighed against the
data by ``ess`` (the KL weight is 1/ess; ess = the training-set size is the Bayesian choice, larger
is a colder posterior). A :class:`bbb.ELBO` loss works too, but its KL is not IVON's prior: inside
:meth:`IVON.sampling` the model's KL is zero (a warning says so once), and the ELBO's loss is its
NLL. Every Bayesian layer must use the ``reparam`` estimator (IVON's Hessian estimate needs the
gradient of each sampled weight), and every trainable parameter must be a Bayesian one.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn as nn
from torch import Tensor

from .distributions import KLMode
from .engine.engine import COMPILE_MIN_NUMEL
from .engine.support import compile_default
from .errors import UserError
from .nn.base import BayesModule, Estimator
from .nn.model import bayes_modules
from .nn.samples import SampleProvider, providing_samples

__all__ = ["IVON", "inverse_softplus"]


def inverse_softplus(sigma: Tensor) -> Tensor:
    """rho with softplus(rho) = sigma (sigma > 0): log(expm1(sigma)), and sigma itself above 20
    (where softplus is the identity to working precision, as ``F.softplus``'s threshold)."""
    return torch.where(sigma > 20.0, sigma, torch.log(torch.expm1(torch.clamp(sigma, max=20.0))))


def ivon_update(mu: Tensor, momentum: Tensor, hess: Tensor, g: Tensor, gz: Tensor, sigma: Tensor,
                hp: Tensor) -> tuple[Tensor, Tensor]:
    """One IVON step of one weight tensor, in place on ``mu``, ``momentum`` and ``hess``; returns
    the new (sigma, rho). ``g``: the gradient at the sampled weights (summed over the samples of a
    mean loss), ``gz``: the same sum of gradient * eps; ``hp`` (float64): beta1, beta2,
    weight_decay, the step of m (lr, rescaled), 1 - beta1^t, ess, clip_radius.
    Plain tensor arithmetic: ``torch.compile`` makes one loop of it."""
    b1, b2, wd, lr, bc1, ess, clip = (hp[i].to(mu.dtype) for i in range(7))
    h_hat = gz / sigma
    momentum.copy_(b1 * momentum + (1.0 - b1) * g)
    new_h = b2 * hess + (1.0 - b2) * h_hat + 0.5 * (1.0 - b2) ** 2 * (hess - h_hat) ** 2 / (hess + wd)
    hess.copy_(new_h)
    direction = torch.clamp((momentum / bc1 + wd * mu) / (new_h + wd), -clip, clip)
    mu.copy_(mu - lr * direction)
    new_sigma = torch.rsqrt(ess * (new_h + wd))
    return new_sigma, inverse_softplus(new_sigma)


class IVON(torch.optim.Optimizer, SampleProvider):
    """IVON on the Bayesian layers of ``model`` (see the module's notes).

    Args:
        model: a network with Bayesian layers (``bbb.BayesMLP``, ``bbb.bayesianize(net)``, peft
            adapters converted by ``bayesianize``); only the posteriors whose mean requires a
            gradient are trained (a frozen layer stays as it is).
        lr: the learning rate a.
        ess: the effective sample size lambda (usually the training-set size).
        hess_init: h at the start (sets sigma at the start: every ``*_rho`` is overwritten).
        weight_decay: the prior precision delta.
        beta1: the momentum of the gradient.
        beta2: the momentum of the Hessian estimate (close to 1).
        clip_radius: the element-wise clip of m's update direction (inf: none).
        rescale_lr: the step of m is ``lr * (hess_init + weight_decay)`` (as the published
            implementation by default), so that ``lr`` means the same for any ``hess_init``.
        seed: the seed of the optimiser's noise generator (None: drawn from torch's global one).
        compile: run the step's arithmetic (:func:`ivon_update`) through ``torch.compile``; None:
            as :class:`bbb.Engine` decides (``BBB_COMPILE``; on CUDA, or on the CPU from
            ``bbb.engine.COMPILE_MIN_NUMEL`` weights). The same numbers either way, to rounding.

    The loss must be the *mean* over the minibatch (and over the weight samples when a forward
    draws k of them, ``bbb.forward_samples``: their gradients are summed, as those of one mean):
    h is a per-example curvature.
    """

    def __init__(self, model: nn.Module, lr: float, ess: float, hess_init: float = 1.0,
                 weight_decay: float = 1e-4, beta1: float = 0.9, beta2: float = 0.99999,
                 clip_radius: float = math.inf, rescale_lr: bool = True, seed: int | None = None,
                 compile: bool | None = None) -> None:
        for name, value, low in (("lr", lr, 0.0), ("ess", ess, 0.0), ("hess_init", hess_init, 0.0)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > low):
                raise UserError(f"IVON: {name} must be a positive number, got {value!r}")
        if not (isinstance(weight_decay, (int, float)) and weight_decay >= 0 and math.isfinite(weight_decay)):
            raise UserError(f"IVON: weight_decay must be >= 0, got {weight_decay!r}")
        for name, value in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= value < 1.0:
                raise UserError(f"IVON: {name} must be in [0, 1), got {value!r}")
        if not clip_radius > 0:
            raise UserError(f"IVON: clip_radius must be > 0, got {clip_radius!r}")
        self.model = model
        self.pairs: list[tuple[BayesModule, str]] = []
        for m in bayes_modules(model):
            trained = [n for n in m.param_names() if m.mu(n).requires_grad]
            if trained and m.estimator is not Estimator.REPARAM:
                raise UserError(f"IVON needs each sampled weight's gradient: {type(m).__name__} uses the "
                                f"{m.estimator.value} estimator; build or convert it with estimator='reparam'")
            self.pairs += [(m, n) for n in trained]
        if not self.pairs:
            raise UserError("IVON: the model has no Bayesian weights to train (bbb.bayesianize(net) converts a "
                            "network; a frozen layer is not trained)")
        owned = {id(m.mu(n)) for m, n in self.pairs} | {id(m.rho(n)) for m, n in self.pairs}
        loose = [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in owned]
        if loose:
            shown = ", ".join(loose[:4]) + (f" and {len(loose) - 4} more" if len(loose) > 4 else "")
            raise UserError(f"IVON trains Bayesian weights only, and {len(loose)} trainable parameter(s) are not "
                            f"Bayesian ({shown}): bayesianize their layers, or freeze them (requires_grad_(False))")
        defaults = {"lr": float(lr), "ess": float(ess), "hess_init": float(hess_init),
                    "weight_decay": float(weight_decay), "beta1": float(beta1), "beta2": float(beta2),
                    "clip_radius": float(clip_radius), "rescale_lr": bool(rescale_lr)}
        super().__init__([m.mu(n) for m, n in self.pairs], defaults)
        dev = self.pairs[0][0].mu(self.pairs[0][1]).device
        self.generator = torch.Generator(device=dev)
        self.generator.manual_seed(int(seed) if seed is not None else int(torch.randint(2**62, ()).item()))
        self._drawn: dict[int, list[tuple[Tensor, Tensor, bool]]] = {}
        self._sig: dict[int, Tensor] = {}
        self._warned_kl = False
        numel = sum(m.mu(n).numel() for m, n in self.pairs)
        self._update = (torch.compile(ivon_update, dynamic=True)
                        if compile_default(compile, dev, numel, COMPILE_MIN_NUMEL) else ivon_update)
        for m, n in self.pairs:
            mu = m.mu(n)
            self.state[mu] = {"step": 0, "momentum": torch.zeros_like(mu, memory_format=torch.preserve_format),
                              "hess": torch.full_like(mu, float(hess_init))}
        self._write_sigma()

    # -- the posterior in the layers ----------------------------------------------------------
    def _sigma(self, mu: Tensor) -> Tensor:
        """sigma = 1 / sqrt(ess (h + weight_decay)) of the mean ``mu`` (kept from the last step)."""
        sig = self._sig.get(id(mu))
        if sig is None:
            g = self.param_groups[0]
            sig = self._sig[id(mu)] = torch.rsqrt(g["ess"] * (self.state[mu]["hess"] + g["weight_decay"]))
        return sig

    @torch.no_grad()
    def _write_sigma(self) -> None:
        """Every trained ``*_rho`` from h: sigma = 1 / sqrt(ess (h + weight_decay))."""
        self._sig.clear()
        for m, n in self.pairs:
            m.rho(n).copy_(inverse_softplus(self._sigma(m.mu(n))))

    # -- sampling (bbb.nn.samples.SampleProvider) ---------------------------------------------
    @contextlib.contextmanager
    def sampling(self) -> Iterator[IVON]:
        """The forward passes inside draw theta = m + sigma * eps from this optimiser's generator;
        the step reads the gradient of each sampled weight."""
        with providing_samples(self):
            yield self

    def draw(self, module: nn.Module, name: str, k: int | None) -> tuple[Tensor, Tensor, Tensor] | None:
        mu = module.mu(name) if isinstance(module, BayesModule) else None
        if mu is None or mu not in self.state:
            return None  # a frozen layer: drawn as usual
        sigma = self._sigma(mu)
        shape = tuple(mu.shape) if k is None else (k, *mu.shape)
        eps = self.normal(shape, mu).detach()
        w = torch.addcmul(mu.detach(), sigma, eps).requires_grad_(True)
        self._drawn.setdefault(id(mu), []).append((eps, w, k is not None))
        return mu, eps, w

    def normal(self, shape: tuple[int, ...], like: Tensor) -> Tensor:
        """Standard normal noise of ``shape`` from the optimiser's generator (a test may replace it)."""
        return torch.randn(shape, generator=self.generator, device=like.device, dtype=like.dtype)

    def model_kl(self, model: nn.Module, mode: KLMode, kl_samples: int | None = None) -> Tensor | None:
        if not self._warned_kl:
            self._warned_kl = True
            warnings.warn("IVON: the model's KL is zero inside IVON.sampling(): IVON's prior is its own "
                          "(weight_decay, weighed by ess), not the ELBO's prior and KL weighting", stacklevel=3)
        return torch.zeros((), device=self.pairs[0][0].mu(self.pairs[0][1]).device)

    # -- the step -----------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self._drawn:
            raise UserError("IVON.step: no weight was sampled since the last step: run the forward pass inside "
                            "`with optimizer.sampling():` (and call backward before step)")
        group = self.param_groups[0]
        b1, wd = group["beta1"], group["weight_decay"]
        lr = group["lr"] * ((group["hess_init"] + wd) if group["rescale_lr"] else 1.0)
        hps: dict[tuple[int, torch.device], Tensor] = {}
        for m, n in self.pairs:
            mu = m.mu(n)
            drawn = self._drawn.get(id(mu), [])
            # a draw of k samples at once: its rows summed (the loss averages over them)
            grads = [(eps, w.grad, rows) for eps, w, rows in drawn if w.grad is not None]
            if not grads:
                continue  # not used by this step's forward (an inactive branch): left as it is
            st = self.state[mu]
            if len(grads) == 1 and not grads[0][2]:
                g, gz = grads[0][1], grads[0][1] * grads[0][0]
            else:
                g = torch.stack([gw.sum(0) if rows else gw for _, gw, rows in grads]).sum(0)
                gz = torch.stack([(gw * eps).sum(0) if rows else gw * eps for eps, gw, rows in grads]).sum(0)
            st["step"] += 1
            key = (st["step"], mu.device)
            if key not in hps:
                hp = torch.tensor([b1, group["beta2"], wd, lr, 1.0 - b1 ** st["step"], group["ess"],
                                   group["clip_radius"]], dtype=torch.float64)
                # to a GPU from pinned memory, asynchronously: no host synchronisation in the step
                hps[key] = hp.pin_memory().to(mu.device, non_blocking=True) if mu.device.type == "cuda" \
                    else hp.to(mu.device)
            # one flat (n,) view of each: one compiled loop for every weight tensor's shape and rank
            flat = [t.view(-1) for t in (mu, st["momentum"], st["hess"])]  # (written in place: views, never copies)
            flat += [t.reshape(-1) for t in (g, gz, self._sigma(mu))]
            if self._update is not ivon_update:
                for t in flat:
                    torch._dynamo.mark_dynamic(t, 0)
            sigma, rho = self._update(flat[0], flat[1], flat[2], flat[3], flat[4], flat[5], hps[key])
            self._sig[id(mu)] = sigma.view_as(mu)
            m.rho(n).copy_(rho.view_as(mu))
        self._drawn.clear()
        return loss

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """The group of the model's Bayesian weights is IVON's only one (its hyperparameters are
        read from it): a second group is a one-line error, not a group whose settings are ignored."""
        if self.param_groups:
            raise UserError("IVON keeps one group, the model's Bayesian weights: build another IVON for another "
                            "model, or change lr, ess, weight_decay in optimizer.param_groups[0]")
        super().add_param_group(param_group)

    # -- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        sd = super().state_dict()
        sd["generator"] = self.generator.get_state()
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        sd = dict(state_dict)
        gen = sd.pop("generator", None)
        super().load_state_dict(sd)
        if gen is not None:
            self.generator.set_state(gen)
        self._drawn.clear()
        self._write_sigma()

