"""bbb train --cuda-graph (bbb.runs.cuda_graph.GraphedEpoch, issue 74): the training steps replayed
from CUDA graphs train as the eager steps do (to the float32 tolerance of tests/core/test_engine.py;
bit for bit where the kernels are deterministic), across a learning-rate change (the graphs are
captured again) and the last, smaller minibatch; an epoch of replays reads nothing from the device;
train() with it resumes a run trained without it. The same step without capture equals run_epoch
bit for bit on the CPU: tests/runs/test_cuda_graph_steps.py."""

from __future__ import annotations

import math

import torch
from cudakit import F32, MILD, QUIET, sync_errors, tiny_cfg

from bbb.elbo import ELBO
from bbb.engine import Engine
from bbb.nn import BayesMLP
from bbb.runs import kl_weight_table, load_checkpoint, read_metrics, run_epoch, train, training_step
from bbb.runs.cuda_graph import GraphedEpoch
from testkit import blobs

N, B = 240, 32  # 7 full minibatches and one of 16


def _setup(dev):
    torch.manual_seed(0)
    net = BayesMLP(12, [32, 32], 3, prior=MILD, rho_init=-3.0).to(dev)
    elbo = ELBO(net, "categorical", num_batches=math.ceil(N / B), kl_weighting="blundell", kl="mc")
    opt = Engine(elbo, "adam", lr=1e-2, seed=4)
    return net, elbo, opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


def test_replayed_steps_train_as_the_eager_ones(cuda):
    d = blobs(N)
    x, y = d["train_x"].to(cuda), d["train_y"].to(cuda)
    out = []
    for graphed in (False, True):
        net, elbo, opt, sched = _setup(cuda)
        table = kl_weight_table(elbo, net, cuda)
        epoch = GraphedEpoch(net, elbo, opt, x, y, B, table, step=training_step, capture=True) if graphed else None
        gen, sums = torch.Generator().manual_seed(2), []
        for e in range(5):
            perm = torch.randperm(N, generator=gen).to(cuda)
            if epoch is not None and e == 3:  # graphs captured and the lr unchanged: no read of the device
                with sync_errors():
                    s = epoch.run(perm)
            else:
                s = epoch.run(perm) if epoch is not None else run_epoch(net, elbo, opt, x, y, perm, B,
                                                                        kl_weights=table)
            sums.append(s.clone())
            sched.step()
        out.append(([p.detach().cpu() for p in net.parameters()], torch.stack(sums).cpu(), opt.state_dict(), epoch))
    (pa, sa, oa, _), (pb, sb, ob, epoch) = out
    assert epoch.replays >= 5 * 7 - 3 - 2 * 3  # all but the warm-up steps after each capture
    assert (oa["step"], oa["counter"]) == (ob["step"], ob["counter"]) == (40, 40)
    for u, v in zip(pa, pb):
        torch.testing.assert_close(u, v, **F32)
    torch.testing.assert_close(sa, sb, rtol=1e-4, atol=1e-3)
    print("bit for bit:", all(torch.equal(u, v) for u, v in zip(pa, pb)))


def test_train_with_cuda_graph_resumes_a_run_trained_without(tmp_path):
    d = blobs()
    cfg = tiny_cfg(method="bbb", prior="mixture", sigma2=math.exp(-2), pi=0.5, epochs=4, lr_schedule="step",
                   lr_step_size=2)
    train(cfg.replace(epochs=2), tmp_path / "parts", data=d, **QUIET)
    train(cfg.replace(cuda_graph=True), tmp_path / "parts", data=d, resume=True, **QUIET)
    train(cfg, tmp_path / "whole", data=d, **QUIET)
    a, b = read_metrics(tmp_path / "parts"), read_metrics(tmp_path / "whole")
    assert [r["epoch"] for r in a] == [1, 2, 3, 4]
    for ra, rb in zip(a, b):
        assert abs(ra["train_loss"] - rb["train_loss"]) <= 1e-3 * abs(rb["train_loss"]) + 1e-4
    sa, sb = (load_checkpoint(tmp_path / r / "last.pt")["model"] for r in ("parts", "whole"))
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], **F32)


def test_the_deterministic_mlp_replays_as_it_steps(cuda):
    """sgd's network with torch.optim's capturable fused Adam: one graph, the eager trajectory."""
    from bbb.runs import TrainConfig, build_model, make_optimizer

    d = blobs(N)
    x, y = d["train_x"].to(cuda), d["train_y"].to(cuda)
    cfg = TrainConfig(method="sgd", hidden=[32, 32], lr=1e-2, device="cuda", cuda_graph=True)
    out = []
    for graphed in (False, True):
        torch.manual_seed(0)
        net = build_model(cfg, 12, 3).to(cuda)
        opt = make_optimizer(cfg, net)
        epoch = GraphedEpoch.for_run(net, None, opt, x, y, B, None, step=training_step) if graphed else None
        gen = torch.Generator().manual_seed(2)
        for _ in range(3):
            perm = torch.randperm(N, generator=gen).to(cuda)
            s = epoch.run(perm) if epoch is not None else run_epoch(net, None, opt, x, y, perm, B)
        out.append(([p.detach().cpu() for p in net.parameters()], s.clone().cpu(), epoch))
    (pa, sa, _), (pb, sb, epoch) = out
    assert epoch.replays == 3 * 7 - 3
    for u, v in zip(pa, pb):
        torch.testing.assert_close(u, v, **F32)
    torch.testing.assert_close(sa, sb, rtol=1e-4, atol=1e-4)
    print("deterministic, bit for bit:", all(torch.equal(u, v) for u, v in zip(pa, pb)))



def test_a_population_replays_as_it_steps(tmp_path):
    """train_population with cuda_graph: the members end where the eager population's do."""
    from bbb.runs import TrainConfig
    from bbb.runs.population import train_population

    d = blobs(N)
    runs = {}
    for graphed in (False, True):
        cfgs = [TrainConfig(method="bbb", prior="mixture", sigma2=math.exp(-2), pi=0.5, hidden=[32, 32], epochs=3,
                            batch_size=B, lr=1e-2, device="cuda", seed=s, cuda_graph=graphed) for s in (0, 1, 2)]
        folder = tmp_path / str(graphed)
        dirs = [folder / f"s{s}" for s in (0, 1, 2)]
        train_population(cfgs, dirs, folder / "pop", data=d, **QUIET)
        runs[graphed] = [load_checkpoint(r / "last.pt")["model"] for r in dirs]
    same = True
    for a, b in zip(runs[False], runs[True]):
        for k in a:
            torch.testing.assert_close(a[k], b[k], **F32)
            same = same and torch.equal(a[k], b[k])
    print("population, bit for bit:", same)
