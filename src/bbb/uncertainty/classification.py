"""Classification from Monte Carlo samples: ``logits`` are (k, B, C), one slice per sampled
network; ``probs`` are (B, C) predictive probabilities. The predictive distribution averages
*probabilities*, never log-probabilities (the latter is a geometric mean, a known peer bug).

Entropy decomposition (all in nats): predictive entropy H[E_w p(y|x,w)] = expected entropy
E_w H[p(y|x,w)] (aleatoric) + mutual information I[y; w | x] (epistemic)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..errors import UserError, check_int

__all__ = ["predictive_probs", "entropy", "predictive_entropy", "expected_entropy", "mutual_information",
           "reliability_bins", "expected_calibration_error", "negative_log_likelihood", "NLL_FLOOR",
           "predictive_log_likelihood", "brier_score", "error_rate", "auroc", "aupr"]


def _check_logits(logits: Tensor, fn: str) -> None:
    """Logits (k, B, C): a tensor of floats with at least one sample and one class, no NaN."""
    if not isinstance(logits, Tensor):
        raise UserError(f"{fn}: expected a tensor of logits (k, B, C), got {type(logits).__name__}")
    if logits.dim() < 2:
        raise UserError(f"{fn}: expected logits (k, B, C) with a leading sample dimension, "
                        f"got shape {tuple(logits.shape)}")
    if logits.shape[0] == 0 or logits.shape[-1] == 0:
        raise UserError(f"{fn}: empty logits of shape {tuple(logits.shape)} (need >= 1 sample and >= 1 class)")
    if not logits.is_floating_point():
        raise UserError(f"{fn}: logits must be floating point, got {logits.dtype}")
    if logits.numel() and bool((torch.isnan(logits) | (logits == math.inf)).any()):
        raise UserError(f"{fn}: logits contain NaN or +inf")


def _prob_tolerance(dtype: torch.dtype) -> float:
    """Round-off allowed on [0, 1] and on row sums (probabilities may have passed through bf16)."""
    return 1e-2 if dtype in (torch.float32, torch.float64) else 3e-2


def _check_probs(probs: Tensor, fn: str) -> None:
    """Probabilities (..., C): floats in [0, 1] whose rows sum to 1 (logits are refused)."""
    if not isinstance(probs, Tensor):
        raise UserError(f"{fn}: expected a tensor of probabilities, got {type(probs).__name__}")
    if probs.dim() < 1 or probs.shape[-1] == 0:
        raise UserError(f"{fn}: empty probabilities of shape {tuple(probs.shape)} (need >= 1 class)")
    if not probs.is_floating_point():
        raise UserError(f"{fn}: probabilities must be floating point, got {probs.dtype}")
    if probs.numel() == 0:
        return
    tol = _prob_tolerance(probs.dtype)
    lo, hi = float(probs.min()), float(probs.max())
    if math.isnan(lo) or math.isnan(hi) or lo < -tol or hi > 1 + tol:
        raise UserError(
            f"{fn}: probabilities must be in [0, 1], got values in [{lo:.4g}, {hi:.4g}]; if these are "
            "logits, pass torch.softmax(logits, -1) (or predictive_probs(logits) for k samples)")
    worst = float((probs.sum(-1, dtype=torch.float64) - 1).abs().max())
    if worst > tol:
        raise UserError(f"{fn}: each row of probabilities must sum to 1, but one is off by {worst:.3g}; "
                        "normalise them (e.g. torch.softmax(logits, -1))")


def predictive_probs(logits: Tensor) -> Tensor:
    """Mean over samples of the softmax: (k, B, C) -> (B, C), in the logits' dtype, float32 for
    float16 / bfloat16 logits (probabilities rounded to bfloat16's 3 digits flip argmaxes and
    shift the entropy and the ECE of a half-precision model's :func:`~bbb.uncertainty.evaluate`)."""
    _check_logits(logits, "predictive_probs")
    return torch.softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32)).mean(0)


