"""What ``bbb report`` (bbb.experiments.report) reads of each folder it is given: a run's files, a
Laplace posterior's (its run's network and training, its own evaluations), or an ensemble's.

An ensemble's folder (``bbb evaluate RUN RUN ... --out DIR``, ``bbb ood``/``bbb uncertain`` with
several runs) is a column of its own: its members' settings (the first member's, and the members
named), their training time summed, and the folder's own eval.json, ood.json and uncertain.json.
A file of the folder that is of earlier networks than its members' now (a member trained on since)
is left out, with the command that scores them again (as ``bbb compare`` refuses it:
:func:`bbb.experiments.comparison.stale_member`).
"""

from __future__ import annotations

import csv
import io
import json
import shlex
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..options import is_bayesian
from . import report_text as RT
from .comparison import missing_member, stale_evaluation, stale_member

__all__ = ["RunFiles", "read_run"]

#: the file each command writes into a run's (or an ensemble's) folder
WRITES = {"evaluate": "eval.json", "prune": "pruning.csv", "ood": "ood.json", "uncertain": "uncertain.json"}


class RunFiles:
    """What one run directory holds for the report (each file read once; missing: None)."""

    def __init__(self, run_dir: str | Path, name: str) -> None:
        self.dir = Path(run_dir)
        self.name = name
        if not self.dir.is_dir():
            raise UserError(f"run directory {self.dir} not found")
        #: the folder the run trained in (a Laplace posterior's: its run's; an ensemble's: its first
        #: member's), and the fit's laplace.json
        self.train_dir = self.dir
        self.laplace: dict[str, Any] | None = None
        #: an ensemble's members (as its files name them), else None
        self.members: list[Path] | None = None
        #: an ensemble's members' config.json, else []
        self.member_configs: list[dict[str, Any]] = []
        self.scored = "best"
        #: the files left out as of an earlier network than the run's now: file name -> why
        self.left_out: dict[str, str] = {}
        from ..runs.trained import LAPLACE_FILE, is_laplace_folder, laplace_base, laplace_run_of

        if is_laplace_folder(self.dir):  # ``bbb laplace RUN --out DIR``: the run's network and training
            self.laplace = _json(self.dir / LAPLACE_FILE)
            self.train_dir = laplace_run_of(self.dir)
            if self.train_dir.is_dir():  # its scores are of another network where the run changed since the fit
                laplace_base(self.dir)
        config = _json(self.train_dir / "config.json")
        if config is None and self.laplace is not None:
            raise UserError(f"{self.dir} is the Laplace posterior of {self.train_dir}, which is not there: put the "
                            "run back (beside the folder as it was, or where it was)")
        self.eval = _json(self.dir / "eval.json")
        self.ood = _json(self.dir / "ood.json")
        self.uncertain = _json(self.dir / "uncertain.json")
        self.pruning = _csv(self.dir / "pruning.csv")
        if config is None:
            config = self._ensemble()
        self.config: dict[str, Any] = config
        #: the epochs a run trained (its summary.json's; a run stopped before its end: metrics.csv's rows)
        self.epochs_done: int | None = None
        if self.members is None:
            self.summary = _json(self.train_dir / "summary.json")
            done = (self.summary or {}).get("epochs")
            if self.summary is None:
                from ..runs.jobs import epochs_done

                done = epochs_done(self.train_dir)
            self.epochs_done = done if isinstance(done, int) else None
            stale = None if self.eval is None else stale_evaluation(self.eval, self.summary or {})
            if stale:
                self.left_out["eval.json"] = stale
        for file in self.left_out:
            setattr(self, {"eval.json": "eval", "ood.json": "ood", "uncertain.json": "uncertain"}[file], None)
        self.regression = "regression" in ((self.summary or {}).get("task"), (self.eval or {}).get("task"),
                                           self.config.get("task"), (self.config.get("preprocess") or {}).get("task"))
        #: image, table (classification) or regression: what sections and commands apply
        self.kind = RT.kind_of(self.config, self.regression)

    @property
    def stale_eval(self) -> str | None:
        """Why eval.json is left out (it is of an earlier network of the run), else None."""
        return self.left_out.get("eval.json")

    def _ensemble(self) -> dict[str, Any]:
        """Read the folder as an ensemble's (its first member's config.json), or say in one line
        what it is instead."""
        from ..runs.checkpoint import ensemble_members, not_a_run_text
        from ..runs.population import wall_seconds

        members = ensemble_members(self.dir)
        if members is None:
            what = not_a_run_text(self.dir)
            raise UserError(what or f"{self.dir} is not a run directory (no readable config.json); "
                                     "give the folders that bbb train or bbb demo wrote")
        self.members = [Path(m) for m in members]
        missing_member(self.dir, self.members, "report")
        configs = [_json(m / "config.json") for m in self.members]
        self.train_dir = self.members[0]
        #: the members' checkpoint its files scored (``--which``)
        self.scored = next((s["checkpoint"] for s in (self.eval, self.ood, self.uncertain)
                            if s and s.get("checkpoint") in ("best", "last")), "best")
        summaries = [_json(m / "summary.json") or {} for m in self.members]
        for command, scored in (("evaluate", self.eval), ("ood", self.ood), ("uncertain", self.uncertain)):
            stale = None if scored is None else stale_member(self.name, self.member_names(), summaries, command,
                                                             scored, self.members)
            if stale:
                self.left_out[WRITES[command]] = stale
        seconds = [v for s in summaries if isinstance(v := s.get("seconds"), int | float)]
        epochs = {s.get("epochs") for s in summaries}
        self.summary = {"epochs": epochs.pop() if len(epochs) == 1 else None,
                        "seconds": wall_seconds(list(zip(self.members, seconds)))
                        if len(seconds) == len(summaries) else None}
        self.pruning = None  # (an ensemble is not pruned as one)
        self.member_configs = [c or {} for c in configs]
        return self.member_configs[0]

    def description(self) -> str:
        """An ensemble's, as its files describe it ("ensemble of 3 runs (sgd x 3)"), else ""."""
        if self.members is None:
            return ""
        for scored in (self.eval, self.ood, self.uncertain):
            if scored and scored.get("ensemble"):
                return str(scored["ensemble"])
        return f"ensemble of {len(self.members)} runs"

    def member_names(self) -> list[str]:
        """An ensemble's members by their folders' names (as a page names runs), else []."""
        return [RT.plain_path(str(m)) for m in self.members or []]

    def unfinished(self) -> bool:
        """Whether the run stopped before the epochs it was started for (interrupted: resumable)."""
        want = self.config.get("epochs")
        return self.laplace is None and isinstance(want, int) and self.epochs_done is not None and \
            self.epochs_done < want

    def suggestions(self) -> list[tuple[str, str]]:
        """(command, what it adds) for each command that runs on this kind of run and would write a
        file the run lacks (:func:`report_text.suggested_commands`; an ensemble's: the same command
        on its members, ``--out`` its folder), with why where the file is there but left out; first,
        for a run stopped before its end, the command that finishes it."""
        have = {f for f in WRITES.values() if (self.dir / f).is_file()} - set(self.left_out)
        if self.members is not None:
            have.add("pruning.csv")  # (its members are pruned, not the ensemble)
        out = []
        for cmd, what in RT.suggested_commands(self.name, self.config, self.regression, have):
            command = cmd.split()[1]
            if self.members is not None:
                if command not in WRITES:  # (bbb predict takes one run)
                    continue
                rest = shlex.split(cmd)[3:]  # (what follows the run: bbb ood's --ood-data FILE)
                cmd = shlex.join(["bbb", command, *self.member_names(), *rest,
                                  *(["--which", "last"] if self.scored == "last" else []), "--out", self.name])
            why = self.left_out.get(WRITES.get(command, ""))
            out.append((cmd, f"{what} (its {WRITES[command]} is left out here: {why})" if why else what))
        if self.unfinished():
            out.insert(0, (shlex.join(["bbb", "train", "--resume", "--out", self.name]),
                           f"finishes its training: it stopped after epoch {self.epochs_done} of "
                           f"{self.config['epochs']}"))
        return out

    def png(self, name: str) -> bytes | None:
        """The bytes of ``name`` when it is a PNG file of the run, else None."""
        try:
            data = (self.dir / name).read_bytes()
        except OSError:
            return None
        return data if data.startswith(b"\x89PNG\r\n\x1a\n") else None

    def learning_curve(self) -> bytes | None:
        """learning_curve.png, else the curve of metrics.csv drawn now (None without matplotlib;
        an ensemble's: None, its members' curves are theirs)."""
        made = self.png("learning_curve.png")
        if made is not None or self.members is not None:
            return made
        from .. import plots
        from ..errors import CheckpointError
        from ..runs import read_metrics

        try:
            rows = read_metrics(self.train_dir)
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

    def prunable(self) -> bool:
        """Whether pruning by signal-to-noise applies: a Bayesian run (not an ensemble)."""
        return self.members is None and is_bayesian(self.config.get("method", "bbb"))


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
