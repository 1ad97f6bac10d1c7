"""Thompson sampling on UCI Mushroom with a BBB network (section 5.3, Fig. 6 of the paper).

Each step a mushroom is drawn uniformly at random (with replacement); the agent eats it or
not. Rewards: edible and eaten +5; poisonous and eaten -35 or +5 with probability 1/2 each;
not eaten 0. The oracle eats exactly the edible mushrooms. Regret = oracle reward - agent
reward, summed over steps; the *expected* regret counts 15 for eating a poisonous mushroom
(its expected reward is -15) and 5 for passing an edible one.

Agents (all on the same network: input = the 117-d one-hot context and a one-of-2 action code,
two hidden layers of 100 ReLU units, one output = the expected reward of the pair):

* ``bbb``: Thompson sampling; the weights are sampled twice per decision and the two reward
  predictions averaged (as in the paper). Trained on the variational free energy of the replay
  buffer: a Gaussian likelihood on rewards with noise sigma ``--noise-sigma`` plus the KL to
  the prior (closed form for the Gaussian prior, the paper's Monte Carlo estimate for
  ``--prior mixture``), weighted ``kl_scale / N`` per example. N is the buffer's current fill
  by default (the buffer is the data set; ``--kl-data`` offers its capacity or every
  interaction seen). Per minibatch of B the loss is the mean NLL + kl_scale * KL / N.

  ``kl_scale`` defaults to 0.01, a tempered posterior, and is **not** the paper's (the paper
  gives no bandit loss). With the exact weight (1) we measured the posterior std of almost
  every first- and second-layer weight going back to the prior's (median sigma 0.96-1.0 with
  a N(0, 1) prior after 800 steps; the same with priors of std 0.1 and 0.3 and with the scale
  mixture). The hidden layers then act as freshly drawn random features: the mean network
  still ate 8-20% of the poisonous mushrooms, against 3% for the greedy network, and regret
  grew about 1 per step after 1,500 steps. This is the known "over-pruning" of mean-field
  variational nets. Tempering keeps the fit and lowers that rate (about 0.3 per step at 3,000
  steps). Over the full protocol (results/bandit/), though, BBB with these defaults ended at
  20,145 regret against 13,694 for greedy; with ``--kl-scale 1e-4 --prior-sigma 0.1``
  (results/bandit-tempered/) it ended lowest of all agents at 9,577.

  Even tempered, the sigmas of the weights the data barely constrains settle at the prior's std
  (median first-layer sigma 0.95 with N(0, 1), 0.097 with N(0, 0.1), after 2,000 steps). Short
  runs (seeds 0-2, mean expected regret at 8,000 steps): the default kl-scale gave 4,020 with a
  N(0, 0.1) prior and 4,130 with N(0, 1) and ``--kl-data seen``; ``--kl-scale 1e-4`` gave 2,750
  (N(0, 1)) and 3,190 (N(0, 0.1)); the greedy networks of the full run had 4,230. With
  ``--kl-scale 1e-4`` and N(0, 1), though, the per-step regret kept rising (0.19 to 0.31 between
  5,000 and 10,000 steps, against about 0.17 for greedy); with N(0, 0.1) it held at 0.15-0.20.
  ``--bbb-optimizer sgd`` (with ``--bbb-lr``) gives the BBB members plain SGD, as public
  reproductions do: the sigmas stay near ``--sigma-init`` and the KL barely acts, but with lr
  0.01 the regret was higher (0.43 per step at 4,000 steps).
* ``greedy`` and ``egreedy_<eps>``: deterministic networks trained on squared loss that pick
  the best predicted action, or a uniformly random action with probability eps.

Protocol (defaults = the paper): a buffer of the 4096 latest interactions, after each
interaction 64 Adam updates on minibatches of 64 drawn from it, 50,000 interactions, 5 seeds.

Speed: every agent and seed runs as one batched *population*; each tensor has a leading member
dimension, the forward and backward passes are written by hand with ``torch.bmm`` (no
autograd), and one fused Adam call updates every member (Adam is elementwise, so members stay
independent). ``--workers`` splits the population over processes (one thread each), which
degrades far more gracefully on a shared CPU than intra-op threads. Subnormal floats are
flushed to zero while the population trains: Adam's decaying first moments otherwise made
every update about twice as slow after a few hundred steps.

Common random numbers: the mushroom sequence and the poisonous coin flips depend on the seed
only, and so do the initial weights, so every agent of seed s faces the same mushrooms from
the same starting network.

Training noise: the reparameterisation noise of the 64 updates per step comes from a bank of
N(0, 1) draws read at a random offset and redrawn every 1024 updates (``--exact-noise`` draws
fresh noise per update instead; torch's CPU ``randn`` costs about as much as the update
itself). The two Thompson samples per decision read the same bank.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import io
import math
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..errors import UserError
from ..io import atomic_torch_save, atomic_write_json, atomic_write_text
from ..options import OptimizerKind, PriorKind, choice, make_prior, resolve_device

__all__ = [
    "BanditConfig",
    "Agent",
    "parse_agent",
    "MLPLayout",
    "mlp_forward",
    "mlp_backward",
    "mushroom_rewards",
    "oracle_rewards",
    "expected_rewards",
    "step_regrets",
    "Population",
    "run_bandit",
    "add_arguments",
    "main",
    "EXAMPLE",
    "REGRET_COLUMNS",
    "SUMMARY_COLUMNS",
]

EXAMPLE = (
    "bbb bandit --out results/bandit                      # the paper: 4 agents x 5 seeds x 50,000 steps\n"
    "  bbb bandit --out runs/bandit-quick --steps 2000 --seeds 0 1   # a quick look"
)

DEFAULT_AGENTS = ("bbb", "greedy", "egreedy_0.01", "egreedy_0.05")

REWARD_EDIBLE = 5.0
REWARD_POISON_BAD = -35.0
REWARD_POISON_LUCKY = 5.0
REWARD_PASS = 0.0
EXPECTED_POISON = 0.5 * (REWARD_POISON_BAD + REWARD_POISON_LUCKY)  # -15

#: actions: 0 = do not eat, 1 = eat
PASS, EAT = 0, 1
NUM_ACTIONS = 2

REGRET_COLUMNS = ["step", "agent", "seed", "cumulative_regret", "cumulative_expected_regret"]
SUMMARY_COLUMNS = [
    "agent", "steps", "seeds", "final_regret_mean", "final_regret_sd",
    "final_expected_regret_mean", "final_expected_regret_sd", "eat_rate_last_1000", "seconds",
]

_ENV_CHUNK = 10_000
_BANK_REFRESH = 1024


# --------------------------------------------------------------------------------------------
# Configuration and agents
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    """One kind of agent: ``bbb`` (Thompson sampling) or epsilon-greedy with ``epsilon``."""

    name: str
    bayesian: bool
    epsilon: float = 0.0


def parse_agent(name: str) -> Agent:
    """``"bbb"``, ``"greedy"`` or ``"egreedy_<eps>"`` (0 <= eps <= 1)."""
    key = str(name).strip().lower()
    if key == "bbb":
        return Agent("bbb", True, 0.0)
    if key == "greedy":
        return Agent("greedy", False, 0.0)
    if key.startswith("egreedy_"):
        try:
            eps = float(key[len("egreedy_"):])
        except ValueError:
            eps = float("nan")
        if not (0.0 <= eps <= 1.0):
            raise UserError(f"bad agent {name!r}: epsilon must be a number in [0, 1], e.g. egreedy_0.05")
        return Agent(key, False, eps)
    raise UserError(f"unknown agent {name!r}; choose bbb, greedy or egreedy_<eps> (e.g. egreedy_0.05)")


@dataclass
class BanditConfig:
    """Settings of :func:`run_bandit`; the defaults are the paper's protocol.

    ``noise_sigma``, the prior, ``sigma_init``, ``kl_scale`` and ``lr`` are not stated in the
    paper; they are our choices, tuned briefly on short runs (see the module docstring).
    """

    steps: int = 50_000
    agents: tuple[str, ...] = DEFAULT_AGENTS
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    updates_per_step: int = 64
    batch_size: int = 64
    buffer: int = 4096
    hidden: tuple[int, ...] = (100, 100)
    lr: float = 1e-3
    noise_sigma: float = 1.0
    prior: str = "gaussian"
    prior_sigma: float = 1.0
    pi: float = 0.5
    sigma1: float = 1.0
    sigma2: float = math.exp(-6.0)
    sigma_init: float = 0.05
    decision_samples: int = 2
    kl_data: str = "fill"
    kl_scale: float = 0.01
    bbb_optimizer: str = "adam"
    bbb_lr: float | None = None
    log_every: int = 100
    exact_noise: bool = False
    workers: int = 1
    threads: int = 1
    device: str = "cpu"
    data_dir: str | None = None
    out: str | None = None
    checkpoint_every: float = 300.0
    resume: bool = True
    quiet: bool = False
    progress_every: float = 30.0

    def validate(self) -> None:
        for name in ("steps", "updates_per_step", "batch_size", "buffer", "decision_samples",
                     "log_every", "workers", "threads"):
            v = getattr(self, name)
            low = 0 if name == "updates_per_step" else 1  # 0: act without learning
            if isinstance(v, bool) or int(v) != v or v < low:
                raise UserError(f"{name.replace('_', '-')} must be an integer >= {low}, got {v!r}")
        choice("prior", self.prior, PriorKind)
        if not (0.0 < self.pi < 1.0):
            raise UserError(f"pi must be in (0, 1), got {self.pi!r}")
        for name in ("lr", "noise_sigma", "prior_sigma", "sigma_init", "sigma1", "sigma2", "kl_scale"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise UserError(f"{name.replace('_', '-')} must be a finite number > 0, got {v!r}")
        choice("bbb-optimizer", self.bbb_optimizer, OptimizerKind)
        if self.bbb_lr is not None and not (math.isfinite(self.bbb_lr) and self.bbb_lr > 0):
            raise UserError(f"bbb-lr must be a finite number > 0, got {self.bbb_lr!r}")
        if self.kl_data not in ("fill", "capacity", "seen"):
            raise UserError(f"kl-data must be fill, capacity or seen, got {self.kl_data!r}")
        if not self.agents:
            raise UserError("give at least one agent")
        if not self.seeds:
            raise UserError("give at least one seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise UserError(f"seeds must be distinct, got {list(self.seeds)}")
        names = [parse_agent(a).name for a in self.agents]
        if len(set(names)) != len(names):
            raise UserError(f"agents must be distinct, got {list(self.agents)}")
        if any(int(s) != s or s < 0 for s in self.seeds):
            raise UserError(f"seeds must be non-negative integers, got {list(self.seeds)}")
        if not self.hidden or any(int(h) != h or h < 1 for h in self.hidden):
            raise UserError(f"hidden sizes must be positive integers, got {list(self.hidden)}")

    def training_key(self) -> dict[str, Any]:
        """The settings a checkpoint must share with a run that resumes it."""
        keys = ("agents", "seeds", "updates_per_step", "batch_size", "buffer", "hidden", "lr",
                "noise_sigma", "prior", "prior_sigma", "pi", "sigma1", "sigma2", "sigma_init", "decision_samples", "kl_data", "kl_scale", "bbb_optimizer", "bbb_lr", "log_every",
                "exact_noise", "workers")
        d = {k: getattr(self, k) for k in keys}
        d["agents"] = [parse_agent(a).name for a in self.agents]
        d["seeds"] = [int(s) for s in self.seeds]
        d["hidden"] = [int(h) for h in self.hidden]
        return d


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


def mushroom_rewards(edible: Tensor, eat: Tensor, lucky: Tensor) -> Tensor:
    """Realised reward: +5 edible eaten; -35 (or +5 when ``lucky``) poisonous eaten; 0 passed."""
    eaten = torch.where(edible | lucky, REWARD_EDIBLE, REWARD_POISON_BAD)
    return torch.where(eat, eaten, REWARD_PASS)


def oracle_rewards(edible: Tensor) -> Tensor:
    """The oracle eats exactly the edible mushrooms: 5 or 0."""
    return torch.where(edible, REWARD_EDIBLE, REWARD_PASS)


def expected_rewards(edible: Tensor, eat: Tensor) -> Tensor:
    """Expected reward of the chosen action: eating is worth 5 (edible) or -15 (poisonous)."""
    return torch.where(eat, torch.where(edible, REWARD_EDIBLE, EXPECTED_POISON), REWARD_PASS)


def step_regrets(edible: Tensor, eat: Tensor, lucky: Tensor) -> tuple[Tensor, Tensor]:
    """(realised, expected) regret of one decision per element."""
    oracle = oracle_rewards(edible)
    return oracle - mushroom_rewards(edible, eat, lucky), oracle - expected_rewards(edible, eat)


def _env_draws(seed: int, steps: int, num_contexts: int) -> tuple[Tensor, Tensor]:
    """Mushroom indices and poisonous coin flips for ``steps`` steps of one seed.

    Drawn in fixed chunks with their own generators, so a longer run extends a shorter one.
    """
    idx, lucky = [], []
    for c in range((steps + _ENV_CHUNK - 1) // _ENV_CHUNK):
        g = torch.Generator().manual_seed(1_000_003 * (int(seed) + 1) + 7919 * c)
        idx.append(torch.randint(0, num_contexts, (_ENV_CHUNK,), generator=g))
        lucky.append(torch.rand(_ENV_CHUNK, generator=g) < 0.5)
    return torch.cat(idx)[:steps], torch.cat(lucky)[:steps]


# --------------------------------------------------------------------------------------------
# A population of MLPs with hand-written forward and backward passes
# --------------------------------------------------------------------------------------------


class MLPLayout:
    """Where each layer lives in a flat parameter vector of S numbers per member.

    Layer l is an ``(in_l + 1, out_l)`` block, row ``in_l`` being the bias: an input carries a
    trailing constant 1 and every hidden activation gets one too, so each layer is a single
    ``bmm`` and its bias gradient comes out of the weight gradient's ``bmm``.
    """

    def __init__(self, in_features: int, hidden: Sequence[int], out_features: int = 1) -> None:
        self.sizes = [int(in_features), *[int(h) for h in hidden], int(out_features)]
        self.blocks: list[tuple[int, int, int]] = []
        off = 0
        for a, b in zip(self.sizes[:-1], self.sizes[1:]):
            self.blocks.append((off, a + 1, b))
            off += (a + 1) * b
        self.size = off

    @property
    def in_features(self) -> int:
        return self.sizes[0]

    def views(self, flat: Tensor) -> list[Tensor]:
        """``flat`` (M, S) -> per layer (M, in_l + 1, out_l) views (no copy)."""
        m = flat.shape[0]
        return [flat[:, o:o + r * c].view(m, r, c) for o, r, c in self.blocks]

    def init_(self, flat: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """torch.nn.Linear's default: weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
        for (_, rows, _), v in zip(self.blocks, self.views(flat)):
            bound = 1.0 / math.sqrt(rows - 1)
            u = torch.rand(v.shape, generator=generator, dtype=torch.float32)
            v.copy_(u.mul_(2 * bound).sub_(bound))
        return flat


