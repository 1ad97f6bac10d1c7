"""``bbb bandit``: the command line."""

from __future__ import annotations

import argparse
import dataclasses

from ...cli.common import (
    add_data_dir,
    add_deprecated_alias,
    add_device,
    add_log,
    add_out,
    add_quiet,
    add_seeds,
    add_threads,
    describe,
    shared_help,
    std,
)
from ...elbo import KLWeighting
from ...engine.engine import OptimizerKind
from ...errors import UserError
from ...nn.base import Estimator
from ...options import PriorKind, values
from .config import BanditConfig, BanditLikelihood, KLData
from .running import merge_runs, run_bandit

EXAMPLE = (
    "bbb bandit --out runs/bandit          # the paper: 4 agents x 5 seeds x 50,000 steps (hours on 2 cores)\n"
    "  bbb bandit --out runs/bandit-quick --steps 2000 --seeds 0 1   # a quick look\n"
    "  bbb bandit --out runs/all --merge runs/bbb-greedy runs/egreedy   # two runs that split the agents, as one"
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
    parser.add_argument("--steps", type=int, default=d.steps, help=f"interactions per agent (default: {d.steps})")
    parser.add_argument("--agents", nargs="+", default=list(d.agents),
                        help=f"bbb, ivon, ensemble, greedy, egreedy_<eps> (default: {' '.join(d.agents)}); ivon: "
                             "Thompson sampling from the posterior BBB's free energy targets, learned by IVON "
                             "(bbb.IVON); no setting of its own has run through on UCI Mushroom yet "
                             "(results/bandit/IVON.md); ensemble: bootstrapped Thompson sampling, each decision one "
                             "of --ensemble-size greedy networks drawn at random")
    add_seeds(parser, list(d.seeds), shared_help("--seeds", "; each is one run of every agent"))
    parser.add_argument("--updates-per-step", type=int, default=d.updates_per_step,
                        help=f"minibatch updates after each interaction (default: {d.updates_per_step})")
    parser.add_argument("--batch-size", type=int, default=d.batch_size,
                        help=shared_help("--batch-size", f" (default: {d.batch_size})"))
    parser.add_argument("--buffer", type=int, default=d.buffer,
                        help=f"replay buffer: the latest N interactions (default: {d.buffer})")
    parser.add_argument("--hidden", nargs="+", type=int, default=list(d.hidden), metavar="N",
                        help=shared_help("--hidden", " (default: 100 100)"))
    parser.add_argument("--optimizer", choices=values(OptimizerKind), default=d.optimizer.value,
                        help=shared_help("--optimizer", " of every agent: adam, or sgd (plain gradient steps, the "
                                                        f"paper's eqs. 5-6; default: {d.optimizer})"))
    parser.add_argument("--lr", type=float, default=d.lr,
                        help=shared_help("--lr", f" of every agent (default: {d.lr:g})"))
    parser.add_argument("--likelihood", choices=values(BanditLikelihood), default=d.likelihood.value,
                        help="reward likelihood of every agent: gaussian (noise std --noise-sigma), or "
                             "heteroscedastic (a second network output sets the noise of each mushroom and action, "
                             f"floored at --noise-sigma; default: {d.likelihood})")
    parser.add_argument("--noise-sigma", type=float, default=d.noise_sigma,
                        help=f"std of the Gaussian reward likelihood of every agent, the floor of the "
                             f"heteroscedastic one (default: {d.noise_sigma:g})")
    parser.add_argument("--estimator", choices=[Estimator.REPARAM.value, Estimator.LOCAL.value],
                        default=d.estimator.value,
                        help="BBB's gradient estimator: reparam (weight draws), or local (local "
                             "reparameterisation; BBB agents only; decisions still draw whole networks; "
                             f"default: {d.estimator})")
    parser.add_argument("--kl-warmup", type=int, default=d.kl_warmup, metavar="N",
                        help="BBB: the first N interactions' updates fit the data without the KL "
                             f"(default: {d.kl_warmup})")
    parser.add_argument("--prior", choices=values(PriorKind), default=d.prior.value,
                        help=shared_help("--prior", ": gaussian (closed-form KL) or the paper's scale mixture "
                                                    f"(Monte Carlo KL; default: {d.prior})"))
    parser.add_argument("--prior-sigma", type=float, default=d.prior_sigma,
                        help=shared_help("--prior-sigma", f" (BBB; default: {d.prior_sigma:g})"))
    parser.add_argument("--pi", type=float, default=d.pi, help=shared_help("--pi", f" (BBB; default: {d.pi:g})"))
    parser.add_argument("--sigma1", type=float, default=d.sigma1,
                        help=shared_help("--sigma1", f" (BBB; default: {d.sigma1:g})"))
    parser.add_argument("--sigma2", type=float, default=d.sigma2,
                        help=shared_help("--sigma2", " (BBB; default: e^-6)"))
    parser.add_argument("--sigma-init", type=std, default=d.sigma_init, metavar="S",
                        help=shared_help("--sigma-init", f" (BBB; default: {d.sigma_init:g})"))
    parser.add_argument("--beta", dest="kl_scale", type=float, default=d.kl_scale, metavar="BETA",
                        help=shared_help("--beta", ": the KL is multiplied by this (BBB; < 1 tempers the posterior; "
                                                   f"config.json: kl_scale; default: {d.kl_scale:g})"))
    add_deprecated_alias(parser, "--kl-scale", "--beta", "kl_scale", float)
    parser.add_argument("--kl-data", choices=values(KLData), default=d.kl_data.value,
                        help="BBB: N of the KL / N weight: every interaction seen so far, or the buffer's fill "
                             f"(its capacity once full; default: {d.kl_data})")
    parser.add_argument("--kl-weighting", choices=values(KLWeighting), default=d.kl_weighting.value,
                        help=shared_help("--kl-weighting", " updates of one interaction (BBB): uniform, blundell "
                                                           "(2^(U-i)/(2^U-1), the paper's eq. 9) or blob (blundell "
                                                           f"reversed, 2^(i-1)/(2^U-1); default: "
                                                           f"{d.kl_weighting})"))
    parser.add_argument("--weight-decay", type=float, default=d.weight_decay,
                        help="greedy and epsilon-greedy agents: an L2 penalty, per example ((y - f)^2 + weight_decay "
                             "* |w|^2) / (2 noise_sigma^2) (a Gaussian prior's MAP; BBB has its KL instead; "
                             f"default: {d.weight_decay:g})")
    parser.add_argument("--samples", dest="decision_samples", type=int, default=d.decision_samples, metavar="K",
                        help=shared_help("--samples", " average of each decision (BBB's Thompson sampling; "
                                                      f"config.json: decision_samples; default: {d.decision_samples})"))
    add_deprecated_alias(parser, "--decision-samples", "--samples", "decision_samples", int)
    parser.add_argument("--ivon-lr", type=float, default=d.ivon_lr,
                        help=f"the ivon agent's learning rate (bbb.IVON's lr, rescaled by its hess_init; default: "
                             f"{d.ivon_lr:g})")
    parser.add_argument("--ivon-hess-init", type=float, default=d.ivon_hess_init,
                        help="the ivon agent's initial Hessian estimate, per unit squared error (its loss is the "
                             "negative log-likelihood times noise_sigma^2): its first sigma is noise_sigma / "
                             f"sqrt(N hess_init / ivon_beta) (default: {d.ivon_hess_init:g})")
    parser.add_argument("--ivon-beta", type=float, default=d.ivon_beta,
                        help="the ivon agent's temperature, as --beta is BBB's: its posterior is the free energy's "
                             "with the KL scaled by this (effective sample size N / (ivon_beta noise_sigma^2); "
                             f"default: {d.ivon_beta:g})")
    parser.add_argument("--ivon-clip", type=float, default=d.ivon_clip,
                        help="the ivon agent's element-wise clip of its update direction (bbb.IVON's clip_radius: a "
                             f"step is at most ivon_lr (hess_init + weight decay) times it; default: {d.ivon_clip:g})")
    parser.add_argument("--ensemble-size", type=int, default=d.ensemble_size,
                        help="the ensemble agent's networks, each from its own initial weights on its own minibatches "
                             f"(default: {d.ensemble_size})")
    parser.add_argument("--ensemble-keep", type=float, default=d.ensemble_keep,
                        help="the ensemble agent: the probability that an interaction enters a network's data, drawn "
                             "per network (Riquelme et al.'s bootstrap; 1: every network sees every interaction, "
                             f"a deep ensemble's recipe; default: {d.ensemble_keep:g})")
    parser.add_argument("--log-every", type=int, default=d.log_every,
                        help=f"write regret.csv rows every N steps (default: {d.log_every})")
    parser.add_argument("--workers", type=int, default=d.workers,
                        help="processes to split the population over (default: 1; 2 uses both cores of a 2-core CPU)")
    add_threads(parser, d.threads, shared_help("--threads", " per worker (default: 1)"))
    add_data_dir(parser, shared_help("--data-dir", " holding mushroom/ (else $BBB_DATA, else ~/.cache/bbb)"))
    add_device(parser)
    parser.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint in --out and start over")
    add_quiet(parser, "the regret summary per agent and the files written")
    add_log(parser, " of each agent and seed into OUT/tb/AGENT-seedS/ when the run (or --merge) ends: cumulative "
                    "regret, expected regret and arm pulls every --log-every steps")
    parser.add_argument("--merge", nargs="+", metavar="RUN",
                        help="instead of running: merge finished runs of the same settings that split the agents "
                             "or the seeds between them into one run in --out (e.g. --agents bbb greedy on one "
                             "machine, --agents egreedy_0.01 egreedy_0.05 on another; or --seeds 8 9 and --seeds 10 "
                             "11 12), every agent with every seed; takes --out and --data-dir only")


def config_from_args(args: argparse.Namespace) -> BanditConfig:
    return BanditConfig(
        steps=args.steps, agents=tuple(args.agents), seeds=tuple(args.seeds),
        updates_per_step=args.updates_per_step, batch_size=args.batch_size, buffer=args.buffer,
        hidden=tuple(args.hidden), optimizer=args.optimizer, lr=args.lr, noise_sigma=args.noise_sigma,
        prior=args.prior, prior_sigma=args.prior_sigma, pi=args.pi, sigma1=args.sigma1, sigma2=args.sigma2,
        sigma_init=args.sigma_init, kl_scale=args.kl_scale, kl_data=args.kl_data, kl_weighting=args.kl_weighting,
        weight_decay=args.weight_decay, likelihood=args.likelihood, estimator=args.estimator,
        kl_warmup=args.kl_warmup,
        decision_samples=args.decision_samples, ivon_lr=args.ivon_lr, ivon_hess_init=args.ivon_hess_init,
        ivon_beta=args.ivon_beta, ivon_clip=args.ivon_clip, ensemble_size=args.ensemble_size,
        ensemble_keep=args.ensemble_keep,
        log_every=args.log_every, workers=args.workers,
        threads=args.threads, device=args.device, data_dir=args.data_dir, out=args.out, resume=not args.fresh,
        quiet=args.quiet, loggers=tuple(args.log or ()))


def main(args: argparse.Namespace) -> int:
    """``bbb bandit``: run and write the outputs (or merge runs: ``--merge``); returns the exit code."""
    cfg = config_from_args(args)
    if args.merge:
        if not cfg.out:
            raise UserError("--merge writes the merged run to --out: give it")
        parser = argparse.ArgumentParser()
        add_arguments(parser)  # the command line's own defaults: an option given with --merge would be ignored
        plain = config_from_args(parser.parse_args(["--out", cfg.out]))
        changed = [f.name for f in dataclasses.fields(cfg) if f.name not in ("data_dir", "quiet", "loggers")
                   and getattr(cfg, f.name) != getattr(plain, f.name)]
        if changed:
            raise UserError(f"--merge takes the settings from the runs it merges; drop {', '.join(changed)}")
        merge_runs(args.merge, cfg.out, cfg.data_dir, loggers=cfg.loggers)
        return 0
    run_bandit(cfg)
    return 0
