"""``bbb reproduce fashion``: the command line."""

from __future__ import annotations

import argparse
import shlex
import sys

from ...cli.common import add_data_dir, add_device, add_out, add_quiet, add_seeds, progress_log, text_table
from ...errors import UserError
from ...options import values
from .settings import FashionBudget, FashionConfig, FashionMethod

__all__ = ["EXAMPLE", "DEFAULT_OUT", "add_arguments", "main", "config_from_args"]

EXAMPLE = (
    "bbb reproduce fashion --out runs/fashion --workers 2     # the table (resumable)\n"
    "  bbb reproduce fashion --out runs/fashion --device cuda --workers 8   # on one GPU, 8 jobs at once\n"
    "  bbb reproduce fashion --out runs/fashion --report       # the tables of what is finished"
)

#: where ``bbb reproduce fashion`` writes by default (never into the committed ``results/``)
DEFAULT_OUT = "runs/reproduce-fashion"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``bbb reproduce fashion`` options on ``parser``."""
    parser.description = (
        "Fashion-MNIST LeNet-5 (no padding, 44,426 weights) in the IVON paper's protocol: batch 128, cosine "
        "schedule, 100 epochs, 3 seeds, 64 test samples. Methods: AdamW (its weight decay chosen on 10,000 "
        "training images held out, never on test), IVON (bbb.IVON; and ivon-opt, the "
        "published package, where installed), Bayes by Backprop (its KL weight and estimator chosen the same "
        "way), MC dropout (its rate chosen the same way), a deep "
        "ensemble of 5 such AdamW networks, an ensemble of 5 BBB networks (bbb_ensemble: the mean of their "
        "posterior predictives) and the AdamW network's last-layer Laplace (laplace-torch, the laplace "
        "extra; nothing trains again). Accuracy, NLL, ECE (15 bins), Brier, OOD AUROC against MNIST (predictive "
        "entropy; the published OOD set, EMNIST letters, is not available offline) and seconds per epoch, beside "
        "the published AdamW and IVON rows. Writes methods.csv, seeds.csv, sweep.csv, table.md, table.png and "
        "run.json to --out.")
    parser.add_argument("--methods", nargs="+", default=None, choices=values(FashionMethod), metavar="M",
                        help="the methods: " + ", ".join(values(FashionMethod)) + " (default: all whose package "
                             "is installed here: ivon_opt needs ivon-opt, laplace laplace-torch; one line names "
                             "those left out)")
    add_seeds(parser, [0, 1, 2], "random seeds, one network (or ensemble) per method each")
    parser.add_argument("--budget", choices=values(FashionBudget), default=str(FashionBudget.PAPER),
                        help="paper: 100 epochs (the published protocol); quick: 10 epochs; smoke: 1 epoch on "
                             "2,000 images (a pipeline test) (default: paper)")
    add_device(parser)
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="jobs trained at once, each in its own process; on a GPU they share it "
                             "(default: 1)")
    parser.add_argument("--threads", type=int, default=1, metavar="N", help="torch threads per worker (default: 1)")
    add_out(parser, "output folder; rerunning with the same folder resumes (each job from its last epoch; "
                    "another --budget there is refused)",
            default=DEFAULT_OUT)
    add_data_dir(parser)
    parser.add_argument("--allow-device-change", action="store_true",
                        help="a job begun on another device type goes on here from its last epoch (not bit for "
                             "bit: its later random draws are this device's; its row names where each epoch ran); "
                             "else such a job stops with an error")
    parser.add_argument("--report", action="store_true",
                        help="train nothing: write the tables of what is finished in --out")
    add_quiet(parser, "the table and the files written")


def _missing_package(method: FashionMethod) -> str | None:
    """What ``method`` needs that this Python lacks (None: nothing)."""
    import importlib.util

    if method is FashionMethod.IVON_OPT and importlib.util.find_spec("ivon") is None:
        return "ivon-opt (pip install ivon-opt==0.1.3)"
    if method is FashionMethod.LAPLACE:
        from ...laplace import INSTALL, laplace_available

        if not laplace_available():
            return f"laplace-torch ({INSTALL})"
    return None


def config_from_args(args: argparse.Namespace) -> FashionConfig:
    methods = args.methods
    left: dict[FashionMethod, str] = {}
    if methods is None:  # all that can run here, the others named (once the settings are checked)
        left = {m: why for m in FashionMethod if (why := _missing_package(m)) is not None}
        methods = [str(m) for m in FashionMethod if args.report or m not in left]
    cfg = FashionConfig(out=args.out, methods=tuple(FashionMethod(m) for m in dict.fromkeys(methods)),
                        seeds=tuple(dict.fromkeys(args.seeds)), budget=FashionBudget(args.budget),
                        device=args.device, workers=args.workers, threads=args.threads, data_dir=args.data_dir,
                        quiet=args.quiet, report_only=args.report,
                        allow_device_change=args.allow_device_change)
    cfg.check()
    if left and not cfg.report_only:
        print("bbb reproduce fashion: leaving out " + "; ".join(f"{m} (needs {why})" for m, why in left.items()),
              file=sys.stderr)
    for m in cfg.methods if not cfg.report_only else ():  # before any job trains
        if (why := _missing_package(m)) is not None:
            raise UserError(f"the {m} row needs {why} (or leave it out: --methods without {m})")
    return cfg


def main(args: argparse.Namespace) -> int:
    """``bbb reproduce fashion``: returns the exit code."""
    cfg = config_from_args(args)
    import torch

    from .report import LABELS
    from .runner import run_fashion

    torch.set_num_threads(cfg.threads)
    res = run_fashion(cfg, command="bbb " + " ".join(shlex.quote(a) for a in sys.argv[1:]), log=progress_log(args))
    import csv
    from pathlib import Path

    path = Path(cfg.out) / "methods.csv"
    if path.is_file():
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        print(text_table([[LABELS.get(r["method"], r["method"]), r["setting"], r["seeds"],
                           *(f"{float(r[k]):.3f}" if r.get(k) else "-" for k in ("acc", "nll", "ece", "ood_auroc"))]
                          for r in rows], ["method", "setting", "seeds", "acc %", "NLL", "ECE", "OOD AUROC"]))
    if res["missing"]:
        print(f"not finished: {len(res['missing'])} test jobs" + (" (rerun without --report)" if cfg.report_only
                                                                   else ""))
    for p in res["written"]:
        print(f"wrote {p}")
    if res["failed"] and not cfg.report_only:
        raise UserError(f"{len(res['failed'])} job(s) failed, the first: {res['failed'][0]}")
    return 0
