"""Predictive uncertainty and calibration from Monte Carlo samples.

Conventions: ``logits`` are (k, B, C), one slice per sampled network; ``probs`` are (B, C)
predictive probabilities. The predictive distribution averages *probabilities*, never
log-probabilities (the latter is a geometric mean, a known peer bug).

Entropy decomposition (all in nats): predictive entropy H[E_w p(y|x,w)] = expected entropy
E_w H[p(y|x,w)] (aleatoric) + mutual information I[y; w | x] (epistemic).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch import Tensor

from .errors import UserError
from .functional import expand_samples
from .nn import sampling, shared_samples

__all__ = [
    "predict",
    "predictive_probs",
    "entropy",
    "predictive_entropy",
    "expected_entropy",
    "mutual_information",
    "reliability_bins",
    "expected_calibration_error",
    "negative_log_likelihood",
    "brier_score",
    "error_rate",
    "auroc",
    "aupr",
    "regression_uncertainty",
]


@torch.no_grad()
def predict(
    model: nn.Module,
    x: Tensor,
    num_samples: int = 10,
    mode: str = "sample",
    batch_size: int | None = None,
) -> Tensor:
    """Network outputs for ``x`` (B, ...): (k, B, ...) sampled, or (1, B, ...) with ``mode="mean"``.

    The k networks run batched; ``batch_size`` bounds memory by chunking the examples, and
    every chunk sees the same k networks (weights drawn once, :func:`bbb.nn.shared_samples`).
    """
    if mode not in ("sample", "mean"):
        raise UserError(f"mode must be 'sample' or 'mean', got {mode!r}")
    if num_samples < 1:
        raise UserError(f"num_samples must be >= 1, got {num_samples}")
    was_training = model.training
    model.eval()
    try:
        chunks = [x] if batch_size is None else list(torch.split(x, batch_size))
        outs = []
        with sampling(model, mode), shared_samples():
            for xc in chunks:
                if mode == "mean":
                    outs.append(model(xc).unsqueeze(0))
                else:
                    outs.append(model(expand_samples(xc, num_samples)) if num_samples > 1
                                else model(xc).unsqueeze(0))
        return torch.cat(outs, dim=1)
    finally:
        model.train(was_training)


def predictive_probs(logits: Tensor) -> Tensor:
    """Mean over samples of the softmax: (k, B, C) -> (B, C)."""
    return torch.softmax(logits, dim=-1).mean(0)


def entropy(probs: Tensor) -> Tensor:
    """Entropy in nats along the last dim (0 log 0 = 0)."""
    return -torch.special.xlogy(probs, probs).sum(-1)


def predictive_entropy(logits: Tensor) -> Tensor:
    return entropy(predictive_probs(logits))


def expected_entropy(logits: Tensor) -> Tensor:
    """Mean over samples of each network's entropy (aleatoric part)."""
    logp = torch.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1).mean(0)


def mutual_information(logits: Tensor) -> Tensor:
    """Predictive entropy minus expected entropy (epistemic part), clamped at 0 against round-off."""
    return (predictive_entropy(logits) - expected_entropy(logits)).clamp_min(0.0)


def _check(probs: Tensor, labels: Tensor) -> None:
    if probs.dim() != 2 or labels.shape != probs.shape[:1]:
        raise UserError(f"expected probs (B, C) and labels (B,), got {tuple(probs.shape)} and {tuple(labels.shape)}")


def reliability_bins(probs: Tensor, labels: Tensor, num_bins: int = 15) -> dict[str, Tensor]:
    """Equal-width confidence bins: per bin the count, mean confidence and accuracy."""
    _check(probs, labels)
    if num_bins < 1:
        raise UserError(f"num_bins must be >= 1, got {num_bins}")
    conf, pred = probs.max(-1)
    correct = (pred == labels).to(probs.dtype)
    # bin b holds confidences in (b/n, (b+1)/n]; confidence 0 falls in bin 0
    idx = (torch.ceil(conf * num_bins) - 1).clamp(0, num_bins - 1).long()
    count = torch.zeros(num_bins, dtype=probs.dtype, device=probs.device).index_add_(0, idx, torch.ones_like(conf))
    conf_sum = torch.zeros_like(count).index_add_(0, idx, conf)
    acc_sum = torch.zeros_like(count).index_add_(0, idx, correct)
    safe = count.clamp_min(1)
    edges = torch.linspace(0, 1, num_bins + 1, dtype=probs.dtype, device=probs.device)
    return {"count": count, "confidence": conf_sum / safe, "accuracy": acc_sum / safe, "edges": edges}


