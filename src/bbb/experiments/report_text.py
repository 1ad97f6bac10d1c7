"""The words of ``bbb report`` (bbb.experiments.report): what a run is, in a reader's terms.

* :func:`kind_of` - the kind of run (``image``, ``table`` classification or ``regression``),
  which decides the sections, metrics and commands that apply to it.
* :func:`data_phrase`, :func:`method_name`, :func:`page_title` - the title of the page, naming the
  data file (its base name only) or the dataset, the task and the size.
* :func:`settings_rows` - the settings that matter (data, method, network, prior, epochs, samples,
  seed) and the others only where they differ from the defaults for that kind of data; none that
  does not apply to the run, no machine-specific one, no local path.
* :func:`suggested_commands` - the commands that write what the page lacks, only those that run on
  that kind of run (tests/applications/test_report_page.py runs each one).
* :data:`EXPLAIN` - one line per metric the results table shows.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from typing import Any

from ..data.arrays import data_kind
from ..options import is_bayesian

__all__ = ["EXPLAIN", "METHOD_NAMES", "command_text", "data_phrase", "kind_of", "method_name", "page_title",
           "plain_path", "settings_rows", "suggested_commands", "task_of"]

METHOD_NAMES = {"bbb": "Bayes by Backprop", "sgd": "a plain network (SGD)", "dropout": "MC dropout",
                "ivon": "IVON (the Bayesian network trained by a natural-gradient optimiser)",
                "laplace": "a last-layer Laplace posterior"}
DATASET_NAMES = {"mnist": ("MNIST", "digit"), "fashion-mnist": ("Fashion-MNIST", "clothing")}

#: one line per row of the results table (the key of :func:`bbb.experiments.report.result_rows`)
EXPLAIN = {
    "test_error_mc": "share of the test rows classified wrongly by the k-sample average: the class probabilities "
                     "of k networks drawn from the learned weight distributions, averaged (k in brackets; what "
                     "bbb predict uses)",
    "test_error": "the same by the mean weights: the one network whose every weight is the mean of its "
                  "distribution (no sampling)",
    "nll": "negative log-likelihood: the average of -log(probability given to the true class), in nats; "
           "lower is better, and a confident mistake costs most",
    "ece": "expected calibration error: the gap between the confidence stated and the share right, averaged "
           "over confidence bins; 0% means answers given with 90% confidence are right 90% of the time",
    "brier": "Brier score: the squared distance between the predicted class probabilities and the true class "
             "(0 is perfect, 2 the worst)",
    "aurc_entropy": "AURC, the area under the risk-coverage curve: the error averaged over every share of the "
                    "test rows kept, when the most uncertain by entropy (the spread of the averaged prediction) "
                    "are handed over first; lower is better",
    "aurc_mi": "the same, the most uncertain by MI, the mutual information between the prediction and the "
               "weights: how much the k sampled networks disagree",
    "risk90_entropy": "referral: the error on the 90% of test rows the model is surest of by entropy, the "
                      "other 10% referred to a person",
    "risk90_mi": "referral: the same, surest by MI",
    "val_error": "share of the validation rows classified wrongly at the epoch kept (these rows chose that "
                 "epoch, so it flatters the model a little)",
    "last_val_error": "share of the validation rows classified wrongly at the last epoch, the checkpoint the "
                      "test numbers are of (not chosen by these rows)",
    "test_rmse_mc": "root mean squared error of the predicted values on the test rows, in the target's units, "
                    "by the k-sample average: the predictions of k networks drawn from the learned weight "
                    "distributions, averaged (k in brackets; what bbb predict uses)",
    "test_rmse": "the same by the mean weights: the one network whose every weight is the mean of its "
                 "distribution (no sampling)",
    "target_sd": "for scale: the standard deviation of the target in the training rows (predicting their "
                 "mean for every row scores about this RMSE)",
    "log_likelihood": "average log density of the true values under the predicted Gaussians; higher is "
                      "better (it rewards a predicted spread of the right size)",
    "coverage_95": "share of the test values inside their predicted 95% interval: near 95% the stated "
                   "uncertainty is honest, below it overconfident",
    "aurc_sd": "AURC, the area under the risk-coverage curve: the squared error averaged over every share of "
               "the test rows kept, the rows with the largest predicted sd handed over first; lower is better",
    "rmse90": "referral: the RMSE on the 90% of test rows with the smallest predicted sd, the other 10% "
              "referred to a person",
    "best_val_rmse": "the validation RMSE at the epoch kept (these rows chose that epoch)",
    "ood_entropy": "out-of-distribution detection: the chance that an input of the other data set (named) "
                   "gets a higher entropy than one of the run's own test set (AUROC: 0.5 is chance, 1 perfect; "
                   "below 0.5: the other inputs get the more confident predictions)",
    "ood_mi": "the same by MI, the sampled networks' disagreement",
    "ood_sd": "out-of-distribution detection: the chance that a row of the other data (named) gets a wider "
              "predictive sd than one of the run's own test rows (AUROC: 0.5 is chance, 1 perfect)",
    "ood_epistemic": "the same by the epistemic sd, the sampled networks' disagreement",
    "model": "the checkpoint the test numbers are from: best, the epoch chosen on the validation rows; last, "
             "the final epoch",
    "seconds": "the training time on the machine that trained it",
    "laplace_fit": "a Laplace posterior's fit (bbb laplace): its time, the last-layer weights it covers and the "
                   "curvature kept, and the prior precision the marginal likelihood chose",
}

#: settings never listed: the machine's, bookkeeping, or shown in other rows
HIDDEN = {"argv", "versions", "preprocess", "device", "device_used", "threads", "data_dir", "data_file", "dataset",
          "checkpoint_every", "num_train", "num_val", "num_test", "num_weights", "num_batches", "test_each_epoch",
          "train_size", "target", "task", "method", "hidden", "prior", "pi", "sigma1", "sigma2", "prior_sigma",
          "dropout_input", "dropout_hidden", "epochs", "samples", "eval_samples", "seed", "compile", "no_compile",
          "ess", "ess_used", "weight_decay", "data_source", "resumed", "run_id"}
BBB_ONLY = {"estimator", "kl", "kl_samples", "kl_weighting", "rho_init", "rho_lr_scale", "mu_init_scale",
            "sigma_init"}
IMAGE_ONLY = {"scale", "val_size"}
FILE_ONLY = {"likelihood", "val_fraction", "test_fraction", "split_seed"}


def task_of(regression: bool) -> str:
    """``classification`` or ``regression``."""
    return "regression" if regression else "classification"


def kind_of(config: dict[str, Any], regression: bool) -> str:
    """``regression`` (a table's quantity), ``table`` (a table's classes) or ``image`` (MNIST,
    Fashion-MNIST): what decides the sections and the commands that apply."""
    if config.get("data_file") or config.get("dataset") == "file":
        return "regression" if regression else "table"
    return "image"


def plain_path(text: str) -> str:
    """A path's base name (never a local folder on a page meant to be sent); other text as it is."""
    if "=" in text and text.startswith("--"):
        flag, _, value = text.partition("=")
        return f"{flag}={plain_path(value)}"
    if os.sep in text or "/" in text or text.startswith("~"):
        return os.path.basename(text.rstrip("/" + os.sep)) or text
    return text


