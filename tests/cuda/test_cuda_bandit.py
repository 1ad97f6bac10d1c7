"""The mushroom bandit's population on CUDA: a run stopped and resumed ends as one never stopped,
and an interaction (decision and updates) does not synchronise with the host."""

from __future__ import annotations

import torch
from cudakit import sync_errors

from bbb.experiments.bandit import Population
from testkit import tiny_bandit_config, tiny_mushrooms


def test_a_stopped_population_on_cuda_saves_and_resumes_exactly(tmp_path):
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(steps=60, agents=("bbb", "greedy"), seeds=(0,), lr=0.01, kl_data="seen",
                             kl_weighting="blundell")
    members = [("bbb", 0), ("greedy", 0)]
    ck = tmp_path / "w.pt"
    calls = iter(range(100))
    pop = Population(cfg, members, ctx, edible, device="cuda")
    assert pop.engine is not None and pop.engine.fused
    assert pop.run(60, ck, stop=lambda: next(calls) >= 25) is False
    assert pop.step == 25 and ck.exists()
    resumed = Population(cfg, members, ctx, edible, device="cuda")
    assert resumed.load(ck) and resumed.step == 25
    assert resumed.run(60, ck) is True
    whole = Population(cfg, members, ctx, edible, device="cuda")
    whole.run(60)
    assert torch.equal(resumed.cum_regret, whole.cum_regret)
    assert torch.equal(resumed.eat_ring, whole.eat_ring)
    for a, b in zip(resumed.net.parameters(), whole.net.parameters()):
        assert torch.equal(a, b)
    assert resumed.results()["log_regret"].device.type == "cpu"


def test_a_stopped_local_estimator_population_on_cuda_resumes_exactly(tmp_path):
    # its pre-activation noise is the device's global stream, which the checkpoint did not hold: a
    # resumed run started that stream again from its seed
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(steps=60, agents=("bbb",), seeds=(0,), estimator="local")
    members = [("bbb", 0)]
    ck = tmp_path / "w.pt"
    calls = iter(range(100))
    pop = Population(cfg, members, ctx, edible, device="cuda")
    assert pop.run(60, ck, stop=lambda: next(calls) >= 25) is False
    resumed = Population(cfg, members, ctx, edible, device="cuda")
    assert resumed.load(ck) and resumed.step == 25
    assert resumed.run(60, ck) is True
    whole = Population(cfg, members, ctx, edible, device="cuda")
    whole.run(60)
    for a, b in zip(resumed.net.parameters(), whole.net.parameters()):
        assert torch.equal(a, b)


def test_a_bandit_interaction_does_not_synchronise():
    """The decision (counter noise whose keys the step reads from a device table), the
    environment's bookkeeping and the updates (the engine and torch's fused optimiser)."""
    ctx, edible = tiny_mushrooms()
    pop = Population(tiny_bandit_config(), [("bbb", 0), ("bbb", 1), ("greedy", 0)], ctx, edible, device="cuda")
    pop._ensure_env(20)
    assert pop.decision_keys.device.type == "cuda"
    for t in range(3):  # the engine compiles here
        pop._act_and_learn(t)
    with sync_errors():
        for t in range(3, 10):
            pop._act_and_learn(t)
    assert bool(torch.isfinite(pop.cum_regret).all())
