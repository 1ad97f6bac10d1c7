"""The table of results/your-data/README.md: test metrics and selective prediction of trained runs.

Usage: python results/your-data/numbers.py RUN [RUN ...] [--samples K]

For each run (bbb train --csv ...): its best checkpoint on its own test split (bbb.runs.load_model,
the split of the run's config), K sampled networks (one for sgd). Classification: test error,
log-likelihood (mean log p(y|x)), AURC and the error among the 90% most certain, ranked by the
predictive entropy (and, for bbb, by the mutual information). Regression: RMSE and
log-likelihood in the target's units, AURC of the squared error and the RMSE of the 90% most
certain, ranked by the predictive sd. Then the refer rule of ``bbb predict`` (its default
target: half the validation error, the threshold chosen on the validation split) applied to the
test split: the share of test inputs kept and their error (RMSE) beside the target.
"""

from __future__ import annotations

import argparse
import math

import torch

import bbb
from bbb import uncertainty as U
from bbb.runs.model import load_split
from bbb.runs.referral import refer_threshold


def row(run: str, samples: int) -> dict[str, object]:
    model = bbb.runs.load_model(run)
    data, _ = load_split(model.config, model.preprocess.to_dict())
    x, y = data["test_x"], data["test_y"]
    with torch.no_grad():
        out = model.sample_outputs(x, samples, seed=0).double()
    r: dict[str, object] = {"run": run, "method": str(model.config.method), "k": out.shape[0], "n": x.shape[0]}
    if model.task == "regression":
        pre = model.preprocess
        reg = model.regression(out)
        means, sigmas = bbb.HeteroscedasticGaussian().split(out)
        m = U.regression_metrics(means, sigmas, y.double(), shift=pre.y.mean, scale=pre.y.std)
        sq = (reg["mean"] - pre.target_values(y.double())) ** 2
        r.update(rmse=m["rmse"], log_likelihood=m["log_likelihood"], aurc=U.aurc(reg["sd"], sq),
                 at90=math.sqrt(U.risk_at_coverage(reg["sd"], sq, 0.9)), coverage_95=m["coverage_95"])
        return refer(model, r, reg["sd"], sq, samples, regression=True)
    probs = U.predictive_probs(out)
    wrong = (probs.argmax(-1) != y).double()
    ent = U.entropy(probs)
    r.update(error=float(wrong.mean()), log_likelihood=-U.negative_log_likelihood(probs, y),
             aurc=U.aurc(ent, wrong), at90=U.risk_at_coverage(ent, wrong, 0.9))
    if out.shape[0] > 1:
        mi = U.mutual_information(out)
        r.update(aurc_mi=U.aurc(mi, wrong), at90_mi=U.risk_at_coverage(mi, wrong, 0.9))
    return refer(model, r, ent, wrong, samples, regression=False)


def refer(model: bbb.runs.TrainedModel, r: dict[str, object], score: torch.Tensor, errors: torch.Tensor,
          samples: int, regression: bool) -> dict[str, object]:
    ref = refer_threshold(model, None, samples, 0)
    kept = score <= ref.threshold
    err = float(errors[kept].mean()) if bool(kept.any()) else float("nan")
    r.update(refer_target=ref.target_error, val_kept=ref.coverage, test_kept=float(kept.double().mean()),
             test_kept_error=math.sqrt(err) if regression else err)
    return r


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--samples", type=int, default=100)
    args = p.parse_args()
    for run in args.runs:
        r = row(run, args.samples)
        print(" | ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)


if __name__ == "__main__":
    main()
