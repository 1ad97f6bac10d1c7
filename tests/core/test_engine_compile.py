"""torch.compile under the Engine: a compiled loss (the ELBO, or any function of it) and a compiled
network train as eager does, and the engine's compiled kernels apply torch's clipping idiom as its
eager ones (run in a subprocess: compiling changes process-wide state).

Issue 53: a compiled ELBO under the Engine trained nothing (Dynamo dropped the engine's note that a
forward drew its sample, so every step was skipped with a false "outside sampling()" warning).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = textwrap.dedent('''
    import json, warnings
    import torch, torch.nn as nn
    import torch._dynamo as dynamo
    import bbb

    def mlp():
        return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))

    def cnn():
        return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))

    def run(make, k, x, y, compiled, backend="inductor"):
        """4 steps of the Engine's loop; compiled: None (eager), "loss" or "net"."""
        torch.manual_seed(0)
        net = bbb.bayesianize(make(), rho_init=-3.0)
        elbo = bbb.ELBO(torch.compile(net, backend=backend) if compiled == "net" else net, "categorical", num_batches=4,
                        num_samples=k)
        engine = bbb.Engine(elbo, "adam", lr=1e-2, seed=0)
        loss_of = lambda a, b: elbo(a, b, batch_index=0).loss  # (one minibatch's weight, as every step here)
        fn = torch.compile(loss_of, backend=backend) if compiled == "loss" else loss_of
        breaks = None
        if compiled == "loss":
            with engine.sampling():
                breaks = dynamo.explain(loss_of)(x, y).graph_break_count
            dynamo.reset()
        mu0 = [p.detach().clone() for n, p in net.named_parameters() if n.endswith("_mu")]
        losses = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(4):
                with engine.sampling():
                    loss = fn(x, y)
                engine.zero_grad()
                (loss / len(y)).backward()
                engine.step()
                losses.append(float(loss.detach()))
        idle = [str(w.message) for w in caught if "engine.step()" in str(w.message)]
        moved = max(float((p.detach() - m).abs().max())
                    for m, (n, p) in zip(mu0, [(n, p) for n, p in net.named_parameters() if n.endswith("_mu")]))
        return losses, [p.detach().clone() for p in net.parameters()], breaks, idle, moved

    g = torch.Generator().manual_seed(1)
    # Inductor for the compiled loss of the MLP; Dynamo and AOTAutograd without Inductor's C++
    # build (aot_eager) for the others: what issue 53 broke lies in Dynamo's graph
    cases = {"mlp_loss_k1": (mlp, 1, torch.randn(16, 6, generator=g), "loss", "inductor"),
             "cnn_loss_k2": (cnn, 2, torch.randn(16, 1, 8, 8, generator=g), "loss", "aot_eager"),
             "mlp_net_k2": (mlp, 2, torch.randn(16, 6, generator=g), "net", "aot_eager")}
    out = {}
    for name, (make, k, x, how, backend) in cases.items():
        y = torch.randint(0, 3, (16,), generator=g)
        le, pe, _, _, _ = run(make, k, x, y, None)
        lc, pc, breaks, idle, moved = run(make, k, x, y, how, backend)
        out[name] = {"breaks": breaks, "idle": idle, "moved": moved, "loss_eager": le, "loss_compiled": lc,
                     "max_param_diff": max(float((a - b).abs().max()) for a, b in zip(pe, pc))}
    # the engine's own kernels compiled, with torch's clipping idiom (the train step on the given .grad)
    def clipped(compile):
        torch.manual_seed(0)
        net = bbb.bayesianize(mlp(), rho_init=-3.0)
        elbo = bbb.ELBO(net, "categorical", num_batches=4)
        engine = bbb.Engine(elbo, "adam", lr=1e-2, seed=0, compile=compile)
        x, y = torch.randn(16, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
        norms = []
        for _ in range(3):
            with engine.sampling():
                loss = elbo(x, y).loss
            engine.zero_grad()
            loss.backward()
            norms.append(float(torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)))
            engine.step()
        return engine.compiled, norms, [p.detach().clone() for p in net.parameters()]
    state = g.get_state()
    ce, ne, pe = clipped(False)
    g.set_state(state)
    cc, nc, pc = clipped(True)
    out["clip_kernels"] = {"compiled": [ce, cc], "loss_eager": ne, "loss_compiled": nc, "breaks": None, "idle": [],
                           "moved": 1.0, "max_param_diff": max(float((a - b).abs().max()) for a, b in zip(pe, pc))}
    print(json.dumps(out))
''')


@pytest.mark.slow
def test_compiled_loss_and_compiled_network_under_the_engine_train_as_eager(tmp_path):
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=900,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root / "src")})
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(res) == {"mlp_loss_k1", "cnn_loss_k2", "mlp_net_k2", "clip_kernels"}
    assert res["clip_kernels"]["compiled"] == [False, True]  # (its "losses" are the clipped norms)
    assert min(res["clip_kernels"]["loss_eager"]) > 0.5  # it clipped
    for name, got in res.items():
        assert got["idle"] == [], (name, got["idle"])  # every step applied a gradient
        assert got["moved"] > 1e-3, (name, got)  # the posterior means moved
        if got["breaks"] is not None:
            assert got["breaks"] == 0, (name, got["breaks"])  # the whole ELBO in one graph
        # stated tolerance: the same float32 training to rounding -- losses to 1e-5 relative,
        # parameters after 4 Adam steps of lr 1e-2 to 1e-5 absolute (measured: below 3e-7)
        for a, b in zip(got["loss_eager"], got["loss_compiled"]):
            assert abs(a - b) <= 1e-5 * abs(a), (name, got)
        assert got["max_param_diff"] <= 1e-5, (name, got)