@dataclass
class _Activations:
    hs: list[Tensor]  # the input of each layer, with its trailing ones column
    out: Tensor


class _Workspace:
    """Hidden-activation buffers (with their ones column) reused across calls of one shape."""

    def __init__(self) -> None:
        self._bufs: dict[tuple, list[Tensor]] = {}

    def get(self, layout: MLPLayout, m: int, b: int, like: Tensor) -> list[Tensor]:
        key = (m, b, like.device, like.dtype)
        bufs = self._bufs.get(key)
        if bufs is None:
            bufs = []
            for h in layout.sizes[1:-1]:
                t = torch.empty(m, b, h + 1, device=like.device, dtype=like.dtype)
                t[..., h] = 1.0
                bufs.append(t)
            self._bufs[key] = bufs
        return bufs


def mlp_forward(layout: MLPLayout, w: Tensor, x: Tensor, workspace: _Workspace | None = None) -> _Activations:
    """ReLU MLP of M members: weights ``w`` (M, S), inputs ``x`` (M, B, in + 1) (last column 1).

    Returns the output (M, B, out) and the per-layer inputs the backward pass needs.
    """
    m, b = x.shape[0], x.shape[1]
    views = layout.views(w)
    bufs = (workspace or _Workspace()).get(layout, m, b, x)
    hs = [x]
    h = x
    for i, v in enumerate(views[:-1]):
        z = torch.bmm(h, v)
        hb = bufs[i]
        torch.clamp_min(z, 0.0, out=hb[..., : z.shape[-1]])
        hs.append(hb)
        h = hb
    return _Activations(hs, torch.bmm(h, views[-1]))


