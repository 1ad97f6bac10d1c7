"""``bbb report RUN [RUN ...] --out report.html``: one self-contained HTML page of runs, side by side.

The page reads what the commands already wrote in each run directory, and nothing else:

=====================  =====================================================================
section                files
=====================  =====================================================================
configuration          ``config.json`` (``bbb train``; the settings that differ between the
                       runs are marked)
results                ``summary.json`` (``bbb train``), ``eval.json`` (``bbb evaluate``),
                       ``ood.json`` (``bbb ood``)
learning curves        ``learning_curve.png`` (``bbb demo``), else drawn from ``metrics.csv``
reliability            ``reliability.png`` (``bbb evaluate``)
risk-coverage          ``risk_coverage.png`` and ``eval.json``'s ``selective`` (``bbb evaluate``)
pruning                ``pruning.csv`` (``bbb prune``) and ``snr.png`` (``bbb demo``)
out-of-distribution    ``ood.json`` and ``ood.png`` (``bbb ood``)
uncertain inputs       ``uncertain.png`` and ``uncertain.json`` (``bbb uncertain``)
=====================  =====================================================================

One column per run, headed by its name (the directory's, made unique); a run without a section's
files shows the command that writes them. Every image is embedded as a ``data:`` URI and the page
has no script, font, style sheet or link to anything outside it: it opens offline, mailed or
archived as one file (tests/applications/test_report.py opens it in headless chromium).
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..cli.common import add_out, describe, shared_help
from ..errors import UserError
from ..io import atomic_write_text

__all__ = ["RunFiles", "read_run", "report_html", "write_report"]

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: right; vertical-align: top; }
td:first-child, th:first-child { text-align: left; }
tr.diff td { background: #fff6d5; }
.runs { display: grid; gap: 1em; }
.run { min-width: 0; }
.run h3 { font-size: 0.95em; margin: 0.3em 0; }
.run img { max-width: 100%; height: auto; border: 1px solid #eee; }
.missing { color: #888; font-style: italic; font-size: 0.85em; }
code { font-size: 0.85em; word-break: break-all; }
"""


class RunFiles:
    """What one run directory holds for the report (each file read once; missing: None)."""

    def __init__(self, run_dir: str | Path, name: str) -> None:
        self.dir = Path(run_dir)
        self.name = name
        if not self.dir.is_dir():
            raise UserError(f"run directory {self.dir} not found")
        self.config = _json(self.dir / "config.json")
        if self.config is None:
            raise UserError(f"{self.dir} is not a run directory (no readable config.json); "
                            "give the folders that bbb train or bbb demo wrote")
        self.summary = _json(self.dir / "summary.json")
        self.eval = _json(self.dir / "eval.json")
        self.ood = _json(self.dir / "ood.json")
        self.uncertain = _json(self.dir / "uncertain.json")
        self.pruning = _csv(self.dir / "pruning.csv")
        self.regression = "regression" in ((self.summary or {}).get("task"), (self.eval or {}).get("task"),
                                           self.config.get("task"))

    def png(self, name: str) -> bytes | None:
        """The bytes of ``name`` when it is a PNG file of the run, else None."""
        try:
            data = (self.dir / name).read_bytes()
        except OSError:
            return None
        return data if data.startswith(b"\x89PNG\r\n\x1a\n") else None

    def learning_curve(self) -> bytes | None:
        """learning_curve.png, else the curve of metrics.csv drawn now (None without matplotlib)."""
        made = self.png("learning_curve.png")
        if made is not None:
            return made
        from .. import plots
        from ..errors import CheckpointError
        from ..runs import read_metrics

        try:
            rows = read_metrics(self.dir)
        except CheckpointError:
            return None
        if not rows:
            return None
        fig = plots.learning_curve(rows, rmse=self.regression)
        if fig is None:
            return None
        buf = io.BytesIO()
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=80)
        return buf.getvalue()


def _json(path: Path) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def _csv(path: Path) -> list[dict[str, str]] | None:
    try:
        with path.open(newline="") as f:
            return list(csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError):
        return None