def command_text(argv: Sequence[Any]) -> str:
    """``bbb`` and ``argv`` with every path cut to its base name, quoted for a shell."""
    return shlex.join(["bbb", *(plain_path(str(a)) for a in argv)])


def method_name(config: dict[str, Any]) -> str:
    m = str(config.get("method", "bbb"))
    return METHOD_NAMES.get(m, m)


def _rows(config: dict[str, Any]) -> int | None:
    source = (config.get("preprocess") or {}).get("source") or {}
    if isinstance(source.get("rows"), int):
        return int(source["rows"])
    counts = [c for c in (config.get(k) for k in ("num_train", "num_val", "num_test")) if isinstance(c, int)]
    return sum(counts) if len(counts) == 3 else None


def folder_run(config: dict[str, Any]) -> bool:
    """Whether the run was trained on a folder of images in class subfolders (``--images``)."""
    return bool(((config.get("preprocess") or {}).get("source") or {}).get("folder"))


def unit_of(config: dict[str, Any], regression: bool) -> str:
    """What a run's examples are called on a page: ``images``, ``rows`` or ``examples`` (tensors)."""
    if config.get("data_source"):
        return "examples"
    return "images" if kind_of(config, regression) == "image" or folder_run(config) else "rows"


def data_phrase(config: dict[str, Any], regression: bool) -> str:
    """``customers.csv (classification, 600 rows)``, ``MNIST (digit classification, 2,000 training
    images)``."""
    if config.get("data_source"):  # tensors given to train(data=...), not the dataset's (a sweep's synthetic data)
        n = config.get("num_train")
        return f"tensors given in memory ({task_of(regression)}" + (
            f", {n:,} training examples)" if isinstance(n, int) else ")")
    if kind_of(config, regression) == "image":
        name, what = DATASET_NAMES.get(str(config.get("dataset")), (str(config.get("dataset")), "image"))
        n = config.get("num_train")
        return f"{name} ({what} classification" + (f", {n:,} training images)" if isinstance(n, int) else ")")
    name = plain_path(str(config.get("data_file") or "your data"))
    rows, unit = _rows(config), unit_of(config, regression)
    return f"{name}{'/' if folder_run(config) else ''} ({task_of(regression)}" + (
        f", {rows:,} {unit})" if rows is not None else ")")