def mlp_backward(layout: MLPLayout, w: Tensor, acts: _Activations, dout: Tensor, grad: Tensor) -> Tensor:
    """Write dL/dw into ``grad`` (M, S) given dL/d(output) ``dout`` (M, B, out); returns ``grad``."""
    views = layout.views(w)
    gviews = layout.views(grad)
    d = dout
    for i in range(len(views) - 1, -1, -1):
        h = acts.hs[i]
        torch.bmm(h.transpose(1, 2), d, out=gviews[i])
        if i > 0:
            dh = torch.bmm(d, views[i][:, :-1, :].transpose(1, 2))
            d = torch.ops.aten.threshold_backward(dh, h[..., :-1], 0.0)
    return grad


# --------------------------------------------------------------------------------------------
# Fused Adam over flat tensors
# --------------------------------------------------------------------------------------------


class _SGD:
    """Plain SGD over tensors whose ``.grad`` the caller fills (no state)."""

    def __init__(self, params: list[Tensor], lr: float) -> None:
        self.params, self.lr = params, float(lr)

    def step(self) -> None:
        torch._foreach_add_(self.params, [p.grad for p in self.params], alpha=-self.lr)

    def state(self) -> dict[str, Any]:
        return {}

    def load(self, st: dict[str, Any]) -> None:
        pass


#: training-key entries added after the first checkpoints were written, with the value those
#: checkpoints implied (so an older checkpoint still resumes)
_KEY_DEFAULTS: dict[str, Any] = {"bbb_optimizer": "adam", "bbb_lr": None}


class _Adam:
    """Adam over a list of tensors whose ``.grad`` the caller fills; one fused call per step.

    Adam is elementwise, so population members never influence each other.
    """

    def __init__(self, params: list[Tensor], lr: float, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = params
        self.lr, self.betas, self.eps = float(lr), betas, float(eps)
        self.exp_avg = [torch.zeros_like(p) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in params]
        dev = params[0].device
        self.step_t = torch.zeros((), dtype=torch.float32, device=dev)
        self._fused = hasattr(torch, "_fused_adam_") and dev.type in ("cpu", "cuda")
        if not self._fused:  # pragma: no cover - old torch / other devices
            ps = [torch.nn.Parameter(p, requires_grad=False) for p in params]
            self._opt = torch.optim.Adam(ps, lr=lr, betas=betas, eps=eps)

    def step(self) -> None:
        grads = [p.grad for p in self.params]
        if self._fused:
            self.step_t += 1
            n = len(self.params)
            torch._fused_adam_(self.params, grads, self.exp_avg, self.exp_avg_sq, [], [self.step_t] * n,
                               amsgrad=False, lr=self.lr, beta1=self.betas[0], beta2=self.betas[1],
                               weight_decay=0.0, eps=self.eps, maximize=False)
        else:  # pragma: no cover
            for q, g in zip(self._opt.param_groups[0]["params"], grads):
                q.grad = g
            self._opt.step()

    def state(self) -> dict[str, Any]:
        if not self._fused:  # pragma: no cover
            return {"opt": self._opt.state_dict()}
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "step": self.step_t}

    def load(self, st: dict[str, Any]) -> None:
        if not self._fused:  # pragma: no cover
            self._opt.load_state_dict(st["opt"])
            return
        for a, b in zip(self.exp_avg, st["exp_avg"]):
            a.copy_(b)
        for a, b in zip(self.exp_avg_sq, st["exp_avg_sq"]):
            a.copy_(b)
        self.step_t.copy_(st["step"])


# --------------------------------------------------------------------------------------------
# Sub-populations (deterministic or Bayesian) with their replay buffers
# --------------------------------------------------------------------------------------------


