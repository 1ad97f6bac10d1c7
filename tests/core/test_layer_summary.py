"""``bbb.layer_summary``: what bayesianize made of a model, a row per module with parameters of its
own, each Bayesian weight counted once, frozen modules marked (a frozen Bayesian one too: its
posterior is kept as it is, not trained)."""

from __future__ import annotations

import torch.nn as nn

import bbb


def block() -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.Flatten(), nn.Linear(4 * 25, 3))


def test_layer_summary_counts_each_bayesian_weight_once():
    net = bbb.bayesianize(block(), skip=[nn.BatchNorm2d])
    s = bbb.layer_summary(net)
    rows = {r[0]: r for r in s.rows}
    assert rows["0"][2:] == (True, 4 * 9 + 4, "reparam")
    assert rows["1"][2:] == (False, 8, "")
    assert s.total_weights == sum(p.numel() for p in block().parameters())
    assert 0.9 < s.bayesian_share < 1.0 and not s.frozen
    text = str(s)
    assert "BayesConv2d" in text and "BatchNorm2d" in text and "weights Bayesian" in text


def test_a_frozen_bayesian_layer_is_marked_frozen():
    # a posterior loaded to be used, not trained (requires_grad off): the table said "yes" as for
    # the layer that trains
    net = bbb.bayesianize(nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)))
    net[0].requires_grad_(False)
    s = bbb.layer_summary(net)
    assert s.frozen == {"0"} and s.frozen_weights == 3 * 4 + 4
    lines = {line.split()[0]: line for line in str(s).splitlines()[1:-1]}
    assert "yes (frozen)" in lines["0"] and "frozen" not in lines["2"]
    assert str(s).endswith(f"; {3 * 4 + 4:,} frozen")