def page_title(runs: Sequence[tuple[dict[str, Any], bool]]) -> str:
    """``Bayes by Backprop on customers.csv (classification, 600 rows)``; several runs on one data
    set: their methods joined by "vs"; on several data sets: that for each, joined by ";"."""
    by_data: dict[str, list[str]] = {}
    for c, reg in runs:
        methods = by_data.setdefault(data_phrase(c, reg), [])
        if method_name(c) not in methods:
            methods.append(method_name(c))
    return "; ".join(f"{' vs '.join(methods)} on {data}" for data, methods in by_data.items())


def _network(config: dict[str, Any]) -> str:
    hidden = config.get("hidden") or []
    if isinstance(hidden, int):
        hidden = [hidden]
    if not hidden:
        text = "no hidden layer"
    elif len(set(hidden)) == 1:
        text = f"{len(hidden)} hidden layer{'s' if len(hidden) > 1 else ''} of {hidden[0]} units"
    else:
        text = "hidden layers of " + ", ".join(map(str, hidden)) + " units"
    n = config.get("num_weights")
    return text + (f", {n:,} weights" if isinstance(n, int) else "")


def _prior(config: dict[str, Any]) -> str:
    if config.get("method") == "ivon":  # IVON's own: a Gaussian of precision ess * weight_decay
        wd, ess = config.get("weight_decay"), config.get("ess_used", config.get("ess"))
        if not (isinstance(wd, int | float) and isinstance(ess, int | float)):
            return "Gaussian" + (f", IVON's weight decay {wd:g}" if isinstance(wd, int | float) else "")
        precision = ess * wd
        return (f"Gaussian, precision {precision:g} = ess {ess:,g} x weight decay {wd:g}"
                + (f", sd {precision ** -0.5:.3g}" if precision > 0 else " (flat)"))
    if config.get("prior") == "gaussian":
        sd = config.get("prior_sigma")
        return f"Gaussian, sd {sd:g}" if isinstance(sd, int | float) else "Gaussian"
    parts = [f"{k} {config[k]:.3g}" for k in ("pi", "sigma1", "sigma2") if isinstance(config.get(k), int | float)]
    return "scale mixture" + (f" ({', '.join(parts)})" if parts else "")


def _data_rows(config: dict[str, Any], regression: bool) -> list[tuple[str, str]]:
    out = [("data", data_phrase(config, regression))]
    pre = config.get("preprocess") or {}
    if kind_of(config, regression) != "image":
        target = config.get("target") or pre.get("target") or ("its subfolders" if folder_run(config) else "-")
        classes = pre.get("classes") or []
        out.append(("target", f"{target} (" + (f"{len(classes)} classes: " + ", ".join(map(str, classes[:10]))
                                                  + (", ..." if len(classes) > 10 else "")
                                                  if classes and not regression else task_of(regression))
                    + ")"))
        cols = [c.get("name") for c in pre.get("columns") or [] if isinstance(c, dict)]
        if cols:
            out.append(("inputs", f"{len(cols)} columns: " + ", ".join(map(str, cols[:12]))
                        + (", ..." if len(cols) > 12 else "")))
        elif folder_run(config) and len(pre.get("feature_shape") or []) == 3:
            c, h, w = pre["feature_shape"]
            out.append(("inputs", f"{'colour' if c == 3 else 'grey'} images resized to {h}x{w} (height x width)"))
    counts = [config.get(k) for k in ("num_train", "num_val", "num_test")]
    if all(isinstance(c, int) for c in counts):
        unit = unit_of(config, regression)
        out.append((unit, f"{counts[0]:,} to train, {counts[1]:,} to validate, {counts[2]:,} to test"))
    return out


def _applies(key: str, config: dict[str, Any], kind: str) -> bool:
    method = config.get("method", "bbb")
    if key in BBB_ONLY and method != "bbb" and not (method == "ivon" and key == "mu_init_scale"):
        return False
    if key == "hess_init" and method != "ivon":
        return False
    if key in IMAGE_ONLY and kind != "image":
        return False
    if key in FILE_ONLY and kind == "image":
        return False
    if key == "likelihood" and kind != "regression":
        return False
    if key == "momentum" and config.get("optimizer") != "sgd":
        return False
    if key in ("lr_step_size", "lr_gamma") and config.get("lr_schedule") != "step":
        return False
    return not (key == "kl_samples" and config.get("kl_samples") is None)