class _SubPopulation:
    """Members sharing one kind of network: ``mu`` only, or ``mu`` and ``log_sigma`` (BBB).

    The BBB posterior std is parameterised as sigma = exp(log_sigma) here rather than the
    library's softplus(rho): for the small sigmas of this task the two coincide
    (softplus(rho) ~ exp(rho) for rho < -3), and exp with its derivative sigma is several
    times cheaper on a CPU than softplus with its sigmoid derivative.
    """

    def __init__(self, layout: MLPLayout, seeds: Sequence[int], bayesian: bool, cfg: BanditConfig,
                 device: torch.device) -> None:
        self.layout = layout
        self.bayesian = bayesian
        self.cfg = cfg
        p, s = len(seeds), layout.size
        self.size = p
        mu = torch.empty(p, s)
        for i, seed in enumerate(seeds):  # the initial weights depend on the seed only
            layout.init_(mu[i:i + 1], torch.Generator().manual_seed(7_777_777 + int(seed)))
        self.mu = mu.to(device)
        self.mu.grad = torch.zeros_like(self.mu)
        self.params = [self.mu]
        if bayesian:
            self.log_sigma = torch.full((p, s), math.log(cfg.sigma_init), device=device)
            self.log_sigma.grad = torch.zeros_like(self.log_sigma)
            self.params.append(self.log_sigma)
            self.kl_scale = 1.0 / cfg.prior_sigma**2
            self.data_scale = 1.0 / (cfg.batch_size * cfg.noise_sigma**2)
            self.grad_w = torch.zeros_like(self.mu)
        else:
            self.data_scale = 1.0 / cfg.batch_size
            self.grad_w = self.mu.grad  # dL/dw is dL/dmu
        d = layout.in_features + 1
        self.xbuf = torch.zeros(p, cfg.buffer, d, device=device)
        self.xbuf[..., -1] = 1.0
        self.rbuf = torch.zeros(p, cfg.buffer, device=device)
        self.row_offset = (torch.arange(p, device=device) * cfg.buffer).view(p, 1)
        self.ws = _Workspace()

    # -- acting ---------------------------------------------------------------------------
    def values(self, x: Tensor, num_samples: int, noise: _NoiseBank) -> Tensor:
        """Predicted reward of every action: x (P, A, in + 1) -> (P, A).

        BBB members average ``num_samples`` sampled networks; deterministic ones use mu.
        """
        if not self.bayesian:
            return mlp_forward(self.layout, self.mu, x, self.ws).out.squeeze(-1)
        p, a, d = x.shape
        k = num_samples
        eps = noise.draw((p, k, self.layout.size))
        w = torch.addcmul(self.mu.unsqueeze(1), torch.exp(self.log_sigma).unsqueeze(1), eps)
        xk = x.unsqueeze(1).expand(p, k, a, d).reshape(p * k, a, d)
        out = mlp_forward(self.layout, w.view(p * k, -1), xk, self.ws).out
        return out.view(p, k, a).mean(1)

    def store(self, pos: int, x: Tensor, r: Tensor) -> None:
        self.xbuf[:, pos] = x
        self.rbuf[:, pos] = r

    # -- learning -------------------------------------------------------------------------
    def compute_grads(self, idx: Tensor, eps: Tensor | None, num_data: int) -> Tensor:
        """Fill ``.grad`` of the parameters for one minibatch per member; returns the outputs.

        ``idx`` (P, B): buffer rows; ``eps`` (P, S): weight noise (BBB); ``num_data``: buffer fill.
        """
        p, b = idx.shape
        flat = (idx + self.row_offset).view(-1)
        x = self.xbuf.view(p * self.cfg.buffer, -1).index_select(0, flat).view(p, b, -1)
        y = self.rbuf.view(-1).index_select(0, flat).view(p, b, 1)
        if self.bayesian:
            assert eps is not None
            sigma = torch.exp(self.log_sigma)
            w = torch.addcmul(self.mu, sigma, eps)
        else:
            w = self.mu
        acts = mlp_forward(self.layout, w, x, self.ws)
        dout = (acts.out - y).mul_(self.data_scale)
        mlp_backward(self.layout, w, acts, dout, self.grad_w)
        if self.bayesian and self.cfg.prior == "mixture":
            self._mixture_grads(w, eps, sigma, self.cfg.kl_scale / num_data)
        elif self.bayesian:
            kw = self.cfg.kl_scale / num_data  # KL / N per example
            g = self.grad_w
            # d/dmu [KL(q || N(0, s^2))] = mu / s^2
            torch.add(g, self.mu, alpha=kw * self.kl_scale, out=self.mu.grad)
            # d/dlog_sigma: (dL/dw) eps sigma + kw (sigma^2 / s^2 - 1)
            gs = self.log_sigma.grad
            torch.mul(g, eps, out=gs)
            gs.mul_(sigma)
            gs.addcmul_(sigma, sigma, value=kw * self.kl_scale)
            gs.sub_(kw)
        return acts.out

    def _mixture_grads(self, w: Tensor, eps: Tensor, sigma: Tensor, kw: float) -> None:
        """Gradients of mean NLL + kw * (log q(w) - log p(w)) for the scale-mixture prior.

        The Monte Carlo KL on the forward pass's own weights (the paper's estimator); with
        log q written through eps, d/dmu log q = 0 and d/dlog_sigma log q = -1, so
        g_w = dNLL/dw - kw dlog p/dw, g_mu = g_w and g_log_sigma = g_w eps sigma - kw.
        -dlog p/dw = w (r1 / s1^2 + r2 / s2^2) with r the component responsibilities.
        """
        c = self.cfg
        a1, a2 = 1.0 / c.sigma1**2, 1.0 / c.sigma2**2
        # log-odds of component 1: log(pi/s1) - log((1-pi)/s2) + (a2 - a1) w^2 / 2
        odds0 = (math.log(c.pi) - math.log(c.sigma1)) - (math.log1p(-c.pi) - math.log(c.sigma2))
        coef = torch.mul(w, w).mul_(0.5 * (a2 - a1)).add_(odds0)
        coef.sigmoid_().mul_(a1 - a2).add_(a2)  # r1 a1 + (1 - r1) a2
        gmu = self.mu.grad
        torch.addcmul(self.grad_w, w, coef, value=kw, out=gmu)
        gs = self.log_sigma.grad
        torch.mul(gmu, eps, out=gs)
        gs.mul_(sigma).sub_(kw)

    def kl(self) -> Tensor:
        """KL[q || prior] of each BBB member (P,): closed form (Gaussian prior) or a 1-sample MC estimate."""
        if self.cfg.prior == "mixture":
            prior = make_prior("mixture", pi=self.cfg.pi, sigma1=self.cfg.sigma1,
                               sigma2=self.cfg.sigma2)
            sigma = torch.exp(self.log_sigma)
            eps = torch.randn_like(sigma)
            w = self.mu + sigma * eps
            log_q = -self.log_sigma - 0.5 * math.log(2 * math.pi) - 0.5 * eps * eps
            return (log_q - prior.log_prob(w)).sum(1)
        s = self.cfg.prior_sigma
        ratio = torch.exp(self.log_sigma) / s
        return (0.5 * (ratio * ratio + (self.mu / s) ** 2) - torch.log(ratio) - 0.5).sum(1)

    # -- checkpoints ----------------------------------------------------------------------
    def state(self) -> dict[str, Tensor]:
        st = {"mu": self.mu, "xbuf": self.xbuf, "rbuf": self.rbuf}
        if self.bayesian:
            st["log_sigma"] = self.log_sigma
        return st

    def load(self, st: dict[str, Tensor]) -> None:
        self.mu.copy_(st["mu"])
        self.xbuf.copy_(st["xbuf"])
        self.rbuf.copy_(st["rbuf"])
        if self.bayesian:
            self.log_sigma.copy_(st["log_sigma"])


class _NoiseBank:
    """N(0, 1) noise for the training updates: a random window of a bank redrawn now and then."""

    def __init__(self, n: int, exact: bool, generator: torch.Generator, device: torch.device,
                 seed: int) -> None:
        self.n, self.exact, self.gen, self.device = n, exact, generator, device
        self.size = max(1 << 22, 16 * n)  # n: the largest draw (the decision's k samples)
        self.rng = random.Random(seed)
        self.calls = 0
        self.bank = None if exact else torch.randn(self.size, generator=generator, device=device)

    def draw(self, shape: tuple[int, ...]) -> Tensor:
        if self.exact:
            return torch.randn(shape, generator=self.gen, device=self.device)
        n = math.prod(shape)
        self.calls += 1
        if self.calls % _BANK_REFRESH == 0:
            self.bank.normal_(generator=self.gen)
        off = self.rng.randrange(0, self.size - n + 1)
        return self.bank[off:off + n].view(shape)


# --------------------------------------------------------------------------------------------
# The population: environment loop, logging and checkpoints
# --------------------------------------------------------------------------------------------


@dataclass
class _Member:
    agent: Agent
    seed: int


