"""The bandit's ``ensemble`` agent: bootstrapped Thompson sampling over deterministic networks. Each
network starts from its own weights (the first from the greedy agent's), takes the greedy agents'
step on minibatches of its own (an interaction left out of its data weighs nothing), a decision is
one network's drawn uniformly, a stopped run resumes exactly, and its settings are never ignored.
Small synthetic data only."""

from __future__ import annotations

import argparse
import copy

import pytest
import torch

from bbb.errors import UserError
from bbb.experiments.bandit import Population, figure6_marks, parse_agent, run_bandit
from bbb.experiments.bandit.command import add_arguments, config_from_args
from bbb.experiments.bandit.ensemble import make_optimizer
from testkit import filled_bandit_population, stopped_and_uninterrupted_bandit, tiny_bandit_config, tiny_mushrooms


def test_ensemble_members_come_last_and_their_first_network_starts_as_greedys():
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(agents=("ensemble", "greedy", "bbb"), seeds=(0, 1), ensemble_size=3)
    pop = Population(cfg, [("ensemble", 1), ("greedy", 0), ("bbb", 0), ("ensemble", 0)], ctx, edible)
    assert pop.pairs == [("bbb", 0), ("greedy", 0), ("ensemble", 1), ("ensemble", 0)]
    assert parse_agent("ensemble").kind == "ensemble" and not parse_agent("ensemble").in_paper
    w = pop.ensembles.net.det[0].weight  # (2 members x 3 networks, in, out)
    assert w.shape[0] == 6
    assert torch.equal(w[3], pop.net.det[0].weight[0])  # seed 0's first network: greedy's start
    assert torch.equal(w[3], pop.net.bayes[0].weight_mu[0])
    for i in range(6):  # every network its own start
        assert all(not torch.equal(w[i], w[j]) for j in range(i + 1, 6))


@pytest.mark.parametrize("keep", [1.0, 0.5])
def test_each_network_takes_the_greedy_step_on_its_own_minibatch(keep):
    """The update of every network is torch.optim's Adam (with --weight-decay's L2) on the mean of its
    minibatch's negative log-likelihood, the rows its data left out weighing 0; its rows are drawn
    from its member's buffer by the ensembles' own generator."""
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(agents=("ensemble", "greedy"), seeds=(0, 1), ensemble_size=2, ensemble_keep=keep,
                             noise_sigma=0.1, weight_decay=1e-3, lr=0.01)
    pop = filled_bandit_population(cfg, [("greedy", 0), ("ensemble", 0), ("ensemble", 1)], ctx, edible)
    ens = pop.ensembles
    if keep < 1:
        share = ens.keep[:, :20].float().mean()
        assert 0.2 < share < 0.8 and not ens.keep[:, :20].all(0).all()  # some rows left out of some networks
    ref = copy.deepcopy(ens.net)
    opt = make_optimizer("adam", list(ref.parameters()), 0.01, 1e-3 / 0.1**2)
    gen = torch.Generator().manual_seed(0)
    gen.set_state(ens.gen.get_state())
    members = torch.tensor([1, 1, 2, 2])  # each member's buffer, once per network
    for u in range(4):
        idx = torch.randint(0, 20, (4, cfg.batch_size), generator=gen)
        x, y = pop.buffer_rows(members, idx)
        nll = (ref(x) - y).square().sum(-1) / (2 * 0.1**2)  # the Gaussian's, but for its constant
        if keep < 1:
            nll = nll * ens.keep.gather(1, idx)
        opt.zero_grad()
        (nll.sum() / cfg.batch_size).backward()
        opt.step()
        pop.update(20, 20 + u, u % 2)
    for (name, a), b in zip(ens.net.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.detach().clone(), b.detach().clone(), rtol=1e-5, atol=1e-6, msg=name)


def test_a_decision_is_one_network_drawn_uniformly():
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(agents=("ensemble",), seeds=(0,), ensemble_size=4)
    pop = Population(cfg, [("ensemble", 0)], ctx, edible)
    pop._ensure_env(10)
    x = pop.inputs(pop.env_idx[pop._member_seed_pos, 0])
    with torch.no_grad():
        each = pop.ensembles.net(x.to_dense().expand(4, -1, -1))[..., 0]  # (networks, actions)
    counts = torch.zeros(4)
    for t in range(400):
        v = pop.values(x, t)[0]
        hits = [j for j in range(4) if torch.equal(v, each[j])]
        assert len(hits) == 1  # one network's prediction, not a blend
        counts[hits[0]] += 1
    assert counts.min() > 60  # uniform: 100 each expected