def entropy(probs: Tensor) -> Tensor:
    """Entropy in nats along the last dim (0 log 0 = 0), in the probabilities' dtype, float32 for
    float16 / bfloat16 ones (their sum over the classes rounded to half precision is off in the
    second digit; the entropy is of the values given, as the other metrics here)."""
    _check_probs(probs, "entropy")
    p = probs.to(torch.promote_types(probs.dtype, torch.float32)).clamp_min(0.0)  # (-1e-9, accepted round-off: 0)
    return -torch.special.xlogy(p, p).sum(-1)


def predictive_entropy(logits: Tensor) -> Tensor:
    """Entropy in nats of the predictive distribution (the mean softmax over the k samples):
    (k, B, C) -> (B,), the total uncertainty."""
    return entropy(predictive_probs(logits))


def expected_entropy(logits: Tensor) -> Tensor:
    """Mean over samples of each network's entropy in nats (aleatoric part): (k, B, C) -> (B,), in
    the logits' dtype, float32 for float16 / bfloat16 logits, as :func:`predictive_entropy` (the
    entropy of half-precision log-probabilities is off in the third digit, as large as a typical
    mutual information, the difference of the two)."""
    _check_logits(logits, "expected_entropy")
    logp = torch.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    p = logp.exp()
    return -torch.where(p > 0, p * logp, torch.zeros_like(p)).sum(-1).mean(0)  # 0 log 0 = 0


def mutual_information(logits: Tensor) -> Tensor:
    """Predictive entropy minus expected entropy (epistemic part), clamped at 0 against round-off:
    (k, B, C) -> (B,), in the logits' dtype, float32 for float16 / bfloat16 logits. Computed in
    float64: the difference of two float32 entropies holds their round-off, larger than a small
    information (samples that agree were not 0, and small informations ranked at random). One
    sample (k = 1) has none: exactly 0."""
    _check_logits(logits, "mutual_information")
    out = torch.promote_types(logits.dtype, torch.float32)
    if logits.shape[0] == 1:
        return torch.zeros(logits.shape[1:-1], dtype=out, device=logits.device)
    work = logits.double()
    return (predictive_entropy(work) - expected_entropy(work)).clamp_min(0.0).to(out)


def _check(probs: Tensor, labels: Tensor, fn: str = "metric") -> None:
    """Probabilities (B, C) and class indices (B,): same B >= 1, labels in 0..C-1."""
    if not isinstance(probs, Tensor) or not isinstance(labels, Tensor):
        raise UserError(f"{fn}: expected tensors probs (B, C) and labels (B,), got "
                        f"{type(probs).__name__} and {type(labels).__name__}")
    if probs.dim() != 2 or labels.dim() != 1 or labels.shape[0] != probs.shape[0]:
        raise UserError(f"{fn}: expected probs (B, C) and labels (B,), got {tuple(probs.shape)} "
                        f"and {tuple(labels.shape)}")
    if probs.shape[0] == 0:
        raise UserError(f"{fn}: no examples (probs of shape {tuple(probs.shape)}); "
                        "the metric of an empty set is undefined")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise UserError(f"{fn}: labels must be integer class indices, got {labels.dtype}")
    _check_probs(probs, fn)
    c = probs.shape[1]
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= c:
        raise UserError(f"{fn}: labels must be class indices in 0..{c - 1}, got values in {lo}..{hi}")


def reliability_bins(probs: Tensor, labels: Tensor, num_bins: int = 15) -> dict[str, Tensor]:
    """Equal-width confidence bins: per bin the count, mean confidence and accuracy (bin b holds
    the confidences in (b/n, (b+1)/n], 0 in bin 0; one within 1e-6 of a bin's width of an edge counts
    as on it, so a float32 and a float64 confidence share their bin), and the n + 1 edges. Summed in float64 and
    returned in float32, or float64 for float64 ``probs`` (half-precision counts stop at 256 or 2048)."""
    _check(probs, labels, "reliability_bins")
    out = torch.promote_types(probs.dtype, torch.float32)
    return {k: v.to(probs.device, out) for k, v in _bins_on_cpu(probs, labels, num_bins).items()}


