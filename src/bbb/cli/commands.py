"""The built-in commands: ``train``, ``evaluate``, ``prune`` and ``demo``.

Out of memory anywhere in train, evaluate or prune is one line that says what to make smaller
(:func:`memory_errors`); a run killed by it stays resumable. ``bbb train --resume`` restores the
thread count the run recorded (``--threads``).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import OutOfMemory, ResultsNotSaved, TrainingInterrupted, UserError
from .common import (
    SCORE_ROWS,
    ensemble_out,
    loggers_of,
    one_line_warnings,
    pct_text,
    progress_log,
    score_text,
    scores_table,
    text_table,
    unfinished_warning,
    weights_text,
)
from .parser import (  # noqa: F401 - the registry finds every command here
    add_demo_arguments,
    add_evaluate_arguments,
    add_prune_arguments,
    add_train_arguments,
)
from .registry import DEMO_SETTINGS

MEMORY_WORDS = ("out of memory", "not enough memory", "can't allocate memory", "cannot allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """``MemoryError``, ``torch.OutOfMemoryError`` (CUDA) or an allocator's RuntimeError (CPU)."""
    import torch

    if isinstance(exc, MemoryError | getattr(torch, "OutOfMemoryError", MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(w in str(exc).lower() for w in MEMORY_WORDS)


@contextlib.contextmanager
def memory_errors(doing: str, reduce: str, after: Callable[[], str] = lambda: "") -> Iterator[None]:
    """Out of memory inside becomes one :class:`~bbb.errors.OutOfMemory` line: what ran out, what
    to make smaller (``reduce``) and ``after()`` (what was kept)."""
    try:
        yield
    except Exception as e:
        if isinstance(e, OutOfMemory):
            msg = str(e)
        elif is_out_of_memory(e):
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
            if len(why) > 120:  # cut between words: never a number cut short (bytes 5017600000000 as 50176000)
                why = why[:why.rfind(" ", 0, 120)] + " ..."
            msg = f"out of memory while {doing} ({why}); use {reduce}"
        else:
            raise
        raise OutOfMemory(msg + after()) from None


def restore_threads(given: int | None, recorded: Any) -> None:
    """``--resume``: torch's thread count as the run recorded it, unless ``--threads`` says
    otherwise (then one line notes that the result may differ from an uninterrupted run's)."""
    import torch

    if isinstance(recorded, bool) or not isinstance(recorded, int) or recorded < 1:
        return
    if given is None:
        torch.set_num_threads(recorded)
    elif given != recorded:
        print(f"bbb train: note: resuming with --threads {given}, the run was trained with {recorded}; its results "
              "may then differ in the last bits from those of an uninterrupted run", file=sys.stderr, flush=True)


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """While the block runs, SIGTERM (a scheduler's stop, ``timeout``, ``kill``) stops it as Ctrl-C
    does: the completed epochs that ``--checkpoint-every`` kept in memory are written to last.pt,
    and one line says what it holds and how to resume (else the process died with them)."""
    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        before = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: signals are not ours to take
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def cmd_train(args: argparse.Namespace) -> int:
    from ..data.arrays import data_kind, moved_data_flag
    from ..runs import TrainConfig, load_checkpoint, train
    from ..runs.checkpoint import load_last
    from ..runs.config import FILE_DATASET

    given = {k: v for k, v in vars(args).items() if k not in ("command", "out", "resume", "overwrite", "quiet",
                                                                 "threads", "no_compile", "log")}
    loggers = loggers_of(args)
    out = Path(args.out)
    if args.resume and (out / "last.pt").exists():
        ckpt = load_last(out, mmap=True)
        if ckpt["config"].get("dataset") == FILE_DATASET:  # the images' settings: refused, as on a new run
            unread = [k for k in ("dataset", "data_dir", "scale", "val_size") if k in given]
            if unread:
                flag = "--" + unread[0].replace("_", "-")
                data = str(ckpt["config"].get("data_file"))
                raise UserError(f"{flag} is a setting of MNIST and Fashion-MNIST, and the run in {out} reads its own "
                                f"data ({data}): leave {flag} out (moved data: give {moved_data_flag(data)})")
        cfg = TrainConfig.from_stored({**ckpt["config"], **given})
        restore_threads(args.threads, ckpt.get("threads"))  # absent in checkpoints of older bbb
    else:
        cfg = TrainConfig(**given)
    cfg.refuse_unused(given)  # an option the method does not read, given even at its default value
    cfg.warn_unread_eval_samples(given)

    def kept() -> str:
        try:
            epoch = load_checkpoint(out / "last.pt", mmap=True)["epoch"]
        except UserError:
            return f"; nothing was saved in {out}"
        return (f"; {out / 'last.pt'} holds epoch {epoch}: with memory freed (or another --eval-samples or "
                f"--device) 'bbb train --resume --out {out}' continues it")

    # a folder of images: --image-size sets the input layer's width, one row of weights per pixel
    images = "--image-size, " if cfg.data_file and data_kind(cfg.data_file) == "folder" else ""
    with memory_errors(f"training {out}", f"a smaller {images}--batch-size, --hidden or --train-samples (a new run, "
                       "--overwrite) or fewer --eval-samples", kept):
        with sigterm_as_ctrl_c():
            summary = train(cfg, out, resume=args.resume, overwrite=args.overwrite, quiet=args.quiet,
                            log=progress_log(args), loggers=loggers)
    print_summary(summary, out)
    return 0


def _test_rows(s: dict[str, Any], what: str, key: str, fmt: Callable[[float], str]) -> list[list[str]]:
    """The summary's test ``what`` rows: of the mean weights (bbb, ivon) or of the network with dropout off,
    and of the k-sample average; of an sgd run one row (one deterministic network: one prediction)."""
    from ..options import Method, is_bayesian

    if str(s.get("method")) == Method.SGD.value:
        return [[f"test {what}", fmt(s[key])]]
    mean = "mean weights" if is_bayesian(s.get("method")) else "dropout off"
    return [[f"test {what} ({mean})", fmt(s[key])],
            [f"test {what} ({s['eval_samples']}-sample average)", fmt(s[key + "_mc"])]]


def print_summary(s: dict[str, Any], out: Path) -> None:
    if s.get("task") == "regression":
        rows = [*_test_rows(s, "RMSE", "test_rmse", lambda v: f"{v:.4g}"),
                ["test log-likelihood", f"{s['test_log_likelihood']:.4f}"],
                ["test 95% interval coverage", pct_text(s["test_coverage_95"])],
                ["validation RMSE", f"{s['best_val_rmse']:.4g}" if s["best_val_rmse"] is not None else "-"],
                ["model", f"{s['model']} (epoch {s['best_epoch']} of {s['epochs']})"],
                ["training time", f"{s['seconds']:.1f} s"]]
        print(text_table(rows, ["run " + str(out), ""]))
        return
    rows = [
        *_test_rows(s, "error", "test_error", pct_text),
        ["validation error", pct_text(s["val_error"])],
        ["test NLL / ECE / Brier", f"{s['test_nll']:.4f} / {pct_text(s['test_ece'])} / {s['test_brier']:.4f}"],
        ["model", f"{s['model']} (epoch {s['best_epoch']} of {s['epochs']})"],
        ["training time", f"{s['seconds']:.1f} s"],
    ]
    print(text_table(rows, ["run " + str(out), ""]))


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..runs import evaluate_run

    for d in args.run_dirs:  # a run stopped part way is evaluated at the epochs it had: said, not silent
        if (line := unfinished_warning("evaluate", d, args.which)) is not None:
            print(line, file=sys.stderr)
    if ensemble_out(args, "eval.json") is not None:
        return _evaluate_ensemble(args)
    run_dir = args.run_dirs[0]
    from ..runs.laplace import is_laplace_folder

    if is_laplace_folder(run_dir):
        return _evaluate_laplace(args)
    try:
        with memory_errors(f"evaluating {run_dir}", "fewer --samples or another --device"):
            r = evaluate_run(run_dir, samples=args.samples, which=args.which, data_dir=args.data_dir,
                             device=args.device, data_file=args.data_file)
    except ResultsNotSaved as e:
        print_eval(e.result, saved=False)
        raise not_saved(e) from None
    print_eval(r)
    return 0


def _evaluate_laplace(args: argparse.Namespace) -> int:
    """``bbb evaluate DIR``, DIR a Laplace posterior's folder: its test scores beside its run's network's."""
    from ..runs.laplace import evaluate_laplace

    unsaved = None
    try:
        with memory_errors(f"evaluating {args.run_dirs[0]}", "fewer --samples or another --device"):
            r = evaluate_laplace(args.run_dirs[0], samples=args.samples, which=args.which, device=args.device,
                                 data_dir=args.data_dir, data_file=args.data_file)
    except ResultsNotSaved as e:
        r, unsaved = e.result, e
    print(scores_table(r["task"], f"test ({r['n']:,} rows)",
                       [(f"laplace ({r['samples']} samples)", r), ("the run's network", r["map"])]))
    if unsaved is not None:
        raise not_saved(unsaved)
    print(f"wrote {', '.join(str(Path(args.run_dirs[0]) / f) for f in ['eval.json', *r.get('plots', [])])}")
    return 0


def _evaluate_ensemble(args: argparse.Namespace) -> int:
    """``bbb evaluate RUN RUN ... --out DIR``: the ensemble's test scores beside each member's."""
    from ..devices import resolve_device
    from ..runs.ensemble import evaluate_ensemble

    if args.samples < 1:
        raise UserError(f"--samples must be >= 1, got {args.samples}")
    unsaved = None
    try:
        with one_line_warnings("evaluate"), memory_errors(f"evaluating the ensemble of {len(args.run_dirs)} runs",
                                                          "fewer --samples or another --device"):
            r = evaluate_ensemble(args.run_dirs, args.out, samples=args.samples, which=args.which,
                                  device=resolve_device(args.device), data_dir=args.data_dir, data_file=args.data_file)
    except ResultsNotSaved as e:
        r, unsaved = e.result, e
    each = f"{r['samples']} samples each" if r["samples"] > 1 else "one network each"
    print(scores_table(r["task"], f"{r['ensemble']}, {each}",
                       [("members (mean)", r["member_mean"]), ("ensemble", r)]), flush=True)
    for m in r["member_scores"]:
        shown = (f"{name} {score_text(m[k], fmt)}" for name, k, fmt in SCORE_ROWS[r["task"]])
        print(f"  {m['run']}: " + ", ".join(shown), flush=True)
    if r["samples"] > 1:  # (so that a member's row and its own bbb evaluate are not taken for a discrepancy)
        print("  (member i draws its samples seeded seed + i, independent of the other members': its own bbb "
              "evaluate, seeded seed, differs from its row by Monte Carlo noise)", flush=True)
    if unsaved is not None:
        raise not_saved(unsaved)
    print(f"wrote {', '.join(str(Path(args.out) / f) for f in ['eval.json', *r.get('plots', [])])}")
    return 0


def not_saved(e: Any) -> UserError:
    """The one line of a :class:`~bbb.errors.ResultsNotSaved` whose results were printed."""
    return UserError(f"cannot write {e.path} ({e.reason}); the results printed above were not saved")


def print_eval(r: dict[str, Any], saved: bool = True) -> None:
    from ..options import is_bayesian

    mean = "mean weights" if is_bayesian(r["method"]) else "deterministic"
    # one sample of MC dropout (--samples 1) is not the deterministic network: only sgd's is the same network
    avg = "(same network)" if r["method"] == "sgd" else f"{r['samples']}-sample average"
    if r.get("task") == "regression":
        rows = [["test RMSE", f"{r['test_rmse']:.4g}", f"{r['test_rmse_mc']:.4g}"],
                ["log-likelihood", "", f"{r['log_likelihood']:.4f}"],
                ["95% interval coverage", "", pct_text(r["coverage_95"])],
                ["intervals' mean gap to their level (5-99%)", "",
                 "-" if r["calibration_error"] is None else f"{100 * r['calibration_error']:.2f} points"],
                ["RMSE of the 90% most certain", "", f"{r['rmse_at_90_coverage']:.4g}"]]
        print(text_table(rows, [f"{r['run']} ({r['checkpoint']}.pt, epoch {r['epoch']})", mean, avg]), flush=True)
        if saved:
            print(f"wrote {', '.join(str(Path(r['run']) / f) for f in ['eval.json', *r.get('plots', [])])}")
        return
    rows = [["test error", pct_text(r["test_error"]), pct_text(r["test_error_mc"])],
            ["NLL (nats)", f"{r['nll_mean']:.4f}", f"{r['nll']:.4f}"],
            ["ECE (15 bins)", pct_text(r["ece_mean"]), pct_text(r["ece"])],
            ["Brier", f"{r['brier_mean']:.4f}", f"{r['brier']:.4f}"]]
    print(text_table(rows, [f"{r['run']} ({r['checkpoint']}.pt, epoch {r['epoch']})", mean, avg]), flush=True)
    sel = r.get("selective")
    if sel:  # selective prediction with the averaged predictive (bbb.runs.selective_prediction)
        print(text_table([[k, pct_text(sel[k]["aurc"]), pct_text(sel[k]["risk_at_90"])]
                          for k in ("entropy", "mi") if k in sel],
                         ["handing over the most uncertain, by", "AURC", "error at 90% kept"]), flush=True)
        print(f"(all kept: error {pct_text(sel['error'])}; the least AURC any ranking reaches: "
              f"{pct_text(sel['oracle_aurc'])})", flush=True)
    if saved:
        files = ["eval.json"] + list(r.get("plots", []))
        print(f"wrote {', '.join(str(Path(r['run']) / f) for f in files)}")


def cmd_prune(args: argparse.Namespace) -> int:
    from ..runs import prune_run

    try:
        with memory_errors(f"pruning {args.run_dir}", "another --device (or free memory)"):
            rows = prune_run(args.run_dir, args.fractions, which=args.which, data_dir=args.data_dir,
                             device=args.device, data_file=args.data_file)
    except ResultsNotSaved as e:
        print_pruning(e.result)
        raise not_saved(e) from None
    print_pruning(rows)
    print(f"wrote {Path(args.run_dir) / 'pruning.csv'}")
    return 0


def print_pruning(rows: Sequence[dict[str, Any]]) -> None:
    rmse = any(r.get("test_rmse") is not None for r in rows)  # a regression's: its test RMSE, target units
    score = (lambda r: f"{r['test_rmse']:.4g}") if rmse else (lambda r: pct_text(r["test_error"]))
    print(text_table([[f"{100 * r['fraction_removed']:g}%", weights_text(r["weights_left"]), score(r)]
                      for r in rows], ["proportion removed", "#weights", "test RMSE" if rmse else "test error"],
                     left=False), flush=True)


def demo_command(args: argparse.Namespace) -> str:
    """The ``bbb demo`` command line that continues the demo of ``args``: the one the user typed
    (``sys.argv``) when it is a ``bbb demo``, else its --out and the settings that differ from the
    defaults."""
    import shlex

    if sys.argv[1:2] == ["demo"]:
        return "bbb " + shlex.join(sys.argv[1:])
    parts = ["bbb", "demo", "--out", shlex.quote(str(args.out))]
    if args.epochs != DEMO_SETTINGS["epochs"]:
        parts += ["--epochs", str(args.epochs)]
    if args.seed != 0:
        parts += ["--seed", str(args.seed)]
    if args.data_dir is not None:
        parts += ["--data-dir", shlex.quote(str(args.data_dir))]
    if args.device != "auto":
        parts += ["--device", shlex.quote(args.device)]
    if getattr(args, "no_compile", False):
        parts += ["--no-compile"]
    for name in getattr(args, "log", None) or []:
        parts += ["--log", shlex.quote(name)]
    return " ".join(parts)


def cmd_demo(args: argparse.Namespace) -> int:
    from .. import plots
    from ..progress import plural
    from ..prune import signal_to_noise, snr_db
    from ..runs import (
        TrainConfig,
        evaluate_run,
        load_run,
        prune_run,
        read_metrics,
        train,
    )
    from ..runs import model as runmodel

    t0 = time.perf_counter()
    out = Path(args.out)
    cfg = TrainConfig(**{**DEMO_SETTINGS, "epochs": args.epochs, "seed": args.seed,
                         "device": args.device, "data_dir": args.data_dir})
    progress_log(args)(f"bbb demo: BBB 2x400, scale-mixture prior (pi={cfg.pi}, sigma1={cfg.sigma1}, "
                       f"sigma2=e^-7), {plural(cfg.epochs, 'epoch')} on MNIST (50k train / 10k validation) -> {out}")
    loggers = loggers_of(args)
    data = runmodel.load_data(cfg)
    try:
        summary = train(cfg, out, data=data, resume="auto", quiet=args.quiet, log=progress_log(args),
                        loggers=loggers)
    except TrainingInterrupted as e:  # the demo resumes itself, then evaluates, prunes and plots
        raise TrainingInterrupted(f"{e.message.split('; resume with:')[0]}; resume with: {demo_command(args)} "
                                  "(it continues the training, then evaluates, prunes and plots)",
                                  e.run_dir, e.epoch) from None
    ev = evaluate_run(out, samples=cfg.eval_samples, which="best", device=args.device, data=data)
    print()
    print_eval(ev)
    rows = prune_run(out, (0.0, 0.5, 0.75, 0.95, 0.98), which="last", device=args.device, data=data)
    print()
    print("Pruning by signal-to-noise |mu|/sigma (last epoch, mean weights of the kept weights):")
    print_pruning(rows)
    written = ["config.json", "metrics.csv", "summary.json", "eval.json", *ev.get("plots", []), "pruning.csv"]
    model, _ = load_run(out, "last")
    for name, make in (("learning_curve.png", lambda p: plots.learning_curve(read_metrics(out), p)),
                       ("snr.png", lambda p: plots.snr_histogram(snr_db(signal_to_noise(model)), p))):
        if make(out / name) is not None:
            written.append(name)
    total = time.perf_counter() - t0
    print()
    print(f"test error {pct_text(ev['test_error'])} (mean weights), {pct_text(ev['test_error_mc'])} "
          f"({ev['samples']}-sample average); training {summary['seconds']:.0f} s, total {total:.0f} s")
    print(f"wrote {', '.join(written)} in {out}")
    return 0