class Population:
    """Every (agent, seed) member, batched; call :meth:`run` to play ``steps`` interactions.

    ``members``: (agent name, seed) pairs; ``contexts`` (n, d) float; ``edible`` (n,) bool.
    """

    def __init__(self, cfg: BanditConfig, members: Sequence[tuple[str, int]], contexts: Tensor,
                 edible: Tensor, device: torch.device | str = "cpu", train_seed: int = 0) -> None:
        cfg.validate()
        if contexts.dim() != 2 or edible.shape != contexts.shape[:1]:
            raise UserError(f"contexts must be (n, d) and edible (n,), got {tuple(contexts.shape)} "
                            f"and {tuple(edible.shape)}")
        if contexts.shape[0] < 1:
            raise UserError("the bandit needs at least one context")
        self.cfg = cfg
        self.device = torch.device(device)
        self.members = [_Member(parse_agent(a), int(s)) for a, s in members]
        if not self.members:
            raise UserError("the population is empty")
        self.contexts = contexts.to(self.device, torch.float32)
        self.edible = edible.to(self.device, torch.bool)
        self.layout = MLPLayout(contexts.shape[1] + NUM_ACTIONS, cfg.hidden, 1)
        self.gen = torch.Generator(device=self.device).manual_seed(10_007 * (train_seed + 1))
        self.seed_list = sorted({m.seed for m in self.members})
        self.bbb_idx = [i for i, m in enumerate(self.members) if m.agent.bayesian]
        self.det_idx = [i for i, m in enumerate(self.members) if not m.agent.bayesian]
        self.subpops: list[tuple[list[int], _SubPopulation]] = []
        for ids, bayes in ((self.det_idx, False), (self.bbb_idx, True)):
            if ids:
                sp = _SubPopulation(self.layout, [self.members[i].seed for i in ids], bayes, cfg, self.device)
                self.subpops.append((ids, sp))
        # one fused Adam over every member; with another optimiser (or rate) for the BBB
        # members, those get their own (still one call for all of them)
        own = cfg.bbb_optimizer != "adam" or (cfg.bbb_lr is not None and cfg.bbb_lr != cfg.lr)
        groups = ([[p for _, sp in self.subpops if not sp.bayesian for p in sp.params],
                   [p for _, sp in self.subpops if sp.bayesian for p in sp.params]] if own
                  else [[p for _, sp in self.subpops for p in sp.params]])
        self.opts: list[_Adam | _SGD] = []
        for i, params in enumerate(groups):
            if not params:
                continue
            bbb_group = own and i == 1
            lr = (cfg.bbb_lr or cfg.lr) if bbb_group else cfg.lr
            self.opts.append(_SGD(params, lr) if bbb_group and cfg.bbb_optimizer == "sgd" else _Adam(params, lr))
        p_all = len(self.members)
        self._sub_index = [(None if len(ids) == p_all else torch.tensor(ids, device=self.device), sp)
                           for ids, sp in self.subpops]
        n_bbb = len(self.bbb_idx) * self.layout.size * max(1, cfg.decision_samples)
        self.noise = _NoiseBank(n_bbb, cfg.exact_noise, self.gen, self.device, 31 * train_seed + 5)
        p = len(self.members)
        self.epsilon = torch.tensor([m.agent.epsilon for m in self.members], device=self.device)
        self.cum_regret = torch.zeros(p, dtype=torch.float64, device=self.device)
        self.cum_expected = torch.zeros(p, dtype=torch.float64, device=self.device)
        self.eat_ring = torch.zeros(1000, p, dtype=torch.bool, device=self.device)  # last 1000 decisions
        self.step = 0
        self.seconds = 0.0
        self.log_steps: list[int] = []
        self.log_regret: list[Tensor] = []
        self.log_expected: list[Tensor] = []
        self._env_steps = 0
        self._member_seed_pos = torch.tensor([self.seed_list.index(m.seed) for m in self.members],
                                             device=self.device)

    def member_slot(self, j: int) -> tuple[_SubPopulation, int]:
        """The sub-population holding member ``j`` and its row there."""
        for ids, sp in self.subpops:
            if j in ids:
                return sp, ids.index(j)
        raise IndexError(j)

    # -- environment ----------------------------------------------------------------------
    def _ensure_env(self, steps: int) -> None:
        if steps <= self._env_steps:
            return
        n = self.contexts.shape[0]
        draws = [_env_draws(s, steps, n) for s in self.seed_list]
        self.env_idx = torch.stack([d[0] for d in draws]).to(self.device)  # (seeds, steps)
        self.env_lucky = torch.stack([d[1] for d in draws]).to(self.device)
        self._env_steps = steps

    # -- one interaction ------------------------------------------------------------------
    def _act_and_learn(self, t: int) -> None:
        cfg = self.cfg
        p = len(self.members)
        mush = self.env_idx[self._member_seed_pos, t]  # (P,)
        lucky = self.env_lucky[self._member_seed_pos, t]
        ctx = self.contexts[mush]  # (P, d)
        edible = self.edible[mush]
        d = self.layout.in_features + 1
        x = torch.zeros(p, NUM_ACTIONS, d, device=self.device)
        x[:, :, : ctx.shape[1]] = ctx.unsqueeze(1)
        x[:, PASS, ctx.shape[1] + PASS] = 1.0
        x[:, EAT, ctx.shape[1] + EAT] = 1.0
        x[:, :, -1] = 1.0
        values = torch.empty(p, NUM_ACTIONS, device=self.device)
        for sl, sp in self._sub_index:
            xs = x if sl is None else x.index_select(0, sl)
            v = sp.values(xs, cfg.decision_samples, self.noise)
            if sl is None:
                values = v
            else:
                values.index_copy_(0, sl, v)
        # ties (e.g. identical predictions) go to "do not eat"
        action = (values[:, EAT] > values[:, PASS]).long()
        explore = torch.rand(p, generator=self.gen, device=self.device) < self.epsilon
        random_action = torch.randint(0, NUM_ACTIONS, (p,), generator=self.gen, device=self.device)
        action = torch.where(explore, random_action, action)
        eat = action == EAT
        reward = mushroom_rewards(edible, eat, lucky)
        regret, expected = step_regrets(edible, eat, lucky)
        self.cum_regret += regret.double()
        self.cum_expected += expected.double()
        self.eat_ring[t % self.eat_ring.shape[0]] = eat
        # store the interaction: the chosen action's input row and its reward
        chosen = x[torch.arange(p, device=self.device), action]
        pos = t % cfg.buffer
        for sl, sp in self._sub_index:
            sp.store(pos, chosen if sl is None else chosen.index_select(0, sl),
                     reward if sl is None else reward.index_select(0, sl))
        filled = min(t + 1, cfg.buffer)
        for _ in range(cfg.updates_per_step):
            self.update(filled, num_data=self.kl_data_size(t + 1))

    def kl_data_size(self, seen: int) -> int:
        """N of the KL / N weight after ``seen`` interactions (see ``BanditConfig.kl_data``)."""
        mode = self.cfg.kl_data
        if mode == "fill":
            return min(seen, self.cfg.buffer)
        if mode == "capacity":
            return self.cfg.buffer
        return seen

    def update(self, filled: int, idx: Tensor | None = None, eps: Tensor | None = None,
               num_data: int | None = None) -> None:
        """One Adam step for every member on a minibatch of its own buffer (rows < ``filled``).

        ``idx`` (P, B) in member order and ``eps`` (P_bbb, S) may be given (tests); else drawn.
        """
        b = self.cfg.batch_size
        for sel, sp in self._sub_index:
            if idx is None:
                sidx = torch.randint(0, filled, (sp.size, b), generator=self.gen, device=self.device)
            else:
                sidx = idx if sel is None else idx.index_select(0, sel)
            e = None
            if sp.bayesian:
                e = eps if eps is not None else self.noise.draw((sp.size, self.layout.size))
            sp.compute_grads(sidx, e, filled if num_data is None else num_data)
        for opt in self.opts:
            opt.step()

    # -- the loop -------------------------------------------------------------------------
    def _log(self) -> None:
        self.log_steps.append(self.step)
        self.log_regret.append(self.cum_regret.clone())
        self.log_expected.append(self.cum_expected.clone())

    def run(self, steps: int, checkpoint: Path | None = None, progress: bool = False,
            label: str = "", stop: Callable[[], bool] | None = None) -> bool:
        """Play until ``self.step == steps`` (continuing a resumed population).

        ``stop`` is asked after every step; when it answers True the population saves its
        checkpoint and returns False (a worker whose parent died). Returns True when done.
        """
        cfg = self.cfg
        self._ensure_env(steps)
        t0 = time.perf_counter()
        seg_start = self.seconds
        last_ckpt = last_print = t0
        step0 = self.step
        while self.step < steps:
            if stop is not None and stop():
                if checkpoint is not None:
                    self.save(checkpoint)
                return False
            self._act_and_learn(self.step)
            self.step += 1
            if self.step % cfg.log_every == 0 or self.step == steps:
                self._log()
            now = time.perf_counter()
            self.seconds = seg_start + (now - t0)
            if checkpoint is not None and now - last_ckpt >= cfg.checkpoint_every:
                self.save(checkpoint)
                last_ckpt = now
            if progress and now - last_print >= cfg.progress_every:
                last_print = now
                rate = (self.step - step0) / max(now - t0, 1e-9)
                eta = (steps - self.step) / max(rate, 1e-9)
                print(f"bandit{label}: step {self.step}/{steps} ({rate:.1f} steps/s, "
                      f"{rate * cfg.updates_per_step:.0f} updates/s, ETA {_fmt_s(eta)}); "
                      f"mean regret {self.regret_by_agent()}", flush=True)
        if checkpoint is not None:
            self.save(checkpoint)
        return True

    def regret_by_agent(self) -> str:
        out = {}
        for i, m in enumerate(self.members):
            out.setdefault(m.agent.name, []).append(float(self.cum_regret[i]))
        return ", ".join(f"{k} {sum(v) / len(v):.0f}" for k, v in out.items())

    def eat_rate(self) -> Tensor:
        """Fraction of the last (up to) 1000 mushrooms each member ate."""
        n = min(self.step, self.eat_ring.shape[0])
        if n == 0:
            return torch.zeros(len(self.members))
        return self.eat_ring[:n].float().mean(0).cpu()

    # -- checkpoints ----------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "key": self.cfg.training_key(),
            "members": [(m.agent.name, m.seed) for m in self.members],
            "step": self.step,
            "seconds": self.seconds,
            "subpops": [sp.state() for _, sp in self.subpops],
            "adam": self.opts[0].state(),
            "opts_extra": [o.state() for o in self.opts[1:]],
            "cum_regret": self.cum_regret,
            "cum_expected": self.cum_expected,
            "eat_ring": self.eat_ring,
            "log_steps": self.log_steps,
            "log_regret": self.log_regret,
            "log_expected": self.log_expected,
            "gen": self.gen.get_state(),
            "noise_rng": self.noise.rng.getstate(),
            "noise_calls": self.noise.calls,
            "bank": self.noise.bank,
        }

    def save(self, path: Path) -> None:
        atomic_torch_save(path, self.state())

    def load(self, path: Path) -> bool:
        """Resume from ``path`` if it exists; UserError if it belongs to another configuration."""
        if not path.exists():
            return False
        try:
            st = torch.load(path, map_location=self.device, weights_only=True)
        except Exception as e:  # noqa: BLE001 - any unreadable file is the same user problem
            raise UserError(f"cannot read the bandit checkpoint {path} ({type(e).__name__}); "
                            f"delete it or run with --fresh") from None
        stored = {**_KEY_DEFAULTS, **st.get("key", {})}
        if stored != self.cfg.training_key() or st.get("members") != [
                (m.agent.name, m.seed) for m in self.members]:
            raise UserError(f"{path} was written with other settings; use the same options, another "
                            f"--out, or --fresh to start over")
        if st["step"] > self.cfg.steps:
            raise UserError(f"{path} is at step {st['step']}, beyond --steps {self.cfg.steps}; "
                            f"raise --steps or use --fresh")
        for (_, sp), s in zip(self.subpops, st["subpops"]):
            sp.load(s)
        self.opts[0].load(st["adam"])
        for o, ost in zip(self.opts[1:], st.get("opts_extra", [])):
            o.load(ost)
        self.cum_regret.copy_(st["cum_regret"])
        self.cum_expected.copy_(st["cum_expected"])
        self.eat_ring.copy_(st["eat_ring"])
        self.step = int(st["step"])
        self.seconds = float(st["seconds"])
        self.log_steps = list(st["log_steps"])
        self.log_regret = list(st["log_regret"])
        self.log_expected = list(st["log_expected"])
        self.gen.set_state(st["gen"])
        self.noise.rng.setstate(st["noise_rng"])
        self.noise.calls = int(st["noise_calls"])
        if st["bank"] is not None and self.noise.bank is not None:
            self.noise.bank.copy_(st["bank"])
        return True

    def results(self) -> dict[str, Any]:
        return {
            "members": [(m.agent.name, m.seed) for m in self.members],
            "log_steps": list(self.log_steps),
            "log_regret": torch.stack(self.log_regret).cpu() if self.log_regret else torch.zeros(0, len(self.members)),
            "log_expected": torch.stack(self.log_expected).cpu() if self.log_expected else torch.zeros(0, len(self.members)),
            "eat_rate": self.eat_rate(),
            "seconds": self.seconds,
        }


