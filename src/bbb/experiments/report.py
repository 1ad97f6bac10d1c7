"""``bbb report RUN [RUN ...] --out report.html``: one self-contained HTML page of runs, side by side,
for the person it is sent to.

The page opens with what was trained and how well (its title names the data file, by its base name
only, or the dataset, the task and the size), then the results with a line on what each metric
means, the plots with what they show, the settings that matter (and the others only where they
differ from the defaults for that kind of data), and the commands that would fill what the page
lacks, only those that run on that kind of run (the words: bbb.experiments.report_text). It reads
what the commands already wrote in each run directory, and nothing else:

=====================  =====================================================================
section                files
=====================  =====================================================================
settings               ``config.json`` (``bbb train``; the settings that differ between the
                       runs are marked)
results                ``summary.json`` (``bbb train``), ``eval.json`` (``bbb evaluate``),
                       ``ood.json`` (``bbb ood``)
learning curves        ``learning_curve.png`` (``bbb demo``), else drawn from ``metrics.csv``
reliability            ``reliability.png`` (``bbb evaluate``; classification)
risk-coverage          ``risk_coverage.png`` and ``eval.json``'s ``selective`` (``bbb evaluate``)
pruning                ``pruning.csv`` (``bbb prune``; a bbb run) and ``snr.png``
                       (``bbb demo``)
out-of-distribution    ``ood.json`` and ``ood.png`` (``bbb ood``; MNIST, Fashion-MNIST)
uncertain inputs       ``uncertain.png`` and ``uncertain.json`` (``bbb uncertain``; images)
=====================  =====================================================================

A ``bbb laplace`` folder is a column too: its run's config.json, summary.json and metrics.csv, its
own eval.json, ood.json and uncertain.json, and a row with the fit (laplace.json). So is an
ensemble's folder (``bbb evaluate RUN RUN ... --out DIR``): its members' settings and commands, their
training time summed, its own eval.json, ood.json and uncertain.json (each left out, with the
command that scores it again, where a member trained on since): bbb.experiments.report_files.

One column per run, headed by its name (the directory's, made unique); a section no run can have
is left out, and a run without a section's files says why, or names the command that writes them.
No absolute path appears on the page. Every image is embedded as a ``data:`` URI and the page has
no script, font, style sheet or link to anything outside it: it opens offline, mailed or archived
as one file (tests/applications/test_report.py opens it in headless chromium,
tests/applications/test_report_page.py checks the words and runs each suggested command).
"""

from __future__ import annotations

import argparse
import base64
import html
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..cli.common import add_out, describe, shared_help
from ..errors import UserError
from ..io import atomic_write_text
from ..options import is_bayesian
from ..progress import plural
from . import report_text as RT
from .report_files import RunFiles, read_run

__all__ = ["RunFiles", "read_run", "report_html", "result_rows", "write_report"]

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1300px; padding: 0 1em; color: #222;
       line-height: 1.4; }
h1 { font-size: 1.45em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: right; vertical-align: top; }
td:first-child, th:first-child, table.text td, table.text th { text-align: left; }
table.results td:last-child, table.results th:last-child { text-align: left; color: #555; font-size: 0.92em;
                                                         max-width: 36em; }
