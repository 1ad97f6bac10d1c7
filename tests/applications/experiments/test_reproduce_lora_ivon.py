"""``bbb reproduce lora --methods ivon``: A and B Bayesian and trained by bbb.IVON (every parameter
the harness trains, the head's adapters included), its (lr, ess) grid chosen on the held-out slice,
its predictive sampled as BBB's; the labels of the other methods' settings unchanged."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from bbb.experiments.lora.backbones import TaskData, build_backbone  # noqa: E402
from bbb.experiments.lora.settings import (  # noqa: E402
    BBB_GRID,
    IVON_GRID,
    IVON_HESS_INIT,
    SCHEDULES,
    Arch,
    LoraBudget,
    LoraMethod,
    Phase,
    Setting,
    Task,
    grid_of,
)
from bbb.experiments.lora.train import Job, _lora_model, predictive_logits, run_job  # noqa: E402
from bbb.ivon import IVON  # noqa: E402
from bbb.nn.base import BayesModule, Estimator  # noqa: E402
from bbb.nn.model import bayes_modules  # noqa: E402


@pytest.mark.parametrize("arch", list(Arch))
def test_ivon_makes_every_trained_parameter_bayesian_a_and_b(arch):
    """IVON trains Bayesian weights only: for each backbone the harness's trainable parameters (the
    adapters of every target, the head's included: peft freezes the head's own weights) are all
    A's and B's posteriors, with the reparameterisation estimator, so IVON takes the model whole."""
    model = _lora_model(build_backbone(arch), LoraMethod.IVON, 4, 8, 0, IVON_GRID[0])
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(n.endswith(("weight_mu", "weight_rho")) for n in trainable)
    assert {"lora_A", "lora_B"} <= {part for n in trainable for part in n.split(".")}
    assert any(".head." in n or ".classifier." in n for n in trainable)  # the head's adapters train as in bbb_ab
    layers = list(bayes_modules(model))
    assert layers and all(isinstance(m, BayesModule) and m.estimator is Estimator.REPARAM for m in layers)
    IVON(model, lr=0.03, ess=1e6)  # refuses a trainable parameter that is not Bayesian: none here


def test_ivon_grid_is_lr_by_ess_and_the_other_labels_are_kept():
    assert grid_of(LoraMethod.IVON) == IVON_GRID and len({s.label() for s in IVON_GRID}) == len(IVON_GRID) > 1
    assert {s.lr for s in IVON_GRID} == {0.03, 0.1} and all(s.ess >= 1e6 for s in IVON_GRID)  # cold, as published
    assert Setting(lr=0.03, ess=1e6).label() == "lr=0.03 ess=1e+06"
    assert Setting(lr=0.03, ess=1e6).record() == {"kl_weight": 0.0, "prior_sigma": 0.0, "lr": 0.03, "ess": 1e6}
    # the keys of results stored before IVON: a resumed run finds its finished jobs
    assert [s.label() for s in BBB_GRID] == ["kl=0.1 prior=0.05", "kl=0.1 prior=0.2", "kl=0.01 prior=0.05",
                                             "kl=0.01 prior=0.2"]
    assert Setting(0.0, 0.2).record() == {"kl_weight": 0.0, "prior_sigma": 0.2} and Setting().label() == "-"


def _data(per_class: int = 6) -> TaskData:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(5).repeat_interleave(per_class)
    x = torch.randn(len(y), 32 * 7 * 7, generator=g) + 2.0 * torch.nn.functional.one_hot(y, 32 * 7 * 7).float()
    return TaskData(pool=x, pool_y=y, test=x[:10], test_y=y[:10], ood={"mnist0-4": x[10:20]})


def test_ivon_job_trains_the_posterior_and_samples_it(monkeypatch):
    """A job trains with IVON (its step runs, the means and sigmas move from their start) at each
    grid point, and the predictive is TEST_SAMPLES draws of the adapters, with the mean beside it."""
    steps = []
    real_step = IVON.step

    def counted(self, closure=None):
        steps.append(self.param_groups[0]["lr"])
        return real_step(self, closure)

    monkeypatch.setattr(IVON, "step", counted)
    bb, data = build_backbone(Arch.CNN), _data()
    sched = SCHEDULES[LoraBudget.SMOKE]
    job = Job(Arch.CNN, Task.DIGITS, 5, 0, LoraMethod.IVON, Phase.VALIDATION, IVON_GRID[:2])
    r = run_job(job, bb, data, sched, 4, 8, lambda n: None)
    assert set(r["settings"]) == {s.label() for s in IVON_GRID[:2]}
    assert steps == [IVON_GRID[0].lr] * sched.steps + [IVON_GRID[1].lr] * sched.steps
    assert r["settings"][IVON_GRID[0].label()]["ess"] == IVON_GRID[0].ess
    test = run_job(Job(Arch.CNN, Task.DIGITS, 5, 0, LoraMethod.IVON, Phase.TEST, (IVON_GRID[1],)), bb, data,
                   sched, 4, 8, lambda n: None)
    row = test["settings"][IVON_GRID[1].label()]
    assert row["auroc_mi_mnist0-4"] is not None and "mean_nll" in row  # sampled, and at the mean

    model = _lora_model(bb, LoraMethod.IVON, 4, 8, 7, IVON_GRID[1])
    opt = IVON(model, lr=0.1, ess=IVON_GRID[1].ess, hess_init=IVON_HESS_INIT, seed=0)
    start = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    for _ in range(3):
        with opt.sampling():
            loss = torch.nn.functional.cross_entropy(model(data.pool), data.pool_y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    moved = {n for n, p in model.named_parameters() if n in start and not torch.equal(p, start[n])}
    assert any(n.endswith("lora_B.default.weight_mu") for n in moved)
    assert any(n.endswith("_rho") for n in moved)  # sigma from IVON's Hessian estimate
    out = predictive_logits([model], LoraMethod.IVON, data.test, seed=0)
    assert out.shape == (10, 10, 5) and not torch.allclose(out[0], out[1])  # TEST_SAMPLES draws
    assert torch.equal(out, predictive_logits([model], LoraMethod.IVON, data.test, seed=0))  # seeded
    assert predictive_logits([model], LoraMethod.IVON, data.test, seed=0, mode="mean").shape[0] == 1
