"""The bandit's settings: rewards, agents and :class:`BanditConfig`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...errors import UserError
from ...options import OptimizerKind, PriorKind, choice

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


ENV_CHUNK = 10_000


BANK_REFRESH = 1024


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
                "noise_sigma", "prior", "prior_sigma", "pi", "sigma1", "sigma2", "sigma_init", "decision_samples",
                "kl_data", "kl_scale", "bbb_optimizer", "bbb_lr", "log_every",
                "exact_noise", "workers")
        d = {k: getattr(self, k) for k in keys}
        d["agents"] = [parse_agent(a).name for a in self.agents]
        d["seeds"] = [int(s) for s in self.seeds]
        d["hidden"] = [int(h) for h in self.hidden]
        return d