code span { white-space: nowrap; }
tr.diff td { background: #fff6d5; }
.runs { display: grid; gap: 1em; }
.run { min-width: 0; }
.run h3 { font-size: 0.95em; margin: 0.3em 0; }
.run img { max-width: 100%; height: auto; border: 1px solid #eee; }
.missing { color: #777; font-style: italic; font-size: 0.9em; }
.caption { color: #444; font-size: 0.92em; max-width: 60em; }
.lead { font-size: 1.02em; }
code { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; font-size: 0.9em; background: #f4f4f4;
       padding: 0 3px; }
"""


def _names(dirs: Sequence[Path]) -> list[str]:
    """The directories' names, with as many parent folders as makes them unique."""
    parts = [d.resolve().parts for d in dirs]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(d) for d in dirs]


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

E = html.escape


def _img(data: bytes | None, alt: str) -> str | None:
    if data is None:
        return None
    return f'<img alt="{E(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'


def _missing(text: str) -> str:
    return f'<p class="missing">{E(text)}</p>'


def _pct(v: Any) -> str:
    return "-" if not isinstance(v, int | float) or isinstance(v, bool) else f"{100 * v:.2f}%"


def _num(v: Any) -> str:
    return "-" if not isinstance(v, int | float) or isinstance(v, bool) else f"{v:.4g}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], marked: Sequence[bool] = (),
           cls: str = "") -> str:
    """A table of already escaped cells (``marked`` rows get the ``diff`` class; ``cls``: the
    table's class, ``text`` for every column left-aligned)."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join(f'<tr{" class=diff" if i < len(marked) and marked[i] else ""}>'
                   + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for i, r in enumerate(rows))
    return f'<table{f" class={cls}" if cls else ""}><tr>{head}</tr>{body}</table>'


def _settings(r: RunFiles) -> dict[str, str]:
    """The run's settings rows; an ensemble's: its members', a setting where they differ (the seed)
    as each member's value in turn."""
    if r.members is None:
        return dict(RT.settings_rows(r.config, r.regression))
    per_member = [dict(RT.settings_rows(c, r.regression)) for c in r.member_configs]
    keys: list[str] = []
    for rows in per_member:
        keys += [k for k in rows if k not in keys]
    out = {"members": ", ".join(r.member_names())}
    for k in keys:
        values = [rows.get(k, "-") for rows in per_member]
        out[k] = values[0] if len(set(values)) == 1 else ", ".join(values)
    return out


def _settings_section(runs: Sequence[RunFiles]) -> str:
    per_run = [_settings(r) for r in runs]
    keys: list[str] = []
    for rows in per_run:
        keys += [k for k in rows if k not in keys]
    body = [[E(k), *(E(rows.get(k, "-")) for rows in per_run)] for k in keys]
    diff = [len(set(row[1:])) > 1 for row in body]
    body.append(["command", *(_command(r) for r in runs)])
    body.append(["versions", *(E(", ".join(f"{k} {v}" for k, v in (r.config.get("versions") or {}).items()))
                               for r in runs)])
    note = ("<p class=caption>The settings that matter, then any other that differs from the defaults for "
            "that kind of data" + ("; those that differ between the runs are marked" if len(runs) > 1 and any(diff)
                                    else "") + ".</p>")
    return note + _table(["setting", *(E(r.name) for r in runs)], body, diff, cls="text")


def _command(r: RunFiles) -> str:
    """The bbb command that trained the run (config.json's argv, paths cut to their base names), or
    the arguments of the program that called the library, then each command that resumed it (a
    resume may train on to more epochs); an ensemble's: each member's, a line each."""
    return "<br>".join(_trained_by(c) for c in (r.member_configs if r.members is not None else [r.config]))


def _trained_by(config: dict[str, Any]) -> str:
    resumed = [r for r in config.get("resumed") or [] if isinstance(r, dict)]
    return _argv_text(config.get("argv")) + "".join(
        f"; then, after epoch {r.get('after_epoch')}, {_argv_text(r.get('argv'))}" for r in resumed)


def _argv_text(argv: Any) -> str:
    from ..cli.registry import COMMANDS

    argv = [str(a) for a in argv or []]
    if argv and argv[0] in COMMANDS:
        return _code(RT.command_text(argv))
    shown = " ".join(RT.plain_path(a) for a in argv)
    return "from Python" + (f" (arguments: <code>{E(shown)}</code>)" if argv else "")


def _k(text: str, k: Any) -> str:
    return text if text == "-" or not k else f"{text} (k={k})"


def result_rows(r: RunFiles) -> list[tuple[str, str, str]]:
    """(key of :data:`report_text.EXPLAIN`, label, value) of the run's results; ``-`` where it has none."""
    ev, s, ood = r.eval or {}, r.summary or {}, r.ood or {}
    sel = ev.get("selective") or {}
    k = ev.get("samples", s.get("eval_samples"))
    scores = ood.get("scores") or {}
    other = str(ood.get("ood", "-"))
    y = (r.config.get("preprocess") or {}).get("y") or {}
    # the checkpoint the test numbers are from: eval.json's (bbb evaluate --which) where it has them
    which, epoch = (ev["checkpoint"], ev.get("epoch")) if ev.get("checkpoint") in ("best", "last") else (
        s.get("model"), s.get("best_epoch"))
    trained = s.get("model") == which  # the validation numbers of summary.json are of that checkpoint
    if ood.get("checkpoint") in ("best", "last") and ood["checkpoint"] != which:  # bbb ood --which another
        other += f", its {ood['checkpoint']} checkpoint"
    if r.regression:
        rows = [
            ("test_rmse_mc", "test RMSE (k-sample average)",
             _k(_num(ev.get("test_rmse_mc", s.get("test_rmse_mc"))), k)),
            ("test_rmse", "test RMSE (mean weights)", _num(ev.get("test_rmse", s.get("test_rmse")))),
            ("target_sd", "the target's sd", _num(y.get("std"))),
            ("log_likelihood", "test log-likelihood", _num(ev.get("log_likelihood", s.get("test_log_likelihood")))),
            ("coverage_95", "95% interval coverage", _pct(ev.get("coverage_95", s.get("test_coverage_95")))),
            ("aurc_sd", "AURC (squared error, by predictive sd)", _num(ev.get("aurc_sd"))),
            ("rmse90", "RMSE of the 90% most certain", _num(ev.get("rmse_at_90_coverage"))),
            ("best_val_rmse", "validation RMSE", _num(s.get("best_val_rmse") if trained else None)),
            ("ood_sd", f"OOD AUROC by predictive sd (vs {other})", _num((scores.get("sd") or {}).get("auroc"))),
            ("ood_epistemic", f"OOD AUROC by epistemic sd (vs {other})",
             _num((scores.get("epistemic_sd") or {}).get("auroc"))),
        ]
    else:
        rows = [
            ("test_error_mc", "test error (k-sample average)",
             _k(_pct(ev.get("test_error_mc", s.get("test_error_mc"))), k)),
            ("test_error", "test error (mean weights)", _pct(ev.get("test_error", s.get("test_error")))),
            ("nll", "test NLL (nats)", _num(ev.get("nll", s.get("test_nll")))),
            ("ece", "test ECE", _pct(ev.get("ece", s.get("test_ece")))),
            ("brier", "test Brier", _num(ev.get("brier", s.get("test_brier")))),
            ("aurc_entropy", "AURC by entropy", _pct((sel.get("entropy") or {}).get("aurc"))),
            ("aurc_mi", "AURC by MI", _pct((sel.get("mi") or {}).get("aurc"))),
            ("risk90_entropy", "error at 90% kept (entropy)", _pct((sel.get("entropy") or {}).get("risk_at_90"))),
            ("risk90_mi", "error at 90% kept (MI)", _pct((sel.get("mi") or {}).get("risk_at_90"))),
            ("val_error", "validation error", _pct(s.get("val_error") if trained else None)),
            ("last_val_error", "validation error (last epoch)", _pct(None if trained else s.get("last_val_error"))),
            ("ood_entropy", f"OOD AUROC by entropy (vs {other})", _num((scores.get("entropy") or {}).get("auroc"))),
            ("ood_mi", f"OOD AUROC by MI (vs {other})", _num((scores.get("mutual_information") or {}).get("auroc"))),
        ]
    model = E(f"{which} (epoch {epoch} of {s.get('epochs', r.config.get('epochs'))})") if which else "-"
    seconds = f"{s['seconds']:.1f} s" if isinstance(s.get("seconds"), int | float) else "-"
    if r.members is not None:  # the members' checkpoints, each of its own epoch; their training summed
        epochs = [m.get("epoch") for m in ev.get("member_scores") or []]
        model = E(f"the {which} of each of its {len(r.members)} members" + (
            f" (epochs {', '.join(map(str, epochs))})" if epochs and None not in epochs else "")) if which else "-"
        seconds += " (its members' sum)" if seconds != "-" else ""
    lap = r.laplace or {}
    fit = (f"{lap['seconds']:.1f} s, {lap.get('n_params', 0):,} weights ({lap.get('hessian')}), prior precision "
           f"{_num(lap.get('prior_precision'))}") if isinstance(lap.get("seconds"), int | float) else "-"
    return [*rows, ("model", "model", model), ("seconds", "training time", seconds),
            ("laplace_fit", "last-layer Laplace fit", fit)]


def _results_section(runs: Sequence[RunFiles]) -> str:
    per_run = [{label: (key, v) for key, label, v in result_rows(r)} for r in runs]
    labels: list[str] = []
    for rows in per_run:  # OOD rows are named after each run's OOD set
        labels += [k for k in rows if k not in labels]
    body = []
    for label in labels:
        cells = [rows[label][1] if label in rows else "-" for rows in per_run]
        if any(c != "-" for c in cells):
            key = next(rows[label][0] for rows in per_run if label in rows)
            body.append([E(label), *cells, E(RT.EXPLAIN[key])])
    if not body:
        return _missing("no results yet (no summary.json or eval.json): see the next steps below")
    return _table(["", *(E(r.name) for r in runs), "what it means"], body, cls="results")


def _lead(r: RunFiles) -> str:
    """What was trained, on what, and how well, in two sentences."""
    c, s, ev = r.config, r.summary or {}, r.eval or {}
    settings = dict(RT.settings_rows(c, r.regression))
    unit = RT.unit_of(c, r.regression)
    target = f" to predict {settings['target']}" if "target" in settings else ""
    n_train = c.get("num_train")
    on = (f"{n_train:,} {unit} of {RT.data_phrase(c, r.regression).split(' (')[0]}" if isinstance(n_train, int)
          else RT.data_phrase(c, r.regression))
    epochs = plural(c["epochs"], "epoch") if isinstance(c.get("epochs"), int) else "- epochs"
    if r.unfinished():
        epochs = f"{r.epochs_done} of {epochs} (stopped before its end: resumable)"
    what = f"{RT.method_name(c)}, trained {epochs} on {on}{target}: {settings['network']}."
    if r.members is not None:
        same = len({RT.method_name(c) for c in r.member_configs}) == 1
        what = f"an {r.description()}: {', '.join(r.member_names())}, {'each' if same else 'the first'} {what}"
    if r.laplace is not None:
        what = (f"the last-layer Laplace posterior ({r.laplace.get('hessian')}, fitted on its training {unit}) of "
                f"{RT.plain_path(str(r.train_dir))}, {what[0].lower()}{what[1:]}")
    n = ev.get("n", c.get("num_test"))
    held = f"On the {n:,} held-out test {unit}" if isinstance(n, int) else "On the held-out test set"
    k = ev.get("samples", s.get("eval_samples"))
    by = f"averaging {k} sampled networks" if k and c.get("method") != "sgd" else "with its one network"
    if r.laplace is not None:
        by = f"averaging {k} draws of its last layer" if k else "with its draws of the last layer"
    if r.members is not None:
        by = (f"averaging its {len(r.members)} members' predictives"
              + (f" ({k} samples of each Bayesian one)" if k and k > 1 and any(
                  is_bayesian(c.get("method", "bbb")) for c in r.member_configs) else ""))
    if r.regression:
        rmse = ev.get("test_rmse_mc", s.get("test_rmse_mc"))
        cov = ev.get("coverage_95", s.get("test_coverage_95"))
        sd = ((c.get("preprocess") or {}).get("y") or {}).get("std")
        how = (f"{held}: RMSE {_num(rmse)} in the target's units, {by} (the target's sd: {_num(sd)}); "
               f"{_pct(cov)} of the true values inside their 95% interval.") if rmse is not None else ""
    else:
        err = ev.get("test_error_mc", s.get("test_error_mc", ev.get("test_error", s.get("test_error"))))
        how = f"{held}: {_pct(err)} wrong, {_pct(1 - err)} right, {by}." if isinstance(err, int | float) else ""
    return f'<p class="lead"><b>{E(r.name)}</b>: {E(what)} {E(how or "Not tested yet: see the next steps below.")}</p>'


def _code(command: str) -> str:
    """A command, broken only between its words."""
    return "<code>" + " ".join(f"<span>{E(w)}</span>" for w in command.split(" ")) + "</code>"


def _next_section(runs: Sequence[RunFiles]) -> str:
    items = []
    for r in runs:
        for cmd, what in r.suggestions():
            items.append(f"<li>{_code(cmd)}: {E(what)}</li>")
    if not items:
        return ""
    return ("<h2>Next steps</h2><p class=caption>Commands that add what this page lacks, run where the run folders "
            "are (each folder is named as in the column heads):</p><ul>" + "".join(items) + "</ul>")


# --------------------------------------------------------------------------------------------
# the sections of images, one column per run
# --------------------------------------------------------------------------------------------


def _side_by_side(runs: Sequence[RunFiles], cell: Callable[[RunFiles], str]) -> str:
    cols = "".join(f'<div class="run"><h3>{E(r.name)}</h3>{cell(r)}</div>' for r in runs)
    return f'<div class="runs" style="grid-template-columns: repeat({len(runs)}, minmax(0, 1fr))">{cols}</div>'


def _to_do(r: RunFiles, command: str) -> str:
    """``none yet: <command> <run>`` for a command that runs on ``r`` (else why the section is empty)."""
    cmds = [c for c, _ in r.suggestions() if c.split()[1] == command]
    if cmds:
        return f'<p class="missing">none yet: {_code(cmds[0])} writes it</p>'
    return _missing(f"none: {r.name} has no {command} output")


def _image_cell(r: RunFiles, name: str, alt: str, command: str) -> str:
    return _img(r.png(name), f"{alt} of {r.name}") or _to_do(r, command)


def _learning(r: RunFiles) -> str:
    if r.members is not None and r.png("learning_curve.png") is None:
        return _missing(f"an ensemble: each member's curves are its own (bbb report {' '.join(r.member_names())})")
    return _img(r.learning_curve(), f"learning curves of {r.name}") or _missing(
        "no metrics.csv to draw (or matplotlib is not installed)")


def _reliability(r: RunFiles) -> str:
    if r.regression:
        return _missing("a regression run has no classes to be confident in: see its interval calibration below")
    return _image_cell(r, "reliability.png", "reliability diagram", "evaluate")


def _calibration(r: RunFiles) -> str:
    if not r.regression:  # (it said "has no evaluate output" of an evaluated classifier, or to run evaluate)
        return _missing("a classifier has no intervals: see its reliability diagram above")
    img = _image_cell(r, "calibration.png", "calibration curve", "evaluate")
    gap = (r.eval or {}).get("calibration_error")
    return img + ("" if gap is None else f'<p class="missing">mean gap to the diagonal: {100 * float(gap):.1f} '
                                          'percentage points</p>')


def _risk(r: RunFiles) -> str:
    ev = r.eval or {}
    if r.regression:
        if "aurc_sd" not in ev:
            return _to_do(r, "evaluate")
        return _table(["handing over by", "AURC (squared error)", "RMSE of the 90% kept"],
                      [["predictive sd", _num(ev.get("aurc_sd")), _num(ev.get("rmse_at_90_coverage"))]])
    sel = ev.get("selective")
    img = _image_cell(r, "risk_coverage.png", "risk-coverage curve", "evaluate")
    if not sel:
        return img
    rows = [[E(k), _pct(sel[k].get("aurc")), _pct(sel[k].get("risk_at_90"))] for k in ("entropy", "mi") if k in sel]
    return img + _table(["handing over by", "AURC", "error at 90% kept"], rows) + (
        f'<p class="missing">all kept: {_pct(sel.get("error"))} wrong; the least AURC any ranking reaches: '
        f'{_pct(sel.get("oracle_aurc"))}</p>')


def _pruning(r: RunFiles) -> str:
    if r.members is not None:
        return _missing("an ensemble is pruned member by member: bbb prune MEMBER, then bbb report MEMBER")
    if not r.prunable():
        return _missing("pruning by signal-to-noise needs a bbb run (or an ivon one)")
    out = ""
    if r.pruning:
        rmse = r.regression and any(_float(p.get("test_rmse")) is not None for p in r.pruning)
        rows = [[_pct(_float(p.get("fraction_removed"))), E(str(p.get("weights_left", ""))),
                 E(f"{_float(p.get('test_rmse')):.4g}") if rmse else _pct(_float(p.get("test_error")))]
                for p in r.pruning]
        which = {str(p.get("checkpoint")) for p in r.pruning} & {"best", "last"}  # (absent in older files)
        if len(which) == 1:  # bbb prune's default is last, evaluate's best: the 0% row's error can differ
            out += f"<p>the {E(which.pop())} checkpoint, its mean weights</p>"
        out += _table(["removed", "weights left", "test RMSE" if rmse else "test error"], rows)
    else:
        out += _to_do(r, "prune")
    snr = _img(r.png("snr.png"), f"signal-to-noise histogram of {r.name}")
    return out + (snr or "")


def _float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _ood(r: RunFiles) -> str:
    if r.kind != "image" and not r.ood:
        return _missing("none yet: bbb ood RUN --ood-data FILE scores the run's test rows against your own rows "
                        "from elsewhere")
    img = _image_cell(r, "ood.png", "OOD scores", "ood")
    if not r.ood:
        return img
    scores = r.ood.get("scores") or {}
    rows = [[E(str((v or {}).get("score", k))), _num((v or {}).get("auroc")), _num((v or {}).get("aupr"))]
            for k, v in scores.items()]  # (the score's name: ood.json of an older bbb has none)
    which = f", the {r.ood['checkpoint']} checkpoint" if r.ood.get("checkpoint") in ("best", "last") else ""
    return (f"<p>{E(str(r.ood.get('dataset')))} (in) vs {E(str(r.ood.get('ood')))} (out), "
            f"k={E(str(r.ood.get('samples')))}{E(which)}</p>" + _table(["score", "AUROC", "AUPR"], rows) + img)


def _uncertain(r: RunFiles) -> str:
    if r.kind != "image" and not RT.folder_run(r.config):
        return _missing("the grids of uncertain inputs are drawn for image runs")
    img = _image_cell(r, "uncertain.png", "most uncertain inputs", "uncertain")
    if not r.uncertain:
        return img
    digits = r.uncertain.get("digits") or []
    n = {g: sum(1 for d in digits if d.get("group") == g) for g in ("uncertain", "confident_errors")}
    k = r.uncertain.get("samples")
    which = r.uncertain.get("checkpoint")  # (bbb uncertain --which; absent in older files)
    img = (f"<p>the {E(which)} checkpoint</p>" if which in ("best", "last") else "") + img
    if k == 1:  # (one network, ranked by its entropy: bbb.experiments.uncertainty.ranking_titles)
        return (f"<p class=caption>{n['uncertain']} most uncertain (the highest entropy of the one network), "
                f"{n['confident_errors']} most confident errors. Above each image: y, its true class; H, the entropy "
                "of the network's prediction (nats); then the class it chose (5:100%).</p>" + img)
    return (f"<p class=caption>{n['uncertain']} most disputed, {n['confident_errors']} most confident errors. "
            f"Above each image: y, its true class; MI, how much the {E(str(k))} sampled networks disagree on it; "
            "then the two classes most of them voted for, each with its share of the votes (5:30% = 30% of the "
            "networks voted 5).</p>" + img)


#: (heading, what it shows, the cell of a run, whether it can apply to a run)
SECTIONS: list[tuple[str, str, Callable[[RunFiles], str], Callable[[RunFiles], bool]]] = [
    ("Learning curves", "The validation error (RMSE for regression) and the training objective, epoch by epoch.",
     _learning, lambda r: True),
    ("Reliability", "Confidence against the share right, in bins of confidence: a calibrated model's bars reach "
     "the diagonal; bars below it are overconfident. Left: the mean weights, right: the k-sample average.",
     _reliability, lambda r: not r.regression),
    ("Interval calibration", "The share of the test targets inside the predictive's central interval of each "
     "level, against the level: a calibrated regression's line follows the diagonal; below it the intervals are too "
     "narrow (overconfident), above it too wide.", _calibration, lambda r: r.regression),
    ("Selective prediction: risk-coverage", "The error among the test inputs kept when the most uncertain are "
     "handed over first (to a person, say): the further right, the more kept. AURC is the area under this curve.",
     _risk, lambda r: True),
    ("Pruning by signal-to-noise", "The test error (a regression's test RMSE) after removing the weights whose "
     "mean is smallest against their spread (|mean|/sd): how many weights the network needs.",
     _pruning, RunFiles.prunable),
    ("Out-of-distribution detection", "How well each uncertainty score tells inputs of another data set from "
     "the run's own test inputs (AUROC: 0.5 is chance, 1 perfect, below 0.5 the other inputs get the more confident "
     "predictions; AUPR: the same with the other set as positives).",
     _ood, lambda r: r.kind == "image" or r.ood is not None),
    ("Uncertain inputs", "The test images the sampled networks dispute most (of one network, an sgd run's: those "
     "it is least sure of), and the errors made with the most confidence.",
     _uncertain, lambda r: r.kind == "image" or RT.folder_run(r.config)),
]


def report_html(run_dirs: Sequence[str | Path], title: str | None = None) -> str:
    """The report of ``run_dirs`` as one HTML document (see the module's notes)."""
    if not run_dirs:
        raise UserError("give at least one run directory")
    from ..runs.rundir import check_distinct  # (runs imports torch: only when reporting)

    check_distinct(run_dirs, "its two columns would be one run's; give each run once")
    dirs = [Path(d) for d in run_dirs]
    runs = [read_run(d, n) for d, n in zip(dirs, _names(dirs))]
    # a Laplace folder's config is its run's (method sgd): the title names the posterior
    title = title or RT.page_title([({**r.config, "method": "laplace"} if r.laplace is not None else
                                     {**r.config, "method": r.description()} if r.members is not None else r.config,
                                     r.regression) for r in runs])
    parts = [f"<h1>{E(title)}</h1>", *(_lead(r) for r in runs), "<h2>Results</h2>", _results_section(runs)]
    for heading, caption, cell, applies in SECTIONS:
        if any(applies(r) for r in runs):
            parts += [f"<h2>{E(heading)}</h2>", f"<p class=caption>{E(caption)}</p>", _side_by_side(runs, cell)]
    parts += ["<h2>Settings</h2>", _settings_section(runs), _next_section(runs)]
    return (PAGE_HEAD + '<meta name="generator" content="bbb report">'
            f"<title>{E(title)}</title><style>{STYLE}</style></head>\n<body>\n"
            + "\n".join(p for p in parts if p) + "\n</body></html>\n")


#: how every page :func:`report_html` writes begins (what :func:`write_report` replaces: a page of its own)
PAGE_HEAD = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
             '<meta name="viewport" content="width=device-width, initial-scale=1">')


def write_report(run_dirs: Sequence[str | Path], out: str | Path, title: str | None = None) -> Path:
    """Write :func:`report_html` to ``out`` (a ``.html`` file, else a folder for ``report.html``),
    atomically; returns the file's path. An existing page is replaced only where bbb report wrote
    it (a page of your own is refused in one line)."""
    out = Path(out)
    path = out if out.suffix.lower() in (".html", ".htm") else out / "report.html"
    if path is not out and out.exists() and not out.is_dir():  # (e.g. a run's eval.json)
        raise UserError(f"--out {out} is a file and not an .html one: give FILE.html, or a folder for report.html")
    if path.is_file():
        with path.open("rb") as f:
            head = f.read(len(PAGE_HEAD.encode()))
        if head != PAGE_HEAD.encode():
            raise UserError(f"{path} exists and is not a page bbb report wrote: give another file (a report it wrote "
                            "is replaced)")
    text = report_html(run_dirs, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    describe(p, "One self-contained HTML page of one or more runs side by side, for the person it is sent to: "
                "what was trained and how well, the results with what each metric means, the learning curves, "
                "reliability diagram, risk-coverage curve, pruning, OOD detection and uncertain inputs of each run "
                "that has them (what bbb train, evaluate, prune, ood and uncertain wrote there), the settings that "
                "matter, and the commands that would add what is missing. Images are embedded and no local path "
                "is shown: the file opens offline and can be sent as it is.",
             "bbb report runs/bbb400 runs/dropout1200 --out report.html")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="run directories written by bbb train or bbb demo, the folder of a run's Laplace "
                        "posterior (bbb laplace), or an ensemble's (bbb evaluate RUN RUN ... --out DIR)")
    add_out(p, shared_help("--out", " file FILE.html, or a folder for report.html"), folder=False)
    p.add_argument("--title", default=None, help="the page's title (default: the method(s) and the data, e.g. "
                                                 "'Bayes by Backprop on customers.csv (classification, 600 rows)')")


def main(args: argparse.Namespace) -> int:
    path = write_report(args.runs, args.out, args.title)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB, {len(args.runs)} run(s))")
    return 0
