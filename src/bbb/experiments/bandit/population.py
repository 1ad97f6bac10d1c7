"""The population of agents: sub-populations with their replay buffers, the environment
loop, logging and checkpoints."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...errors import UserError
from ...io import atomic_torch_save
from ...options import make_prior
from .config import BANK_REFRESH, EAT, NUM_ACTIONS, PASS, Agent, BanditConfig, parse_agent
from .env import env_draws, mushroom_rewards, step_regrets
from .mlp import KEY_DEFAULTS, FlatAdam, FlatSGD, MLPLayout, Workspace, mlp_backward, mlp_forward


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
        self.ws = Workspace()

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
        if self.calls % BANK_REFRESH == 0:
            self.bank.normal_(generator=self.gen)
        off = self.rng.randrange(0, self.size - n + 1)
        return self.bank[off:off + n].view(shape)


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
        self.opts: list[FlatAdam | FlatSGD] = []
        for i, params in enumerate(groups):
            if not params:
                continue
            bbb_group = own and i == 1
            lr = (cfg.bbb_lr or cfg.lr) if bbb_group else cfg.lr
            self.opts.append(FlatSGD(params, lr) if bbb_group and cfg.bbb_optimizer == "sgd" else FlatAdam(params, lr))
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
        draws = [env_draws(s, steps, n) for s in self.seed_list]
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
                      f"{rate * cfg.updates_per_step:.0f} updates/s, ETA {fmt_seconds(eta)}); "
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
        stored = {**KEY_DEFAULTS, **st.get("key", {})}
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
            "log_expected": (torch.stack(self.log_expected).cpu() if self.log_expected
                             else torch.zeros(0, len(self.members))),
            "eat_rate": self.eat_rate(),
            "seconds": self.seconds,
        }


def fmt_seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{(s % 3600) // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
