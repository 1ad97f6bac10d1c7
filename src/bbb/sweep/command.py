"""``bbb sweep``: the command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..cli.common import add_data_dir, add_log, add_quiet, describe, out_folder
from ..errors import UserError
from ..progress import plural
from .cost import REF_EPOCH_SECONDS, epoch_seconds_estimate
from .populations import population_plan
from .results import Backend, SchedulerKind, SweepOptions, check_population_size, ranked_by
from .runner import run_sweep
from .space import (
    Trial,
    TrialStatus,
    apply_overrides,
    count_trials,
    expand_space,
    load_space,
    resolve_params,
    varied_keys,
)
from .trial import epochs_done, finished_row, trial_dir

EXAMPLE = (
    "bbb sweep --space paper --set epochs=2 --limit 4 --dry-run\n"
    "  bbb sweep --space paper --backend local --max-concurrent 2 --out runs/grid\n"
    "  bbb sweep --space paper --population 9 --out runs/grid    # on a GPU: 9 grid points trained at once\n"
    "  bbb sweep --space paper --backend ray --address auto --gpus-per-trial 0.25 --scheduler asha --out runs/grid\n"
    "  bbb sweep --space my_space.yaml --set epochs=20 --set 'seed={grid: [0, 1, 2]}' --out runs/mine"
)


def _dump_space(space: dict[str, Any]) -> str:
    try:
        import yaml
    except ImportError:
        return json.dumps(space, indent=2) + "\n"
    return yaml.safe_dump(space, sort_keys=False, default_flow_style=None)


def dry_run_table(trials: Sequence[Trial], out: Path | None, ref_epoch_seconds: float) -> tuple[str, float]:
    """The ``--dry-run`` listing and the estimated total seconds."""
    keys = varied_keys(trials)
    lines = []
    total = 0.0
    header = ["#", "trial_id", *keys, "epochs", "est_hours", "state"]
    for t in trials:
        cfg, _ = resolve_params(t.params)
        sec = epoch_seconds_estimate(t.params, ref_epoch_seconds) * cfg.epochs
        total += sec
        state = "-"
        if out is not None:
            r = finished_row(out, t)
            done = epochs_done(trial_dir(out, t.trial_id))
            state = r["status"] if r else (f"epoch {done}" if done else "-")
        lines.append([str(t.index + 1), t.trial_id, *(json.dumps(t.params[k]) if isinstance(
            t.params[k], list | dict) else str(t.params[k]) for k in keys), str(cfg.epochs),
            f"{sec / 3600:.2f}", state])
    widths = [max(len(r[j]) for r in [header, *lines]) for j in range(len(header))]
    text = "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [header, *lines])
    return text, total


def warn_repeats(space: dict[str, Any], n_trials: int, limit: int | None) -> None:
    """A one-line warning when points of the space repeat another's settings (the same trial id:
    ``samples: {grid: [1, 1]}``, ``lr: {grid: [0.01, 0.010]}``, equal random draws): each such
    trial is listed and run once, so the sweep has fewer trials than the grid's product."""
    total = count_trials(space)
    if limit is None and n_trials < total:
        print(f"bbb sweep: warning: {total - n_trials} of the space's {total} points repeat another point's "
              f"settings (the same trial id) and are listed and run once: {plural(n_trials, 'trial')}",
              file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``bbb sweep`` options on ``parser``."""
    describe(parser, None, EXAMPLE)
    parser.epilog = (parser.epilog or "") + (
        "\n\nWrites OUT/sweep.csv (one row per trial, sorted by validation error; a regression's by validation "
        "NLL), OUT/best.json, "
        "OUT/space.json (the space run) and OUT/trials/<trial_id>/ (a bbb train run directory each).\n"
        "Space format and cluster set-up: docs/scale_out.md.")
    parser.add_argument("--space", default="paper", metavar="paper|FILE",
                        help="search space: 'paper' (the paper's MNIST grid, 972 trials) or a YAML/JSON file "
                             "(default: paper)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="override one key of the space, e.g. epochs=2 or 'lr={grid: [0.001, 0.01]}' "
                             "(repeatable)")
    parser.add_argument("--limit", type=int, default=None, metavar="N", help="only the first N trials")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the trials and their estimated cost; run nothing")
    parser.add_argument("--show-space", action="store_true",
                        help="print the space (after --set) as YAML, to start a space file from; run nothing")
    parser.add_argument("--out", metavar="DIR", type=out_folder, help="output folder of the sweep (required unless "
                                                     "--dry-run/--show-space)")
    parser.add_argument("--backend", default=Backend.LOCAL.value, choices=[b.value for b in Backend],
                        help="local: processes on this machine; ray: Ray Tune trials (default: local)")
    parser.add_argument("--address", default=None, metavar="ADDRESS",
                        help="ray: 'auto' or ray://HOST:PORT to join a cluster (default: start a local one)")
    parser.add_argument("--scheduler", default=SchedulerKind.NONE.value, choices=[s.value for s in SchedulerKind],
                        help="ray: asha stops poor trials early on the per-epoch validation error (default: none)")
    parser.add_argument("--grace-period", type=int, default=None, metavar="EPOCHS",
                        help="asha: epochs before a trial may be stopped (default: epochs/10)")
    parser.add_argument("--reduction-factor", type=float, default=4.0,
                        help="asha: keep 1/this of the trials at each rung (default: 4)")
    parser.add_argument("--max-concurrent", type=int, default=None, metavar="N",
                        help="trials at a time (local default: 1; ray default: as many as resources allow)")
    parser.add_argument("--gpus-per-trial", type=float, default=0.0, metavar="F",
                        help="ray: GPUs per trial, may be fractional (0.25: four trials per GPU; default: 0)")
    parser.add_argument("--cpus-per-trial", type=float, default=None, metavar="F",
                        help="CPUs per trial, also torch threads (ray default: 1; local default: cores/max-concurrent)")
    parser.add_argument("--population", type=int, default=None, metavar="N",
                        help="train up to N trials that differ only in their seed, learning rate, prior numbers or "
                             "initialisation as one population (one network of batched matrix products under one "
                             "engine: pays on a GPU, where one network's step is launch-bound; each trial keeps "
                             "its own directory, its noise is the population's); the local backend, one "
                             "population at a time (default: every trial alone)")
    parser.add_argument("--max-failures", type=int, default=2,
                        help="retries of a crashed trial, each from its latest checkpoint (default: 2)")
    parser.add_argument("--storage", default=None, metavar="PATH|URI",
                        help="ray: storage of Ray's checkpoints (default: OUT/ray; on a multi-node cluster a "
                             "shared folder or s3://... URI)")
    add_data_dir(parser)
    parser.add_argument("--ref-epoch-seconds", type=float, default=REF_EPOCH_SECONDS, metavar="S",
                        help="dry-run cost model: seconds per epoch of BBB 2x400 with 1 sample on your hardware "
                             f"(default: {REF_EPOCH_SECONDS:g}, measured on 2 CPU cores: bbb.cli.cost)")
    add_quiet(parser, "the counts of trials and the best one")
    add_log(parser)


def main(args: argparse.Namespace) -> int:
    """``bbb sweep``: expand the space, then list it (--dry-run) or run it."""
    space = apply_overrides(load_space(args.space), args.sets)
    if args.show_space:
        sys.stdout.write(_dump_space(space))
        return 0
    if args.population is not None:
        check_population_size(args.population)
    # checked before a dry run too: its plan (--population's groups) is the run's, never one the run refuses
    opts = SweepOptions(out=Path(args.out or "."), backend=args.backend, address=args.address,
                        scheduler=args.scheduler, max_concurrent=args.max_concurrent,
                        gpus_per_trial=args.gpus_per_trial, cpus_per_trial=args.cpus_per_trial,
                        max_failures=args.max_failures, grace_period=args.grace_period,
                        reduction_factor=args.reduction_factor, storage=args.storage,
                        data_dir=args.data_dir, progress=not args.quiet, loggers=tuple(args.log or ()),
                        population=args.population)
    if args.dry_run:
        trials = expand_space(space, args.limit)
        warn_repeats(space, len(trials), args.limit)
        if not args.ref_epoch_seconds > 0:
            raise UserError(f"--ref-epoch-seconds must be > 0, got {args.ref_epoch_seconds}")
        text, total = dry_run_table(trials, Path(args.out) if args.out else None, args.ref_epoch_seconds)
        print(text)
        epochs = sum(resolve_params(t.params)[0].epochs for t in trials)
        print(f"\n{plural(len(trials), 'trial')}, {plural(epochs, 'epoch')}; estimated {total / 3600:.1f} "
              f"machine-hours ({total / 86400:.1f} days) at {args.ref_epoch_seconds:g} s per epoch of BBB 2x400 "
              "(scaled by weights and samples; see docs/scale_out.md)")
        if args.population is not None:
            print(population_plan(trials, Path(args.out) if args.out else None, args.population))
        return 0
    if not args.out:
        raise UserError("--out DIR is required (or use --dry-run)")
    if args.ref_epoch_seconds != REF_EPOCH_SECONDS:  # (the cost model of the list, nothing a run reads)
        raise UserError("--ref-epoch-seconds is for --dry-run (its cost estimate): give --dry-run, or leave it out")
    t0 = time.perf_counter()
    try:
        rows = run_sweep(space, opts, limit=args.limit, log=(lambda s: None) if args.quiet else None,
                         warn=lambda s: print(s, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        print(f"bbb sweep: interrupted; finished trials are in {opts.out}/sweep.csv; run the same "
              "command again to resume", file=sys.stderr)
        return 130
    warn_repeats(space, len(rows), args.limit)
    counts = {s.value: sum(1 for r in rows if r["status"] == s.value) for s in TrialStatus}
    print(f"{plural(len(rows), 'trial')}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
          + f" ({time.perf_counter() - t0:.0f} s)")
    if counts[TrialStatus.DONE.value] + counts[TrialStatus.STOPPED.value] and all(
            ranked_by(r) is None for r in rows):
        print("bbb sweep: warning: no finished trial has a validation error or NLL to rank it by (no validation "
              "rows?), so sweep.csv is not sorted by one and no best.json is written", file=sys.stderr, flush=True)
    best_path = opts.out / "best.json"
    if best_path.is_file():
        best = json.loads(best_path.read_text())
        if best.get("selected_by") == "val_nll" and best.get("val_error") is not None:
            print(f"best by validation NLL: trial {best['trial_id']} val NLL {best['val_nll']:.4f}, val error "
                  f"{100 * best['val_error']:.2f}%, test error {100 * best['test_error']:.2f}%")
        elif best.get("selected_by") == "val_nll":
            print(f"best by validation NLL: trial {best['trial_id']} val NLL {best['val_nll']:.4f}, test RMSE "
                  f"{best['test_rmse']:.4g}, test log-likelihood {best['test_log_likelihood']:.4f}")
        else:
            print(f"best by validation: trial {best['trial_id']} val error {100 * best['val_error']:.2f}%, "
                  f"test error {100 * best['test_error']:.2f}%")
    written = [opts.out / name for name in ("space.json", "sweep.csv", "best.json") if (opts.out / name).is_file()]
    print(f"wrote {', '.join(map(str, written))} and a folder per trial in {opts.out / 'trials'}")
    return 0
