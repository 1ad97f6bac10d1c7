"""The bandit's recipe options beyond the paper's: the heteroscedastic reward likelihood, the
local reparameterisation estimator (decisions still draw whole networks) and the KL warm-up."""

from __future__ import annotations

import json

import pytest
import torch

from bbb.errors import UserError
from bbb.experiments.bandit import BanditConfig, Population, run_bandit
from bbb.nn import BayesPopulation, sampling
from testkit import tiny_bandit_config, tiny_mushrooms


@pytest.mark.parametrize("kw, match", [
    (dict(estimator="flipout"), "not flipout"),
    (dict(estimator="nope"), "unknown estimator"),
    (dict(estimator="local", agents=("bbb", "greedy")), "BBB agents only"),
    (dict(likelihood="student"), "unknown likelihood"),
    (dict(kl_warmup=-1), "kl_warmup"),
])
def test_bad_recipe_options_are_one_line_errors(kw, match):
    with pytest.raises(UserError, match=match):
        BanditConfig(**kw).validate()


def test_new_options_leave_the_checkpoint_key_of_the_defaults_unchanged():
    """A checkpoint written before these options existed still resumes: at their defaults they are
    not part of the key; set, they are."""
    key = BanditConfig().training_key()
    assert not {"estimator", "likelihood", "kl_warmup"} & set(key)
    changed = BanditConfig(estimator="local", agents=("bbb",), likelihood="heteroscedastic", kl_warmup=5)
    assert {"estimator": "local", "likelihood": "heteroscedastic", "kl_warmup": 5}.items() <= \
        changed.training_key().items()


def test_forward_weights_draws_whole_networks_for_the_local_estimator():
    """Under the local estimator forward() draws pre-activations per row, so two identical rows get
    different outputs; forward_weights() draws one network per member and sample: identical rows
    agree, and in mean mode both equal the deterministic forward."""
    torch.manual_seed(0)
    pop = BayesPopulation(5, [7], 1, bayesian=2, estimator="local")
    x = torch.randn(2, 1, 5).expand(2, 4, 5).contiguous()
    with sampling(pop):
        per_row = pop(x)
        whole = pop.forward_weights(x, num_samples=3)
    assert not torch.allclose(per_row[:, 0], per_row[:, 1])
    assert whole.shape == (3, 2, 4, 1)
    assert torch.allclose(whole[:, :, :1].expand_as(whole), whole)
    assert not torch.allclose(whole[0], whole[1])
    pop.eval()
    assert torch.equal(pop.forward_weights(x), pop(x))


def test_local_estimator_decides_reproducibly_and_resumes_exactly(tmp_path):
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(steps=40, agents=("bbb",), seeds=(0, 1), estimator="local")
    members = [("bbb", 0), ("bbb", 1)]
    pop = Population(cfg, members, ctx, edible)
    assert pop.net.local and not pop.engine.fused
    pop._ensure_env(40)
    x = pop.inputs(pop.env_idx[pop._member_seed_pos, 0])
    assert torch.equal(pop.values(x, 3), pop.values(x, 3))  # the decision noise is the step's
    assert not torch.equal(pop.values(x, 3), pop.values(x, 4))
    ck = tmp_path / "w.pt"
    calls = iter(range(100))
    assert pop.run(40, ck, stop=lambda: next(calls) >= 15) is False
    resumed = Population(cfg, members, ctx, edible)
    torch.manual_seed(123)  # the global stream is the checkpoint's, not whatever ran in between
    assert resumed.load(ck) and resumed.run(40, ck) is True
    whole = Population(cfg, members, ctx, edible)
    whole.run(40)
    assert torch.equal(resumed.cum_regret, whole.cum_regret)
    for a, b in zip(resumed.net.parameters(), whole.net.parameters()):
        assert torch.equal(a, b)
    first = [p.detach().clone() for p in Population(cfg, members, ctx, edible).net.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(first, whole.net.parameters()))  # it trained


