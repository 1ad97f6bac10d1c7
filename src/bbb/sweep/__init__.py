"""Hyperparameter sweeps over a search space, on this machine or on a Ray cluster (``bbb sweep``).

A search space (the paper's MNIST grid by default, or a YAML/JSON file) expands into trials; each
trial is one job of the job runner (:func:`bbb.runs.run_job`) in its own run directory
``OUT/trials/<trial_id>/``, where ``trial_id`` is a stable hash of the trial's settings. Two
backends run the same job runner and write the same files:

- ``local``: ``--max-concurrent`` trials at a time, each in its own process (one trial at a time
  runs in the calling process); no Ray needed.
- ``ray``: every trial is a Ray Tune trial. ``--address auto`` / ``ray://HOST:PORT`` joins a
  running cluster, no address starts a local one; ``--gpus-per-trial`` may be fractional;
  ``--scheduler asha`` stops trials early on the validation error reported every epoch.
  Ray is an optional extra: ``pip install '.[ray]'`` in a clone of bbb.

Fault tolerance. Every epoch ends with ``last.pt`` in the trial directory (atomically written)
and, on Ray, a checkpoint reported through ``tune.report(..., checkpoint=...)``. A failed trial is
retried up to ``--max-failures`` times and resumes from its latest checkpoint (on Ray from
``tune.get_checkpoint()``, so a trial also resumes on another node). Re-running ``bbb sweep``
with the same ``--out`` skips finished trials (``result.json`` written) and resumes unfinished ones
from their ``last.pt``. Locally, a trial being trained holds ``trials/<id>/trial.lock`` (an
``flock`` freed when its process ends), so a second sweep on the same ``--out`` never trains it
twice; worker processes stop as soon as the sweep process is gone (``kill -9`` included).

Spaces are validated before they are expanded (:func:`validate_space`: finite numbers of the right
kind within bounds for every numeric key) and counted without expanding (:func:`count_trials`);
more than :data:`MAX_TRIALS` trials need ``--limit``.

Results: ``OUT/sweep.csv`` (one row per trial, sorted by validation error, a regression's by
validation NLL: every hyperparameter of the space, epochs run, validation/test scores, seconds,
status) and ``OUT/best.json`` (the trial with the lowest; the test scores are reported, never used
to choose). Both are
rewritten atomically after every finished trial, so a killed sweep never leaves half a file.

Search-space format (YAML or JSON; see docs/scale_out.md)::

    description: free text
    num_samples: 1        # random draws per grid point (when some value is random)
    seed: 0               # seed of the random draws
    params:
      lr: {grid: [1.0e-3, 1.0e-4, 1.0e-5]}     # every value (cartesian product, first key outermost)
      samples: {choice: [1, 2, 5, 10]}         # random: choice, uniform, loguniform, randint
      epochs: 600                              # anything else is a fixed value
      hidden: [400, 400]                       # (a plain list is a fixed value too)

Keys are :class:`bbb.runs.TrainConfig` fields plus ``width``/``depth`` (``hidden`` = depth x
width), ``neg_log_sigma1``/``neg_log_sigma2`` (sigma = exp(-value)), ``dataset: synthetic``
(Gaussian blobs: ``synthetic_dim``, ``synthetic_train``, ``synthetic_classes``; for tests and
smoke runs).
"""

from __future__ import annotations

from .command import (  # noqa: F401
    EXAMPLE,
    add_arguments,
    main,
)
from .cost import (  # noqa: F401
    epoch_seconds_estimate,
    synthetic_data,
)
from .results import (  # noqa: F401
    SweepOptions,
    read_sweep,
)
from .runner import (  # noqa: F401
    run_sweep,
)
from .space import (  # noqa: F401
    MAX_TRIALS,
    NUMERIC_KEYS,
    PAPER_SPACE,
    RESULT_COLUMNS,
    SWEEP_KEYS,
    Trial,
    apply_overrides,
    count_trials,
    expand_space,
    load_space,
    resolve_params,
    validate_space,
)

__all__ = [
    "Trial",
    "SweepOptions",
    "PAPER_SPACE",
    "SWEEP_KEYS",
    "RESULT_COLUMNS",
    "load_space",
    "apply_overrides",
    "expand_space",
    "validate_space",
    "count_trials",
    "MAX_TRIALS",
    "NUMERIC_KEYS",
    "resolve_params",
    "synthetic_data",
    "epoch_seconds_estimate",
    "run_sweep",
    "read_sweep",
    "add_arguments",
    "main",
    "EXAMPLE",
]
