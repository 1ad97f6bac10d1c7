"""The mushroom environment: rewards, regrets and the seeded stream of contexts."""

from __future__ import annotations

import torch
from torch import Tensor

from .config import ENV_CHUNK, EXPECTED_POISON, REWARD_EDIBLE, REWARD_PASS, REWARD_POISON_BAD


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


def env_draws(seed: int, steps: int, num_contexts: int) -> tuple[Tensor, Tensor]:
    """Mushroom indices and poisonous coin flips for ``steps`` steps of one seed.

    Drawn in fixed chunks with their own generators, so a longer run extends a shorter one.
    """
    idx, lucky = [], []
    for c in range((steps + ENV_CHUNK - 1) // ENV_CHUNK):
        g = torch.Generator().manual_seed(1_000_003 * (int(seed) + 1) + 7919 * c)
        idx.append(torch.randint(0, num_contexts, (ENV_CHUNK,), generator=g))
        lucky.append(torch.rand(ENV_CHUNK, generator=g) < 0.5)
    return torch.cat(idx)[:steps], torch.cat(lucky)[:steps]
