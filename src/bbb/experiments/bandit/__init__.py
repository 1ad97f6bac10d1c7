"""Thompson sampling on UCI Mushroom with a BBB network (section 5.3, Fig. 6 of the paper).

Each step a mushroom is drawn uniformly at random (with replacement); the agent eats it or
not. Rewards: edible and eaten +5; poisonous and eaten -35 or +5 with probability 1/2 each;
not eaten 0. The oracle eats exactly the edible mushrooms. Regret = oracle reward - agent
reward, summed over steps; the *expected* regret counts 15 for eating a poisonous mushroom
(its expected reward is -15) and 5 for passing an edible one.

Agents, all on the same network (input = the 117-d one-hot context and a one-of-2 action code,
two hidden layers of 100 ReLU units, one output = the expected reward of the pair), the same
likelihood (Gaussian rewards with noise std ``--noise-sigma``; ``--likelihood heteroscedastic``:
a second output sets the noise of each mushroom and action, floored at ``--noise-sigma``) and
the same optimiser (``--optimizer adam|sgd``, ``--lr``):

* ``bbb``: Thompson sampling; the weights are sampled ``--samples`` times (the paper: 2) per
  decision and the reward predictions averaged. The posterior is the library's diagonal
  Gaussian N(mu, softplus(rho)^2), starting at sigma ``--sigma-init``; the loss of one update is
  the negative ELBO of :class:`bbb.ELBO` per example: the minibatch's mean negative
  log-likelihood plus ``beta * pi_i * U / N`` times the KL to the prior (``--beta``; ``--prior
  gaussian``: closed form; ``mixture``: the paper's Monte Carlo estimate), where N is the
  number of interactions seen or the buffer's fill (``--kl-data``) and pi_i the weight of the
  i-th of the U updates after an interaction (``--kl-weighting uniform``: 1/U, i.e. KL / N per
  example; ``blundell``: 2^(U-i)/(2^U-1); ``blob``: blundell's reversed, 2^(i-1)/(2^U-1));
  ``--kl-warmup N``: 0 for the first N interactions.
  ``--estimator local`` trains with local reparameterisation (BBB agents only); decisions then
  still draw whole networks (:meth:`bbb.nn.BayesPopulation.forward_weights`).
* ``ivon`` (not in the paper): Thompson sampling as ``bbb``'s, from the posterior of BBB's free
  energy (the same likelihood, Gaussian prior and N) at its own temperature ``--ivon-beta`` (BBB's
  is ``--beta``), learned by IVON's natural-gradient update (:class:`bbb.IVON`: one weight sample
  per update, no KL term; the prior is its weight decay) instead of Adam on the free energy. Its
  loss is the minibatch's mean negative log-likelihood times noise_sigma^2 (for the Gaussian
  likelihood the squared error / 2), its effective sample size N / (ivon_beta noise_sigma^2) and
  weight decay ivon_beta noise_sigma^2 / (prior_sigma^2 N), updated with N at every interaction;
  ``--ivon-lr`` and ``--ivon-hess-init`` (the initial Hessian per unit squared error) are its
  other settings. Its members are a population
  of their own (:attr:`Population.ivon_net`) that sees the same minibatches.
* ``ensemble`` (not in the paper): bootstrapped Thompson sampling (Osband et al. 2016; Riquelme et
  al. 2018's BootRMS): ``--ensemble-size`` deterministic networks of the greedy agents' recipe,
  each from its own initial weights (the first: greedy's) on its own minibatches of the agent's
  buffer, each interaction entering each network's data with probability ``--ensemble-keep``;
  every decision is that of one network drawn uniformly (:class:`Ensembles`).
* ``greedy`` and ``egreedy_<eps>``: deterministic networks (the posterior means, no weight noise,
  no KL) trained on the same likelihood, with an optional L2 penalty ``--weight-decay`` wd (the
  MAP counterpart of a Gaussian prior; per example ((y - f)^2 + wd |w|^2) / (2 noise^2), so
  that under Adam their fit does not depend on ``--noise-sigma``); they pick the best
  predicted action, or a uniformly random action with probability eps.

Every finished run measures Figure 6's marks (:func:`figure6_marks`): which of the paper's
observations hold, printed with the results and written to ``summary.json``.

Protocol (defaults = the paper): a buffer of the 4096 latest interactions, after each
interaction 64 updates on minibatches of 64 drawn from it, 50,000 interactions, 5 seeds.

The population: every agent and seed of one process is a member of one
:class:`bbb.nn.BayesPopulation` (a leading member dimension on every parameter; the one-hot
inputs go through the first layer as sums of rows), so one batched forward and backward pass
updates them all. The BBB members train through :class:`bbb.Engine` (sampling, KL gradient
and Adam/SGD in one fused, compiled kernel; counter-based noise, fresh for every update), the
deterministic members through ``torch.optim``'s fused Adam/SGD. ``--workers`` splits the
population over processes (one thread each).

Common random numbers: the mushroom sequence and the poisonous coin flips depend on the seed
only, and so do the initial weights, so every agent of seed s faces the same mushrooms from
the same starting network.

Stopping: Ctrl-C or SIGTERM stops every worker after its current step and saves its
checkpoint (as does the periodic save every 5 minutes); the same command resumes exactly.
"""

from __future__ import annotations

from .command import (  # noqa: F401
    EXAMPLE,
    add_arguments,
    main,
)
from .config import (  # noqa: F401
    REGRET_COLUMNS,
    SUMMARY_COLUMNS,
    Agent,
    BanditConfig,
    parse_agent,
)
from .ensemble import Ensembles  # noqa: F401
from .env import (  # noqa: F401
    expected_rewards,
    mushroom_rewards,
    oracle_rewards,
    step_regrets,
)
from .marks import (  # noqa: F401
    exploration_floor,
    figure6_marks,
)
from .population import (  # noqa: F401
    Population,
)
from .running import (  # noqa: F401
    merge_runs,
    run_bandit,
)

__all__ = [
    "BanditConfig",
    "Agent",
    "parse_agent",
    "mushroom_rewards",
    "oracle_rewards",
    "expected_rewards",
    "step_regrets",
    "Population",
    "Ensembles",
    "merge_runs",
    "run_bandit",
    "figure6_marks",
    "exploration_floor",
    "add_arguments",
    "main",
    "EXAMPLE",
    "REGRET_COLUMNS",
    "SUMMARY_COLUMNS",
]
