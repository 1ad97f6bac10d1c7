"""The mushroom bandit: environment bookkeeping, hand-written gradients, population independence,
a tiny end-to-end run with resume, and user errors. Everything runs on small synthetic data."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from bbb.errors import UserError
from bbb.experiments import bandit as B
from bbb.experiments.bandit import (
    BanditConfig,
    MLPLayout,
    Population,
    expected_rewards,
    mlp_backward,
    mlp_forward,
    mushroom_rewards,
    oracle_rewards,
    parse_agent,
    run_bandit,
    step_regrets,
)


def _tiny_data(n: int = 40, groups: int = 3, values: int = 3, seed: int = 0):
    """One-hot contexts of ``groups`` attributes with ``values`` values each; edibility a rule."""
    g = torch.Generator().manual_seed(seed)
    attr = torch.randint(0, values, (n, groups), generator=g)
    ctx = torch.zeros(n, groups * values)
    ctx[torch.arange(n).unsqueeze(1), attr + values * torch.arange(groups)] = 1.0
    edible = attr[:, 0] != 0
    return ctx, edible


def _tiny_cfg(**kw) -> BanditConfig:
    base = dict(steps=120, seeds=(0, 1), updates_per_step=2, batch_size=8, buffer=32,
                hidden=(8, 6), log_every=40, quiet=True, checkpoint_every=1e9)
    base.update(kw)
    return BanditConfig(**base)


# --------------------------------------------------------------------------------------------
# Environment
# --------------------------------------------------------------------------------------------


def test_rewards_oracle_and_regret_bookkeeping():
    edible = torch.tensor([True, True, False, False, False, False])
    eat = torch.tensor([True, False, True, True, False, False])
    lucky = torch.tensor([False, True, False, True, False, True])
    assert mushroom_rewards(edible, eat, lucky).tolist() == [5.0, 0.0, -35.0, 5.0, 0.0, 0.0]
    assert oracle_rewards(edible).tolist() == [5.0, 5.0, 0.0, 0.0, 0.0, 0.0]
    assert expected_rewards(edible, eat).tolist() == [5.0, 0.0, -15.0, -15.0, 0.0, 0.0]
    realised, expected = step_regrets(edible, eat, lucky)
    # passing an edible one costs 5; eating a poisonous one costs 35 or -5 (lucky), 15 expected
    assert realised.tolist() == [0.0, 5.0, 35.0, -5.0, 0.0, 0.0]
    assert expected.tolist() == [0.0, 5.0, 15.0, 15.0, 0.0, 0.0]


def test_oracle_agent_has_zero_regret_and_random_agent_the_textbook_rate():
    g = torch.Generator().manual_seed(0)
    edible = torch.rand(200_000, generator=g) < 0.5
    lucky = torch.rand(200_000, generator=g) < 0.5
    r, e = step_regrets(edible, edible.clone(), lucky)
    assert r.abs().sum() == 0 and e.sum() == 0
    eat = torch.rand(200_000, generator=g) < 0.5
    _, e = step_regrets(edible, eat, lucky)
    assert e.mean().item() == pytest.approx(0.25 * 5 + 0.25 * 15, abs=0.1)


def test_env_draws_depend_on_seed_only_and_extend():
    a_idx, a_lucky = B.env_draws(3, 12_000, 50)
    b_idx, b_lucky = B.env_draws(3, 25_000, 50)
    assert torch.equal(a_idx, b_idx[:12_000]) and torch.equal(a_lucky, b_lucky[:12_000])
    c_idx, _ = B.env_draws(4, 12_000, 50)
    assert not torch.equal(a_idx, c_idx)
    assert int(a_idx.min()) >= 0 and int(a_idx.max()) < 50
    assert abs(a_lucky.float().mean().item() - 0.5) < 0.03


def test_population_sees_the_mushrooms_and_bookkeeps_regret():
    ctx, edible = _tiny_data()
    cfg = _tiny_cfg(steps=30, agents=("greedy", "egreedy_1"), seeds=(5,))
    pop = Population(cfg, [("greedy", 5), ("egreedy_1", 5)], ctx, edible)
    pop.run(30)
    idx, lucky = B.env_draws(5, 30, ctx.shape[0])
    # replay the egreedy_1 member's decisions from its buffer: action code in the input row
    sp = pop.subpops[0][1]
    eat = sp.xbuf[1, :30, ctx.shape[1] + B.EAT] == 1.0
    assert torch.equal(sp.xbuf[1, :30, : ctx.shape[1]], ctx[idx])
    r = mushroom_rewards(edible[idx], eat, lucky)
    assert torch.equal(sp.rbuf[1, :30], r)
    realised, expected = step_regrets(edible[idx], eat, lucky)
    assert pop.cum_regret[1].item() == pytest.approx(realised.sum().item())
    assert pop.cum_expected[1].item() == pytest.approx(expected.sum().item())
    # both members of seed 5 faced the same mushrooms
    assert torch.equal(sp.xbuf[0, :30, : ctx.shape[1]], sp.xbuf[1, :30, : ctx.shape[1]])


# --------------------------------------------------------------------------------------------
# Hand-written forward and backward
# --------------------------------------------------------------------------------------------


def _autograd_forward(layout: MLPLayout, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    h = x
    views = layout.views(w)
    for i, v in enumerate(views):
        z = torch.bmm(h, v)
        if i < len(views) - 1:
            h = torch.cat([z.relu(), torch.ones(*z.shape[:2], 1, dtype=z.dtype)], -1)
    return z


def test_mlp_forward_backward_match_autograd():
    torch.manual_seed(1)
    layout = MLPLayout(7, [5, 4, 3], 1)
    w = torch.randn(3, layout.size, dtype=torch.float64)
    x = torch.randn(3, 6, 8, dtype=torch.float64)
    x[..., -1] = 1.0
    acts = mlp_forward(layout, w, x)
    dout = torch.randn(3, 6, 1, dtype=torch.float64)
    grad = mlp_backward(layout, w, acts, dout, torch.zeros_like(w))
    wa = w.clone().requires_grad_()
    out = _autograd_forward(layout, wa, x)
    torch.testing.assert_close(acts.out, out.detach())
    (out * dout).sum().backward()
    torch.testing.assert_close(grad, wa.grad)


@pytest.mark.parametrize("agent,prior", [("bbb", "gaussian"), ("bbb", "mixture"), ("greedy", "gaussian")])
def test_population_gradients_match_autograd_loss(agent, prior):
    """BBB: mean Gaussian NLL + kl_scale * KL / N (closed form for the Gaussian prior, the paper's
    Monte Carlo log q(w) - log p(w) for the scale mixture); greedy: mean squared error / 2."""
    from bbb.distributions import ScaleMixturePrior

    ctx, edible = _tiny_data()
    cfg = _tiny_cfg(agents=(agent,), seeds=(0, 1), noise_sigma=2.0, prior=prior, prior_sigma=0.7,
                    pi=0.3, sigma1=1.0, sigma2=0.05, sigma_init=0.1, kl_scale=0.5)
    pop = Population(cfg, [(agent, 0), (agent, 1)], ctx, edible)
    pop._ensure_env(20)
    cfg.updates_per_step = 0
    for t in range(12):
        pop._act_and_learn(t)
    sp = pop.subpops[0][1]
    p, s = sp.size, sp.layout.size
    idx = torch.randint(0, 12, (p, cfg.batch_size))
    eps = torch.randn(p, s) if sp.bayesian else None
    sp.compute_grads(idx, eps, 12)
    mu = sp.mu.detach().clone().requires_grad_()
    x = sp.xbuf[torch.arange(p)[:, None], idx]
    y = sp.rbuf.gather(1, idx)
    if sp.bayesian:
        log_sigma = sp.log_sigma.detach().clone().requires_grad_()
        w = mu + log_sigma.exp() * eps
    else:
        w = mu
    f = _autograd_forward(sp.layout, w, x).squeeze(-1)
    if sp.bayesian:
        nll = ((f - y) ** 2 / (2 * cfg.noise_sigma**2)).mean(1).sum()
        sig = log_sigma.exp()
        if prior == "gaussian":
            s0 = cfg.prior_sigma
            kl = (0.5 * ((sig / s0) ** 2 + (mu / s0) ** 2) - torch.log(sig / s0) - 0.5).sum()
            torch.testing.assert_close(sp.kl(), (0.5 * ((sig / s0) ** 2 + (mu / s0) ** 2)
                                                 - torch.log(sig / s0) - 0.5).sum(1).detach())
        else:
            log_q = -log_sigma - 0.5 * math.log(2 * math.pi) - 0.5 * eps * eps
            kl = (log_q - ScaleMixturePrior(0.3, 1.0, 0.05).log_prob(w)).sum()
            assert torch.isfinite(sp.kl()).all()
        (nll + 0.5 * kl / 12).backward()
        torch.testing.assert_close(sp.log_sigma.grad, log_sigma.grad, rtol=1e-4, atol=1e-6)
    else:
        (0.5 * (f - y) ** 2).mean(1).sum().backward()
    torch.testing.assert_close(sp.mu.grad, mu.grad, rtol=1e-4, atol=1e-6)


def test_kl_data_size_modes():
    ctx, edible = _tiny_data()
    sizes = {}
    for mode in ("fill", "capacity", "seen"):
        pop = Population(_tiny_cfg(kl_data=mode), [("bbb", 0)], ctx, edible)
        sizes[mode] = [pop.kl_data_size(t) for t in (1, 10, 32, 100)]
    assert sizes == {"fill": [1, 10, 32, 32], "capacity": [32] * 4, "seen": [1, 10, 32, 100]}


# --------------------------------------------------------------------------------------------
# Population independence
# --------------------------------------------------------------------------------------------


def test_batched_population_equals_members_run_alone():
    ctx, edible = _tiny_data()
    members = [("bbb", 0), ("greedy", 1), ("egreedy_0.05", 2), ("bbb", 3)]
    cfg = _tiny_cfg(agents=("bbb", "greedy", "egreedy_0.05"), seeds=(0, 1, 2, 3))
    full = Population(cfg, members, ctx, edible)
    full._ensure_env(40)
    cfg.updates_per_step = 0
    for t in range(20):  # fill the buffers by acting
        full._act_and_learn(t)
    g = torch.Generator().manual_seed(0)
    idx = [torch.randint(0, 20, (4, cfg.batch_size), generator=g) for _ in range(4)]
    eps = [torch.randn(2, full.layout.size, generator=g) for _ in range(4)]
    alone = []
    for j, (agent, seed) in enumerate(members):
        # the member on its own, with its buffer, minibatches and noise from the population
        sp, k = full.member_slot(j)
        pop1 = Population(cfg, [(agent, seed)], ctx, edible)
        sp1 = pop1.subpops[0][1]
        sp1.xbuf.copy_(sp.xbuf[k:k + 1])
        sp1.rbuf.copy_(sp.rbuf[k:k + 1])
        torch.testing.assert_close(sp1.mu, sp.mu[k:k + 1])
        for u in range(4):
            pop1.update(20, idx=idx[u][j:j + 1], eps=eps[u][k:k + 1] if sp.bayesian else None)
        alone.append(sp1)
    for u in range(4):
        full.update(20, idx=idx[u], eps=eps[u])
    for j in range(len(members)):
        sp, k = full.member_slot(j)
        torch.testing.assert_close(sp.mu[k:k + 1], alone[j].mu, rtol=1e-5, atol=1e-6)
        if sp.bayesian:
            torch.testing.assert_close(sp.log_sigma[k:k + 1], alone[j].log_sigma, rtol=1e-5, atol=1e-6)
        assert not torch.equal(sp.mu[k:k + 1], Population(cfg, [members[j]], ctx, edible).subpops[0][1].mu)


def test_initial_weights_depend_on_the_seed_only():
    ctx, edible = _tiny_data()
    cfg = _tiny_cfg()
    pop = Population(cfg, [("bbb", 0), ("greedy", 0), ("greedy", 1)], ctx, edible)
    det = pop.subpops[0][1]
    bbb = pop.subpops[1][1]
    assert torch.equal(det.mu[0], bbb.mu[0])
    assert not torch.equal(det.mu[0], det.mu[1])


# --------------------------------------------------------------------------------------------
# End to end
# --------------------------------------------------------------------------------------------


def _read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_tiny_run_writes_files_with_the_right_columns_and_resumes(tmp_path):
    ctx, edible = _tiny_data()
    out = tmp_path / "bandit"
    res = run_bandit(_tiny_cfg(out=str(out)), contexts=ctx, edible=edible)
    assert set(res["files"]) >= {"regret.csv", "summary.csv", "regret.png", "config.json"}
    rows = _read_csv(out / "regret.csv")
    assert list(rows[0]) == B.REGRET_COLUMNS
    assert len(rows) == 3 * 4 * 2  # log points x agents x seeds
    assert {r["agent"] for r in rows} == {"bbb", "greedy", "egreedy_0.01", "egreedy_0.05"}
    assert {int(r["step"]) for r in rows} == {40, 80, 120}
    summary = _read_csv(out / "summary.csv")
    assert list(summary[0]) == B.SUMMARY_COLUMNS
    assert [s["agent"] for s in summary] == ["bbb", "greedy", "egreedy_0.01", "egreedy_0.05"]
    assert all(int(s["steps"]) == 120 and int(s["seeds"]) == 2 for s in summary)
    final = {(r["agent"], r["seed"]): float(r["cumulative_regret"]) for r in rows if r["step"] == "120"}
    for s in summary:
        vals = [v for (a, _), v in final.items() if a == s["agent"]]
        assert float(s["final_regret_mean"]) == pytest.approx(sum(vals) / 2, rel=1e-4)
    assert json.loads((out / "config.json").read_text())["steps"] == 120
    assert (out / "checkpoint" / "worker0.pt").exists()

    # a longer run in the same folder continues from the checkpoint
    res2 = run_bandit(_tiny_cfg(out=str(out), steps=160), contexts=ctx, edible=edible)
    rows2 = _read_csv(out / "regret.csv")
    assert {int(r["step"]) for r in rows2} == {40, 80, 120, 160}
    assert [r for r in rows2 if int(r["step"]) <= 120] == rows
    assert res2["summary"][0]["steps"] == 160

    # other settings in the same folder: a one-line user error
    with pytest.raises(UserError, match="other settings"):
        run_bandit(_tiny_cfg(out=str(out), steps=200, lr=0.5), contexts=ctx, edible=edible)


def test_a_stopped_population_saves_and_resumes_where_it_stopped(tmp_path):
    """A worker whose parent died (``stop`` answers True) checkpoints and returns False."""
    ctx, edible = _tiny_data()
    cfg = _tiny_cfg(steps=60, agents=("bbb", "greedy"), seeds=(0,))
    members = [("bbb", 0), ("greedy", 0)]
    ck = tmp_path / "w.pt"
    calls = iter(range(100))
    pop = Population(cfg, members, ctx, edible)
    assert pop.run(60, ck, stop=lambda: next(calls) >= 25) is False
    assert pop.step == 25 and ck.exists()
    resumed = Population(cfg, members, ctx, edible)
    assert resumed.load(ck) and resumed.step == 25
    assert resumed.run(60, ck) is True
    whole = Population(cfg, members, ctx, edible)
    whole.run(60)
    torch.testing.assert_close(resumed.cum_regret, whole.cum_regret)


def test_bbb_members_can_have_their_own_optimiser(tmp_path):
    ctx, edible = _tiny_data()
    cfg = _tiny_cfg(agents=("bbb", "greedy"), seeds=(0,), bbb_optimizer="sgd", bbb_lr=0.05)
    pop = Population(cfg, [("bbb", 0), ("greedy", 0)], ctx, edible)
    pop._ensure_env(20)
    cfg.updates_per_step = 0
    for t in range(12):
        pop._act_and_learn(t)
    det, bay = pop.subpops[0][1], pop.subpops[1][1]
    assert [type(o).__name__ for o in pop.opts] == ["FlatAdam", "FlatSGD"]
    mu0, ls0, det0 = bay.mu.clone(), bay.log_sigma.clone(), det.mu.clone()
    idx = torch.randint(0, 12, (2, cfg.batch_size))
    eps = torch.randn(1, bay.layout.size)
    pop.update(12, idx=idx, eps=eps)
    # plain SGD on the BBB member: a step of exactly -lr * grad
    torch.testing.assert_close(bay.mu, mu0 - 0.05 * bay.mu.grad)
    torch.testing.assert_close(bay.log_sigma, ls0 - 0.05 * bay.log_sigma.grad)
    # Adam (lr 1e-3) on the greedy member: the first step moves each weight by about lr
    moved = (det.mu - det0).abs()
    assert moved.max() <= 1.01e-3 and moved.max() > 0.9e-3
    ck = tmp_path / "w.pt"
    pop.save(ck)
    again = Population(cfg, [("bbb", 0), ("greedy", 0)], ctx, edible)
    assert again.load(ck)
    with pytest.raises(UserError, match="bbb-optimizer"):
        _tiny_cfg(bbb_optimizer="rmsprop").validate()


def test_checkpoints_from_before_the_optimiser_options_still_resume(tmp_path):
    ctx, edible = _tiny_data()
    cfg = _tiny_cfg(agents=("bbb",), seeds=(0,), steps=20)
    pop = Population(cfg, [("bbb", 0)], ctx, edible)
    pop.run(20)
    st = pop.state()
    for k in ("bbb_optimizer", "bbb_lr"):
        del st["key"][k]
    del st["opts_extra"]
    ck = tmp_path / "old.pt"
    torch.save(st, ck)
    again = Population(cfg, [("bbb", 0)], ctx, edible)
    assert again.load(ck) and again.step == 20
    with pytest.raises(UserError, match="other settings"):
        Population(_tiny_cfg(agents=("bbb",), seeds=(0,), steps=20, bbb_optimizer="sgd"),
                   [("bbb", 0)], ctx, edible).load(ck)


def test_two_workers_run_and_merge(tmp_path):
    ctx, edible = _tiny_data()
    res = run_bandit(_tiny_cfg(out=str(tmp_path), workers=2, steps=40), contexts=ctx, edible=edible)
    assert len(res["regret_rows"]) == 1 * 4 * 2
    assert len(res["summary"]) == 4


def test_plot_regret_handles_zero_regret(tmp_path):
    rows = [{"step": s, "agent": "bbb", "seed": 0, "cumulative_regret": 0.0,
             "cumulative_expected_regret": 0.0} for s in (1, 2)]
    assert B.plot_regret(rows, tmp_path / "r.png").stat().st_size > 0


# --------------------------------------------------------------------------------------------
# User errors
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["thompson", "egreedy_2", "egreedy_x", ""])
def test_bad_agent_names(name):
    with pytest.raises(UserError):
        parse_agent(name)


def test_agent_names():
    assert parse_agent("BBB").bayesian
    assert parse_agent("egreedy_0.05").epsilon == 0.05
    assert not parse_agent("greedy").bayesian


@pytest.mark.parametrize("kw", [dict(steps=0), dict(seeds=(0, 0)), dict(seeds=()), dict(lr=-1.0),
                                dict(batch_size=0), dict(buffer=0), dict(hidden=()), dict(agents=("bbb", "bbb")),
                                dict(noise_sigma=0.0), dict(seeds=(-1,)), dict(device="tpu"),
                                dict(prior="laplace"), dict(pi=1.0), dict(kl_data="all"), dict(kl_scale=0.0)])
def test_bad_settings_raise_user_error(kw):
    ctx, edible = _tiny_data()
    with pytest.raises(UserError):
        run_bandit(_tiny_cfg(**kw), contexts=ctx, edible=edible)


def test_bad_data_raises_user_error():
    ctx, edible = _tiny_data()
    with pytest.raises(UserError):
        Population(_tiny_cfg(), [("bbb", 0)], ctx, edible[:-1])


def test_cli_parser_and_errors(tmp_path, capsys, monkeypatch):
    import argparse

    parser = argparse.ArgumentParser()
    B.add_arguments(parser)
    assert "Example" in (parser.epilog or "")
    args = parser.parse_args(["--out", str(tmp_path), "--seed", "3", "--steps", "5", "--quiet",
                              "--data-dir", str(tmp_path), "--device", "cpu"])
    cfg = B.config_from_args(args)
    assert cfg.seeds == (3,) and cfg.steps == 5 and cfg.quiet and cfg.data_dir == str(tmp_path)
    cli = pytest.importorskip("bbb.cli")
    rc = cli.main(["bandit", "--out", str(tmp_path / "x"), "--steps", "0"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "steps" in err[0]
    # a data problem is a one-line error too
    import bbb.data
    from bbb.errors import DataError

    def missing(*a, **k):
        raise DataError("mushroom/agaricus-lepiota.data not found")

    monkeypatch.setattr(bbb.data, "load_mushroom", missing)
    rc = cli.main(["bandit", "--out", str(tmp_path / "y"), "--steps", "3"])
    assert rc == 2
    assert "agaricus" in capsys.readouterr().err
