"""Selective prediction in ``bbb evaluate`` (evaluate_run's ``selective``): the risk-coverage curve
and AURC of the k-sample predictive when the most uncertain inputs (by predictive entropy, and by
mutual information where there are samples) are handed over, in eval.json, the printed table and
risk_coverage.png; the numbers equal bbb.uncertainty.selective's on the same predictions."""

from __future__ import annotations

import json

import pytest
import torch

import bbb.runs.model as RM
from bbb import uncertainty as U
from bbb.runs import TrainConfig, classifier_metrics, evaluate_run, load_run, train
from bbb.runs.evaluation import selective_prediction
from testkit import blobs, run_main

QUIET = {"quiet": True, "log": lambda s: None}


def trained(tmp_path, method: str):
    data = blobs(spread=0.8)  # overlapping classes: errors to hand over
    run = tmp_path / method
    train(TrainConfig(method=method, hidden=[8], epochs=2, batch_size=64, lr=1e-2, device="cpu", eval_samples=2),
          run, data=data, **QUIET)
    return run, data


@pytest.mark.parametrize("method", ["bbb", "dropout", "sgd"])
def test_evaluate_writes_aurc_by_entropy_and_mi(tmp_path, method):
    run, data = trained(tmp_path, method)
    ev = evaluate_run(run, samples=4, device="cpu", data=data)
    sel = ev["selective"]
    assert ("mi" in sel) == (method != "sgd")  # one network: no mutual information
    # the same predictions scored by the library's functions
    model, _ = load_run(run, "best")
    res = classifier_metrics(model, data["test_x"], data["test_y"], method, samples=4, return_probs=True)
    errors = (res["probs"].argmax(-1) != data["test_y"]).double()
    ent = U.entropy(res["probs"].double())
    assert sel["entropy"]["aurc"] == pytest.approx(U.aurc(ent, errors), abs=1e-12)
    assert sel["entropy"]["risk_at_90"] == pytest.approx(U.risk_at_coverage(ent, errors, 0.9), abs=1e-12)
    if method != "sgd":
        assert sel["mi"]["aurc"] == pytest.approx(U.aurc(res["mi"], errors), abs=1e-12)
        assert res["mi"].shape == (60,) and bool((res["mi"] >= 0).all())
    assert sel["error"] == pytest.approx(ev["test_error_mc"]) and 0 < sel["error"] < 1
    assert sel["oracle_aurc"] <= sel["entropy"]["aurc"]
    assert sel["coverage"][-1] == 1.0 and sel["entropy"]["risk"][-1] == pytest.approx(sel["error"])
    assert json.loads((run / "eval.json").read_text())["selective"] == sel
    assert "risk_coverage.png" in ev["plots"] and (run / "risk_coverage.png").stat().st_size > 1000


def test_the_curve_at_its_coverages():
    probs = torch.tensor([[0.9, 0.1], [0.6, 0.4], [0.5, 0.5], [0.8, 0.2]])
    y = torch.tensor([0, 1, 1, 0])  # the two uncertain ones are wrong / a coin toss
    sel = selective_prediction(probs, y, None, points=4)
    assert sel["coverage"] == [0.25, 0.5, 0.75, 1.0]
    # ranked by entropy: 0.9 (right), 0.8 (right), 0.6 (wrong), 0.5 (argmax 0: wrong)
    assert sel["entropy"]["risk"] == pytest.approx([0, 0, 1 / 3, 0.5])
    assert sel["entropy"]["aurc"] == pytest.approx((0 + 0 + 1 / 3 + 0.5) / 4)
    assert sel["oracle_aurc"] == pytest.approx(sel["entropy"]["aurc"])  # the ranking is the best one
    assert sel["entropy"]["risk_at_90"] == pytest.approx(0.5)  # ceil(0.9 * 4) = 4 kept


def test_cli_prints_the_selective_table(capsys, tmp_path, monkeypatch):
    run, data = trained(tmp_path, "bbb")
    monkeypatch.setattr(RM, "load_split", lambda cfg, stored=None: (data, None))  # the run's data, from "disk"
    rc, out, err = run_main(capsys, "evaluate", str(run), "--samples", "3", "--device", "cpu")
    assert rc == 0, err
    assert "AURC" in out and "entropy" in out and "mi" in out and "risk_coverage.png" in out


def test_one_sample_has_no_mutual_information_to_rank_by():
    """With k = 1 the mutual information is 0 (was round-off, ~1e-7) for every input: eval.json's
    selective prediction ranked the inputs by it and reported an AURC "by mi"."""
    from bbb.nn import BayesLinear
    from bbb.runs.evaluation import predictive_scores

    torch.manual_seed(0)
    net = torch.nn.Sequential(BayesLinear(4, 16), torch.nn.ReLU(), BayesLinear(16, 3))
    x, y = torch.randn(50, 4), torch.randint(0, 3, (50,))
    for k, has_mi in ((1, False), (3, True)):
        res = classifier_metrics(net, x, y, "bbb", samples=k, return_probs=True)
        assert (res["mi"] is not None) == has_mi
        assert ("mi" in selective_prediction(res["probs"], y, res["mi"])) == has_mi
        outputs = 3 * torch.randn(k, 50, 3)
        assert ("mi" in predictive_scores("classification", None, outputs, y, selective=True)["selective"]) == has_mi


def test_a_dropout_run_without_dropout_is_one_network():
    """--method dropout with rates 0 builds no dropout layer: its k "samples" were k copies of one
    network, reported as a k-sample average whose mutual information (round-off) ranked the inputs."""
    from bbb.runs.evaluation import mc_outputs

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.0), torch.nn.Linear(16, 3))
    x, y = torch.randn(50, 4), torch.randint(0, 3, (50,))
    res = classifier_metrics(net, x, y, "dropout", samples=10, return_probs=True)
    assert res["samples"] == 1 and res["mi"] is None and res["error_mc"] == res["error"]
    assert mc_outputs(net, x, "dropout", 10).shape == (1, 50, 3)
    net[2].p = 0.5  # a real dropout layer: k sampled networks
    assert classifier_metrics(net, x, y, "dropout", samples=10, return_probs=True)["mi"].shape == (50,)
