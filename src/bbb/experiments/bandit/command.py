"""``bbb bandit``: the command line."""

from __future__ import annotations

import argparse

from ...cli.common import add_data_dir, add_device, add_out, add_quiet, add_seeds, add_threads, describe
from ...elbo import KLWeighting
from ...engine.engine import OptimizerKind
from ...options import PriorKind, values
from .config import BanditConfig, KLData
from .running import run_bandit

EXAMPLE = (
    "bbb bandit --out results/bandit                      # the paper: 4 agents x 5 seeds x 50,000 steps\n"
    "  bbb bandit --out runs/bandit-quick --steps 2000 --seeds 0 1   # a quick look"
)


DESCRIPTION = (
    "Contextual bandit on UCI Mushroom (section 5.3, Fig. 6): Thompson sampling with a BBB "
    "network vs greedy and epsilon-greedy networks, all agents and seeds trained as one batched "
    "population (bbb.nn.BayesPopulation) with the same recipe. Writes regret.csv, summary.csv, "
    "summary.json, regret.png, eating.png and config.json to --out; a checkpoint under --out/checkpoint (saved "
    "every 5 minutes and on Ctrl-C or SIGTERM) lets an interrupted run resume with the same command."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``bbb bandit`` options on ``parser``."""
    d = BanditConfig()
    describe(parser, DESCRIPTION, EXAMPLE)
    add_out(parser, "output folder (created; resumed if it has a checkpoint)")
    parser.add_argument("--steps", type=int, default=d.steps, help=f"interactions per agent (default {d.steps})")
    parser.add_argument("--agents", nargs="+", default=list(d.agents),
                        help="bbb, greedy, egreedy_<eps> (default: %(default)s)")
    add_seeds(parser, list(d.seeds), "seeds; each is one run of every agent")
    parser.add_argument("--updates-per-step", type=int, default=d.updates_per_step,
                        help=f"minibatch updates after each interaction (default {d.updates_per_step})")
    parser.add_argument("--batch-size", type=int, default=d.batch_size, help=f"minibatch size (default {d.batch_size})")
    parser.add_argument("--buffer", type=int, default=d.buffer,
                        help=f"replay buffer: the latest N interactions (default {d.buffer})")
    parser.add_argument("--hidden", nargs="+", type=int, default=list(d.hidden),
                        help="hidden layer widths (default: 100 100)")
    parser.add_argument("--optimizer", choices=values(OptimizerKind), default=d.optimizer,
                        help=f"every agent's optimiser: adam, or sgd (plain gradient steps, the paper's eqs. 5-6; "
                             f"default {d.optimizer})")
    parser.add_argument("--lr", type=float, default=d.lr, help=f"learning rate of every agent (default {d.lr:g})")
    parser.add_argument("--noise-sigma", type=float, default=d.noise_sigma,
                        help=f"std of the Gaussian reward likelihood of every agent (default {d.noise_sigma:g})")
    parser.add_argument("--prior", choices=values(PriorKind), default=d.prior,
                        help="BBB prior: gaussian (closed-form KL) or the paper's scale mixture (Monte Carlo KL; "
                             f"default {d.prior})")
    parser.add_argument("--prior-sigma", type=float, default=d.prior_sigma,
                        help=f"BBB: std of the Gaussian prior on every weight (default {d.prior_sigma:g})")
    parser.add_argument("--pi", type=float, default=d.pi, help=f"BBB mixture prior weight (default {d.pi:g})")
    parser.add_argument("--sigma1", type=float, default=d.sigma1,
                        help=f"BBB mixture prior std 1 (default {d.sigma1:g})")
    parser.add_argument("--sigma2", type=float, default=d.sigma2, help="BBB mixture prior std 2 (default e^-6)")
    parser.add_argument("--sigma-init", type=float, default=d.sigma_init,
                        help=f"BBB: initial posterior std softplus(rho) of every weight (default {d.sigma_init:g})")
    parser.add_argument("--kl-scale", type=float, default=d.kl_scale,
                        help=f"BBB: multiply the KL by this (< 1 tempers the posterior; default {d.kl_scale:g})")
    parser.add_argument("--kl-data", choices=values(KLData), default=d.kl_data,
                        help="BBB: N of the KL / N weight: every interaction seen so far, or the buffer's fill "
                             f"(its capacity once full; default {d.kl_data})")
    parser.add_argument("--kl-weighting", choices=values(KLWeighting), default=d.kl_weighting,
                        help="BBB: the KL's split over the updates of one interaction: uniform, or blundell "
                             f"(2^(U-i)/(2^U-1), the paper's eq. 9; default {d.kl_weighting})")
    parser.add_argument("--weight-decay", type=float, default=d.weight_decay,
                        help="greedy and epsilon-greedy agents: an L2 penalty, per example ((y - f)^2 + weight_decay "
                             "* |w|^2) / (2 noise_sigma^2) (a Gaussian prior's MAP; BBB has its KL instead; "
                             f"default {d.weight_decay:g})")
    parser.add_argument("--decision-samples", type=int, default=d.decision_samples,
                        help=f"BBB: weight samples averaged per decision (default {d.decision_samples})")
    parser.add_argument("--log-every", type=int, default=d.log_every,
                        help=f"write regret.csv rows every N steps (default {d.log_every})")
    parser.add_argument("--workers", type=int, default=d.workers,
                        help="processes to split the population over (default 1; 2 uses both cores of a 2-core CPU)")
    add_threads(parser, d.threads, "torch threads per worker (default 1)")
    add_data_dir(parser, "data folder holding mushroom/ (else $BBB_DATA, else ~/.cache/bbb)")
    add_device(parser)
    parser.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint in --out and start over")
    add_quiet(parser, "the regret summary per agent and the files written")


def config_from_args(args: argparse.Namespace) -> BanditConfig:
    return BanditConfig(
        steps=args.steps, agents=tuple(args.agents), seeds=tuple(args.seeds),
        updates_per_step=args.updates_per_step, batch_size=args.batch_size, buffer=args.buffer,
        hidden=tuple(args.hidden), optimizer=args.optimizer, lr=args.lr, noise_sigma=args.noise_sigma,
        prior=args.prior, prior_sigma=args.prior_sigma, pi=args.pi, sigma1=args.sigma1, sigma2=args.sigma2,
        sigma_init=args.sigma_init, kl_scale=args.kl_scale, kl_data=args.kl_data, kl_weighting=args.kl_weighting,
        weight_decay=args.weight_decay,
        decision_samples=args.decision_samples, log_every=args.log_every, workers=args.workers,
        threads=args.threads, device=args.device, data_dir=args.data_dir, out=args.out, resume=not args.fresh,
        quiet=args.quiet)


def main(args: argparse.Namespace) -> int:
    """``bbb bandit``: run and write the outputs; returns the exit code."""
    run_bandit(config_from_args(args))
    return 0
