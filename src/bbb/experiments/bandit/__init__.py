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
  gives no bandit loss; docs/notes.md has the measurements behind the default).
  ``--bbb-optimizer sgd`` (with ``--bbb-lr``) gives the BBB members plain SGD, as public
  reproductions do.
* ``greedy`` and ``egreedy_<eps>``: deterministic networks trained on squared loss that pick
  the best predicted action, or a uniformly random action with probability eps.

Protocol (defaults = the paper): a buffer of the 4096 latest interactions, after each
interaction 64 Adam updates on minibatches of 64 drawn from it, 50,000 interactions, 5 seeds.

Speed: every agent and seed runs as one batched *population*; each tensor has a leading member
dimension, the forward and backward passes are written by hand with ``torch.bmm`` (no
autograd), and one fused Adam call updates every member (Adam is elementwise, so members stay
independent). ``--workers`` splits the population over processes (one thread each), which
degrades far more gracefully on a shared CPU than intra-op threads. Subnormal floats are
flushed to zero while the population trains (Adam's decaying first moments otherwise slow
every update down).

Common random numbers: the mushroom sequence and the poisonous coin flips depend on the seed
only, and so do the initial weights, so every agent of seed s faces the same mushrooms from
the same starting network.

Training noise: the reparameterisation noise of the 64 updates per step comes from a bank of
N(0, 1) draws read at a random offset and redrawn every 1024 updates (``--exact-noise`` draws
fresh noise per update instead). The two Thompson samples per decision read the same bank.
"""

from __future__ import annotations

from .command import (  # noqa: F401
    DESCRIPTION,
    EXAMPLE,
    add_arguments,
    config_from_args,
    main,
)
from .config import (  # noqa: F401
    BANK_REFRESH,
    DEFAULT_AGENTS,
    EAT,
    ENV_CHUNK,
    EXPECTED_POISON,
    NUM_ACTIONS,
    PASS,
    REGRET_COLUMNS,
    REWARD_EDIBLE,
    REWARD_PASS,
    REWARD_POISON_BAD,
    REWARD_POISON_LUCKY,
    SUMMARY_COLUMNS,
    Agent,
    BanditConfig,
    parse_agent,
)
from .env import (  # noqa: F401
    env_draws,
    expected_rewards,
    mushroom_rewards,
    oracle_rewards,
    step_regrets,
)
from .mlp import (  # noqa: F401
    KEY_DEFAULTS,
    FlatAdam,
    FlatSGD,
    MLPLayout,
    Workspace,
    mlp_backward,
    mlp_forward,
)
from .plot import (  # noqa: F401
    plot_regret,
)
from .population import (  # noqa: F401
    Population,
    fmt_seconds,
)
from .running import (  # noqa: F401
    cpu_name,
    run_bandit,
    split_members,
)

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
