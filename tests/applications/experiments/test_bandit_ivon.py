"""The bandit's ``ivon`` agent: Thompson sampling from the posterior that BBB's free energy targets,
learned by bbb.IVON. Its update is IVON's on the unscaled negative log-likelihood (the scaling of
its loss by noise_sigma^2 changes units, not numbers), its sigma follows the data seen, its
decisions draw from that posterior, a stopped run resumes exactly, and settings it cannot honour
are one-line errors. Small synthetic data only."""

from __future__ import annotations

import argparse

import pytest
import torch

from bbb import IVON
from bbb.distributions import softplus
from bbb.errors import UserError
from bbb.experiments.bandit import Population, figure6_marks
from bbb.experiments.bandit.command import add_arguments, config_from_args
from bbb.experiments.bandit.config import IVON_BETA1, IVON_BETA2
from bbb.nn import BayesPopulation, OneHot
from testkit import filled_bandit_population, stopped_and_uninterrupted_bandit, tiny_bandit_config, tiny_mushrooms


def test_ivon_members_come_last_start_from_their_seeds_network_and_their_sigma_follows_the_data():
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(agents=("ivon", "bbb", "greedy"), seeds=(0, 1), noise_sigma=0.05, ivon_beta=0.5,
                             kl_scale=2.0, prior_sigma=0.7, ivon_hess_init=0.02)  # kl_scale: BBB's, not IVON's
    pop = Population(cfg, [("ivon", 0), ("bbb", 0), ("greedy", 1), ("ivon", 1)], ctx, edible)
    assert pop.pairs == [("bbb", 0), ("greedy", 1), ("ivon", 0), ("ivon", 1)]
    first = pop.ivon_net.bayes[0]
    assert torch.equal(first.weight_mu[0], pop.net.bayes[0].weight_mu[0])  # seed 0's starting network
    assert torch.equal(first.weight_mu[1], pop.net.det[0].weight[0])  # seed 1's
    # ess and weight decay: ess * wd is the prior's precision; sigma from hess_init at one interaction
    for n in (1, 7, 300):
        assert pop.ivon_ess(n) * pop.ivon_weight_decay(n) == pytest.approx(1 / 0.7**2)
        assert pop.ivon_ess(n) == pytest.approx(n / (0.5 * 0.05**2))
    start = (pop.ivon_ess(1) * (0.02 + pop.ivon_weight_decay(1))) ** -0.5
    torch.testing.assert_close(softplus(first.weight_rho), torch.full_like(first.weight_rho, start))
    pop._ensure_env(cfg.steps)
    for t in range(30):
        pop._act_and_learn(t)
    n = pop.kl_data_size(30)
    for layer in pop.ivon_net.bayes:
        for name in ("weight", "bias"):
            h = pop.ivon.state[layer.mu(name)]["hess"]
            want = torch.rsqrt(pop.ivon_ess(n) * (h + pop.ivon_weight_decay(n)))
            torch.testing.assert_close(softplus(layer.rho(name)), want, rtol=1e-5, atol=0)
    assert not torch.equal(first.weight_mu[0], pop.net.bayes[0].weight_mu[0])  # trained


def test_an_ivon_member_updates_as_ivon_on_the_unscaled_negative_log_likelihood():
    """The agent's IVON sees noise_sigma^2 times the NLL with ess N / (beta noise^2), weight decay
    beta noise^2 / (prior_sigma^2 N) and hess_init h0: the same steps as IVON on the NLL itself
    with ess N / beta, weight decay beta / (prior_sigma^2 N), hess_init h0 / noise^2 and lr times
    noise^2 (its rescaled step lr (hess_init + wd) unchanged), drawing the same noise."""
    ctx, edible = tiny_mushrooms()
    sigma, beta, ps, h0, lr = 0.05, 0.5, 0.7, 0.02, 0.2
    cfg = tiny_bandit_config(agents=("ivon",), seeds=(0, 1), noise_sigma=sigma, ivon_beta=beta, prior_sigma=ps,
                             ivon_hess_init=h0, ivon_lr=lr, updates_per_step=3)
    pop = filled_bandit_population(cfg, [("ivon", 0), ("ivon", 1)], ctx, edible)
    ref = BayesPopulation(pop.num_features, cfg.hidden, 1, bayesian=2)
    ref.load_state_dict(pop.ivon_net.state_dict())
    opt = IVON(ref, lr=lr * sigma**2, ess=1 / beta, hess_init=h0 / sigma**2, weight_decay=beta / ps**2,
               beta1=IVON_BETA1, beta2=IVON_BETA2, seed=pop.noise_seed + 2)
    torch.testing.assert_close(ref.bayes[0].weight_rho, pop.ivon_net.bayes[0].weight_rho)
    g = torch.Generator().manual_seed(0)
    rows = torch.arange(2).unsqueeze(1)
    for u in range(6):
        idx = torch.randint(0, 20, (2, cfg.batch_size), generator=g)
        num_data = 20 + u
        pop.update(20, num_data, u % 3, idx=idx)
        x = OneHot(pop.buf_index[rows, idx], pop.num_features).to_dense()
        y = pop.buf_reward[rows, idx].unsqueeze(-1)
        opt.param_groups[0].update(ess=num_data / beta, weight_decay=beta / (ps**2 * num_data))
        with opt.sampling():
            out = ref(x)
        loss = (out - y).square().sum(-1).div(2 * sigma**2).mean(-1).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    for (name, a), b in zip(pop.ivon_net.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.detach().clone(), b.detach().clone(), rtol=1e-4, atol=1e-6, msg=name)