def test_heteroscedastic_likelihood_learns_a_larger_noise_where_rewards_are_noisy():
    """Every agent gets the second (noise) output; the decision reads the mean; after training on
    one input whose rewards alternate +5 / -35 and one that always pays 0, the predicted noise of
    the first is far above the second's (floored at noise_sigma)."""
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(agents=("bbb", "greedy"), seeds=(0,), likelihood="heteroscedastic", lr=0.01,
                             buffer=64, batch_size=32)
    pop = Population(cfg, [("bbb", 0), ("greedy", 0)], ctx, edible)
    assert pop.net.sizes[-1] == 2
    rows = pop.inputs(torch.tensor([0, 0]))  # (P, actions, K): mushroom 0 with both actions
    noisy, quiet = rows.index[:, 1], rows.index[:, 0]  # eat, pass
    for pos in range(64):
        pop.buf_index[:, pos] = noisy if pos % 2 else quiet
        pop.buf_reward[:, pos] = (5.0 if pos % 4 == 1 else -35.0) if pos % 2 else 0.0
        if pop.buf_dense is not None:
            pop.buf_dense[:, pos] = pop._rows(pop.buf_index[:, pos], None).to_dense()
    for _ in range(300):
        pop.update(64, 64)
    pop.net.eval()
    with torch.no_grad():
        out = pop.net(rows if pop.buf_dense is None else rows.to_dense())
    mean, sigma = pop.elbo.likelihood.split(out)
    assert torch.all(sigma[:, 1] > 5.0) and torch.all(sigma[:, 0] < 1.0)
    assert torch.allclose(mean[:, 1], torch.full((2,), -15.0), atol=4.0)
    assert pop.values(rows, 0).shape == (2, 2)


def test_kl_warmup_switches_the_kl_on_after_its_interactions():
    """The updates of the first kl_warmup interactions get KL coefficient 0, the later ones the
    usual weight."""
    ctx, edible = tiny_mushrooms()
    cfg = tiny_bandit_config(steps=6, agents=("bbb",), seeds=(0,), kl_warmup=3)
    pop = Population(cfg, [("bbb", 0)], ctx, edible)
    coefs: list[float] = []
    real = pop.elbo

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def __call__(self, x, y, kl_weight):
            coefs.append(float(kl_weight))
            return real(x, y, kl_weight=kl_weight)

    pop.elbo = Spy()  # type: ignore[assignment]
    pop.run(6)
    per = cfg.updates_per_step
    assert coefs[:3 * per] == [0.0] * (3 * per) and all(c > 0 for c in coefs[3 * per:])


def test_a_run_with_the_new_recipe_writes_it_into_config_json(tmp_path):
    ctx, edible = tiny_mushrooms()
    out = tmp_path / "run"
    cfg = tiny_bandit_config(steps=20, agents=("bbb", "greedy"), seeds=(0,), likelihood="heteroscedastic",
                             kl_warmup=4, out=str(out))
    run_bandit(cfg, contexts=ctx, edible=edible)
    meta = json.loads((out / "config.json").read_text())
    assert meta["likelihood"] == "heteroscedastic" and meta["kl_warmup"] == 4 and meta["estimator"] == "reparam"


def test_the_choices_are_enum_members_and_files_hold_their_strings(tmp_path):
    """String or member in, member held; the checkpoint key and config.json hold the strings, and
    the committed results/bandit/config.json loads to a config that writes its values back."""
    from dataclasses import asdict, fields
    from pathlib import Path

    from bbb.elbo import KLWeighting
    from bbb.engine.engine import OptimizerKind
    from bbb.experiments.bandit.config import BanditLikelihood, KLData
    from bbb.nn.base import Estimator
    from bbb.options import PriorKind

    members = dict(optimizer=OptimizerKind.SGD, prior=PriorKind.MIXTURE, kl_data=KLData.BUFFER,
                   kl_weighting=KLWeighting.UNIFORM, estimator=Estimator.LOCAL,
                   likelihood=BanditLikelihood.HETEROSCEDASTIC)
    a = BanditConfig(agents=("bbb",), **members)
    b = BanditConfig(agents=("bbb",), **{k: v.value for k, v in members.items()})
    assert a == b and all(getattr(b, k) is v for k, v in members.items())
    assert all(type(v) is not str or k == "device" for k, v in vars(BanditConfig()).items()
               if k in members)
    key = b.training_key()
    assert all(type(key[k]) is str for k in members if k in key)
    torch.save(key, tmp_path / "k.pt")
    assert torch.load(tmp_path / "k.pt", weights_only=True) == key  # a checkpoint stays loadable
    committed = json.loads((Path(__file__).resolve().parents[3] / "results/bandit/config.json").read_text())
    names = {f.name for f in fields(BanditConfig)}
    cfg = BanditConfig(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in committed.items() if k in names})
    back = json.loads(json.dumps(asdict(cfg)))
    assert {k: back[k] for k in committed if k in names} == {k: committed[k] for k in committed if k in names}
    with pytest.raises(UserError, match="unknown kl-data 'nope'"):
        BanditConfig(kl_data="nope")
