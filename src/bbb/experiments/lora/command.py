"""``bbb reproduce lora``: the command line."""

from __future__ import annotations

import argparse
import shlex
import sys

from ...cli.common import add_data_dir, add_log, add_out, add_quiet, add_seeds, progress_log, text_table
from ...cli.timings import LORA_MINUTES
from ...errors import UserError
from ...options import values
from .settings import POOL_PER_CLASS, Arch, LoraBudget, LoraExpConfig, LoraMethod, Task, default_methods

__all__ = ["EXAMPLE", "DEFAULT_OUT", "add_arguments", "main", "config_from_args"]

EXAMPLE = (
    "bbb reproduce lora --out runs/lora --workers 2        # the benchmark (resumable)\n"
    "  bbb reproduce lora --out runs/lora-cnn --archs cnn --seeds 0 1 2 --budget quick\n"
    "  bbb reproduce lora --out runs/lora --report         # the tables of what is finished"
)

#: where ``bbb reproduce lora`` writes by default (never into the committed ``results/``)
DEFAULT_OUT = "runs/reproduce-lora"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``bbb reproduce lora`` options on ``parser``."""
    parser.description = (
        "Few-shot LoRA with uncertainty (issue 63): a small CNN and a small ViT pretrained here on MNIST "
        "digits 0-4 (cached in <out>/backbones), frozen, then LoRA adapters (peft) fit to K images per class "
        "of MNIST 5-9 or Fashion-MNIST 0-4 through the pretrained 5-way head, trained long with no early "
        "stopping. Methods: MLE LoRA, MAP LoRA, MC dropout on the adapters, an ensemble of 3 adapters, Bayes "
        "by Backprop on A (BLoB's choice) and on A and B, IVON on A and B (bbb.IVON), and Laplace-LoRA (MAP's "
        "network, then a KFAC Laplace over the adapters, prior precision by the marginal likelihood, probit "
        "predictive; needs laplace-torch). MAP's prior (Laplace-LoRA's too), BBB's KL "
        "weight and prior, and IVON's learning rate and effective sample size are chosen on a held-out slice of "
        "the few-shot data (20%), never on test. Test accuracy, ECE (15 bins), NLL, "
        "Brier, OOD AUROC (entropy; MI), reliability diagrams and NLL/ECE against steps. Writes methods.csv, "
        "seeds.csv, sweep.csv, target.csv, table.md, results.json, run.json and PNG figures to --out.")
    parser.add_argument("--archs", nargs="+", default=[str(a) for a in Arch], choices=values(Arch),
                        help="the backbones (default: cnn vit)")
    parser.add_argument("--tasks", nargs="+", default=[str(t) for t in Task], choices=values(Task),
                        help="the few-shot tasks (default: digits fashion)")
    parser.add_argument("--shots", nargs="+", type=int, default=[5, 10, 50], metavar="K",
                        help=f"images per class of the few-shot sets, 2 to {POOL_PER_CLASS} (drawn from a pool of "
                        f"{POOL_PER_CLASS} a class) (default: 5 10 50)")
    parser.add_argument("--methods", nargs="+", default=None, choices=values(LoraMethod),
                        metavar="M", help="the methods: " + ", ".join(values(LoraMethod)) + " (default: all; "
                        "laplace only where laplace-torch is installed)")
    add_seeds(parser, None, "random seeds, one few-shot draw and adapter initialisation each (default: the "
                            "budget's: 0-4, quick 0 1, smoke 0)")
    parser.add_argument("--budget", choices=values(LoraBudget), default=str(LoraBudget.DEFAULT),
                        help=f"default: the benchmark (600 steps; about {LORA_MINUTES} minutes on 2 CPU cores with "
                             "--workers 2, measured before ivon joined the methods: it adds its jobs); quick: 300 "
                             "steps, 2 seeds; smoke: a few steps (a pipeline test) "
                             "(default: default)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="jobs trained at once, each in its own process (default: 1)")
    parser.add_argument("--threads", type=int, default=1, metavar="N", help="torch threads per worker (default: 1)")
    add_out(parser, "output folder; rerunning with the same folder resumes (another --budget there is refused)",
            default=DEFAULT_OUT)
    add_data_dir(parser)
    parser.add_argument("--report", action="store_true",
                        help="train nothing: write the tables of what is finished in --out")
    add_quiet(parser, "the table and the files written")
    add_log(parser, " when the jobs end (and for jobs finished before, on a resume or with --report), from "
                    "each job's file in OUT/jobs: a test job's NLL, ECE and accuracy against training steps "
                    "(curve/, on the first test images) and its final test metrics (test/) in OUT/tb/JOB, a "
                    "validation job's held-out scores per setting in OUT/tb/JOB/SETTING; not live (the jobs "
                    "train in worker processes), and no training loss or KL (the jobs do not store them)")


def config_from_args(args: argparse.Namespace) -> LoraExpConfig:
    try:
        import peft  # noqa: F401
    except ImportError:
        raise UserError("bbb reproduce lora needs peft and transformers: pip install 'bayes-by-backprop[lora]'") \
            from None
    if args.methods is None:
        methods = default_methods()
    else:
        methods = tuple(LoraMethod(m) for m in dict.fromkeys(args.methods))
    cfg = LoraExpConfig(out=args.out, archs=tuple(Arch(a) for a in dict.fromkeys(args.archs)),
                        tasks=tuple(Task(t) for t in dict.fromkeys(args.tasks)),
                        shots=tuple(sorted(set(args.shots))), methods=methods,
                        seeds=None if args.seeds is None else tuple(sorted(set(args.seeds))),
                        budget=LoraBudget(args.budget), workers=args.workers, threads=args.threads,
                        data_dir=args.data_dir, quiet=args.quiet, report_only=args.report,
                        loggers=tuple(args.log or ()))
    cfg.check()
    if args.methods is None and LoraMethod.LAPLACE not in methods:  # (after the settings' own errors: one line each)
        from ...laplace import INSTALL

        print(f"bbb reproduce lora: the laplace method is left out: laplace-torch is not installed ({INSTALL})",
              file=sys.stderr)
    return cfg


def main(args: argparse.Namespace) -> int:
    """``bbb reproduce lora``: returns the exit code."""
    cfg = config_from_args(args)
    import torch

    from .runner import run_lora

    torch.set_num_threads(cfg.threads)
    res = run_lora(cfg, command="bbb " + " ".join(shlex.quote(a) for a in sys.argv[1:]), log=progress_log(args))
    import json
    from pathlib import Path

    path = Path(cfg.out) / "results.json"
    if path.is_file():
        groups = json.loads(path.read_text())["methods"]
        print(text_table([[g["arch"], g["task"], str(g["shots"]), g["method"], str(g["seeds"]),
                           f"{100 * g['acc']:.1f}", f"{100 * g['ece']:.1f}", f"{g['nll']:.3f}"] for g in groups],
                         ["backbone", "task", "K", "method", "seeds", "ACC %", "ECE %", "NLL"]))
    if res["missing"]:
        print(f"not finished: {len(res['missing'])} test jobs" + (" (rerun without --report)" if cfg.report_only
                                                                   else ""))
    for p in res["written"]:
        print(f"wrote {p}")
    return 0
