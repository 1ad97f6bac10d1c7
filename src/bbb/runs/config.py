"""The settings of one training run: :class:`TrainConfig` (validated, round-trips through
``config.json``) and what may change on resume."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import warnings
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from ..data.arrays import DEFAULT_IMAGE_SIZE, data_kind, moved_data_flag
from ..data.files import TASKS
from ..distributions import KLMode, Prior, make_prior
from ..elbo import KLWeighting
from ..engine.engine import OptimizerKind
from ..errors import SettingError, UserError, check_bool, check_int
from ..nn import DEFAULT_PI, DEFAULT_RHO_INIT, DEFAULT_SIGMA1, DEFAULT_SIGMA2
from ..nn.base import Estimator
from ..options import IMAGE_DATASETS, MAX_SEED, Dataset, DeviceKind, LRSchedule, Method, PriorKind, choice, device_name

__all__ = ["BAYES_ONLY", "BY_DATA", "BY_METHOD", "DATA_DEFAULTS", "DROPOUT_ONLY", "FILE_DATASET", "IN_MEMORY",
           "IVON_ONLY",
           "LIKELIHOODS", "METHOD_DATA_DEFAULTS", "PRIOR_ONLY",
           "METHOD_DEFAULTS",
           "NOISE_LR_SCALE", "NOT_FOR_IVON", "RESUME_MUTABLE", "SELECT_BY", "STORED_BEFORE", "TrainConfig",
           "resume_conflicts", "same_setting", "stored_default"]

#: the ``dataset`` of a run trained on your own file (``data_file``: a CSV or an .npz)
FILE_DATASET = "file"
#: the ``data_source`` of a run trained on tensors given to :func:`bbb.runs.train` (``data=``) that are
#: not its ``dataset``'s images (a sweep's synthetic blobs, your own arrays): nothing on disk holds
#: them, so evaluating, pruning or resuming it from its folder is a one-line error, never MNIST's numbers
IN_MEMORY = "memory"
#: the Gaussian of a regression run: the network predicts its noise sd per input
#: (heteroscedastic) or learns one sd for all inputs (homoscedastic)
LIKELIHOODS = ("heteroscedastic", "homoscedastic")
#: what picks ``best.pt`` among the epochs: the lowest validation NLL of the mean weights (ties to
#: the earlier epoch), or the lowest validation error (an RMSE for regression; ties to the earlier
#: epoch: the paper's early stopping on MNIST)
SELECT_BY = ("nll", "error")

#: the default of a :class:`TrainConfig` field left at :data:`BY_DATA`
BY_DATA: Any = None

#: The one home of the defaults that depend on the data (a field left at :data:`BY_DATA` takes
#: these): ``image``, MNIST and Fashion-MNIST (the paper's settings, docs/defaults.md); ``file``,
#: your own table or arrays (``--csv`` / ``--npz``): a network and an objective sized for hundreds
#: to thousands of rows, where the paper's 2x400 with the scale-mixture prior and Blundell's
#: weighting lets the KL swamp the data (chosen on validation splits: docs/your_data.md).
#: Explicit values always win; ``config.json`` records the values used.
DATA_DEFAULTS: dict[str, dict[str, Any]] = {
    "image": {"hidden": [400, 400], "prior": "mixture", "kl_weighting": "blundell", "epochs": 10, "batch_size": 128,
              "select_by": "error", "dropout_input": 0.2, "dropout_hidden": 0.5},
    "file": {"hidden": [100, 100], "prior": "gaussian", "kl_weighting": "uniform", "epochs": 200, "batch_size": 32,
             "select_by": "nll", "dropout_input": 0.0, "dropout_hidden": 0.05},
}

#: the default of a :class:`TrainConfig` field left at :data:`BY_METHOD`
BY_METHOD: Any = None

#: The one home of the defaults that depend on the method (a field left at :data:`BY_METHOD` takes
#: these; a field a method does not list stays None, unused): the learning rate of each method's
#: optimiser, and IVON's own settings (``--method ivon``: :class:`bbb.IVON`). IVON's were chosen by
#: short trials on MNIST's validation split, beside the published Fashion-MNIST LeNet-5 setting
#: (docs/defaults.md has the trials and their commands). Explicit values always win.
METHOD_DEFAULTS: dict[str, dict[str, Any]] = {
    Method.BBB.value: {"lr": 1e-3},
    Method.SGD.value: {"lr": 1e-3},
    Method.DROPOUT.value: {"lr": 1e-3},
    Method.IVON.value: {"lr": 0.5, "hess_init": 0.5, "weight_decay": 5e-4},
}

#: The defaults of a method on one kind of data (a field left at :data:`BY_METHOD` takes these before
#: :data:`METHOD_DEFAULTS`): IVON on a table. MNIST's lr 0.5 and hess-init 0.5 diverge on a table of a
#: few hundred rows (Boston); lr 0.1 and hess-init 2 had the lowest mean validation NLL of 16 IVON
#: settings over yacht, Boston, concrete and customers (docs/defaults.md has the grid).
METHOD_DATA_DEFAULTS: dict[tuple[str, str], dict[str, Any]] = {
    (Method.IVON.value, "file"): {"lr": 0.1, "hess_init": 2.0},
}

#: IVON's own settings (``--ess``, ``--hess-init``, ``--weight-decay``): given with another method,
#: a one-line error (no other method reads them)
IVON_ONLY = ("ess", "hess_init", "weight_decay")

#: the settings of Bayes by Backprop's prior, KL and optimiser, and of dropout, which IVON does not
#: read (its prior is a Gaussian of precision ``ess * weight_decay``, its update rule
#: its own, sigma at the start set by ``hess_init``): given with ``--method ivon``, a one-line error
NOT_FOR_IVON = ("prior", "pi", "sigma1", "sigma2", "prior_sigma", "kl_weighting", "kl", "kl_samples", "rho_init",
                "rho_lr_scale", "optimizer", "momentum", "dropout_input", "dropout_hidden")

#: the settings of the Bayesian network and its objective, which plain networks (``--method sgd``
#: and ``dropout``: an nn.Linear MLP, cross-entropy, one forward pass a step) do not read: given
#: with either, a one-line error
BAYES_ONLY = ("prior", "pi", "sigma1", "sigma2", "prior_sigma", "kl_weighting", "kl", "kl_samples", "rho_init",
              "rho_lr_scale", "estimator", "mu_init_scale", "samples")

#: the settings of one kind of prior (its parameters), which the other kind does not read: given
#: with the other (``--pi`` with ``--prior gaussian``, ``--prior-sigma`` with ``mixture``), a
#: one-line error
PRIOR_ONLY = {"pi": PriorKind.MIXTURE, "sigma1": PriorKind.MIXTURE, "sigma2": PriorKind.MIXTURE,
              "prior_sigma": PriorKind.GAUSSIAN}

#: dropout's rates, which no other method reads: given with ``--method bbb`` or ``sgd``, a one-line
#: error (with ``--method ivon``: :data:`NOT_FOR_IVON`)
DROPOUT_ONLY = ("dropout_input", "dropout_hidden")

#: the settings that one method, prior, optimiser or schedule reads and another does not
#: (:meth:`TrainConfig.refuse_unused`): built with a value other than their default for a
#: configuration that does not read it, a one-line error from Python as from ``bbb train``
UNREAD_CHECKED = (*BAYES_ONLY, *DROPOUT_ONLY, "momentum", "lr_step_size", "lr_gamma")

#: set while :meth:`TrainConfig.from_stored` builds a run's stored settings: an unread value there
#: (written by a bbb that took it) is put back to its default, never an error that stops a run loading
_STORED: contextvars.ContextVar[bool] = contextvars.ContextVar("bbb_stored_config", default=False)

#: settings added after runs were written with the behaviour that this value names (a stored
#: config that lacks one was trained so: every run before ``select_by`` chose by validation error)
STORED_BEFORE: dict[str, Any] = {"select_by": "error"}

#: ``--likelihood homoscedastic``: the learning rate of the one noise parameter as a multiple of
#: ``lr`` (``--noise-lr-scale``). At 1, Adam moves it about ``lr`` a step, too slowly to settle in
#: a table's default epochs; the choice and its measurements: docs/your_data.md
NOISE_LR_SCALE = 10.0


def stored_default(d: dict[str, Any], name: str) -> Any:
    """The value of a setting that the stored config ``d`` lacks (added since): what the bbb that
    wrote it did (:data:`STORED_BEFORE`; a homoscedastic run's noise learning-rate scale 1)."""
    if name == "noise_lr_scale":
        return 1.0 if d.get("likelihood") == "homoscedastic" else None
    return STORED_BEFORE.get(name, TrainConfig().to_dict()[name])


def _plain(v: Any) -> Any:
    """A setting's value as ``config.json`` holds it (an Enum member as its string)."""
    return v.value if isinstance(v, Enum) else v


#: float32's largest finite number (the images' dtype after --scale)
FLOAT32_MAX = 3.4028234663852886e38


def _positive(name: str, value: Any, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SettingError(name, f"must be a number, got {value!r}") from None
    ok = (v >= 0 if allow_zero else v > 0) and math.isfinite(v)
    if not ok:
        raise SettingError(name, f"must be {'>= 0' if allow_zero else '> 0'} and finite, got {value}")
    return v


@dataclass
class TrainConfig:
    """Every setting of one training run (the command line's ``bbb train`` options).

    Construction validates and normalises every field; a bad value raises a one-line
    :class:`~bbb.errors.SettingError` that names the field (``val_size must be ...``; the command
    line names its flag instead). A field of a choice holds its Enum member (``cfg.optimizer is
    OptimizerKind.SGD``) whether it was given the member or its string value (``"sgd"``).
    ``to_dict`` / ``from_dict`` round-trip through plain JSON types: ``to_dict`` writes each
    member as its string value, so ``config.json`` and the checkpoint's ``config`` hold strings.
    A field whose default is :data:`BY_DATA` (the network, prior, KL weighting, epochs, batch
    size, and ``select_by``) takes the default of the kind of data,
    :data:`DATA_DEFAULTS`: MNIST's for images, a table's for ``data_file``.
    """

    dataset: str = "mnist"
    method: Method = Method.BBB
    prior: PriorKind = BY_DATA
    pi: float = DEFAULT_PI
    sigma1: float = DEFAULT_SIGMA1
    sigma2: float = DEFAULT_SIGMA2
    prior_sigma: float = 1.0
    hidden: list[int] = BY_DATA
    epochs: int = BY_DATA
    lr: float = BY_METHOD
    optimizer: OptimizerKind = OptimizerKind.ADAM
    momentum: float = 0.9
    rho_lr_scale: float = 1.0
    lr_schedule: LRSchedule = LRSchedule.NONE
    lr_step_size: int = 0
    lr_gamma: float = 0.1
    batch_size: int = BY_DATA
    samples: int = 1
    kl_samples: int | None = None
    estimator: Estimator = Estimator.REPARAM
    kl_weighting: KLWeighting = BY_DATA
    kl: KLMode = KLMode.AUTO
    rho_init: float = DEFAULT_RHO_INIT
    mu_init_scale: float | None = None
    dropout_input: float = BY_DATA
    dropout_hidden: float = BY_DATA
    seed: int = 0
    device: str = DeviceKind.AUTO.value
    bf16: bool = False
    scale: float = 126.0
    val_size: int = 10000
    split_seed: int = 0
    eval_samples: int = 10
    test_each_epoch: bool = False
    data_dir: str | None = None
    checkpoint_every: int = 1
    # the training step replayed from CUDA graphs (bbb.runs.cuda_graph; a GPU; not ivon)
    cuda_graph: bool = False
    # your own data (--csv / --npz): the file, the CSV's target column, the task, the split
    data_file: str | None = None
    target: str | None = None
    task: str | None = None
    likelihood: str = "heteroscedastic"
    # --likelihood homoscedastic: the one noise parameter's learning rate is lr times this (None:
    # NOISE_LR_SCALE; a run stored before it existed: 1)
    noise_lr_scale: float | None = None
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    train_size: int | None = None
    # CSV columns that are not features (an identifier, a note): left out of the inputs
    ignore_columns: list[str] | None = None
    # numeric CSV columns that number the rows (a year) kept as features, not refused as identifiers
    keep_columns: list[str] | None = None
    # a folder of images (--images DIR): the [height, width] they are resized to (None: 28x28)
    image_size: list[int] | None = None
    # --colour: the folder's images read in red, green and blue (else grey)
    image_colour: bool = False
    # what picks best.pt: "nll" or "error" (SELECT_BY)
    select_by: str = BY_DATA
    # IVON (--method ivon): the effective sample size (None: the training set's size), the Hessian
    # estimate h at the start, the prior precision (METHOD_DEFAULTS)
    ess: float | None = None
    hess_init: float | None = BY_METHOD
    weight_decay: float | None = BY_METHOD
    # None: the run's data are ``dataset``'s (or ``data_file``'s), on disk; IN_MEMORY: tensors given to
    # train(data=...) that are not (set by train itself: bbb.runs.model.data_source_of)
    data_source: str | None = None

    def __post_init__(self) -> None:
        self._check_data_file()
        self.method = Method(choice("method", self.method, Method))
        given_ivon = [name for name in IVON_ONLY if getattr(self, name) is not None]
        for name, value in DATA_DEFAULTS[self.data_kind].items():
            if getattr(self, name) is BY_DATA:
                setattr(self, name, list(value) if isinstance(value, list) else value)
        by_method = {**METHOD_DEFAULTS[self.method.value],
                     **METHOD_DATA_DEFAULTS.get((self.method.value, self.data_kind), {})}
        for name, value in by_method.items():
            if getattr(self, name) is BY_METHOD:
                setattr(self, name, value)
        self.select_by = choice("select_by", self.select_by, SELECT_BY)
        self.dataset = choice("dataset", self.dataset, (*IMAGE_DATASETS, FILE_DATASET))
        if self.data_source is not None:
            self.data_source = choice("data_source", self.data_source, (IN_MEMORY,))
        self.prior = PriorKind(choice("prior", self.prior, PriorKind))
        self.optimizer = OptimizerKind(choice("optimizer", self.optimizer, OptimizerKind))
        self.lr_schedule = LRSchedule(choice("lr schedule", self.lr_schedule, LRSchedule))
        self.estimator = Estimator(choice("estimator", self.estimator, Estimator))
        self.kl_weighting = KLWeighting(choice("KL weighting", self.kl_weighting, KLWeighting))
        self.kl = KLMode(choice("KL mode", self.kl, KLMode))
        self.device = device_name(self.device)
        pi = float(self.pi)
        if not (0.0 < pi <= 1.0):
            raise SettingError("pi", f"(the mixture weight) must be in (0, 1], got {self.pi}")
        self.pi = pi
        self.sigma1 = _positive("sigma1", self.sigma1)
        self.sigma2 = _positive("sigma2", self.sigma2)
        self.prior_sigma = _positive("prior_sigma", self.prior_sigma)
        if isinstance(self.hidden, int | float):
            self.hidden = [self.hidden]
        self.hidden = [check_int("hidden", h, 1) for h in self.hidden]
        self.epochs = check_int("epochs", self.epochs, 1)
        self.lr = _positive("lr", self.lr)
        self.momentum = float(self.momentum)
        if not (0.0 <= self.momentum < 1.0):
            raise SettingError("momentum", f"must be in [0, 1), got {self.momentum}")
        self.rho_lr_scale = _positive("rho_lr_scale", self.rho_lr_scale)
        if self.likelihood == "homoscedastic" and self.data_file is not None:
            self.noise_lr_scale = _positive("noise_lr_scale", NOISE_LR_SCALE if self.noise_lr_scale is None
                                            else self.noise_lr_scale)
        elif self.noise_lr_scale is not None:
            raise SettingError("noise_lr_scale", "applies to the one noise parameter of --likelihood homoscedastic")
        self.lr_step_size = check_int("lr_step_size", self.lr_step_size, 0)
        self.lr_gamma = _positive("lr_gamma", self.lr_gamma)
        self.batch_size = check_int("batch_size", self.batch_size, 1)
        self.samples = check_int("samples", self.samples, 1)
        if self.kl_samples is not None:
            self.kl_samples = check_int("kl_samples", self.kl_samples, self.samples)
        self.rho_init = float(self.rho_init)
        if not math.isfinite(self.rho_init):
            raise SettingError("rho_init", f"must be finite, got {self.rho_init}")
        if self.mu_init_scale is not None:
            self.mu_init_scale = _positive("mu_init_scale", self.mu_init_scale)
        for name in ("dropout_input", "dropout_hidden"):
            p = float(getattr(self, name))
            if not (0.0 <= p < 1.0):
                raise SettingError(name, f"must be in [0, 1), got {p}")
            setattr(self, name, p)
        self.seed = check_int("seed", self.seed, 0)
        for name in ("seed", "split_seed"):
            if check_int(name, getattr(self, name), 0) > MAX_SEED:
                raise SettingError(name, f"must be at most {MAX_SEED}, got {getattr(self, name)}")
        self.bf16 = check_bool("bf16", self.bf16)
        self.scale = _positive("scale", self.scale)
        if 255.0 / self.scale > FLOAT32_MAX:  # the pixels (0-255) / scale: inf in float32, then NaN
            raise SettingError("scale", f"must be at least {255.0 / FLOAT32_MAX:.3g} (the pixels, 0-255, divided by "
                                        f"less pass float32's largest number), got {self.scale:g}")
        self.val_size = check_int("val_size", self.val_size, 0)
        self.split_seed = check_int("split_seed", self.split_seed, 0)
        self.eval_samples = check_int("eval_samples", self.eval_samples, 1)
        self.test_each_epoch = check_bool("test_each_epoch", self.test_each_epoch)
        self.checkpoint_every = check_int("checkpoint_every", self.checkpoint_every, 1)
        self.cuda_graph = check_bool("cuda_graph", self.cuda_graph)
        self.image_colour = check_bool("image_colour", self.image_colour)
        if self.cuda_graph and self.method is Method.IVON:
            raise SettingError("cuda_graph", "does not capture IVON's step yet (--method bbb, sgd or dropout)")
        if self.cuda_graph and self.bf16:
            raise SettingError("cuda_graph", "and --bf16 do not go together (the graph captures the float32 step)")
        if self.data_dir is not None:  # absolute, as data_file: the run finds its images from any folder
            self.data_dir = str(Path(self.data_dir).expanduser().resolve())
        self._check_ivon(given_ivon)
        if self.method is Method.BBB and self.prior is PriorKind.MIXTURE and self.kl is KLMode.CLOSED:
            raise UserError("no closed-form KL for the scale-mixture prior; use --kl mc or --kl auto")
        if self.method is Method.BBB and self.kl is KLMode.SPLIT and not self.make_prior().has_split:
            raise UserError("--kl split needs the mixture's wide component first (--sigma1 above --sigma2): swap "
                            "them (and --pi for 1 - --pi), or use --kl mc or --kl auto")
        if self.method is Method.BBB and self.kl_samples is not None:
            if self.kl is KLMode.SPLIT:
                raise UserError("--kl-samples averages a Monte Carlo KL; --kl split draws one importance sample "
                                "of its own: leave out --kl-samples, or use --kl mc")
            if self.prior is PriorKind.GAUSSIAN and self.kl is not KLMode.MC:
                raise UserError("--kl-samples averages a Monte Carlo KL, and the Gaussian prior's KL is in closed "
                                "form here; add --kl mc, or leave out --kl-samples")

    def _check_ivon(self, given_ivon: list[str]) -> None:
        """IVON's settings: valid for ``--method ivon`` and refused with any other method; with
        ivon, every setting it does not read (:data:`NOT_FOR_IVON`) refused where it differs from
        its default (the command line refuses one given at all: :meth:`refuse_unused`)."""
        if self.method is not Method.IVON:
            self.refuse_unused(given_ivon)
            self._refuse_unread()
            return
        if self.ess is not None:
            self.ess = _positive("ess", self.ess)
        self.hess_init = _positive("hess_init", self.hess_init)
        self.weight_decay = _positive("weight_decay", self.weight_decay, allow_zero=True)
        defaults = self._defaults()
        self.refuse_unused([k for k in NOT_FOR_IVON if _plain(getattr(self, k)) != _plain(defaults[k])])
        if self.estimator is not Estimator.REPARAM:
            raise SettingError("estimator", f"{self.estimator.value} cannot train with --method ivon: IVON's Hessian "
                               "estimate needs the gradient of each sampled weight (--estimator reparam)")
        if self.data_file is not None and self.likelihood == "homoscedastic":
            raise UserError("--likelihood homoscedastic learns one noise sd, a plain parameter, and IVON trains "
                            "Bayesian weights only: use --likelihood heteroscedastic with --method ivon")

    def _defaults(self) -> dict[str, Any]:
        return {**{f.name: f.default for f in dataclasses.fields(self)}, **DATA_DEFAULTS[self.data_kind]}

    def _refuse_unread(self) -> None:
        """Of :data:`UNREAD_CHECKED`, a setting whose value differs from its default and that this
        configuration does not read: :meth:`refuse_unused`'s one-line error (``TrainConfig(method="sgd",
        prior="gaussian")`` as ``bbb train --method sgd --prior gaussian``); in a stored config
        (:meth:`from_stored`) put back to its default instead: the run never read it."""
        defaults = self._defaults()
        changed = [k for k in UNREAD_CHECKED if _plain(getattr(self, k)) != _plain(defaults[k])]
        if not _STORED.get():
            self.refuse_unused(changed)
            return
        for name in changed:
            try:
                self.refuse_unused([name])
            except SettingError:
                setattr(self, name, defaults[name])

    def refuse_unused(self, names: Any) -> None:
        """A one-line :class:`~bbb.errors.SettingError` for the first of the settings ``names`` that
        this configuration's method does not read: IVON's own (:data:`IVON_ONLY`) with another
        method, those of Bayes by Backprop and dropout (:data:`NOT_FOR_IVON`) with ivon, those of
        the Bayesian network (:data:`BAYES_ONLY`) with sgd or dropout, dropout's rates
        (:data:`DROPOUT_ONLY`) with bbb or sgd, a prior's parameters (:data:`PRIOR_ONLY`) with
        the other kind of prior, ``momentum`` without ``--optimizer sgd``, the step schedule's
        ``lr_step_size`` and ``lr_gamma`` without ``--lr-schedule step``, ``select_by`` without a
        validation set. ``bbb
        train`` passes the options given (so that one given at its default value is refused too)."""
        ivon = self.method is Method.IVON
        for name in names:
            if ivon and name in NOT_FOR_IVON:
                owner = ("dropout" if name.startswith("dropout") else
                         "bbb, sgd or dropout" if name in ("optimizer", "momentum") else "bbb")
                raise SettingError(name, f"applies to --method {owner}, not to --method ivon: IVON's prior is a "
                                   "Gaussian of precision --ess times --weight-decay, its update rule its own, "
                                   "sigma at the start set by --hess-init; leave it out")
            if not ivon and name in IVON_ONLY:
                raise SettingError(name, f"is a setting of --method ivon (IVON's optimiser), not of --method "
                                   f"{self.method.value}; leave it out, or train with --method ivon")
            if self.method in (Method.SGD, Method.DROPOUT) and name in BAYES_ONLY:
                raise SettingError(name, f"applies to the Bayesian network (--method bbb), not to --method "
                                   f"{self.method.value} (a plain network: no prior, no KL, one forward pass a step); "
                                   "leave it out, or train with --method bbb")
            if self.method is Method.BBB and name in PRIOR_ONLY and PRIOR_ONLY[name] is not self.prior:
                raise SettingError(name, f"applies to --prior {PRIOR_ONLY[name].value}, not to the --prior "
                                   f"{self.prior.value} this run trains with; leave it out, or give --prior "
                                   f"{PRIOR_ONLY[name].value}")
            if name == "momentum" and not ivon and self.optimizer is not OptimizerKind.SGD:
                raise SettingError(name, f"applies to --optimizer sgd, not to --optimizer {self.optimizer.value}; "
                                   "leave it out, or give --optimizer sgd")
            if name in ("lr_step_size", "lr_gamma") and self.lr_schedule is not LRSchedule.STEP:
                raise SettingError(name, f"applies to --lr-schedule step, not to --lr-schedule "
                                   f"{self.lr_schedule.value}; leave it out, or give --lr-schedule step")
            if name == "select_by" and (self.val_fraction == 0 if self.data_file is not None else self.val_size == 0):
                raise SettingError(name, "picks best.pt on the validation set, and this run holds none (--val-size 0 "
                                   "or --val-fraction 0: best.pt is the last epoch); leave it out, or keep a "
                                   "validation set")
            if self.method in (Method.BBB, Method.SGD) and name in DROPOUT_ONLY:
                raise SettingError(name, f"applies to --method dropout, not to --method {self.method.value} "
                                   "(its network has no dropout layers); leave it out, or train with --method "
                                   "dropout")

    def warn_unread_eval_samples(self, names: Any) -> None:
        """A one-line warning where ``eval_samples`` is among ``names`` (the options given) and the method
        is sgd: one deterministic network has one prediction, so k samples nothing (a warning, not
        :meth:`refuse_unused`'s error: one ``eval_samples`` serves a sweep or a script over all methods)."""
        if self.method is Method.SGD and "eval_samples" in names:
            warnings.warn(f"--eval-samples {self.eval_samples} has no effect with --method sgd: its one deterministic "
                          "network gives one prediction (its test metrics are those of its softmax)", stacklevel=2)

    def warn_moot_kl_weighting(self, num_batches: int) -> None:
        """A one-line warning where ``kl_weighting`` differs from its default and the run has one
        minibatch an epoch: every weighting then puts the whole KL on it (the runs are the same)."""
        if num_batches == 1 and self.method is Method.BBB and \
                _plain(self.kl_weighting) != DATA_DEFAULTS[self.data_kind]["kl_weighting"]:
            warnings.warn(f"--kl-weighting {_plain(self.kl_weighting)} has no effect here: it splits the KL over "
                          f"an epoch's minibatches, and --batch-size {self.batch_size} makes one (every weighting "
                          "gives it the whole KL)", stacklevel=3)

    def _check_data_file(self) -> None:
        """The settings of a data file (``data_file``; ``dataset`` becomes ``"file"``) and of an
        image dataset exclude each other: one given with the other is a one-line error."""
        if self.data_file is not None:
            # one rule for the stored path, from the CLI and from Python: absolute and resolved, so the
            # run finds its file from any folder (a moved file: --csv/--npz FILE on evaluate, predict)
            self.data_file = str(Path(self.data_file).expanduser().resolve())
            if self.data_dir is not None:
                raise UserError("--data-dir is the folder of MNIST and Fashion-MNIST, and this run reads its own "
                                f"data ({self.data_file}): leave --data-dir out (moved data: give "
                                f"{moved_data_flag(self.data_file)})")
            if self.dataset not in (Dataset.MNIST.value, FILE_DATASET):
                raise UserError(f"--dataset {self.dataset} and --csv/--npz/--images exclude each other: give one")
            self.dataset = FILE_DATASET
            if self.val_size != 10000:
                raise UserError("--val-size counts MNIST images held out; for your own data (--csv, --npz, --images) "
                                "use --val-fraction")
            if self.scale != 126.0:
                raise UserError(f"--scale {self.scale:g} divides MNIST's pixels; a run on your own data (--csv, --npz, "
                                "--images) standardises its columns or pixels by the training rows' mean and sd and "
                                "never reads it: leave --scale out")
            if self.task is not None:
                self.task = choice("task", self.task, TASKS)
            if self.ignore_columns is not None:
                self.ignore_columns = [str(c) for c in self.ignore_columns] or None
            if self.keep_columns is not None:
                self.keep_columns = [str(c) for c in self.keep_columns] or None
            self.likelihood = choice("likelihood", self.likelihood, LIKELIHOODS)
            if self.image_size is not None or self.image_colour:
                if data_kind(self.data_file) != "folder":
                    flag = "--image-size" if self.image_size is not None else "--colour"
                    raise UserError(f"{flag} reads a folder of images (--images DIR); {self.data_file} is read as it "
                                    f"is: leave {flag} out")
            if self.image_size is not None:
                given_size = self.image_size if isinstance(self.image_size, (list, tuple)) else [self.image_size]
                size = [check_int("--image-size", v, 1) for v in given_size]
                if not 1 <= len(size) <= 2:
                    raise UserError(f"--image-size takes one number (square) or two (height width), got {len(size)}")
                self.image_size = [size[0], size[-1]]
            for name in ("val_fraction", "test_fraction"):
                v = float(getattr(self, name))
                if not (0.0 <= v < 1.0):
                    raise UserError(f"--{name.replace('_', '-')} must be in [0, 1), got {v}")
                setattr(self, name, v)
            if self.val_fraction + self.test_fraction >= 1.0:
                raise UserError(f"--val-fraction {self.val_fraction} and --test-fraction {self.test_fraction} "
                                "leave no rows to train on: make their sum < 1")
        else:
            if self.dataset == FILE_DATASET:
                raise UserError("dataset 'file' needs the file: --csv FILE, --npz FILE or --images DIR")
            given = [f"--{k.replace('_', '-')}" for k in ("target", "task") if getattr(self, k) is not None]
            given += ["--ignore"] if self.ignore_columns else []
            given += ["--keep"] if self.keep_columns else []
            given += ["--image-size"] if self.image_size is not None else []
            given += ["--colour"] if self.image_colour else []
            given += [f"--{k.replace('_', '-')}" for k, d in (("val_fraction", 0.1), ("test_fraction", 0.1),
                                                             ("likelihood", "heteroscedastic"))
                      if getattr(self, k) != d]
            if given:
                raise UserError(f"{given[0]} applies to your own data (--csv FILE, --npz FILE or --images DIR), not to "
                                f"--dataset {self.dataset}")
        if self.train_size is not None:
            self.train_size = check_int("--train-size", self.train_size, 1)

    @property
    def data_kind(self) -> str:
        """``"file"`` (your own table or arrays: ``data_file``) or ``"image"``: the key of
        :data:`DATA_DEFAULTS` whose defaults this configuration takes."""
        return "file" if self.data_file is not None else "image"

    def check_split(self, train: int, val: int, test: int) -> None:
        """Refuse a split of ``train``, ``val`` and ``test`` rows that this run cannot use (one
        line naming the sizes and the option to change), before anything is trained or written:
        no training rows, no test rows (a run ends by evaluating on its test set), or, for your
        own data, no validation rows though ``val_fraction`` asks for some."""
        own = self.data_file is not None
        rows = "images" if own and Path(str(self.data_file)).is_dir() else "rows"
        sizes = f"the split has {train} training, {val} validation and {test} test {rows if own else 'examples'}"
        if train == 0:
            raise UserError(f"{sizes}: nothing to train on; " + (
                f"give more {rows}, or lower --val-fraction and --test-fraction" if own else "give data"))
        if test == 0:  # (a classifier's fraction of each class is rounded: a small class's may be none)
            now = f"(now {self.test_fraction:g}; a classifier's is taken of each class, rounded)" \
                if self.test_fraction else "(e.g. 0.1)"
            raise UserError(f"{sizes}; a run ends by evaluating on its test set: "
                            + (f"raise --test-fraction {now} or give more {rows}" if own else "give test data"))
        if own and val == 0 and self.val_fraction > 0:
            raise UserError(f"{sizes}; --val-fraction {self.val_fraction:g} asks for validation {rows} to choose the "
                            f"best epoch on: raise it or give more {rows} (--val-fraction 0: no validation, best.pt is "
                            "the last epoch)")

    # -- conversion ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The settings as plain JSON types: an Enum member as its string value (the
        ``config.json`` of every version, and what :func:`resume_conflicts` compares)."""
        return {k: v.value if isinstance(v, Enum) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """The settings of ``d``; a setting it lacks takes its default (for the kind of data)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise UserError(f"unknown setting(s) {', '.join(unknown)}")
        return cls(**d)

    @classmethod
    def from_stored(cls, d: dict[str, Any]) -> TrainConfig:
        """The settings a run was trained with, from its stored config (a checkpoint's, or
        ``config.json``'s keys): a setting added since (:data:`STORED_BEFORE`) takes the value
        that names the behaviour of the bbb that wrote the run, not today's default."""
        d = {**{k: v for k, v in STORED_BEFORE.items() if k not in d}, **d}
        d.setdefault("noise_lr_scale", stored_default(d, "noise_lr_scale"))
        if d.get("data_file") is not None and d.get("data_dir") is not None:
            d["data_dir"] = None  # stored by a bbb that ignored it for a file's run: never read
        if d.get("data_file") is not None and d.get("scale", 126.0) != 126.0:
            d["scale"] = 126.0  # the same for --scale: a file's run never read it
        token = _STORED.set(True)  # the same for a setting its method did not read (TrainConfig._refuse_unread)
        try:
            return cls.from_dict(d)
        finally:
            _STORED.reset(token)

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)

    def make_prior(self) -> Prior:
        return make_prior(self.prior, pi=self.pi, sigma1=self.sigma1, sigma2=self.sigma2,
                          prior_sigma=self.prior_sigma)