#: how near an edge (in bins' widths) a confidence is counted at it: float32's rounding of a value on an
#: edge, times the bins (1.2e-7 relative, times n <= 1000s), is far below; distinct confidences nearer
#: than 1e-6 of a bin are one confidence for any histogram
EDGE_SNAP = 1e-6


def _bins_on_cpu(probs: Tensor, labels: Tensor, num_bins: int) -> dict[str, Tensor]:
    """Per bin the count, mean confidence and accuracy, float64 on the CPU."""
    num_bins = check_int("num_bins", num_bins)
    conf, pred = probs.max(-1)
    correct = (pred == labels).to(torch.float64)
    # bin b holds confidences in (b/n, (b+1)/n]; confidence 0 falls in bin 0. Found in float64, a
    # confidence within EDGE_SNAP of a bin's width of an edge counted at the edge: a k-sample average
    # such as 6/10 lies on an edge of 15 bins, and its float32 rounding (0.6000000238) lay above it,
    # its float64 value on it (a float32 product conf * n rounded the other way again)
    conf = conf.double()
    idx = (torch.ceil(conf * num_bins - EDGE_SNAP) - 1).clamp(0, num_bins - 1).long()
    # the sums on the CPU, in order and in float64: CUDA's index_add_ adds floats by atomics in no fixed
    # order, and a run's ECE then differed in the 8th digit from one evaluation to the next (tests/cuda);
    # a bfloat16 count stops growing at 256 (its ECE was weighted by the wrong bin sizes)
    idx, conf, correct = idx.cpu(), conf.cpu().double(), correct.cpu()
    count = torch.zeros(num_bins, dtype=torch.float64).index_add_(0, idx, torch.ones_like(conf))
    conf_sum = torch.zeros_like(count).index_add_(0, idx, conf)
    acc_sum = torch.zeros_like(count).index_add_(0, idx, correct)
    safe = count.clamp_min(1)
    edges = torch.linspace(0, 1, num_bins + 1, dtype=torch.float64)
    return {"count": count, "confidence": conf_sum / safe, "accuracy": acc_sum / safe, "edges": edges}


def expected_calibration_error(probs: Tensor, labels: Tensor, num_bins: int = 15) -> float:
    """ECE = sum_b (n_b / N) |accuracy_b - confidence_b| over equal-width confidence bins
    (:func:`reliability_bins`; empty bins weigh 0), in float64."""
    _check(probs, labels, "expected_calibration_error")
    bins = _bins_on_cpu(probs, labels, check_int("num_bins", num_bins))
    n = bins["count"].sum()
    return float((bins["count"] / n * (bins["accuracy"] - bins["confidence"]).abs()).sum())


#: what :func:`negative_log_likelihood` counts a true class's probability of exactly 0 as (float32's
#: smallest normal number, -log = 87.3: a lower bound of what the zero hides, a probability that
#: underflowed), in every dtype; any positive probability counts as itself (a float32 subnormal, a
#: float64 1e-300: a floor of 1e-12 had capped an example's NLL at 27.6, this one as a floor at 87.3,
#: understating a confident error's, the deterministic networks' most of all). From logits,
#: :func:`predictive_log_likelihood` needs no floor.
NLL_FLOOR = torch.finfo(torch.float32).tiny