def test_a_stopped_run_with_an_ensemble_agent_resumes_exactly(tmp_path):
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(steps=50, agents=("bbb", "ensemble", "greedy"), seeds=(0,), noise_sigma=0.1, lr=0.01,
                             ensemble_size=3, ensemble_keep=0.7)
    members = [("bbb", 0), ("ensemble", 0), ("greedy", 0)]
    resumed, whole = stopped_and_uninterrupted_bandit(cfg, members, ctx, edible, tmp_path / "w.pt", 50, 20)
    assert torch.equal(resumed.cum_regret, whole.cum_regret)
    assert torch.equal(resumed.ensembles.keep, whole.ensembles.keep)
    for net_a, net_b in ((resumed.net, whole.net), (resumed.ensembles.net, whole.ensembles.net)):
        for a, b in zip(net_a.parameters(), net_b.parameters()):
            assert torch.equal(a, b)
    # the ensemble alone runs and resumes too
    alone = tiny_bandit_config(steps=30, agents=("ensemble",), seeds=(0, 1), ensemble_size=2)
    pop = Population(alone, [("ensemble", 0), ("ensemble", 1)], ctx, edible)
    assert pop.net is None and pop.run(30, tmp_path / "a.pt") is True
    again = Population(alone, [("ensemble", 0), ("ensemble", 1)], ctx, edible)
    assert again.load(tmp_path / "a.pt") and torch.equal(again.cum_regret, pop.cum_regret)
    # another size is another run: its checkpoint is refused, not half-loaded
    other = Population(tiny_bandit_config(steps=30, agents=("ensemble",), seeds=(0, 1), ensemble_size=3),
                       [("ensemble", 0), ("ensemble", 1)], ctx, edible)
    with pytest.raises(UserError, match="other settings"):
        other.load(tmp_path / "a.pt")


def test_the_ensembles_settings_are_never_ignored():
    parser = argparse.ArgumentParser()
    add_arguments(parser)

    def cfg(*argv: str):
        c = config_from_args(parser.parse_args(["--out", "x", *argv]))
        c.validate()
        return c

    c = cfg("--agents", "ensemble", "--ensemble-size", "3", "--ensemble-keep", "0.8")
    assert (c.ensemble_size, c.ensemble_keep) == (3, 0.8)
    assert c.training_key()["ensemble_size"] == 3 and c.training_key()["ensemble_keep"] == 0.8
    assert "ensemble_size" not in cfg("--agents", "ensemble").training_key()  # old checkpoints still resume
    for argv, match in ((["--agents", "greedy", "--ensemble-size", "3"], "ensemble_size"),
                        (["--agents", "bbb", "--ensemble-keep", "0.5"], "ensemble_keep"),
                        (["--agents", "ensemble", "--ensemble-keep", "0"], "ensemble_keep"),
                        (["--agents", "ensemble", "--ensemble-keep", "1.5"], "ensemble_keep"),
                        (["--agents", "ensemble", "--ensemble-size", "0"], "ensemble_size"),
                        (["--agents", "ensemble", "--estimator", "local"], "local")):
        with pytest.raises(UserError, match=match):
            cfg(*argv)
    cfg("--agents", "ensemble", "--lr", "0.01", "--weight-decay", "0.1")  # the greedy recipe's: read


def test_a_run_with_the_ensemble_writes_its_rows_and_the_marks_leave_it_out(tmp_path):
    ctx, edible = tiny_mushrooms()
    out = run_bandit(tiny_bandit_config(steps=40, log_every=20, agents=("bbb", "greedy", "ensemble"), seeds=(0,),
                                        ensemble_size=2, out=str(tmp_path / "r")), ctx, edible)
    assert {r["agent"] for r in out["summary"]} == {"bbb", "greedy", "ensemble"}
    assert {r["agent"] for r in out["regret_rows"] if r["step"] == 40} == {"bbb", "greedy", "ensemble"}
    with_it = figure6_marks(out["summary"], out["regret_rows"], 0.5)
    without = figure6_marks([s for s in out["summary"] if s["agent"] != "ensemble"],
                            [r for r in out["regret_rows"] if r["agent"] != "ensemble"], 0.5)
    assert with_it == without
