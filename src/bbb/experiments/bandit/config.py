"""The bandit's settings: rewards, agents and :class:`BanditConfig`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ...distributions import Prior, inverse_softplus, make_prior
from ...elbo import KLWeighting
from ...engine.engine import OptimizerKind
from ...errors import SettingError, UserError, check_int
from ...nn.base import Estimator
from ...options import PriorKind, StrOption, choice
from ...runs.config import PRIOR_ONLY


class BanditLikelihood(StrOption):
    """The reward likelihood of every agent: ``gaussian`` (noise std ``noise_sigma``) or
    ``heteroscedastic`` (the network's second output sets the noise of each input and action,
    :class:`~bbb.elbo.HeteroscedasticGaussian`, floored at ``noise_sigma``)."""

    GAUSSIAN = "gaussian"
    HETEROSCEDASTIC = "heteroscedastic"


class KLData(StrOption):
    """N of the bandit's KL / N weight: every interaction ``seen`` so far, or the replay
    ``buffer``'s fill (its capacity once full)."""

    SEEN = "seen"
    BUFFER = "buffer"


DEFAULT_AGENTS = ("bbb", "greedy", "egreedy_0.01", "egreedy_0.05")


#: the generator seed of a member's initial weights is this plus its seed (an ensemble's first network
#: starts as the greedy agent's of the same seed)
INIT_SEED = 7_777_777


#: IVON's momentum and Hessian averaging (its paper's defaults; beta2 must stay close to 1)
IVON_BETA1, IVON_BETA2 = 0.9, 0.99999


REWARD_EDIBLE = 5.0


REWARD_POISON_BAD = -35.0


REWARD_POISON_LUCKY = 5.0


REWARD_PASS = 0.0


EXPECTED_POISON = 0.5 * (REWARD_POISON_BAD + REWARD_POISON_LUCKY)  # -15


#: actions: 0 = do not eat, 1 = eat
PASS, EAT = 0, 1


NUM_ACTIONS = 2


REGRET_COLUMNS = ["step", "agent", "seed", "cumulative_regret", "cumulative_expected_regret", "cumulative_eaten"]


#: the window of the summary's late regret rate (whether a learner still learns at the end)
LATE_WINDOW = 10_000


#: the window of the summary's early eat rate (Figure 6's marks: greedy eats nothing for about the
#: first 1,000 steps, BBB eats and passes from the start)
EARLY_WINDOW = 1_000


SUMMARY_COLUMNS = [
    "agent", "steps", "seeds", "final_regret_mean", "final_regret_sd",
    "final_expected_regret_mean", "final_expected_regret_sd", "expected_regret_per_step_late",
    "eat_rate_first_1000", "eat_rate_last_1000", "seconds",
]


ENV_CHUNK = 10_000


#: version of the checkpoint files under ``--out/checkpoint`` (1: the hand-written population;
#: 2: without the eaten counts)
CHECKPOINT_FORMAT = 3


@dataclass(frozen=True)
class Agent:
    """One kind of agent: ``bbb`` (Thompson sampling, trained by Bayes by Backprop: ``bayesian``),
    ``ivon`` (Thompson sampling, the same posterior family learned by IVON: ``ivon``),
    ``ensemble`` (bootstrapped Thompson sampling over deterministic networks: ``ensemble``) or
    epsilon-greedy with ``epsilon`` (a deterministic network)."""

    name: str
    bayesian: bool
    epsilon: float = 0.0
    ivon: bool = False
    ensemble: bool = False

    @property
    def kind(self) -> str:
        """``"bbb"``, ``"ivon"``, ``"ensemble"`` or ``"deterministic"``: which settings it reads
        (:data:`AGENT_SETTINGS`)."""
        return "bbb" if self.bayesian else "ivon" if self.ivon else "ensemble" if self.ensemble else "deterministic"

    @property
    def in_paper(self) -> bool:
        """One of the paper's agents (BBB, greedy, epsilon-greedy): Figure 6's marks judge these only."""
        return self.kind in ("bbb", "deterministic")