#: settings that may change when a run is resumed (they do not alter the trajectory)
RESUME_MUTABLE = frozenset({"epochs", "device", "data_dir", "test_each_epoch", "eval_samples", "bf16",
                            "checkpoint_every", "data_file", "cuda_graph",  # data_file: the same MD5 is checked
                            "data_source"})  # train's own record of the data given (a run written before it: None)


def same_setting(name: str, a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are one value of the setting ``name``: the CSV columns of ``--ignore``
    and ``--keep`` as sets (their order and repeats change nothing), an image size left out as the
    default it stands for, any other by equality."""
    if name in ("ignore_columns", "keep_columns"):
        return set(a or ()) == set(b or ())
    if name == "image_size":
        return list(a or DEFAULT_IMAGE_SIZE) == list(b or DEFAULT_IMAGE_SIZE)
    return bool(a == b)


def resume_conflicts(stored: dict[str, Any], now: TrainConfig) -> list[tuple[str, Any, Any]]:
    """(setting, stored value, new value) for each setting outside :data:`RESUME_MUTABLE` that
    differs between a run's stored config and ``now``. A setting the stored config lacks (added
    to :class:`TrainConfig` after the run was written) counts as the behaviour the run was
    trained with: :data:`STORED_BEFORE`'s value, else its default."""
    with contextlib.suppress(UserError):  # an older bbb's run: a setting it did not read counts at its default
        read = TrainConfig.from_stored(stored).to_dict()
        stored = {**stored, **{k: read[k] for k in UNREAD_CHECKED if k in stored}}
    was = {k: stored[k] if k in stored else stored_default(stored, k) for k in now.to_dict()}
    return [(k, was[k], v) for k, v in now.to_dict().items()
            if k not in RESUME_MUTABLE and not same_setting(k, was[k], v)]
