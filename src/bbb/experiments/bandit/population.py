"""The agents of one process as a single :class:`~bbb.nn.BayesPopulation`: their replay buffers,
decisions and training updates, the interaction loop, logging and checkpoints."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ...elbo import ELBO, Gaussian, HeteroscedasticGaussian, Likelihood
from ...engine import Engine, counter_noise
from ...engine.kernels import counter_keys_tensor, seed_mix
from ...errors import UserError
from ...io import atomic_torch_save
from ...ivon import IVON
from ...nn import BayesPopulation, OneHot, mark_deterministic, one_hot_is_dense
from ...nn.base import Estimator
from .config import (
    CHECKPOINT_FORMAT,
    EARLY_WINDOW,
    EAT,
    INIT_SEED,
    IVON_BETA1,
    IVON_BETA2,
    NUM_ACTIONS,
    PASS,
    Agent,
    BanditConfig,
    BanditLikelihood,
    parse_agent,
)
from .ensemble import Ensembles, make_optimizer
from .env import env_draws, mushroom_rewards, step_regrets


@dataclass
class _Member:
    agent: Agent
    seed: int


def member_order(members: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """The population's order of (agent, seed) pairs: the BBB agents' first (the
    :class:`~bbb.nn.BayesPopulation` convention), then the deterministic ones, then IVON's (a
    population of their own), then the ensembles' (networks of their own), each group in the given
    order."""
    ms = [(parse_agent(a).name, int(s)) for a, s in members]

    def group(name: str) -> int:
        return {"bbb": 0, "deterministic": 1, "ivon": 2, "ensemble": 3}[parse_agent(name).kind]

    return sorted(ms, key=lambda m: group(m[0]))  # stable: the given order within a group


def _members(x: Tensor | OneHot, start: int, stop: int) -> Tensor | OneHot:
    """Members ``start .. stop - 1`` of population inputs (members, ...): views."""
    if isinstance(x, OneHot):
        return OneHot(x.index[start:stop], x.features, None if x.value is None else x.value[start:stop])
    return x[start:stop]


class Population:
    """Every (agent, seed) member of one process, batched; :meth:`run` plays the interactions.

    ``members``: (agent name, seed) pairs, kept in :func:`member_order`; ``contexts`` (n, d)
    float; ``edible`` (n,) bool. The network is a :class:`~bbb.nn.BayesPopulation` (``net``): the
    BBB members are Bayesian, the epsilon-greedy ones deterministic. One training update draws a
    minibatch for every member from its own buffer and takes one step of the negative ELBO
    (:class:`~bbb.elbo.ELBO`: Gaussian likelihood, the prior's KL) summed over the members,
    the BBB members through :class:`~bbb.engine.Engine` (its counter-based noise is fresh for
    every update), the others through the same ``torch.optim`` algorithm. The IVON members are a
    Bayesian population of their own (``ivon_net``, None without them) trained by
    :class:`bbb.IVON` on the same minibatches (:meth:`_ivon_update`); ``net`` is None when they
    are the only members. The ensemble members' networks are :class:`Ensembles` (``ensembles``,
    None without them), each network on minibatches of its own.
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
        self.device = dev = torch.device(device)
        self.members = [_Member(parse_agent(a), s) for a, s in member_order(members)]
        if not self.members:
            raise UserError("the population is empty")
        p = len(self.members)
        self.num_bayesian = sum(m.agent.bayesian for m in self.members)
        self.num_ivon = sum(m.agent.ivon for m in self.members)
        self.num_ensemble = sum(m.agent.ensemble for m in self.members)
        # the members of self.net: BBB's, then the deterministic ones; then IVON's, then the ensembles'
        self.num_main = p - self.num_ivon - self.num_ensemble
        self.num_batched = self.num_main + self.num_ivon  # the members that share the minibatch draws
        # inputs as one-hot rows: the context's non-zeros, then the action's code
        ctx = OneHot.from_dense(contexts.to(dev, torch.float32))
        self.ctx_index, self.ctx_value = ctx.index, ctx.value
        self.edible = edible.to(dev, torch.bool)
        self.num_features = contexts.shape[1] + NUM_ACTIONS
        self.hetero = BanditLikelihood(cfg.likelihood) is BanditLikelihood.HETEROSCEDASTIC
        self.local = Estimator(cfg.estimator) is Estimator.LOCAL
        if self.local:  # its pre-activation noise is torch's global stream: seeded, and checkpointed
            torch.manual_seed(10_007 * (int(train_seed) + 1) + 3)
        outputs = 2 if self.hetero else 1
        self.net = (BayesPopulation(self.num_features, cfg.hidden, outputs, bayesian=self.num_bayesian,
                                    deterministic=self.num_main - self.num_bayesian, prior=cfg.make_prior(),
                                    rho_init=cfg.rho_init, device=dev, estimator=cfg.estimator)
                    if self.num_main else None)
        self.ivon_net = (BayesPopulation(self.num_features, cfg.hidden, outputs, bayesian=self.num_ivon,
                                         prior=cfg.make_prior(), device=dev) if self.num_ivon else None)
        for j, m in enumerate(self.members[:self.num_batched]):  # the initial weights (means): the seed's
            gen = torch.Generator().manual_seed(INIT_SEED + m.seed)
            if j < self.num_main:
                self.main_net.reset_member(j, gen)
            else:
                self.ivon_population.reset_member(j - self.num_main, gen)
        if self.net is not None:
            self.net.train()
            if not self.num_bayesian:  # greedy agents alone: deterministic on purpose (the ELBO does not warn)
                mark_deterministic(self.net)
        # training noise; decisions: + 1; IVON's: + 2, + 3; the ensembles' draws: + 4
        self.noise_seed = 2 * (10_007 * (int(train_seed) + 1))
        # local reparameterisation has no fused kernel: the engine's plain path, chosen (no warning)
        self.engine = (Engine(self.main_net.bayes, cfg.optimizer, lr=cfg.lr, seed=self.noise_seed,
                              fused=False if self.local else None)
                       if self.num_bayesian else None)
        self.ivon: IVON | None = None
        if self.ivon_net is not None:  # sigma written from hess_init at one interaction's ess
            self.ivon_net.train()
            self.ivon = IVON(self.ivon_net, lr=cfg.ivon_lr, ess=self.ivon_ess(1), hess_init=cfg.ivon_hess_init,
                             weight_decay=self.ivon_weight_decay(1), beta1=IVON_BETA1, beta2=IVON_BETA2,
                             clip_radius=cfg.ivon_clip, seed=self.noise_seed + 2)
        det = list(self.net.det.parameters()) if self.net is not None else []
        # the penalty is set against the squared error: per example ((y - f)^2 + wd |w|^2) / (2 noise^2),
        # so that (under Adam) the deterministic agents' fit does not change with --noise-sigma
        wd = cfg.weight_decay / cfg.noise_sigma**2
        self.det_opt = make_optimizer(cfg.optimizer, det, cfg.lr, wd) if det else None
        updates = max(1, cfg.updates_per_step)
        lik: Likelihood = HeteroscedasticGaussian(cfg.noise_sigma) if self.hetero else Gaussian(cfg.noise_sigma)
        self.likelihood = lik.to(dev)
        self.ensembles = (Ensembles(cfg, [m.seed for m in self.members[self.num_batched:]], self.num_features,
                                    outputs, self.likelihood, dev, self.noise_seed + 4)
                          if self.num_ensemble else None)
        self._ensemble_members = torch.arange(self.num_batched, p, device=dev)
        self.elbo = (ELBO(self.net, lik, num_batches=updates, kl_weighting=cfg.kl_weighting,
                          beta=cfg.kl_scale).to(dev) if self.net is not None else None)
        k = ctx.index.shape[1] + 1
        self.buf_index = torch.zeros(p, cfg.buffer, k, dtype=torch.long, device=dev)
        self.buf_value = None if ctx.value is None else torch.zeros(p, cfg.buffer, k, device=dev)
        self.buf_reward = torch.zeros(p, cfg.buffer, device=dev)
        # the stored rows expanded once (not in every update) where the network multiplies them densely;
        # rebuilt from buf_index / buf_value on load
        self.buf_dense = (torch.zeros(p, cfg.buffer, self.num_features, device=dev)
                          if self.local or one_hot_is_dense(self.num_features, k) else None)
        self.gen = torch.Generator(device=dev).manual_seed(10_007 * (int(train_seed) + 1))
        self.seed_list = sorted({m.seed for m in self.members})
        self._member_seed_pos = torch.tensor([self.seed_list.index(m.seed) for m in self.members], device=dev)
        self.epsilon = torch.tensor([m.agent.epsilon for m in self.members], device=dev)
        self.cum_regret = torch.zeros(p, dtype=torch.float64, device=dev)
        self.cum_expected = torch.zeros(p, dtype=torch.float64, device=dev)
        self.cum_eaten = torch.zeros(p, dtype=torch.long, device=dev)
        self.eat_ring = torch.zeros(1000, p, dtype=torch.bool, device=dev)  # the last 1000 decisions
        self.step = 0
        self.seconds = 0.0
        self.log_steps: list[int] = []
        self.log_regret: list[Tensor] = []
        self.log_expected: list[Tensor] = []
        self.log_eaten: list[Tensor] = []
        self._env_steps = 0

    @property
    def pairs(self) -> list[tuple[str, int]]:
        return [(m.agent.name, m.seed) for m in self.members]

    @property
    def main_net(self) -> BayesPopulation:
        """``net`` (the BBB and deterministic members); an error where there are none."""
        if self.net is None:
            raise RuntimeError("this population has no BBB or deterministic member")
        return self.net

    @property
    def ivon_population(self) -> BayesPopulation:
        """``ivon_net`` (the IVON members); an error where there are none."""
        if self.ivon_net is None:
            raise RuntimeError("this population has no IVON member")
        return self.ivon_net

    def networks(self) -> list[BayesPopulation]:
        """The populations of this process: ``net``, ``ivon_net`` and the ensembles' where they exist."""
        ens = None if self.ensembles is None else self.ensembles.net
        return [n for n in (self.net, self.ivon_net, ens) if n is not None]

    def ivon_ess(self, num_data: int) -> float:
        """IVON's effective sample size after ``num_data`` interactions (N of the KL / N weight):
        N / (ivon_beta noise_sigma^2), for its loss of noise_sigma^2 times the negative
        log-likelihood (:class:`~bbb.experiments.bandit.config.BanditConfig`)."""
        return num_data / (self.cfg.ivon_beta * self.cfg.noise_sigma ** 2)

    def ivon_weight_decay(self, num_data: int) -> float:
        """IVON's prior precision per unit of ess: ivon_beta noise_sigma^2 / (prior_sigma^2 N), so
        that ess times it is the prior's precision 1 / prior_sigma^2."""
        return self.cfg.ivon_beta * self.cfg.noise_sigma ** 2 / (self.cfg.prior_sigma ** 2 * num_data)

    # -- environment ----------------------------------------------------------------------
    def _ensure_env(self, steps: int) -> None:
        if steps <= self._env_steps:
            return
        n = self.ctx_index.shape[0]
        draws = [env_draws(s, steps, n) for s in self.seed_list]
        self.env_idx = torch.stack([d[0] for d in draws]).to(self.device)  # (seeds, steps)
        self.env_lucky = torch.stack([d[1] for d in draws]).to(self.device)
        # the decision noise's counter keys of every step, formed at once on the device: a step
        # reads its row (no copy from the host, which would block the loop on a GPU)
        self.decision_keys = counter_keys_tensor(seed_mix(self.noise_seed + 1),
                                                 torch.arange(steps, device=self.device)).to(torch.int32)
        self.ivon_decision_keys = counter_keys_tensor(seed_mix(self.noise_seed + 3),
                                                      torch.arange(steps, device=self.device)).to(torch.int32)
        self._env_steps = steps

    def inputs(self, mush: Tensor) -> OneHot:
        """The input rows of mushrooms ``mush`` (P,) with each action: (P, actions, K)."""
        p = mush.shape[0]
        ci = self.ctx_index[mush]
        kc = ci.shape[1]
        codes = torch.arange(NUM_ACTIONS, device=self.device) + (self.num_features - NUM_ACTIONS)
        index = torch.cat([ci.unsqueeze(1).expand(p, NUM_ACTIONS, kc),
                           codes.view(1, NUM_ACTIONS, 1).expand(p, NUM_ACTIONS, 1)], dim=2)
        value = None
        if self.ctx_value is not None:
            cv = self.ctx_value[mush].unsqueeze(1).expand(p, NUM_ACTIONS, kc)
            value = torch.cat([cv, torch.ones(p, NUM_ACTIONS, 1, device=self.device)], dim=2)
        return OneHot(index, self.num_features, value)

    # -- acting ---------------------------------------------------------------------------
    @torch.no_grad()
    def values(self, x: OneHot, t: int) -> Tensor:
        """Predicted reward of every action, (P, actions): a BBB or IVON member averages
        ``decision_samples`` networks drawn for step ``t`` from its posterior (counter-based noise,
        independent of the training noise; whole networks also under the local estimator, which
        trains with per-row pre-activation noise); a deterministic member uses its weights, an
        ensemble member one of its networks (:meth:`Ensembles.values`). With
        the heteroscedastic likelihood the value is the predicted mean (output 0)."""
        k = self.cfg.decision_samples
        inside = t < self._env_steps  # else: the keys formed on the host
        parts = []
        if self.net is not None:
            keys = self.decision_keys[t] if inside else None
            noise = (counter_noise(self.net.bayes, self.noise_seed + 1, t, num_samples=k, keys=keys)
                     if self.num_bayesian else contextlib.nullcontext())
            with noise:
                out = self.net.forward_weights(_members(x, 0, self.num_main), num_samples=k)[..., 0]  # (k, P, actions)
            nb = self.num_bayesian
            parts += [out[:, :nb].mean(0), out[0, nb:]]
        if self.ivon_net is not None:
            keys = self.ivon_decision_keys[t] if inside else None
            with counter_noise(self.ivon_net.bayes, self.noise_seed + 3, t, num_samples=k, keys=keys):
                out = self.ivon_net.forward_weights(_members(x, self.num_main, self.num_batched), num_samples=k)
            parts.append(out[..., 0].mean(0))
        if self.ensembles is not None:
            parts.append(self.ensembles.values(_members(x, self.num_batched, len(self.members))))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _act_and_learn(self, t: int) -> None:
        cfg = self.cfg
        p = len(self.members)
        mush = self.env_idx[self._member_seed_pos, t]  # (P,)
        lucky = self.env_lucky[self._member_seed_pos, t]
        edible = self.edible[mush]
        x = self.inputs(mush)
        values = self.values(x, t)
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
        self.cum_eaten += eat
        self.eat_ring[t % self.eat_ring.shape[0]] = eat
        # store the interaction: the chosen action's input row and its reward
        rows = torch.arange(p, device=self.device)
        pos = t % cfg.buffer
        self.buf_index[:, pos] = x.index[rows, action]
        if self.buf_value is not None and x.value is not None:  # both or neither (the contexts' kind)
            self.buf_value[:, pos] = x.value[rows, action]
        self.buf_reward[:, pos] = reward
        if self.buf_dense is not None:
            self.buf_dense[:, pos] = self._rows(self.buf_index[:, pos], None if self.buf_value is None
                                                else self.buf_value[:, pos]).to_dense()
        if self.ensembles is not None:
            self.ensembles.store(pos)
        filled = min(t + 1, cfg.buffer)
        num_data = self.kl_data_size(t + 1)
        # every update's minibatch rows at once (the same draws as one call per update); the
        # ensembles draw their own
        idx = torch.randint(0, filled, (cfg.updates_per_step, self.num_batched, cfg.batch_size), generator=self.gen,
                            device=self.device)
        kl_on = t >= cfg.kl_warmup  # the first kl_warmup interactions fit the data alone
        for u in range(cfg.updates_per_step):
            self.update(filled, num_data, u, idx=idx[u], kl_on=kl_on)

    def _rows(self, index: Tensor, value: Tensor | None) -> OneHot:
        return OneHot(index, self.num_features, value)

    def kl_data_size(self, seen: int) -> int:
        """N of the KL / N weight after ``seen`` interactions (``BanditConfig.kl_data``)."""
        return seen if self.cfg.kl_data == "seen" else min(seen, self.cfg.buffer)

    # -- learning -------------------------------------------------------------------------
    def update(self, filled: int, num_data: int, batch_index: int = 0, idx: Tensor | None = None,
               kl_on: bool = True) -> None:
        """One optimiser step of every member on a minibatch of its own buffer (rows < ``filled``).

        The loss of member m is its minibatch's mean negative log-likelihood plus, for a BBB
        member, ``kl_scale * pi_i * U / N`` times the KL, with pi_i the weight of update
        ``batch_index`` of the U updates per interaction (``--kl-weighting``: 1/U for uniform,
        so KL / N per example) and N = ``num_data``; 0 while ``kl_on`` is False (the warm-up,
        ``BanditConfig.kl_warmup``). ``idx`` (P', B): the buffer rows of the members but the
        ensembles' (tests); drawn here when None. The ensembles' networks take a step on
        minibatches of their own (:meth:`Ensembles.update`).
        """
        cfg = self.cfg
        q, b = self.num_batched, cfg.batch_size
        if self.ensembles is not None:
            self.ensembles.update(filled, self._ensemble_members, self.buffer_rows)
        if not q:
            return
        if idx is None:
            idx = torch.randint(0, filled, (q, b), generator=self.gen, device=self.device)
        x, y = self.buffer_rows(torch.arange(q, device=self.device), idx)
        nm = self.num_main
        if self.ivon_net is not None:
            self._ivon_update(_members(x, nm, q), y[nm:], num_data)
        if self.elbo is None:
            return
        if nm < q:
            x, y = _members(x, 0, nm), y[:nm]
        coef = self.elbo.kl_weight(batch_index) * self.elbo.num_batches * b / num_data if kl_on else 0.0
        with self.engine.sampling() if self.engine is not None else contextlib.nullcontext():
            out = self.elbo(x, y, kl_weight=coef)
        if self.engine is not None:
            self.engine.zero_grad()
        if self.det_opt is not None:
            self.det_opt.zero_grad()
        (out.loss / b).backward()
        if self.engine is not None:
            self.engine.step()
        if self.det_opt is not None:
            self.det_opt.step()

    def buffer_rows(self, members: Tensor, idx: Tensor) -> tuple[Tensor | OneHot, Tensor]:
        """Rows ``idx`` (M, B) of the buffers of ``members`` (M,), indices into :attr:`members`: the
        inputs (M, B, features) or :class:`OneHot` (M, B, K), and the rewards (M, B), or (M, B, 1)
        for the Gaussian likelihood (the shape its log_prob takes)."""
        m, b = idx.shape
        flat = (idx + members.view(m, 1) * self.cfg.buffer).view(-1)
        x: Tensor | OneHot
        if self.buf_dense is not None:
            x = self.buf_dense.view(-1, self.num_features).index_select(0, flat).view(m, b, self.num_features)
        else:
            k = self.buf_index.shape[-1]
            xi = self.buf_index.view(-1, k).index_select(0, flat).view(m, b, k)
            xv = None if self.buf_value is None else self.buf_value.view(-1, k).index_select(0, flat).view(m, b, k)
            x = self._rows(xi, xv)
        y = self.buf_reward.view(-1).index_select(0, flat).view((m, b) if self.hetero else (m, b, 1))
        return x, y

    def _ivon_update(self, x: Tensor | OneHot, y: Tensor, num_data: int) -> None:
        """One :class:`bbb.IVON` step of every IVON member: its loss is the minibatch's mean negative
        log-likelihood times noise_sigma^2 at one weight sample, its effective sample size and
        weight decay those of ``num_data`` interactions (:meth:`ivon_ess`, :meth:`ivon_weight_decay`).

        IVON's update keeps h + weight decay positive at the weight decay of its step; here the
        weight decay falls as N grows, so a Hessian estimate h that its noisy estimates had taken
        below 0 (a squared error's curvature never is) could leave h + weight decay <= 0 at the next
        one, and sigma = 1 / sqrt(ess (h + wd)) undefined: h is set to at least 0 before each step."""
        opt = self.ivon
        assert opt is not None and self.ivon_net is not None
        group = opt.param_groups[0]
        group["ess"], group["weight_decay"] = self.ivon_ess(num_data), self.ivon_weight_decay(num_data)
        with torch.no_grad():
            for state in opt.state.values():
                state["hess"].clamp_(min=0.0)
        with opt.sampling():
            out = self.ivon_net(x)
        nll = -self.likelihood.log_prob(out, y)  # (members, B)
        opt.zero_grad()
        (nll.mean(-1).sum() * self.cfg.noise_sigma ** 2).backward()
        opt.step()

    # -- the loop -------------------------------------------------------------------------
    def _log(self) -> None:
        self._check_finite()
        self.log_steps.append(self.step)
        self.log_regret.append(self.cum_regret.clone())
        self.log_expected.append(self.cum_expected.clone())
        self.log_eaten.append(self.cum_eaten.clone())

    def _check_finite(self) -> None:
        """A diverged member (a non-finite weight) is a one-line error, not regret rows of a network
        that only outputs NaN (which never eats). Checked at every log step: one reduction."""
        if self.ivon_net is not None:
            bad = [n for n, p in self.ivon_net.named_parameters() if not bool(torch.isfinite(p).all())]
            if bad:
                raise UserError(f"the ivon agent's training diverged by step {self.step} (non-finite {bad[0]}); "
                                "lower --ivon-lr or raise --ivon-hess-init")
        bad_ensemble = None if self.ensembles is None else self.ensembles.check_finite()
        if bad_ensemble is not None:
            raise UserError(f"the ensemble agent's training diverged by step {self.step} (non-finite {bad_ensemble}); "
                            "lower --lr or raise --noise-sigma")
        net = self.net
        bad = [] if net is None else [n for n, p in net.named_parameters() if not bool(torch.isfinite(p).all())]
        if bad:
            step = (f"plain SGD's step on the loss is lr / noise_sigma^2 = {self.cfg.lr / self.cfg.noise_sigma**2:g}: "
                    if self.cfg.optimizer == "sgd" else "")
            raise UserError(f"bandit training diverged by step {self.step} (non-finite {bad[0]}); {step}"
                            "lower --lr or raise --noise-sigma")

    def run(self, steps: int, checkpoint: Path | None = None, progress: bool = False,
            label: str = "", stop: Callable[[], bool] | None = None) -> bool:
        """Play until ``self.step == steps`` (continuing a resumed population).

        ``stop`` is asked after every step; when it answers True the population saves its
        checkpoint and returns False (Ctrl-C, SIGTERM, or a worker whose parent died). Returns
        True when done.
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
            # (and at the early window's end, whose eat rate the summary reads from these rows)
            if self.step % cfg.log_every == 0 or self.step in (steps, EARLY_WINDOW):
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
        out: dict[str, list[float]] = {}
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
            "format": CHECKPOINT_FORMAT,
            "key": self.cfg.training_key(),
            "device": self.device.type,  # the random streams differ between device kinds
            "members": self.pairs,
            "step": self.step,
            "seconds": self.seconds,
            "net": None if self.net is None else self.net.state_dict(),
            "engine": None if self.engine is None else self.engine.state_dict(),
            "ivon_net": None if self.ivon_net is None else self.ivon_net.state_dict(),
            "ivon": None if self.ivon is None else self.ivon.state_dict(),
            "det_opt": None if self.det_opt is None else self.det_opt.state_dict(),
            "ensembles": None if self.ensembles is None else self.ensembles.state_dict(),
            "buf_index": self.buf_index,
            "buf_value": self.buf_value,
            "buf_reward": self.buf_reward,
            "cum_regret": self.cum_regret,
            "cum_expected": self.cum_expected,
            "cum_eaten": self.cum_eaten,
            "eat_ring": self.eat_ring,
            "log_steps": self.log_steps,
            "log_regret": self.log_regret,
            "log_expected": self.log_expected,
            "log_eaten": self.log_eaten,
            "gen": self.gen.get_state(),
            "torch_rng": torch.get_rng_state() if self.local else None,
            # (on a GPU the local estimator's pre-activation noise comes from the device's stream)
            "cuda_rng": torch.cuda.get_rng_state(self.device) if self.local and self.device.type == "cuda" else None,
        }

    def save(self, path: Path) -> None:
        atomic_torch_save(path, self.state())

    def load(self, path: Path) -> bool:
        """Resume from ``path`` if it exists; UserError if it belongs to another configuration."""
        st = read_checkpoint(path, self.cfg, self.pairs, self.device)
        if st is None:
            return False
        if self.net is not None:
            self.net.load_state_dict(st["net"])
        if self.ivon_net is not None and self.ivon is not None:
            self.ivon_net.load_state_dict(st["ivon_net"])
            self.ivon.load_state_dict(st["ivon"])  # sigma (rho) written again from its h, ess and weight decay
        if self.engine is not None:
            self.engine.load_state_dict(st["engine"])
        if self.det_opt is not None:
            self.det_opt.load_state_dict(st["det_opt"])
        if self.ensembles is not None:
            self.ensembles.load_state_dict(st["ensembles"])
        for name in ("buf_index", "buf_reward", "cum_regret", "cum_expected", "cum_eaten", "eat_ring"):
            getattr(self, name).copy_(st[name])
        if self.buf_value is not None:
            self.buf_value.copy_(st["buf_value"])
        if self.buf_dense is not None:
            self.buf_dense.copy_(self._rows(self.buf_index, self.buf_value).to_dense())
        self.step = int(st["step"])
        self.seconds = float(st["seconds"])
        self.log_steps = list(st["log_steps"])
        self.log_regret = list(st["log_regret"])
        self.log_expected = list(st["log_expected"])
        self.log_eaten = list(st["log_eaten"])
        self.gen.set_state(st["gen"])
        if self.local:
            torch.set_rng_state(st["torch_rng"])
            if self.device.type == "cuda" and st.get("cuda_rng") is not None:
                torch.cuda.set_rng_state(st["cuda_rng"], self.device)
        return True

    def results(self) -> dict[str, Any]:
        p = len(self.members)
        return {
            "members": self.pairs,
            "log_steps": list(self.log_steps),
            "log_regret": torch.stack(self.log_regret).cpu() if self.log_regret else torch.zeros(0, p),
            "log_expected": torch.stack(self.log_expected).cpu() if self.log_expected else torch.zeros(0, p),
            "log_eaten": (torch.stack(self.log_eaten).cpu() if self.log_eaten
                          else torch.zeros(0, p, dtype=torch.long)),
            "eat_rate": self.eat_rate(),
            "seconds": self.seconds,
        }


def read_checkpoint(path: Path, cfg: BanditConfig, pairs: list[tuple[str, int]],
                    device: torch.device) -> dict[str, Any] | None:
    """The state saved in ``path`` (None when there is none) after checking that the population
    of ``pairs`` under ``cfg`` on ``device`` can resume it: UserError, naming what differs,
    when it cannot. The workers' parent checks every worker's file with it before any trains."""
    if not path.exists():
        return None
    try:
        # onto the CPU: the generator's state must stay a CPU tensor (set_state), and the
        # buffers are copied to the run's device
        st = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same user problem
        raise UserError(f"cannot read the bandit checkpoint {path} ({type(e).__name__}); "
                        f"delete it or run with --fresh") from None
    if not isinstance(st, dict) or st.get("format") != CHECKPOINT_FORMAT:
        raise UserError(f"{path} was written by another version of bbb bandit; use another --out, or "
                        f"--fresh to start over")
    key = cfg.training_key()
    saved = st.get("key")
    if saved != key or [tuple(m) for m in st.get("members", [])] != pairs:
        differ = sorted(k for k in set(key) | set(saved or {}) if (saved or {}).get(k) != key.get(k))
        said = "; ".join(f"{k} {(saved or {}).get(k)!r} there, {key.get(k)!r} now" for k in differ[:3])
        raise UserError(f"{path} was written with other settings ({said or 'other agents or seeds'}); use the "
                        f"same options, another --out, or --fresh to start over")
    if st.get("device", "cpu") != device.type:
        raise UserError(f"{path} was written on {st.get('device', 'cpu')}, and this run is on {device.type}: "
                        "their random streams differ, so it cannot resume exactly; use --device "
                        f"{st.get('device', 'cpu')}, another --out, or --fresh to start over")
    if st["step"] > cfg.steps:
        raise UserError(f"{path} is at step {st['step']}, beyond --steps {cfg.steps}; "
                        f"raise --steps or use --fresh")
    return st


def fmt_seconds(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{(s % 3600) // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