#: the settings that only some kinds of agent read (:attr:`Agent.kind`); every other setting is every
#: agent's. A value other than the default that no agent of a run reads is refused (never ignored), and
#: ``--merge`` takes each from the parts whose agents read it.
AGENT_SETTINGS: dict[str, tuple[str, ...]] = {
    "optimizer": ("bbb", "deterministic", "ensemble"), "lr": ("bbb", "deterministic", "ensemble"),
    "weight_decay": ("deterministic", "ensemble"),
    "prior": ("bbb", "ivon"), "prior_sigma": ("bbb", "ivon"), "kl_data": ("bbb", "ivon"),
    "decision_samples": ("bbb", "ivon"),
    "pi": ("bbb",), "sigma1": ("bbb",), "sigma2": ("bbb",), "sigma_init": ("bbb",), "kl_scale": ("bbb",),
    "kl_weighting": ("bbb",), "kl_warmup": ("bbb",), "estimator": ("bbb",),
    "ivon_lr": ("ivon",), "ivon_hess_init": ("ivon",), "ivon_beta": ("ivon",), "ivon_clip": ("ivon",),
    "ensemble_size": ("ensemble",), "ensemble_keep": ("ensemble",),
}


def parse_agent(name: str) -> Agent:
    """``"bbb"``, ``"ivon"``, ``"ensemble"``, ``"greedy"`` or ``"egreedy_<eps>"`` (0 <= eps <= 1)."""
    key = str(name).strip().lower()
    if key == "bbb":
        return Agent("bbb", True, 0.0)
    if key == "ivon":
        return Agent("ivon", False, 0.0, ivon=True)
    if key == "ensemble":
        return Agent("ensemble", False, 0.0, ensemble=True)
    if key == "greedy":
        return Agent("greedy", False, 0.0)
    if key.startswith("egreedy_"):
        try:
            eps = float(key[len("egreedy_"):])
        except ValueError:
            eps = float("nan")
        if not (0.0 <= eps <= 1.0):
            raise UserError(f"bad agent {name!r}: epsilon must be a number in [0, 1], e.g. egreedy_0.05")
        if eps == 0.0:  # never exploring: the greedy agent, under its one name
            return Agent("greedy", False, 0.0)
        written = f"{eps:g}"  # one name per epsilon (egreedy_.05 is egreedy_0.05): the outputs' agent
        return Agent(f"egreedy_{written if float(written) == eps else repr(eps)}", False, eps)
    raise UserError(f"unknown agent {name!r}; choose bbb, ivon, ensemble, greedy or egreedy_<eps> (e.g. egreedy_0.05)")