def read_run(run_dir: str | Path, name: str | None = None) -> RunFiles:
    """The files of one run directory (a one-line UserError when it is not one)."""
    return RunFiles(run_dir, name or Path(run_dir).resolve().name)


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


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], marked: Sequence[bool] = ()) -> str:
    """A table of already escaped cells (``marked`` rows get the ``diff`` class)."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join(f'<tr{" class=diff" if i < len(marked) and marked[i] else ""}>'
                   + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for i, r in enumerate(rows))
    return f"<table><tr>{head}</tr>{body}</table>"


def _config_section(runs: Sequence[RunFiles]) -> str:
    keys: list[str] = []
    for r in runs:
        keys += [k for k in (r.config or {}) if k not in keys and k not in ("argv", "versions")]

    def cell(r: RunFiles, k: str) -> str:
        v = (r.config or {}).get(k, "")
        return E(" ".join(map(str, v)) if isinstance(v, list) else str(v))

    rows = [[E(k), *(cell(r, k) for r in runs)] for k in keys]
    diff = [len({c for c in row[1:]}) > 1 for row in rows]
    rows.append(["versions", *(E(", ".join(f"{k} {v}" for k, v in (r.config or {}).get("versions", {}).items()))
                               for r in runs)])
    rows.append(["command", *(_command(r) for r in runs)])
    note = "<p>Settings that differ between the runs are marked.</p>" if len(runs) > 1 and any(diff) else ""
    return note + _table(["setting", *(E(r.name) for r in runs)], rows, diff)


def _command(r: RunFiles) -> str:
    """The bbb command that trained the run (config.json's argv), or the argv of the program that
    called the library."""
    from ..cli.registry import COMMANDS

    argv = [str(a) for a in (r.config or {}).get("argv", [])]
    if argv and argv[0] in COMMANDS:
        return "<code>" + E(" ".join(["bbb", *argv])) + "</code>"
    return "from Python" + (f" (arguments: <code>{E(' '.join(argv))}</code>)" if argv else "")


def _result_rows(r: RunFiles) -> dict[str, str]:
    ev, s, ood = r.eval or {}, r.summary or {}, r.ood or {}
    sel = ev.get("selective") or {}
    k = ev.get("samples", s.get("eval_samples"))
    scores = ood.get("scores") or {}
    return {
        "test RMSE (mean weights)": _num(ev.get("test_rmse", s.get("test_rmse"))),
        "test RMSE (k-sample average)": _num(ev.get("test_rmse_mc", s.get("test_rmse_mc"))),
        "test log-likelihood": _num(ev.get("log_likelihood", s.get("test_log_likelihood"))),
        "95% interval coverage": _pct(ev.get("coverage_95", s.get("test_coverage_95"))),
        "AURC of the squared error by predictive sd": _num(ev.get("aurc_sd")),
        "RMSE of the 90% most certain": _num(ev.get("rmse_at_90_coverage")),
        "test error (mean weights)": _pct(ev.get("test_error", s.get("test_error"))),
        "test error (k-sample average)": _with_k(_pct(ev.get("test_error_mc", s.get("test_error_mc"))), k),
        "validation error": _pct(s.get("val_error")),
        "test NLL (nats)": _num(ev.get("nll", s.get("test_nll"))),
        "validation RMSE (best epoch)": _num(s.get("best_val_rmse")),
        "test ECE": _pct(ev.get("ece", s.get("test_ece"))),
        "test Brier": _num(ev.get("brier", s.get("test_brier"))),
        "AURC by entropy": _pct((sel.get("entropy") or {}).get("aurc")),
        "AURC by MI": _pct((sel.get("mi") or {}).get("aurc")),
        "error at 90% kept (entropy)": _pct((sel.get("entropy") or {}).get("risk_at_90")),
        "error at 90% kept (MI)": _pct((sel.get("mi") or {}).get("risk_at_90")),
        f"OOD AUROC by entropy ({ood.get('ood', '-')})": _num((scores.get("entropy") or {}).get("auroc")),
        f"OOD AUROC by MI ({ood.get('ood', '-')})": _num((scores.get("mutual_information") or {}).get("auroc")),
        "model": E(f"{s['model']} (epoch {s.get('best_epoch')} of {s.get('epochs')})") if "model" in s else "-",
        "training time": f"{s['seconds']:.1f} s" if isinstance(s.get("seconds"), int | float) else "-",
    }


def _with_k(text: str, k: Any) -> str:
    return text if text == "-" or not k else f"{text} (k={k})"


def _results_section(runs: Sequence[RunFiles]) -> str:
    per_run = [_result_rows(r) for r in runs]
    labels: list[str] = []
    for rows in per_run:  # OOD rows are named after each run's OOD set
        labels += [k for k in rows if k not in labels]
    body = [[E(k), *(rows.get(k, "-") for rows in per_run)] for k in labels]
    body = [row for row in body if any(c != "-" for c in row[1:])]
    return _table(["", *(E(r.name) for r in runs)], body)


def _side_by_side(runs: Sequence[RunFiles], cell: Callable[[RunFiles], str]) -> str:
    cols = "".join(f'<div class="run"><h3>{E(r.name)}</h3>{cell(r)}</div>' for r in runs)
    return f'<div class="runs" style="grid-template-columns: repeat({len(runs)}, minmax(0, 1fr))">{cols}</div>'


def _image_cell(r: RunFiles, name: str, alt: str, hint: str) -> str:
    return _img(r.png(name), f"{alt} of {r.name}") or _missing(f"none yet: {hint} {r.dir}")


def _learning(r: RunFiles) -> str:
    return _img(r.learning_curve(), f"learning curves of {r.name}") or _missing(
        "no metrics.csv to draw (or matplotlib is not installed)")


def _risk(r: RunFiles) -> str:
    ev = r.eval or {}
    if r.regression and "aurc_sd" in ev:  # bbb evaluate of a regression run: numbers, no curve
        return _table(["handing over by", "AURC (squared error)", "RMSE of the 90% kept"],
                      [["predictive sd", _num(ev.get("aurc_sd")), _num(ev.get("rmse_at_90_coverage"))]])
    sel = ev.get("selective")
    img = _image_cell(r, "risk_coverage.png", "risk-coverage curve", "bbb evaluate")
    if not sel:
        return img
    rows = [[E(k), _pct(sel[k].get("aurc")), _pct(sel[k].get("risk_at_90"))] for k in ("entropy", "mi") if k in sel]
    return img + _table(["handing over by", "AURC", "error at 90% kept"], rows) + (
        f'<p class="missing">all kept: {_pct(sel.get("error"))}; least AURC of any ranking: '
        f'{_pct(sel.get("oracle_aurc"))}</p>')


def _pruning(r: RunFiles) -> str:
    out = ""
    if r.pruning:
        rows = [[_pct(_float(p.get("fraction_removed"))), E(str(p.get("weights_left", ""))),
                 _pct(_float(p.get("test_error")))] for p in r.pruning]
        out += _table(["removed", "weights left", "test error"], rows)
    else:
        out += _missing(f"no pruning.csv: bbb prune {r.dir} (bbb runs)")
    snr = _img(r.png("snr.png"), f"signal-to-noise histogram of {r.name}")
    return out + (snr or "")


def _float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _ood(r: RunFiles) -> str:
    img = _image_cell(r, "ood.png", "OOD scores", "bbb ood")
    if not r.ood:
        return img
    scores = r.ood.get("scores") or {}
    rows = [[E(k), _num((v or {}).get("auroc")), _num((v or {}).get("aupr"))] for k, v in scores.items()]
    return (f"<p>{E(str(r.ood.get('dataset')))} (in) vs {E(str(r.ood.get('ood')))} (out), "
            f"k={E(str(r.ood.get('samples')))}</p>" + _table(["score", "AUROC", "AUPR"], rows) + img)


def _uncertain(r: RunFiles) -> str:
    img = _image_cell(r, "uncertain.png", "most uncertain inputs", "bbb uncertain")
    if not r.uncertain:
        return img
    digits = r.uncertain.get("digits") or []
    n = {g: sum(1 for d in digits if d.get("group") == g) for g in ("uncertain", "confident_errors")}
    return f"<p>{n['uncertain']} most disputed, {n['confident_errors']} most confident errors</p>" + img


SECTIONS: list[tuple[str, Callable[[RunFiles], str]]] = [
    ("Learning curves", _learning),
    ("Reliability", lambda r: _image_cell(r, "reliability.png", "reliability diagram", "bbb evaluate")),
    ("Selective prediction: risk-coverage", _risk),
    ("Pruning by signal-to-noise", _pruning),
    ("Out-of-distribution detection", _ood),
    ("Uncertain inputs", _uncertain),
]


def report_html(run_dirs: Sequence[str | Path], title: str | None = None) -> str:
    """The report of ``run_dirs`` as one HTML document (see the module's notes)."""
    if not run_dirs:
        raise UserError("give at least one run directory")
    dirs = [Path(d) for d in run_dirs]
    runs = [read_run(d, n) for d, n in zip(dirs, _names(dirs))]
    title = title or "bbb report: " + ", ".join(r.name for r in runs)
    parts = [f"<h1>{E(title)}</h1>", "<h2>Configuration</h2>", _config_section(runs),
             "<h2>Results</h2>", _results_section(runs)]
    for heading, cell in SECTIONS:
        parts += [f"<h2>{E(heading)}</h2>", _side_by_side(runs, cell)]
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{E(title)}</title><style>{STYLE}</style></head>\n<body>\n"
            + "\n".join(parts) + "\n</body></html>\n")


def write_report(run_dirs: Sequence[str | Path], out: str | Path, title: str | None = None) -> Path:
    """Write :func:`report_html` to ``out`` (a ``.html`` file, else a folder for ``report.html``),
    atomically; returns the file's path."""
    out = Path(out)
    path = out if out.suffix.lower() in (".html", ".htm") else out / "report.html"
    text = report_html(run_dirs, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    describe(p, "One self-contained HTML page of one or more runs side by side: the configuration, the results, "
                "the learning curves, reliability diagram, risk-coverage curve, pruning, OOD detection and "
                "uncertain inputs of each run that has them (what bbb train, evaluate, prune, ood and uncertain "
                "wrote there). Images are embedded: the file opens offline and can be sent as it is.",
             "bbb report runs/bbb400 runs/dropout1200 --out report.html")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories written by bbb train or bbb demo")
    add_out(p, shared_help("--out", " file FILE.html, or a folder for report.html"))
    p.add_argument("--title", default=None, help="the page's title (default: bbb report: the runs' names)")


def main(args: argparse.Namespace) -> int:
    path = write_report(args.runs, args.out, args.title)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB, {len(args.runs)} run(s))")
    return 0