def defaults_of(config: dict[str, Any]) -> dict[str, Any]:
    """The defaults of today's bbb for the run's kind of data (empty when they cannot be made)."""
    from ..runs import TrainConfig

    given = {k: config[k] for k in ("dataset", "data_file", "task", "method") if config.get(k) is not None}
    try:
        return TrainConfig.from_dict(given).to_dict()
    except Exception:  # noqa: BLE001 - a config of another bbb: then every setting is shown
        return {}


def settings_rows(config: dict[str, Any], regression: bool) -> list[tuple[str, str]]:
    """(setting, value) of one run: the ones that matter, then the others that differ from the
    defaults for its kind of data (see the module's notes)."""
    kind = kind_of(config, regression)
    method = str(config.get("method", "bbb"))
    rows = _data_rows(config, regression)
    rows.append(("method", f"{method_name(config)} (--method {method})"))
    rows.append(("network", _network(config)))
    if is_bayesian(method):
        rows.append(("prior", _prior(config)))
    if method == "dropout":
        rows.append(("dropout", f"input {config.get('dropout_input')}, hidden {config.get('dropout_hidden')}"))
    rows.append(("epochs", str(config.get("epochs", "-"))))
    if is_bayesian(method):
        rows.append(("weight samples per training step", str(config.get("samples", "-"))))
    if method != "sgd":
        # (bbb train's own test: the results' k is bbb evaluate's --samples where it ran)
        rows.append(("networks sampled by bbb train's test (--eval-samples)", str(config.get("eval_samples", "-"))))
    rows.append(("seed", str(config.get("seed", "-"))))
    defaults = defaults_of(config)
    for key in sorted(config):
        if key in HIDDEN or not _applies(key, config, kind):
            continue
        if key in defaults and defaults[key] == config[key]:
            continue
        value = config[key]
        text = " ".join(map(str, value)) if isinstance(value, list) else str(value)
        rows.append((key.replace("_", " "), plain_path(text) if isinstance(value, str) else text))
    return rows


def suggested_commands(name: str, config: dict[str, Any], regression: bool, have: set[str]) -> list[tuple[str, str]]:
    """(command, what it adds) for the run called ``name`` (its folder, as the column heads call
    it), each one that runs on this kind of run and whose file ``have`` lacks."""
    kind, method = kind_of(config, regression), config.get("method", "bbb")
    run = shlex.quote(name)
    out: list[tuple[str, str]] = []
    if config.get("data_source"):  # each reads the run's data, which are not on disk
        return out
    if "eval.json" not in have:
        out.append((f"bbb evaluate {run}", "the test metrics, the reliability diagram and the risk-coverage curve"
                    if not regression else
                    "the test RMSE, log-likelihood, interval coverage, the calibration curve and AURC"))
    if is_bayesian(method) and "pruning.csv" not in have:
        out.append((f"bbb prune {run}", f"the test {'RMSE' if kind == 'regression' else 'error'} with the weights "
                    "of lowest signal-to-noise removed"))
    if kind == "image":
        if "ood.json" not in have:
            out.append((f"bbb ood {run}", "how well the uncertainty tells the other image set apart"))
        if "uncertain.json" not in have:
            out.append((f"bbb uncertain {run}", "the test images the sampled networks dispute most"))
    else:
        source = plain_path(str(config.get("data_file") or "data.csv"))
        stem, ext = os.path.splitext(source)
        folder = data_kind(source) == "folder"  # a folder of images in class subfolders (--images)
        new = shlex.quote(f"new_{os.path.basename(source.rstrip('/'))}/" if folder else f"new_{stem}{ext}")
        what = (f"{new}: a folder of new images, like those of {source}'s subfolders" if folder else
                f"{new}: the columns of {source}" + ("" if ext.lower() == ".npz" else "; the target column may be "
                                                                                    "left out"))
        if folder and "uncertain.json" not in have:
            out.append((f"bbb uncertain {run}", "the test images the sampled networks dispute most, by file"))
        if "ood.json" not in have:
            out.append((f"bbb ood {run} --ood-data {new}", f"how well the uncertainty tells "
                        f"{'images' if folder else 'rows'} from elsewhere ({what.split(';')[0]}) from the run's own "
                        f"test {'images' if folder else 'rows'}"))
        out.append((f"bbb predict {run} {new} --out predictions.csv",
                    f"predictions with uncertainty for new {'images' if folder else 'rows'} ({what}), and which to "
                    "refer to a person"))
    return out
