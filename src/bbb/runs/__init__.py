"""A run: one network trained into one run directory, and everything that reads one back.

The middle layer (docs/design.md): it builds on the core library (``bbb.nn``, ``bbb.elbo``,
``bbb.engine``, ...) and the applications (the command line, the sweep, the experiments) build on
it. A run directory is one contract, kept here:

* :mod:`bbb.runs.config` - :class:`TrainConfig`, what may change on resume.
* :mod:`bbb.runs.model` - the network and the dataset split of a configuration.
* :mod:`bbb.runs.checkpoint` - ``last.pt`` (the commit point) / ``best.pt`` (format version
  checked), ``metrics.csv`` (checked against ``last.pt``), their repair on resume.
* :mod:`bbb.runs.loop` - :func:`train`, the epoch loop with its ``on_epoch`` callback.
* :mod:`bbb.runs.population` - :func:`train_population`: runs of one recipe that differ in their
  seed or initialisation trained together as one population, each into its own run directory.
* :mod:`bbb.runs.evaluation` - evaluation and summary, ``bbb evaluate`` and ``bbb prune``.
* :mod:`bbb.runs.loggers` - :class:`TrainLogger`, the protocol of experiment loggers
  (TensorBoard, W&B, MLflow), and :class:`TensorBoardLogger`.
* :mod:`bbb.runs.jobs` - the one job runner (:func:`run_jobs`): skip finished runs, resume,
  record divergence, retry crashes, report through :class:`JobCallbacks`.
* :mod:`bbb.runs.rundir` - who may write a run directory: resume/overwrite checks, the lock.
* :mod:`bbb.runs.trained` - :func:`load_model` (``bbb.runs.load_model``): a trained run as a model
  that takes raw inputs (its preprocessing kept in the checkpoint).
* :mod:`bbb.runs.referral` - what a run's predictions are for: each input's uncertainty and the
  referral rule chosen on its validation set (``bbb predict``).
"""

from __future__ import annotations

from .checkpoint import (
    CHECKPOINT_FORMAT,
    METRIC_COLUMNS,
    PRUNING_COLUMNS,
    committed_checkpoint,
    load_checkpoint,
    load_run,
    model_from_checkpoint,
    read_metrics,
    run_dir_of,
)
from .config import (
    RESUME_MUTABLE,
    TrainConfig,
)
from .ensemble import TrainedEnsemble, evaluate_ensemble, load_ensemble
from .evaluation import (
    EVAL_CHUNK,
    classifier_metrics,
    error_count,
    evaluate_run,
    mc_dropout,
    mean_logits,
    mean_network_error,
    prune_run,
    run_data,
)
from .jobs import JobCallbacks, JobResult, RunJob, job_state, run_job, run_jobs
from .laplace import TrainedLaplace, evaluate_laplace, fit_run_laplace
from .loggers import TensorBoardLogger, TrainLogger
from .loop import batch_objective, kl_weight_table, run_epoch, train, training_step
from .model import DATA_KEYS, build_model, check_data, infer_method, load_data, num_weights
from .optim import make_optimizer
from .population import train_population
from .rundir import lock_run_dir
from .trained import TrainedModel, load_model

__all__ = [
    "CHECKPOINT_FORMAT",
    "DATA_KEYS",
    "EVAL_CHUNK",
    "JobCallbacks",
    "JobResult",
    "METRIC_COLUMNS",
    "PRUNING_COLUMNS",
    "RESUME_MUTABLE",
    "RunJob",
    "TensorBoardLogger",
    "TrainConfig",
    "TrainLogger",
    "TrainedEnsemble",
    "TrainedLaplace",
    "TrainedModel",
    "batch_objective",
    "build_model",
    "check_data",
    "committed_checkpoint",
    "classifier_metrics",
    "error_count",
    "fit_run_laplace",
    "evaluate_ensemble",
    "evaluate_laplace",
    "evaluate_run",
    "infer_method",
    "job_state",
    "kl_weight_table",
    "load_checkpoint",
    "load_data",
    "load_ensemble",
    "load_model",
    "load_run",
    "lock_run_dir",
    "make_optimizer",
    "mc_dropout",
    "mean_logits",
    "mean_network_error",
    "model_from_checkpoint",
    "num_weights",
    "prune_run",
    "read_metrics",
    "run_data",
    "run_dir_of",
    "run_epoch",
    "run_job",
    "run_jobs",
    "train",
    "train_population",
    "training_step",
]