def negative_log_likelihood(probs: Tensor, labels: Tensor, eps: float = NLL_FLOOR) -> float:
    """Mean -log p(y | x) of the predictive distribution, in float64: each probability as it is,
    one of exactly 0 as ``eps`` (:data:`NLL_FLOOR`, whatever the probabilities' dtype). From the
    logits, ``-predictive_log_likelihood(logits, labels).mean()`` is exact where probabilities
    underflow."""
    _check(probs, labels, "negative_log_likelihood")
    p = probs.gather(1, labels.long()[:, None]).double()
    # (plus zero: a certain and right prediction's minus log of one is minus zero, printed as a negative NLL)
    return float(-torch.log(torch.where(p > 0, p, torch.full_like(p, eps))).mean()) + 0.0


def predictive_log_likelihood(logits: Tensor, labels: Tensor) -> Tensor:
    """log p(y | x) of the predictive distribution of k sampled networks, log (1/k) sum_j
    softmax(logits_j)[y]: (k, B, C) logits and (B,) class indices -> (B,), float64, by log-sum-exp
    over the samples' log-softmaxes: exact where the probabilities underflow (a confident error
    with a logit gap of 2e4 has -2e4, where a probability is 0 in any float)."""
    _check_logits(logits, "predictive_log_likelihood")
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.shape[0] != logits.shape[1] \
            or labels.is_floating_point() or labels.dtype == torch.bool:
        raise UserError(f"predictive_log_likelihood: expected logits (k, B, C) and integer labels (B,), got "
                        f"{tuple(logits.shape)} and {getattr(labels, 'dtype', type(labels).__name__)} "
                        f"{tuple(getattr(labels, 'shape', ()))}")
    c = logits.shape[-1]
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= c):
        raise UserError(f"predictive_log_likelihood: labels must be class indices in 0..{c - 1}")
    # the log-softmax in (at least) float32, as the probabilities are (a vocabulary's (k, B, C) in float64
    # would double the memory), exact in the log domain; the k picked values summed in float64
    logp = torch.log_softmax(logits, dim=-1, dtype=torch.promote_types(logits.dtype, torch.float32))
    picked = logp.gather(-1, labels.long().to(logp.device).view(1, -1, 1).expand(logp.shape[0], -1, 1))[..., 0]
    return torch.logsumexp(picked.double(), 0) - math.log(logits.shape[0])


def brier_score(probs: Tensor, labels: Tensor) -> float:
    """Mean over examples of sum_c (p_c - 1[y = c])^2, summed over the classes (0 is perfect, 2
    the worst), in float64."""
    _check(probs, labels, "brier_score")
    onehot = torch.nn.functional.one_hot(labels.long(), probs.shape[-1]).to(torch.float64)
    return float(((probs.double() - onehot) ** 2).sum(-1).mean())


def error_rate(probs: Tensor, labels: Tensor) -> float:
    """Share of examples whose most probable class (the first, on a tie) is not the label."""
    _check(probs, labels, "error_rate")
    return float((probs.argmax(-1) != labels).to(torch.float64).mean())


def _scores(negative: Tensor, positive: Tensor, fn: str) -> tuple[Tensor, Tensor]:
    try:
        neg = torch.as_tensor(negative).detach().flatten().double().cpu()
        pos = torch.as_tensor(positive).detach().flatten().double().cpu()
    except (TypeError, ValueError, RuntimeError) as exc:
        raise UserError(f"{fn}: the scores must be numeric arrays or tensors ({exc})") from None
    if neg.numel() == 0 or pos.numel() == 0:
        raise UserError(f"{fn} needs at least one score in each group")
    if not bool(torch.isfinite(neg).all() and torch.isfinite(pos).all()):
        raise UserError(f"{fn}: scores must be finite (found NaN or inf)")
    return neg, pos


def auroc(scores_negative: Tensor, scores_positive: Tensor) -> float:
    """Area under the ROC curve for "positive scores higher" (Mann-Whitney U, ties count 1/2)."""
    neg, pos = _scores(scores_negative, scores_positive, "AUROC")
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
    neg, pos = _scores(scores_negative, scores_positive, "AUPR")
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