#: the ``bbb bandit`` options whose name is not their setting's (the library's vocabulary:
#: bbb.cli.common.SHARED_FLAGS), for the messages
@dataclass
class BanditConfig:
    """Settings of :func:`run_bandit`. The protocol's defaults are the paper's (buffer 4096, 64
    updates of 64 per interaction, 2x100 network, 2 Thompson samples, 50,000 steps, 5 seeds).

    The recipe (optimiser, learning rate, prior, likelihood noise, KL weighting and scale, N of
    the KL / N weight, initial sigma) is not stated in the paper; every agent uses the same one
    (the deterministic agents: the same network, likelihood and optimiser, without weight noise
    or KL; ``weight_decay`` adds an L2 penalty to theirs, the MAP counterpart of BBB's prior).
    The defaults are the recipe chosen on seeds 0-2 with runs of 20,000 steps
    (``results/bandit/SELECTION.md``): Adam 1e-3, likelihood noise 0.001, prior N(0, 1), the
    untempered KL (scale 1) over every interaction seen, split over an interaction's updates by
    the paper's 2^(U-i)/(2^U-1).

    The ``ivon`` agent learns the posterior of BBB's free energy (the same likelihood, Gaussian
    prior N(0, prior_sigma^2) and N) tempered by its own ``ivon_beta`` (BBB's is ``kl_scale``) by
    IVON's natural-gradient update (:class:`bbb.IVON`) instead of Adam on the free energy; its
    other settings are ``ivon_lr`` and ``ivon_hess_init``, in the units of the loss it is given:
    each example's negative log-likelihood times noise_sigma^2 (the squared error / 2 of the
    Gaussian likelihood), with effective sample size N / (ivon_beta noise_sigma^2) and weight
    decay ivon_beta noise_sigma^2 / (prior_sigma^2 N), so that ess times its objective is the
    free energy at KL scale ivon_beta, divided by it. Its Hessian estimate h is then per unit
    squared error; sigma = 1 / sqrt(ess (h + weight decay)) starts at about noise_sigma / sqrt(N
    hess_init / ivon_beta). ``ivon_beta`` noise_sigma^2 is its effective noise variance.
    ``ivon_clip``: IVON's element-wise clip of its update direction (``clip_radius``; its steps are
    then at most ivon_lr (hess_init + weight decay) ivon_clip), inf by default.

    The ``ensemble`` agent is ``ensemble_size`` deterministic networks of the greedy agents' recipe
    (optimiser, learning rate, likelihood, ``weight_decay``), each from its own initial weights
    and on its own minibatches of the agent's buffer; each stored interaction enters each
    network's data with probability ``ensemble_keep`` (Riquelme et al.'s bootstrap; 1: every
    network sees every interaction, a deep ensemble's recipe). Every decision is one network's,
    drawn uniformly (bootstrapped Thompson sampling, Osband et al. 2016).
    """

    steps: int = 50_000
    agents: tuple[str, ...] = DEFAULT_AGENTS
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    updates_per_step: int = 64
    batch_size: int = 64
    buffer: int = 4096
    hidden: tuple[int, ...] = (100, 100)
    optimizer: OptimizerKind = OptimizerKind.ADAM
    lr: float = 1e-3
    noise_sigma: float = 0.001
    prior: PriorKind = PriorKind.GAUSSIAN
    prior_sigma: float = 1.0
    pi: float = 0.5
    sigma1: float = 1.0
    sigma2: float = math.exp(-6.0)
    sigma_init: float = 0.05
    kl_scale: float = 1.0
    kl_data: KLData = KLData.SEEN
    kl_weighting: KLWeighting = KLWeighting.BLUNDELL
    weight_decay: float = 0.0
    decision_samples: int = 2
    ivon_lr: float = 0.1
    ivon_hess_init: float = 0.01
    ivon_beta: float = 1.0
    ivon_clip: float = math.inf
    ensemble_size: int = 5
    ensemble_keep: float = 1.0
    estimator: Estimator = Estimator.REPARAM
    likelihood: BanditLikelihood = BanditLikelihood.GAUSSIAN
    kl_warmup: int = 0
    log_every: int = 100
    workers: int = 1
    threads: int = 1
    device: str = "cpu"
    data_dir: str | None = None
    out: str | None = None
    checkpoint_every: float = 300.0
    resume: bool = True
    quiet: bool = False
    progress_every: float = 30.0
    #: experiment loggers (``--log``; names of :data:`bbb.runs.loggers.LOGGERS`): OUT/tb/AGENT-seedS
    loggers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # the choices as their enums, whether given as the enum or its string (a bad string: the
        # one-line error); config.json and the checkpoint's key hold the strings
        self.optimizer = OptimizerKind(choice("optimizer", self.optimizer, OptimizerKind))
        self.prior = PriorKind(choice("prior", self.prior, PriorKind))
        self.kl_data = KLData(choice("kl-data", self.kl_data, KLData))
        self.kl_weighting = KLWeighting(choice("kl-weighting", self.kl_weighting, KLWeighting))
        self.estimator = Estimator(choice("estimator", self.estimator, Estimator))
        self.likelihood = BanditLikelihood(choice("likelihood", self.likelihood, BanditLikelihood))

    def validate(self) -> None:
        for name in ("steps", "updates_per_step", "batch_size", "buffer", "decision_samples",
                     "log_every", "workers", "threads"):
            low = 0 if name == "updates_per_step" else 1  # 0: act without learning
            check_int(name, getattr(self, name), low)  # (the command line names the flag)
        check_int("kl_warmup", self.kl_warmup, 0)
        check_int("ensemble_size", self.ensemble_size, 1)
        keep = self.ensemble_keep
        if not (isinstance(keep, (int, float)) and 0.0 < keep <= 1.0):
            raise SettingError("ensemble_keep", f"must be a probability in (0, 1], got {keep!r}")
        est = Estimator(choice("estimator", self.estimator, Estimator))
        if est is Estimator.FLIPOUT:
            raise UserError("the bandit's population supports the reparam and local estimators, not flipout")
        if est is Estimator.LOCAL and any(not parse_agent(a).bayesian for a in self.agents):
            raise UserError("--estimator local trains the BBB agents only: run the other agents separately "
                            "(e.g. --agents bbb)")
        choice("likelihood", self.likelihood, BanditLikelihood)
        choice("optimizer", self.optimizer, OptimizerKind)
        choice("prior", self.prior, PriorKind)
        choice("kl-data", self.kl_data, KLData)
        choice("kl-weighting", self.kl_weighting, KLWeighting)
        if not (0.0 < self.pi < 1.0):
            raise SettingError("pi", f"must be in (0, 1), got {self.pi!r}")
        prior = PriorKind(self.prior)
        for name, kind in PRIOR_ONLY.items():  # a parameter of the other prior: never read
            if kind is not prior and getattr(self, name) != BanditConfig.__dataclass_fields__[name].default:
                raise SettingError(name, f"applies to --prior {kind.value}, not to --prior {prior.value}; "
                                   f"leave it out, or give --prior {kind.value}")
        for name in ("lr", "noise_sigma", "prior_sigma", "sigma_init", "sigma1", "sigma2", "kl_scale", "ivon_lr",
                     "ivon_hess_init", "ivon_beta"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise SettingError(name, f"must be a finite number > 0, got {v!r}")
        if not (isinstance(self.ivon_clip, (int, float)) and self.ivon_clip > 0):
            raise SettingError("ivon_clip", f"must be a number > 0 (inf: no clipping), got {self.ivon_clip!r}")
        wd = self.weight_decay
        if not (isinstance(wd, (int, float)) and math.isfinite(wd) and wd >= 0):
            raise SettingError("weight_decay", f"must be a finite number >= 0, got {wd!r}")
        if not self.agents:
            raise UserError("give at least one agent")
        ivon = any(parse_agent(a).ivon for a in self.agents)
        if ivon and prior is not PriorKind.GAUSSIAN:
            raise UserError("the ivon agent's prior is IVON's Gaussian (its weight decay): run it with --prior "
                            "gaussian, or the mixture without it")
        if ivon and self.kl_warmup:
            raise UserError("--kl-warmup applies to the BBB agents' KL; IVON's prior is in its update: run the "
                            "ivon agent without it")
        kinds = {parse_agent(a).kind for a in self.agents}
        for name, readers in AGENT_SETTINGS.items():  # a setting no agent of the run reads: never ignored
            if kinds.isdisjoint(readers) and getattr(self, name) != BanditConfig.__dataclass_fields__[name].default:
                raise SettingError(name, f"applies to the {' and '.join(readers)} agents, and this run has none: "
                                         "add one to --agents, or leave it out")
        if self.loggers and not self.out:
            raise UserError("--log writes its event files into OUT/tb: give --out")
        from ...runs.loggers import make_loggers

        make_loggers(self.loggers)  # an unknown name or a missing package: one line, before anything runs
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

    def make_prior(self) -> Prior:
        return make_prior(self.prior, pi=self.pi, sigma1=self.sigma1, sigma2=self.sigma2,
                          prior_sigma=self.prior_sigma)

    @property
    def rho_init(self) -> float:
        """rho of the initial posterior std: softplus(rho_init) = sigma_init."""
        return float(inverse_softplus(float(self.sigma_init)))

    def training_key(self) -> dict[str, Any]:
        """The settings a checkpoint must share with a run that resumes it."""
        keys = ("agents", "seeds", "updates_per_step", "batch_size", "buffer", "hidden", "optimizer", "lr",
                "noise_sigma", "prior", "prior_sigma", "pi", "sigma1", "sigma2", "sigma_init", "kl_scale",
                "kl_data", "kl_weighting", "decision_samples", "log_every", "workers")

        def plain(v: Any) -> Any:  # the string of an enum member (a checkpoint holds no Enum)
            return v.value if isinstance(v, Enum) else v

        d = {k: plain(getattr(self, k)) for k in keys}
        d["agents"] = [parse_agent(a).name for a in self.agents]
        d["seeds"] = [int(s) for s in self.seeds]
        d["hidden"] = [int(h) for h in self.hidden]
        # absent at their defaults, so that checkpoints from before these options still resume
        for name in ("weight_decay", "estimator", "likelihood", "kl_warmup", "ivon_lr", "ivon_hess_init", "ivon_beta",
                     "ivon_clip", "ensemble_size", "ensemble_keep"):
            value = plain(getattr(self, name))
            if value != plain(BanditConfig.__dataclass_fields__[name].default):
                d[name] = value
        return d