def expected_calibration_error(probs: Tensor, labels: Tensor, num_bins: int = 15) -> float:
    """ECE = sum_b (n_b / N) |accuracy_b - confidence_b| over equal-width confidence bins."""
    bins = reliability_bins(probs, labels, num_bins)
    n = bins["count"].sum()
    return float((bins["count"] / n * (bins["accuracy"] - bins["confidence"]).abs()).sum())


def negative_log_likelihood(probs: Tensor, labels: Tensor, eps: float = 1e-12) -> float:
    """Mean -log p(y | x) of the predictive distribution (probabilities clamped at ``eps``)."""
    _check(probs, labels)
    return float(-torch.log(probs.gather(1, labels[:, None]).clamp_min(eps)).mean())


def brier_score(probs: Tensor, labels: Tensor) -> float:
    """Mean over examples of sum_c (p_c - 1[y = c])^2 (0 is perfect, 2 the worst)."""
    _check(probs, labels)
    onehot = torch.nn.functional.one_hot(labels, probs.shape[-1]).to(probs.dtype)
    return float(((probs - onehot) ** 2).sum(-1).mean())


def error_rate(probs: Tensor, labels: Tensor) -> float:
    _check(probs, labels)
    return float((probs.argmax(-1) != labels).to(torch.float64).mean())


def auroc(scores_negative: Tensor, scores_positive: Tensor) -> float:
    """Area under the ROC curve for "positive scores higher" (Mann-Whitney U, ties count 1/2)."""
    neg = scores_negative.detach().flatten().double().cpu()
    pos = scores_positive.detach().flatten().double().cpu()
    if neg.numel() == 0 or pos.numel() == 0:
        raise UserError("AUROC needs at least one score in each group")
    allv = torch.cat([neg, pos])
    # average ranks with ties
    order = torch.argsort(allv, stable=True)
    sorted_v = allv[order]
    ranks = torch.empty_like(allv)
    uniq, inverse, counts = torch.unique_consecutive(sorted_v, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    avg_rank = ends - (counts.double() - 1) / 2  # 1-based average rank of each tie group
    ranks[order] = avg_rank[inverse]
    n_pos, n_neg = pos.numel(), neg.numel()
    u = ranks[neg.numel():].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def aupr(scores_negative: Tensor, scores_positive: Tensor) -> float:
    """Area under the precision-recall curve (average precision) with the positives as targets."""
    neg = scores_negative.detach().flatten().double().cpu()
    pos = scores_positive.detach().flatten().double().cpu()
    if neg.numel() == 0 or pos.numel() == 0:
        raise UserError("AUPR needs at least one score in each group")
    scores = torch.cat([pos, neg])
    target = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
    order = torch.argsort(scores, descending=True, stable=True)
    s, t = scores[order], target[order]
    tp = torch.cumsum(t, 0)
    fp = torch.cumsum(1 - t, 0)
    # evaluate only at the last index of each group of tied scores
    last = torch.ones_like(s, dtype=torch.bool)
    last[:-1] = s[1:] != s[:-1]
    tp, fp = tp[last], fp[last]
    precision = tp / (tp + fp)
    recall = tp / pos.numel()
    prev = torch.cat([torch.zeros(1, dtype=recall.dtype), recall[:-1]])
    return float(((recall - prev) * precision).sum())


def regression_uncertainty(means: Tensor, noise_sigma: Tensor | float | None = None) -> dict[str, Tensor]:
    """Split the predictive variance of k sampled regressors into epistemic and aleatoric parts.

    ``means`` (k, B): each network's mean prediction; ``noise_sigma`` scalar or (k, B): each
    network's noise standard deviation. Returns mean, epistemic variance Var_w[mean],
    aleatoric variance E_w[sigma^2] and the total (their sum, the law of total variance).
    """
    if means.dim() < 2:
        raise UserError("means must have a leading sample dimension (k, B)")
    epistemic = means.var(0, unbiased=False)
    if noise_sigma is None:
        aleatoric = torch.zeros_like(epistemic)
    else:
        s = torch.as_tensor(noise_sigma, dtype=means.dtype, device=means.device)
        aleatoric = (s * s).expand_as(means).mean(0) if s.dim() else (s * s).expand_as(epistemic)
    return {"mean": means.mean(0), "epistemic": epistemic, "aleatoric": aleatoric,
            "total": epistemic + aleatoric, "std": torch.sqrt(epistemic + aleatoric)}
