"""Training runs of one recipe together: :func:`train_population` trains K runs that differ only in
their seed, their initialisation (``rho_init``, ``mu_init_scale``), their learning rate or their
prior's numbers (``pi``, ``sigma1``, ``sigma2``, ``prior_sigma``: :data:`MEMBER_SETTINGS`; a seed
cell's seeds, or a grid over those) as one :class:`~bbb.nn.BayesPopulation` under one
:class:`~bbb.engine.Engine` (batched matrix products, one fused kernel over every member's weights,
which reads each member's prior and learning rate from a table: a
:class:`~bbb.distributions.MemberPrior` and ``member_lr_scale``; each member its own gradient),
each into its own run directory.

Every member's run directory holds what :func:`bbb.runs.train` leaves (config.json, metrics.csv,
summary.json, last.pt, best.pt), so tables, figures, ``bbb evaluate``, ``predict`` and ``prune`` read
it as any run. What differs from training the K runs one after the other:

- **its random numbers**: member j starts from the weights ``bbb train --seed s_j`` starts from and
  draws its minibatches from that run's shuffling generator (the same minibatches in the same
  order), but its weight noise is the population's engine's (the counter-based noise of the first
  member's seed at the member's positions in the population's buffers): an independent draw of the
  same recipe, not that ``bbb train`` run's numbers;
- **the epoch's numbers**: each member's loss, NLL and KL are its own (the engine forms the KL
  member by member, :attr:`bbb.engine.Engine.kl_members`); the validation (and test) errors of
  each epoch are computed on the population's batched products, equal to the member's own to
  rounding (the best epoch is chosen on them); summary.json is computed on the member alone, as
  ``bbb train`` does; an epoch's ``seconds`` (and so the summary's) is the population's, shared by
  its members, not a share of it;
- **the commit point** is the population's: ``population.pt`` in ``pop_dir`` (the population, the
  engine, the schedule, every member's generator, history and best epoch), written first each
  epoch; then each member's ``best.pt`` (when its validation improved), ``last.pt`` (its network,
  no optimiser state, and the population it belongs to) and ``metrics.csv``. A resumed population
  rewrites those from ``population.pt`` first. ``bbb train --resume`` on a member refuses and says
  where its state is;
- **divergence** is a member's: a member whose loss or weights stop being finite gets its
  ``diverged.json`` (its files keep the epoch before), and the others go on (members never
  interact).

What it trains: the Bayesian MLP (``method="bbb"``, the reparameterisation estimator: the engine's
fused kernel) on a classification split; any other setting is a one-line :class:`UserError`.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

from ..devices import resolve_device
from ..distributions import MemberPrior, Prior
from ..elbo import ELBO
from ..engine import Engine
from ..errors import CheckpointError, TrainingInterrupted, UserError, reason_of
from ..io import atomic_torch_save, atomic_write_json, atomic_write_text
from ..nn import BayesMLP, BayesPopulation
from ..nn.base import Estimator
from ..nn.model import modes_kept
from ..options import Method
from ..progress import progress_bar
from . import model as runmodel
from .checkpoint import CHECKPOINT_FORMAT, diverged_text, improves, metrics_text
from .config import TrainConfig, resume_conflicts
from .cuda_graph import StepGraphs, check_capturable
from .evaluation import EVAL_CHUNK
from .jobs import DIVERGED_FILE, Job, State, job_state, read_json
from .loop import kl_weight_table
from .model import DATA_KEYS, build_model, check_data, num_weights, versions
from .optim import check_schedule_on_resume, make_optimizer, make_scheduler
from .rundir import guard_run_dir, remove_results
from .summary import finish_classifier

__all__ = ["MEMBER_SETTINGS", "POPULATION_FILE", "check_population", "member_lr_scale", "member_prior",
           "population_groups", "stored_population", "train_population", "wall_seconds"]

#: the population's commit point in its folder
POPULATION_FILE = "population.pt"
_FORMAT = 1


#: the settings in which the runs of a population may differ: the seed, where the posterior starts
#: (each member starts from its own run's network), the learning rate (the engine's
#: ``member_lr_scale``) and the numbers of the prior (one family for all: a
#: :class:`~bbb.distributions.MemberPrior`)
MEMBER_SETTINGS = ("seed", "rho_init", "mu_init_scale", "lr", "pi", "sigma1", "sigma2", "prior_sigma")


def check_population(cfgs: Sequence[TrainConfig]) -> TrainConfig:
    """The common recipe of ``cfgs`` (the first), after checking that they can train as one
    population: at least one; each its own seed, initialisation, learning rate or prior numbers
    (:data:`MEMBER_SETTINGS`: a seed cell's seeds, or a grid over those), every other setting equal; the
    Bayesian MLP with the reparameterisation estimator, float32, a commit every epoch. Else a
    one-line UserError."""
    if not cfgs:
        raise UserError("a population needs at least one run")
    first = {k: v for k, v in cfgs[0].to_dict().items() if k not in MEMBER_SETTINGS}
    for j, c in enumerate(cfgs[1:], 1):
        other = {k: v for k, v in c.to_dict().items() if k not in MEMBER_SETTINGS}
        diff = sorted(k for k in first.keys() | other.keys() if first.get(k) != other.get(k))
        if diff:
            raise UserError(f"the runs of a population differ only in {', '.join(MEMBER_SETTINGS)}; run {j} "
                            f"(seed {c.seed}) has another {diff[0]} ({other.get(diff[0])!r}, not "
                            f"{first.get(diff[0])!r})")
    seen: dict[tuple[Any, ...], int] = {}
    for j, c in enumerate(cfgs):
        key = tuple(getattr(c, f) for f in MEMBER_SETTINGS)
        if key in seen:
            raise UserError(f"run {j} of the population repeats run {seen[key]} ("
                            + ", ".join(f"{f} {v!r}" for f, v in zip(MEMBER_SETTINGS, key))
                            + "): give each run its own seed or settings")
        seen[key] = j
    cfg = cfgs[0]
    why = None
    if cfg.method != Method.BBB.value:
        why = f"method {cfg.method} (only bbb trains as a population)"
    elif Estimator(cfg.estimator) is not Estimator.REPARAM:
        why = f"the {cfg.estimator} estimator (the population's engine fuses reparam only)"
    elif cfg.bf16:
        why = "bf16 (a population trains in float32)"
    elif cfg.checkpoint_every != 1:
        why = f"checkpoint_every {cfg.checkpoint_every} (a population commits every epoch)"
    elif cfg.data_file is not None:
        why = "your own data file (a population trains on the image datasets)"
    if why is not None:
        raise UserError(f"these runs cannot train as a population: {why}; train them one by one")
    member_prior(cfgs)  # the members' priors make one family (else a one-line UserError)
    return cfg


def member_prior(cfgs: Sequence[TrainConfig]) -> Prior:
    """The prior of a population of ``cfgs``: theirs where they share it, else a
    :class:`~bbb.distributions.MemberPrior` of each run's."""
    priors = [c.make_prior() for c in cfgs]
    return priors[0] if all(p == priors[0] for p in priors) else MemberPrior(priors)


def member_lr_scale(cfgs: Sequence[TrainConfig]) -> tuple[float, ...] | None:
    """Each run's learning rate as a multiple of the first's (the engine's ``member_lr_scale``),
    or None where they share it."""
    if all(c.lr == cfgs[0].lr for c in cfgs):
        return None
    return tuple(c.lr / cfgs[0].lr for c in cfgs)


def stored_population(run_dir: str | Path) -> dict[str, Any] | None:
    """The population ``run_dir`` was started in (its config.json's ``population``: ``dir``,
    ``seeds``, ``runs`` (the members' directory names), ``member``), or None."""
    got = (read_json(Path(run_dir) / "config.json") or {}).get("population")
    return got if isinstance(got, dict) else None


def wall_seconds(runs: Sequence[tuple[str | Path, float]]) -> float:
    """The training time of ``runs`` (each its run directory and its summary's ``seconds``): their
    sum, with the runs trained as one population counted once (their ``seconds`` is the population's
    wall time, shared by its members: the longest of them)."""
    alone = 0.0
    together: dict[str, float] = {}
    for run_dir, seconds in runs:
        pop = stored_population(run_dir)
        if pop is None:
            alone += float(seconds)
        else:
            key = str(pop.get("dir"))
            together[key] = max(together.get(key, 0.0), float(seconds))
    return alone + sum(together.values())


J = TypeVar("J", bound=Job)


def population_groups(jobs: Sequence[J], new_dir: Callable[[list[J]], Path], *, size: int | None = None,
                      key: Callable[[J], Any] | None = None,
                      legacy: Callable[[J, dict[str, Any]], list[J]] | None = None,
                      what: str = "the runs it was started with") -> list[tuple[Path | None, list[J]]]:
    """``jobs`` (a :class:`~bbb.runs.jobs.Job` each: ``run_dir``, ``config``), in order, grouped to train
    as populations: ``(population folder, its jobs)``, or ``(None, [job])`` for a job that trains
    alone (finished, diverged, settings no population takes, the one job left of its recipe).

    A run started in a population goes on in that one, with every run it was started with (found
    among ``jobs`` by their directories' names; ``legacy(job, stored)`` for a population that stored
    its seeds alone; a member missing from ``jobs`` is a one-line UserError that says to run it with
    ``what``). The other new runs whose settings differ only in :data:`MEMBER_SETTINGS` (and in
    ``key(job)``, where given: e.g. their data) make new populations of up to ``size`` runs (None:
    all), each in ``new_dir(its jobs)``."""
    groups: list[tuple[Path | None, list[J]]] = []
    new: dict[str, list[J]] = {}
    started: dict[str, list[J]] = {}
    by_name = {j.run_dir.name: j for j in jobs}
    for job in jobs:
        stored = stored_population(job.run_dir)
        state = job_state(job.run_dir, job.config.epochs).state
        if stored is not None and state in (State.PARTIAL, State.NEW):  # (NEW: killed at epoch 0)
            if stored["dir"] not in started:
                names = stored.get("runs")
                if not isinstance(names, list):
                    if legacy is None:
                        raise UserError(f"the population in {stored['dir']} does not name its runs; train it with "
                                        "the bbb that started it")
                    started[stored["dir"]] = legacy(job, stored)
                    continue
                missing = [n for n in names if n not in by_name]
                if missing:
                    raise UserError(f"the population in {stored['dir']} holds {', '.join(names)}, and this call does "
                                    f"not train {', '.join(missing)}: run it with {what}")
                # a member's folder trained alone since (bbb train --overwrite): resuming would write over that run
                alone = [n for n in names if (by_name[n].run_dir / "config.json").is_file()
                         and (stored_population(by_name[n].run_dir) or {}).get("dir") != stored["dir"]]
                if alone:
                    raise UserError(f"the population in {stored['dir']} cannot go on: {by_name[alone[0]].run_dir}, one "
                                    "of its runs' folders, holds a run trained alone since, which it would write over; "
                                    "move that run elsewhere (the population then writes its member there again)")
                started[stored["dir"]] = [by_name[n] for n in names]
            continue
        if state is not State.NEW:
            groups.append((None, [job]))
            continue
        shared = {k: v for k, v in job.config.to_dict().items() if k not in MEMBER_SETTINGS}
        extra = None if key is None else key(job)
        new.setdefault(json.dumps([shared, extra], sort_keys=True, default=str), []).append(job)
    # a member of a started population trains there only (its folder gone: not also alone, or anew)
    claimed = {j.run_dir.name for members in started.values() for j in members}
    groups = [(d, m) for d, m in groups if m[0].run_dir.name not in claimed]
    groups += [(Path(d), members) for d, members in started.items()]
    for members in ([j for j in m if j.run_dir.name not in claimed] for m in new.values()):
        if not members:
            continue
        step = len(members) if size is None else max(1, size)
        for chunk in (members[i:i + step] for i in range(0, len(members), step)):
            try:
                check_population([j.config for j in chunk])
            except UserError:
                groups += [(None, [j]) for j in chunk]
                continue
            groups.append((None, chunk) if len(chunk) == 1 else (new_dir(chunk), chunk))
    return groups


def _member_checkpoint(pop: BayesPopulation, j: int, epoch: int, cfg: TrainConfig, metrics: list[dict[str, Any]],
                       best: dict[str, Any], info: dict[str, Any], where: dict[str, Any]) -> dict[str, Any]:
    """Member j's last.pt / best.pt: :func:`bbb.runs.train`'s format with its network alone."""
    return {
        "format": CHECKPOINT_FORMAT, "model": pop.member(j).state_dict(), "optimizer": None, "scheduler": None,
        "epoch": epoch, "rng": None, "metrics": [dict(r) for r in metrics], "best": dict(best),
        "config": cfg.to_dict(), "model_info": dict(info), "versions": versions(),
        "threads": torch.get_num_threads(), "population": {**where, "member": j},
    }


@torch.no_grad()
def _member_sums(pop: BayesPopulation, x: Tensor, y: Tensor) -> Tensor:
    """(members, 2): each member's misclassified count and summed cross-entropy of its mean weights
    on the same rows ``(x, y)``, float64 on the device, unread."""
    k = pop.members
    out = torch.zeros(k, 2, dtype=torch.float64, device=x.device)
    with modes_kept(pop):
        for xc, yc in zip(torch.split(x, EVAL_CHUNK), torch.split(y, EVAL_CHUNK)):
            logits = pop(xc.unsqueeze(0).expand(k, *xc.shape)).float()  # (members, rows, classes)
            errors = (logits.argmax(-1) != yc).sum(1).double()
            nll = F.cross_entropy(logits.transpose(1, 2), yc.expand(k, -1), reduction="none").double().sum(1)
            out += torch.stack([errors, nll], 1)
    return out


def _finite_members(pop: BayesPopulation) -> Tensor:
    """(members,) bool: whether every weight of each member is finite (a device tensor)."""
    k = pop.members
    return torch.stack([torch.isfinite(p.detach().reshape(k, -1)).all(1) for p in pop.parameters()]).all(0)


class _Epochs:
    """The population's training steps of an epoch: each member on its own minibatches (a row of the
    ``(members, N)`` permutation), the members' (free energy, NLL, KL) sums. A full minibatch's step
    reads its index from the device (the same code for every index), so that with ``capture`` it
    replays from CUDA graphs (:class:`~bbb.runs.cuda_graph.StepGraphs`, ``--cuda-graph``)."""

    def __init__(self, pop: BayesPopulation, elbo: ELBO, opt: Engine, x: Tensor, y: Tensor, batch: int,
                 kl_table: Tensor, samples: int, *, capture: bool) -> None:
        self.pop, self.elbo, self.opt, self.x, self.y = pop, elbo, opt, x, y
        self.k, self.batch, self.kl_table, self.samples = pop.members, batch, kl_table, samples
        self.full = x.shape[0] // batch
        dev = x.device
        self.perms = torch.zeros(self.k, x.shape[0], dtype=torch.int64, device=dev)
        self.index = torch.zeros(1, dtype=torch.int64, device=dev)
        self.sums = torch.zeros(self.k, 3, dtype=torch.float64, device=dev)  # free energy, nll, kl
        self.graphs = StepGraphs(opt, self._full_step, dev, capture=capture)

    def _batch(self, idx: Tensor, kl_w: Tensor) -> None:
        """One step on the rows ``idx`` (members, b), its numbers added into ``sums``."""
        k, b = idx.shape
        xb = self.x.index_select(0, idx.reshape(-1)).view(k, b, self.x.shape[1])
        yb = self.y.index_select(0, idx.reshape(-1)).view(k, b)
        with self.opt.sampling():
            out = self.elbo(xb, yb, kl_weight=kl_w)
            kls = self.opt.kl_members
        assert kls is not None
        logp = self.elbo.likelihood.log_prob(out.output.detach(), yb)  # (members, b) or (k, members, b)
        nll = -(logp.reshape(-1, k, b).sum((0, 2)) / self.samples)
        w = out.kl_weight
        fe = nll + (w.detach() if isinstance(w, Tensor) else w) * kls
        self.opt.zero_grad(set_to_none=True)
        (out.loss / b).backward()  # the sum of the members' free energies per example
        self.opt.step()
        self.sums += torch.stack([fe.double(), nll.double(), kls.detach().double()], 1)

    def _full_step(self) -> None:
        b, full = self.batch, self.full
        idx = self.perms[:, : full * b].view(self.k, full, b).index_select(1, self.index).view(self.k, b)
        self._batch(idx, self.kl_table.index_select(0, self.index).view(()))
        self.index += 1

    def run(self, perms: Tensor, steps: Any) -> Tensor:
        """One epoch over ``perms`` (members, N) in the minibatch order ``steps``; the sums (members,
        3), a float64 device tensor, unread."""
        self.perms.copy_(perms)
        self.index.zero_()
        self.sums.zero_()
        self.graphs.begin()
        for i in steps:
            if i >= self.full:  # the last, smaller minibatch, eagerly
                self.graphs.join()
                self._batch(self.perms[:, i * self.batch:], self.kl_table[i])
            else:
                self.graphs()
        self.graphs.join()
        return self.sums


def train_population(
    cfgs: Sequence[TrainConfig],
    outs: Sequence[str | Path],
    pop_dir: str | Path,
    *,
    data: dict[str, Tensor] | None = None,
    quiet: bool = False,
    log: Callable[[str], None] | None = None,
    resume_hint: str | None = None,
) -> list[dict[str, Any] | None]:
    """Train ``cfgs`` (equal but for their seeds and initialisation: :func:`check_population`) as one population,
    member j into the run directory ``outs[j]``; the state that resumes it in ``pop_dir``. Returns
    each member's summary (summary.json), or None for a member that diverged.

    ``pop_dir`` holding ``population.pt`` resumes it (the same seeds in the same order and the same
    settings but epochs, device and data_dir, else a one-line error); else the population starts,
    and each member's directory must hold no previous run. Every directory is locked while it
    trains. ``data``: pre-loaded tensors as :func:`bbb.runs.train`'s (else ``cfgs[0].dataset``).
    ``resume_hint``: the command that resumes it, for the message of an interrupt.
    """
    cfg = check_population(cfgs)
    if len(outs) != len(cfgs):
        raise UserError(f"train_population: {len(cfgs)} runs but {len(outs)} run directories")
    dirs = [Path(o) for o in outs]
    pop_dir = Path(pop_dir)
    if len({d.resolve() for d in [*dirs, pop_dir]}) != len(dirs) + 1:
        raise UserError("train_population: every member and the population need a directory of their own")
    say: Callable[[str], None] = log if log is not None else (lambda s: print(s, flush=True))
    resuming = (pop_dir / POPULATION_FILE).is_file()
    with contextlib.ExitStack() as stack:
        stack.enter_context(guard_run_dir(pop_dir, "auto"))
        for d in dirs:
            stack.enter_context(guard_run_dir(d, "auto" if resuming else False))
        return _train(list(cfgs), dirs, pop_dir, cfg, data, quiet, say, resume_hint)


def _train(cfgs: list[TrainConfig], dirs: list[Path], pop_dir: Path, cfg: TrainConfig,
           data: dict[str, Tensor] | None, quiet: bool, log: Callable[[str], None],
           resume_hint: str | None) -> list[dict[str, Any] | None]:
    if data is not None:  # recorded as train records it (bbb.runs.model.data_source_of)
        check_data(data)
        cfgs = [c.replace(data_source=runmodel.data_source_of(c, data)) for c in cfgs]
        cfg = cfg.replace(data_source=cfgs[0].data_source)
    seeds = [c.seed for c in cfgs]
    k = len(cfgs)
    pop_path = pop_dir / POPULATION_FILE
    ckpt: dict[str, Any] | None = None
    if pop_path.is_file():
        ckpt = _load(pop_path)
        if ckpt["seeds"] != seeds:
            raise UserError(f"cannot resume the population in {pop_dir}: its seeds are {ckpt['seeds']}, not {seeds}; "
                            "use another folder")
        # each member's settings (a population written before grids stored the first run's alone)
        stored = ckpt.get("configs") or [{**ckpt["config"], "seed": seed} for seed in ckpt["seeds"]]
        for j, (was_cfg, c) in enumerate(zip(stored, cfgs)):
            diff = resume_conflicts(was_cfg, c)
            if diff:
                key, was, new = diff[0]
                raise UserError(f"cannot resume the population in {pop_dir}: run {j}'s setting {key!r} was {was!r}, "
                                f"now {new!r}")
            check_schedule_on_resume(int(was_cfg.get("epochs", c.epochs)), c, f"the population in {pop_dir}")
    device = resolve_device(cfg.device)
    preprocess = None
    if data is None:  # (a population resumed on tensors given in memory: refused there)
        was = ckpt["config"].get("data_source") if ckpt is not None else None
        data, preprocess = runmodel.load_split(cfg.replace(data_source=was), new_run=ckpt is None)
    check_data(data)
    for c in cfgs:
        c.check_split(*(int(data[f"{s}_x"].shape[0]) for s in ("train", "val", "test")))
    if data["train_y"].is_floating_point():
        raise UserError("a population trains classifiers (this split's targets are numbers); train regression "
                        "runs one by one")
    num_classes = int(data.get("num_classes", 0)) or int(
        max(int(data[s].max()) for s in ("train_y", "val_y", "test_y") if data[s].numel()) + 1)
    data = {s: data[s].to(device, torch.float32 if s.endswith("_x") else torch.int64) for s in DATA_KEYS}
    x, y = data["train_x"], data["train_y"]
    n, in_features, bsz = x.shape[0], int(x.shape[1]), cfg.batch_size
    num_batches = math.ceil(n / bsz)

    # the members start where `bbb train --seed s` starts: its seed, then its network
    pop = BayesPopulation(in_features, cfg.hidden, num_classes, bayesian=k, prior=member_prior(cfgs),
                          rho_init=cfg.rho_init, mu_init_scale=cfg.mu_init_scale, estimator=cfg.estimator,
                          device=device)
    for j, c in enumerate(cfgs):
        torch.manual_seed(c.seed)
        net = build_model(c, in_features, num_classes).to(device)
        assert isinstance(net, BayesMLP)  # (method bbb: check_population)
        pop.load_member(j, net)
    torch.manual_seed(seeds[0])
    elbo = ELBO(pop, "categorical", num_batches=num_batches, kl_weighting=cfg.kl_weighting,
                num_samples=cfg.samples, kl=cfg.kl, kl_samples=cfg.kl_samples)
    opt = make_optimizer(cfg, pop, n, member_lr_scale=member_lr_scale(cfgs))
    if not isinstance(opt, Engine) or not opt.fused:
        raise UserError(f"these runs cannot train as a population: the engine does not fuse them "
                        f"({getattr(opt, 'fallback_reason', None)}); train them one by one")
    sched = make_scheduler(cfg, opt)
    kl_table = kl_weight_table(elbo, pop, device)
    assert kl_table is not None
    if cfg.cuda_graph:  # before any file is written
        check_capturable(elbo, opt, device, kl_table)
    epochs = _Epochs(pop, elbo, opt, x, y, bsz, kl_table, cfg.samples, capture=cfg.cuda_graph)
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    metrics: list[list[dict[str, Any]]] = [[] for _ in range(k)]
    best: list[dict[str, Any]] = [{"epoch": 0, "val_error": None, "val_nll": None} for _ in range(k)]
    diverged: dict[int, str] = {}
    start = 0
    info: dict[str, Any] = {"in_features": in_features, "num_classes": num_classes, "num_train": n,
                            "task": "classification"}
    if preprocess is not None:
        info["preprocess"] = preprocess.to_dict()
    # the folder from anywhere: a population resumed from another working directory finds it
    where = {"dir": str(pop_dir.resolve()), "seeds": seeds, "runs": [d.name for d in dirs]}
    if ckpt is not None:
        try:
            pop.load_state_dict(ckpt["model"])
            opt.load_state_dict(ckpt["optimizer"])
            if sched is not None and ckpt.get("scheduler") is not None:
                sched.load_state_dict(ckpt["scheduler"])
            for g, saved in zip(gens, ckpt["shuffle"]):
                g.set_state(saved)
            torch.set_rng_state(ckpt["torch_rng"])
        except (KeyError, RuntimeError, ValueError, TypeError) as e:
            raise CheckpointError(f"{pop_path} cannot be resumed ({reason_of(e)})") from None
        metrics, best = ckpt["metrics"], ckpt["best"]
        diverged = {int(j): str(m) for j, m in ckpt["diverged"].items()}
        start = int(ckpt["epoch"])
        log(f"resuming the population of {k} in {pop_dir} after epoch {start}")
        if start < cfg.epochs:  # it trains on: what was made from the members' checkpoints is stale (as bbb train)
            for j, d in enumerate(dirs):
                removed = [] if j in diverged else [f for f in remove_results(d, also=("summary.json",))
                                                    if f != "summary.json"]
                if removed:
                    warnings.warn(f"removed {', '.join(removed)} from {d} (made from the run before it trained on; "
                                  "run the commands that wrote them again)", UserWarning, stacklevel=3)

    def state(epoch: int) -> dict[str, Any]:
        return {"format": _FORMAT, "seeds": seeds, "epoch": epoch, "model": pop.state_dict(),
                "optimizer": opt.state_dict(), "scheduler": None if sched is None else sched.state_dict(),
                "shuffle": [g.get_state() for g in gens], "torch_rng": torch.get_rng_state(),
                "metrics": metrics, "best": best, "diverged": {str(j): m for j, m in diverged.items()},
                "config": cfg.to_dict(), "configs": [c.to_dict() for c in cfgs], "versions": versions()}

    def members_files(epoch: int, improved: Sequence[int]) -> None:
        """Each member's files as the committed state says (best.pt where it is this epoch's)."""
        for j in range(k):
            if j in diverged:
                continue
            member = _member_checkpoint(pop, j, epoch, cfgs[j], metrics[j], best[j], info, where)
            if j in improved:
                atomic_torch_save(dirs[j] / "best.pt", member)
            atomic_torch_save(dirs[j] / "last.pt", member)
            atomic_write_text(dirs[j] / "metrics.csv", metrics_text(metrics[j]))

    threads = torch.get_num_threads()
    for j, c in enumerate(cfgs):
        atomic_write_json(dirs[j] / "config.json", {
            **c.to_dict(), "versions": versions(), "device_used": str(device), "threads": threads, "num_train": n,
            "num_val": int(data["val_x"].shape[0]), "num_test": int(data["test_x"].shape[0]),
            "num_batches": num_batches, "num_weights": num_weights(pop) // k, "argv": sys.argv[1:],
            "population": {**where, "member": j}})
    if ckpt is None:
        atomic_torch_save(pop_path, state(0))
        members_files(0, [])
    else:  # the derived files as the commit point says (a kill between the writes)
        members_files(start, [j for j in range(k) if best[j]["epoch"] == start and start > 0])

    has_val = data["val_x"].shape[0] > 0
    try:
        for epoch in range(start + 1, cfg.epochs + 1):
            if len(diverged) == k:
                break
            t0 = time.perf_counter()
            perms = torch.stack([torch.randperm(n, generator=g) for g in gens]).to(device)
            steps: Any = range(num_batches)
            bar = None if quiet else progress_bar(steps, desc=f"epoch {epoch}/{cfg.epochs} ({k} runs)", unit="batch")
            sums = epochs.run(perms, steps if bar is None else bar)
            if bar is not None:
                bar.close()
            parts = [sums, _finite_members(pop).double().view(k, 1)]
            if has_val:
                parts.append(_member_sums(pop, data["val_x"], data["val_y"]))
            if cfg.test_each_epoch:
                parts.append(_member_sums(pop, data["test_x"], data["test_y"])[:, :1])
            read = torch.cat(parts, 1).tolist()
            if sched is not None:
                sched.step()
            seconds = time.perf_counter() - t0
            improved = []
            for j in range(k):
                if j in diverged:
                    continue
                r = read[j]
                if not (math.isfinite(r[0]) and r[3]):
                    diverged[j] = diverged_text(epoch, r[0], dirs[j] / "last.pt")
                    atomic_write_json(dirs[j] / DIVERGED_FILE, {"message": diverged[j]})
                    log(f"  {dirs[j].name}: {diverged[j]}")
                    continue
                n_val, n_test = data["val_x"].shape[0], data["test_x"].shape[0]
                row = {"epoch": epoch, "seconds": seconds, "train_loss": r[0] / n, "nll": r[1] / n,
                       "kl": r[2] / num_batches, "val_error": r[4] / n_val if has_val else None,
                       "test_error": r[-1] / n_test if cfg.test_each_epoch and n_test else None,
                       "val_nll": r[5] / n_val if has_val else None}
                metrics[j].append(row)
                if improves(cfg.select_by, row, best[j]):
                    best[j] = {"epoch": epoch, "val_error": row["val_error"], "val_nll": row["val_nll"]}
                    improved.append(j)
            atomic_torch_save(pop_path, state(epoch))  # the commit point
            members_files(epoch, improved)
            errs = sorted(metrics[j][-1]["val_error"] for j in range(k)
                          if j not in diverged and metrics[j][-1]["val_error"] is not None)
            msg = (f"epoch {epoch}/{cfg.epochs}  {k - len(diverged)} of {k} runs" + (
                f"  val_err {100 * errs[0]:.2f}%..{100 * errs[-1]:.2f}%" if errs else "") + f"  ({seconds:.1f}s)")
            if quiet:
                log(msg)
            else:
                print(msg, file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        done = max((len(m) for m in metrics), default=0)
        again = resume_hint or "the same command"
        raise TrainingInterrupted(f"interrupted during epoch {done + 1}; {pop_path} holds epoch {done}; resume with "
                                  f"{again}", pop_dir, done) from None

    summaries: list[dict[str, Any] | None] = []
    for j in range(k):
        if j in diverged:
            summaries.append(None)
            continue
        member = pop.member(j).to(device)
        summaries.append(finish_classifier(dirs[j], cfgs[j], data, member, metrics[j], best[j]))
    return summaries


def _load(path: Path) -> dict[str, Any]:
    """``population.pt`` (``weights_only``); a problem reading it is a one-line CheckpointError."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure to read is the same user problem
        raise CheckpointError(f"{path} is corrupt or unreadable ({reason_of(e)})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != _FORMAT or "seeds" not in ckpt:
        raise CheckpointError(f"{path} is not a bbb population checkpoint")
    return ckpt