def _fmt_s(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{(s % 3600) // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


# --------------------------------------------------------------------------------------------
# Running (optionally over several worker processes)
# --------------------------------------------------------------------------------------------


def _split_members(members: list[tuple[str, int]], workers: int) -> list[list[tuple[str, int]]]:
    """Round-robin over the member list (grouped by agent), so each worker gets a similar mix."""
    groups = [members[i::workers] for i in range(workers)]
    return [g for g in groups if g]


def _worker(cfg: BanditConfig, members: list[tuple[str, int]], contexts: Tensor, edible: Tensor,
            worker_id: int, checkpoint: str | None, progress: bool,
            parent_pid: int | None = None) -> dict[str, Any]:
    threads_before = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    # Adam's first moments of weights without gradient (features absent from a minibatch, dead
    # units) decay by 0.9 per update into subnormal floats, which made each update ~2x slower
    flushed = torch.set_flush_denormal(True)
    try:
        dev = resolve_device(cfg.device)
        pop = Population(cfg, members, contexts, edible, dev, train_seed=worker_id)
        ck = Path(checkpoint) if checkpoint else None
        resumed = pop.load(ck) if (ck is not None and cfg.resume) else False
        if resumed and progress:
            print(f"bandit: resumed worker {worker_id} from {ck} at step {pop.step}", flush=True)
        label = f"[w{worker_id}]" if cfg.workers > 1 else ""
        stop = None
        if parent_pid is not None:  # a worker process: stop (checkpointed) if the parent dies
            def stop() -> bool:
                return os.getppid() != parent_pid
        if not pop.run(cfg.steps, ck, progress=progress, label=label, stop=stop):
            # the pool would catch SystemExit and keep this process waiting for work: leave now
            print(f"bandit worker {worker_id}: the parent process ended; saved {ck}", file=sys.stderr, flush=True)
            os._exit(3)
        return pop.results()
    finally:
        torch.set_num_threads(threads_before)
        if flushed:
            torch.set_flush_denormal(False)


def run_bandit(config: BanditConfig | None = None, contexts: Tensor | None = None,
               edible: Tensor | None = None, **overrides: Any) -> dict[str, Any]:
    """Run the bandit experiment; write its files when ``config.out`` is set.

    ``contexts``/``edible`` default to UCI Mushroom (:func:`bbb.data.load_mushroom`). Returns a
    dict with ``regret_rows`` (the rows of regret.csv), ``summary`` (rows of summary.csv),
    ``seconds`` and the written ``files``.
    """
    cfg = dataclasses.replace(config or BanditConfig(), **overrides)
    cfg.agents = tuple(parse_agent(a).name for a in cfg.agents)
    cfg.seeds = tuple(int(s) for s in cfg.seeds)
    cfg.hidden = tuple(int(h) for h in cfg.hidden)
    cfg.validate()
    dev = resolve_device(cfg.device)
    if contexts is None or edible is None:
        from ..data import load_mushroom

        contexts, edible = load_mushroom(cfg.data_dir)
    contexts = torch.as_tensor(contexts, dtype=torch.float32)
    edible = torch.as_tensor(edible).bool()
    members = [(a, s) for a in cfg.agents for s in cfg.seeds]
    workers = min(cfg.workers, len(members))
    if dev.type == "cuda":
        workers = 1
    groups = _split_members(members, workers)
    out = Path(cfg.out) if cfg.out else None
    ckdir = None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        ckdir = out / "checkpoint"
        ckdir.mkdir(exist_ok=True)
        if not cfg.resume:
            for f in ckdir.glob("worker*.pt"):
                f.unlink()
    progress = not cfg.quiet
    if progress:
        print(f"bandit: {len(cfg.agents)} agents x {len(cfg.seeds)} seeds x {cfg.steps} steps, "
              f"{cfg.updates_per_step} updates of {cfg.batch_size} per step, buffer {cfg.buffer}; "
              f"{len(groups)} worker(s) x {cfg.threads} thread(s) on {dev}", flush=True)
    t0 = time.perf_counter()
    paths = [None if ckdir is None else str(ckdir / f"worker{i}.pt") for i in range(len(groups))]
    if len(groups) == 1:
        results = [_worker(cfg, groups[0], contexts, edible, 0, paths[0], progress)]
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        ctx = mp.get_context("spawn")
        with ProcessPoolExecutor(len(groups), mp_context=ctx) as ex:
            futs = [ex.submit(_worker, cfg, g, contexts, edible, i, paths[i], progress and i == 0, os.getpid())
                    for i, g in enumerate(groups)]
            results = [f.result() for f in futs]
    wall = time.perf_counter() - t0
    seconds = max(r["seconds"] for r in results)
    rows, summary = _tabulate(cfg, results, seconds)
    res: dict[str, Any] = {"regret_rows": rows, "summary": summary, "seconds": seconds,
                           "wall_seconds": wall, "config": cfg, "files": []}
    if out is not None:
        res["files"] = _write_outputs(out, cfg, rows, summary, seconds, len(groups))
    if progress:
        for s in summary:
            print(f"  {s['agent']:>14s}: regret {s['final_regret_mean']:.0f} +- {s['final_regret_sd']:.0f}"
                  f" (expected {s['final_expected_regret_mean']:.0f}), eats {s['eat_rate_last_1000']:.1%}"
                  f" of the last 1000")
        print(f"bandit: {_fmt_s(seconds)} of training" + (f"; wrote {out}" if out else ""), flush=True)
    return res


def _sd(t: Tensor) -> float:
    return float(t.std(unbiased=True)) if t.numel() > 1 else 0.0


def _tabulate(cfg: BanditConfig, results: list[dict[str, Any]], seconds: float):
    rows: list[dict[str, Any]] = []
    final: dict[str, list[tuple[float, float, float]]] = {}
    for r in results:
        steps = r["log_steps"]
        for j, (agent, seed) in enumerate(r["members"]):
            for i, st in enumerate(steps):
                rows.append({"step": st, "agent": agent, "seed": seed,
                             "cumulative_regret": float(r["log_regret"][i, j]),
                             "cumulative_expected_regret": float(r["log_expected"][i, j])})
            if steps:
                final.setdefault(agent, []).append((float(r["log_regret"][-1, j]),
                                                    float(r["log_expected"][-1, j]),
                                                    float(r["eat_rate"][j])))
    order = {a: i for i, a in enumerate(cfg.agents)}
    rows.sort(key=lambda d: (d["step"], order[d["agent"]], d["seed"]))
    summary = []
    for agent in cfg.agents:
        vals = final.get(agent, [])
        if not vals:
            continue
        reg = torch.tensor([v[0] for v in vals], dtype=torch.float64)
        exp_ = torch.tensor([v[1] for v in vals], dtype=torch.float64)
        eat = sum(v[2] for v in vals) / len(vals)
        summary.append({"agent": agent, "steps": cfg.steps, "seeds": len(vals),
                        "final_regret_mean": float(reg.mean()), "final_regret_sd": _sd(reg),
                        "final_expected_regret_mean": float(exp_.mean()),
                        "final_expected_regret_sd": _sd(exp_),
                        "eat_rate_last_1000": eat, "seconds": round(seconds, 1)})
    return rows, summary


def _csv_text(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return buf.getvalue()


def _write_outputs(out: Path, cfg: BanditConfig, rows, summary, seconds: float, workers: int) -> list[str]:
    files = []
    atomic_write_text(out / "regret.csv", _csv_text(rows, REGRET_COLUMNS))
    files.append("regret.csv")
    atomic_write_text(out / "summary.csv", _csv_text(summary, SUMMARY_COLUMNS))
    files.append("summary.csv")
    meta = {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()}
    meta.update({"seconds": round(seconds, 1), "workers_used": workers, "torch": torch.__version__,
                 "python": platform.python_version(), "machine": platform.machine(),
                 "processor": _cpu_name(), "cpu_count": os.cpu_count()})
    atomic_write_json(out / "config.json", meta)
    files.append("config.json")
    try:
        plot_regret(rows, out / "regret.png", agents=list(cfg.agents))
        files.append("regret.png")
    except ImportError:
        print("bandit: matplotlib is not installed; skipped regret.png (pip install matplotlib)",
              file=sys.stderr)
    return files


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------

_COLORS = {"bbb": "tab:red", "greedy": "tab:blue", "egreedy_0.01": "tab:green", "egreedy_0.05": "tab:purple"}


def plot_regret(rows: list[dict[str, Any]], path: str | os.PathLike[str], agents: Sequence[str] | None = None,
                expected: bool = False) -> Path:
    """Cumulative regret vs step on a log y axis: the mean over seeds and a min-max band (Fig. 6)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    col = "cumulative_expected_regret" if expected else "cumulative_regret"
    by: dict[str, dict[int, list[float]]] = {}
    for r in rows:
        by.setdefault(r["agent"], {}).setdefault(int(r["step"]), []).append(float(r[col]))
    agents = list(agents) if agents else list(by)
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for i, a in enumerate(agents):
        if a not in by:
            continue
        steps = sorted(by[a])
        vals = [by[a][s] for s in steps]
        mean = [sum(v) / len(v) for v in vals]
        lo = [min(v) for v in vals]
        hi = [max(v) for v in vals]
        c = _COLORS.get(a, f"C{i}")
        label = {"bbb": "BBB (Thompson, 2 samples)", "greedy": "greedy"}.get(
            a, a.replace("egreedy_", "") + " greedy" if a.startswith("egreedy_") else a)
        if a.startswith("egreedy_"):
            label = f"{float(a[8:]) * 100:g}% greedy"
        ax.plot(steps, [max(m, 1e-1) for m in mean], color=c, lw=1.6, label=label)
        ax.fill_between(steps, [max(v, 1e-1) for v in lo], [max(v, 1e-1) for v in hi], color=c, alpha=0.18, lw=0)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cumulative expected regret" if expected else "cumulative regret")
    nseeds = max((len(v) for d in by.values() for v in d.values()), default=0)
    ax.set_title(f"Mushroom bandit: mean over {nseeds} seed(s), band = min..max")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    from ..io import atomic_write_bytes

    atomic_write_bytes(path, buf.getvalue())
    return path


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

DESCRIPTION = (
    "Contextual bandit on UCI Mushroom (section 5.3, Fig. 6): Thompson sampling with a BBB "
    "network vs greedy and epsilon-greedy networks, all agents and seeds trained as one batched "
    "population. Writes regret.csv, summary.csv, regret.png and config.json to --out; a "
    "checkpoint under --out/checkpoint lets an interrupted run resume with the same command."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``bbb bandit`` options on ``parser``."""
    d = BanditConfig()
    parser.description = DESCRIPTION
    if not parser.epilog:
        parser.epilog = "Example:\n  " + EXAMPLE
    parser.add_argument("--out", required=True, help="output folder (created; resumed if it has a checkpoint)")
    parser.add_argument("--steps", type=int, default=d.steps, help=f"interactions per agent (default {d.steps})")
    parser.add_argument("--agents", nargs="+", default=list(d.agents),
                        help="bbb, greedy, egreedy_<eps> (default: %(default)s)")
    parser.add_argument("--seeds", "--seed", nargs="+", type=int, default=list(d.seeds),
                        help="seeds; each is one run of every agent (default: 0 1 2 3 4)")
    parser.add_argument("--updates-per-step", type=int, default=d.updates_per_step,
                        help=f"minibatch updates after each interaction (default {d.updates_per_step})")
    parser.add_argument("--batch-size", type=int, default=d.batch_size, help=f"minibatch size (default {d.batch_size})")
    parser.add_argument("--buffer", type=int, default=d.buffer,
                        help=f"replay buffer: the latest N interactions (default {d.buffer})")
    parser.add_argument("--hidden", nargs="+", type=int, default=list(d.hidden),
                        help="hidden layer widths (default: 100 100)")
    parser.add_argument("--lr", type=float, default=d.lr, help=f"Adam learning rate (default {d.lr:g})")
    parser.add_argument("--bbb-optimizer", choices=["adam", "sgd"], default=d.bbb_optimizer,
                        help="BBB: optimiser of the BBB members (default adam; sgd keeps the sigmas of "
                             "weights the data does not reach near their initial value)")
    parser.add_argument("--bbb-lr", type=float, default=d.bbb_lr,
                        help="BBB: learning rate of the BBB members (default: --lr)")
    parser.add_argument("--noise-sigma", type=float, default=d.noise_sigma,
                        help=f"BBB: std of the Gaussian reward likelihood (default {d.noise_sigma:g})")
    parser.add_argument("--prior", choices=["gaussian", "mixture"], default=d.prior,
                        help="BBB prior: gaussian (closed-form KL) or the paper's scale mixture (Monte Carlo KL)")
    parser.add_argument("--prior-sigma", type=float, default=d.prior_sigma,
                        help=f"BBB: std of the Gaussian prior on every weight (default {d.prior_sigma:g})")
    parser.add_argument("--pi", type=float, default=d.pi, help=f"BBB mixture prior weight (default {d.pi:g})")
    parser.add_argument("--sigma1", type=float, default=d.sigma1, help=f"BBB mixture prior std 1 (default {d.sigma1:g})")
    parser.add_argument("--sigma2", type=float, default=d.sigma2, help="BBB mixture prior std 2 (default e^-6)")
    parser.add_argument("--kl-data", choices=["fill", "capacity", "seen"], default=d.kl_data,
                        help="BBB: N in the KL / N weight: the buffer's current fill, its capacity, or every "
                             f"interaction seen so far (default {d.kl_data})")
    parser.add_argument("--kl-scale", type=float, default=d.kl_scale,
                        help=f"BBB: multiply the KL weight by this (< 1 tempers the posterior; default {d.kl_scale:g})")
    parser.add_argument("--sigma-init", type=float, default=d.sigma_init,
                        help=f"BBB: initial posterior std of every weight (default {d.sigma_init:g})")
    parser.add_argument("--decision-samples", type=int, default=d.decision_samples,
                        help=f"BBB: weight samples averaged per decision (default {d.decision_samples})")
    parser.add_argument("--log-every", type=int, default=d.log_every,
                        help=f"write regret.csv rows every N steps (default {d.log_every})")
    parser.add_argument("--exact-noise", action="store_true",
                        help="draw fresh weight noise for every update (slower) instead of the noise bank")
    parser.add_argument("--workers", type=int, default=d.workers,
                        help="processes to split the population over (default 1; 2 uses both cores of a 2-core CPU)")
    parser.add_argument("--threads", type=int, default=d.threads, help="torch threads per worker (default 1)")
    parser.add_argument("--data-dir", default=None, help="data folder holding mushroom/ (default: $BBB_DATA, then ~/.cache/bbb)")
    parser.add_argument("--device", default=d.device, help="cpu, cuda or auto (default cpu)")
    parser.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint in --out and start over")
    parser.add_argument("--quiet", action="store_true", help="print nothing but errors")


def config_from_args(args: argparse.Namespace) -> BanditConfig:
    return BanditConfig(
        steps=args.steps, agents=tuple(args.agents), seeds=tuple(args.seeds),
        updates_per_step=args.updates_per_step, batch_size=args.batch_size, buffer=args.buffer,
        hidden=tuple(args.hidden), lr=args.lr, noise_sigma=args.noise_sigma, prior=args.prior,
        prior_sigma=args.prior_sigma, pi=args.pi, sigma1=args.sigma1, sigma2=args.sigma2,
        kl_data=args.kl_data, kl_scale=args.kl_scale, bbb_optimizer=args.bbb_optimizer, bbb_lr=args.bbb_lr,
        sigma_init=args.sigma_init, decision_samples=args.decision_samples, log_every=args.log_every,
        exact_noise=args.exact_noise, workers=args.workers, threads=args.threads, device=args.device,
        data_dir=args.data_dir, out=args.out, resume=not args.fresh, quiet=args.quiet)


def main(args: argparse.Namespace) -> int:
    """``bbb bandit``: run and write the outputs; returns the exit code."""
    run_bandit(config_from_args(args))
    return 0