def test_ivon_decisions_draw_networks_from_its_posterior():
    """Each step draws its own networks (the same ones when asked again); with sigma near 0 the
    value is the posterior mean's prediction."""
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(agents=("ivon", "greedy"), seeds=(0,), decision_samples=1, ivon_hess_init=1e-4)
    pop = Population(cfg, [("greedy", 0), ("ivon", 0)], ctx, edible)
    pop._ensure_env(10)
    x = pop.inputs(pop.env_idx[pop._member_seed_pos, 0])
    a, b, c = pop.values(x, 3), pop.values(x, 3), pop.values(x, 4)
    assert torch.equal(a, b)
    assert torch.equal(a[0], c[0])  # the greedy member: no noise
    assert not torch.allclose(a[1], c[1])
    with torch.no_grad():
        for layer in pop.ivon_net.bayes:
            layer.weight_rho.fill_(-40.0)
            layer.bias_rho.fill_(-40.0)
        pop.ivon_net.eval()  # the means
        mean = pop.ivon_net(x.to_dense()[1:])[..., 0]  # the IVON member's rows: (1, actions)
        pop.ivon_net.train()
    torch.testing.assert_close(pop.values(x, 5)[1:], mean, rtol=1e-5, atol=1e-5)


def test_a_stopped_run_with_an_ivon_agent_resumes_exactly(tmp_path):
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(steps=50, agents=("bbb", "ivon", "greedy"), seeds=(0,), noise_sigma=0.1, lr=0.01)
    members = [("bbb", 0), ("ivon", 0), ("greedy", 0)]
    resumed, whole = stopped_and_uninterrupted_bandit(cfg, members, ctx, edible, tmp_path / "w.pt", 50, 20)
    assert torch.equal(resumed.cum_regret, whole.cum_regret)
    for net_a, net_b in ((resumed.net, whole.net), (resumed.ivon_net, whole.ivon_net)):
        for a, b in zip(net_a.parameters(), net_b.parameters()):
            assert torch.equal(a, b)
    # IVON alone (no BBB or deterministic member) runs and resumes too
    alone = tiny_bandit_config(steps=30, agents=("ivon",), seeds=(0, 1))
    pop = Population(alone, [("ivon", 0), ("ivon", 1)], ctx, edible)
    assert pop.net is None and pop.run(30, tmp_path / "a.pt") is True
    again = Population(alone, [("ivon", 0), ("ivon", 1)], ctx, edible)
    assert again.load(tmp_path / "a.pt") and torch.equal(again.cum_regret, pop.cum_regret)


@pytest.mark.parametrize("change,message", [
    ({"prior": "mixture"}, "--prior gaussian"),
    ({"kl_warmup": 5}, "--kl-warmup"),
    ({"estimator": "local"}, "BBB agents only"),
])
def test_settings_the_ivon_agent_cannot_honour_are_one_line_errors(change, message):
    with pytest.raises(UserError, match=message):
        tiny_bandit_config(agents=("bbb", "ivon"), **change).validate()


def test_ivon_settings_without_an_ivon_agent_are_refused_and_the_command_line_passes_them():
    with pytest.raises(UserError, match="ivon"):
        tiny_bandit_config(agents=("bbb",), ivon_lr=0.3).validate()
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = config_from_args(parser.parse_args(["--out", "x", "--agents", "ivon", "greedy", "--ivon-lr", "0.3",
                                              "--ivon-hess-init", "0.001", "--ivon-beta", "100", "--ivon-clip", "2"]))
    assert (cfg.ivon_lr, cfg.ivon_hess_init, cfg.ivon_beta, cfg.ivon_clip) == (0.3, 0.001, 100.0, 2.0)
    cfg.validate()
    assert cfg.training_key()["ivon_lr"] == 0.3


def test_figure6_marks_are_the_papers_agents_only():
    row = {"steps": 100, "eat_rate_first_1000": 0.5, "expected_regret_per_step_late": 0.1}
    summary = [{"agent": "bbb", "final_regret_mean": 10.0, **row},
               {"agent": "greedy", "final_regret_mean": 20.0, **row},
               {"agent": "ivon", "final_regret_mean": 5.0, **row}]
    marks = {m["mark"]: m for m in figure6_marks(summary, [], 0.5)}
    lowest = marks["BBB has the lowest mean realised regret"]
    assert lowest["holds"] and "ivon" not in lowest["measured"]


def test_a_diverged_ivon_agent_names_its_own_settings():
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(steps=40, agents=("ivon", "greedy"), seeds=(0,), ivon_lr=1e6, log_every=10)
    pop = Population(cfg, [("greedy", 0), ("ivon", 0)], ctx, edible)
    with pytest.raises(UserError, match=r"ivon agent's training diverged by step 10 .*lower --ivon-lr"):
        pop.run(40)


def test_a_negative_hessian_estimate_cannot_undo_sigma_as_the_weight_decay_falls():
    """IVON keeps h + wd > 0 at its step's wd; the agent's wd falls with N. A state whose h sits
    just above -wd(1) (noisy estimates can take it there) would give h + wd(N) < 0 later: h is
    kept at or above 0 before each step, and every sigma stays finite (at most sqrt(2) times the
    prior's sd: the step's h + wd is at least half of the clamped one's)."""
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(agents=("ivon",), seeds=(0,), prior_sigma=0.7, updates_per_step=1)
    pop = filled_bandit_population(cfg, [("ivon", 0)], ctx, edible)
    with torch.no_grad():
        for state in pop.ivon.state.values():
            state["hess"].fill_(-0.9 * pop.ivon_weight_decay(1))
    pop.update(20, 1000, 0)
    for layer in pop.ivon_net.bayes:
        sigma = softplus(layer.weight_rho.detach())
        assert bool(torch.isfinite(sigma).all()) and float(sigma.max()) <= 0.7 * 2**0.5 + 1e-6


def test_the_clip_bounds_every_step_of_the_means():
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(agents=("ivon",), seeds=(0,), ivon_lr=0.5, ivon_hess_init=0.01, ivon_clip=0.2,
                             updates_per_step=1)
    pop = filled_bandit_population(cfg, [("ivon", 0)], ctx, edible)
    assert pop.ivon.param_groups[0]["clip_radius"] == 0.2
    for u in range(5):
        before = [p.detach().clone() for p in pop.ivon_net.parameters()][::2]  # the means
        pop.update(20, 20 + u, 0)
        bound = 0.5 * (0.01 + pop.ivon_weight_decay(20 + u)) * 0.2
        for b, a in zip(before, list(pop.ivon_net.parameters())[::2]):
            assert float((a.detach() - b).abs().max()) <= bound + 1e-7  # float32 rounding of the subtraction
    with pytest.raises(UserError, match="ivon_clip"):
        tiny_bandit_config(agents=("ivon",), ivon_clip=0.0).validate()


@pytest.mark.parametrize("agents,change,flag", [
    (("greedy",), {"sigma_init": 0.1}, "sigma_init"),      # BBB's, with no BBB agent
    (("ivon",), {"lr": 0.01}, "lr"),                       # Adam's: the ivon agent reads --ivon-lr
    (("ivon", "greedy"), {"kl_scale": 2.0}, "kl_scale"),   # BBB's temperature: IVON's is ivon_beta
    (("bbb",), {"weight_decay": 0.1}, "weight_decay"),     # the deterministic agents' penalty
])
def test_a_setting_no_agent_of_the_run_reads_is_refused(agents, change, flag):
    with pytest.raises(UserError, match=f"{flag} applies to the .* agents, and this run has none"):
        tiny_bandit_config(agents=agents, **change).validate()
    tiny_bandit_config(agents=("bbb", "greedy", "ivon"), **change).validate()  # read by one of them: accepted
