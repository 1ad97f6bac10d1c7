"""Every exception of ``bbb`` lives in :mod:`bbb.errors`, under :class:`~bbb.errors.BBBError` and
the builtin it is an instance of; the command line prints each as one line; one check of the
integer arguments (:func:`~bbb.errors.check_int`) answers alike at every public entry point."""

from __future__ import annotations

import importlib
import inspect
import math
import pickle
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import bbb
import bbb.errors as E
from bbb.errors import BBBError, UserError, check_bool, check_float, check_int

#: each class of bbb.errors -> the builtin it must also be
BUILTIN = {
    E.UserError: ValueError,
    E.SettingError: ValueError,
    E.DataError: ValueError,
    E.CheckpointError: ValueError,
    E.SettingsMismatch: ValueError,
    E.TrainingDiverged: ValueError,
    E.RunDirBusy: ValueError,
    E.MissingExtra: ModuleNotFoundError,
    E.DiskFullError: OSError,
    E.ResultsNotSaved: OSError,
    E.NetworkError: ConnectionError,
    E.OutOfMemory: MemoryError,
    E.TrainingInterrupted: KeyboardInterrupt,
}

#: one instance of each, as bbb raises them
INSTANCES = [
    E.UserError("bad value"),
    E.SettingError("val_size", "must be in 0..59999, got 60000"),
    E.DataError("f.bin: checksum mismatch"),
    E.CheckpointError("last.pt not found"),
    E.SettingsMismatch("trained with lr=0.1, this plan has 0.2"),
    E.TrainingDiverged("diverged in epoch 2"),
    E.RunDirBusy("out is in use: another bbb process (pid 7)", holder="7"),
    E.DiskFullError("no space left on the device while writing out/last.pt; free some space"),
    E.ResultsNotSaved(Path("out/eval.json"), "read-only file system", {"error": 0.01}),
    E.NetworkError(OSError("network is unreachable")),
    E.OutOfMemory("out of memory: evaluating needs at least 9.0 GiB"),
    E.TrainingInterrupted("interrupted during epoch 3; out/last.pt holds epoch 2", Path("out"), 2),
    E.MissingExtra("last-layer Laplace needs laplace-torch: pip install '.[laplace]'", "laplace"),
]


def _classes_of(module) -> list[type]:
    return [c for c in vars(module).values()
            if inspect.isclass(c) and issubclass(c, BaseException) and c.__module__ == module.__name__]


def test_every_class_is_a_bbb_error_and_its_builtin():
    classes = _classes_of(E)
    assert set(classes) == set(BUILTIN) | {BBBError}, "give a new class its builtin in BUILTIN"
    assert set(E.__all__) >= {c.__name__ for c in classes}
    for cls, builtin in BUILTIN.items():
        assert issubclass(cls, BBBError) and issubclass(cls, builtin), cls
    assert {type(e) for e in INSTANCES} == set(BUILTIN)


def test_the_builtins_catch_them():
    with pytest.raises(OSError):
        raise E.DiskFullError("no space left")
    try:
        raise E.DiskFullError("no space left")
    except ValueError:  # pragma: no cover - the point: a full disk is not a bad value
        pytest.fail("a full disk is a ValueError")
    except OSError as e:
        assert isinstance(e, BBBError)
    with pytest.raises(MemoryError):
        raise E.OutOfMemory("out of memory")
    with pytest.raises(ValueError):
        raise E.CheckpointError("corrupt")


def test_ctrl_c_is_no_exception():
    """``except Exception`` (a retry loop, say) never catches Ctrl-C; ``except KeyboardInterrupt`` does."""
    assert not issubclass(E.TrainingInterrupted, Exception) and not issubclass(BBBError, Exception)
    assert all(issubclass(cls, Exception) for cls in BUILTIN if cls is not E.TrainingInterrupted)
    with pytest.raises(KeyboardInterrupt):
        try:
            raise E.TrainingInterrupted("interrupted", Path("out"), 1)
        except Exception:  # noqa: BLE001 - what must not catch it
            pytest.fail("except Exception caught Ctrl-C")


def test_the_attributes_and_messages_stay():
    busy, unsaved, stopped = INSTANCES[6], INSTANCES[8], INSTANCES[11]
    assert busy.holder == "7" and str(busy).startswith("out is in use")
    assert unsaved.path == Path("out/eval.json") and unsaved.result == {"error": 0.01}
    assert str(unsaved) == f"cannot write {Path('out/eval.json')} (read-only file system); the results were " \
                           "computed but not saved"
    assert (stopped.run_dir, stopped.epoch, str(stopped)) == (Path("out"), 2, stopped.message)
    assert str(INSTANCES[9]) == "network is unreachable"
    assert str(INSTANCES[1]) == "val_size must be in 0..59999, got 60000" and INSTANCES[1].setting == "val_size"


@pytest.mark.parametrize("exc", INSTANCES, ids=lambda e: type(e).__name__)
def test_each_survives_pickling(exc):
    """Exceptions cross processes (the sweep's workers) pickled: same class, message and attributes."""
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == str(exc)
    assert vars(back) == vars(exc)


def _walk() -> dict[str, object]:
    names = ["bbb"] + [m.name for m in pkgutil.walk_packages(bbb.__path__, "bbb.") if m.name != "bbb.__main__"]
    return {n: importlib.import_module(n) for n in sorted(names)}


def test_no_exception_class_is_defined_outside_errors():
    modules = _walk()
    assert len(modules) > 40
    outside = [f"{name}.{cls.__name__}" for name, module in modules.items() if name != "bbb.errors"
               for cls in _classes_of(module)]
    assert not outside, f"define these in bbb/errors.py: {outside}"


@pytest.mark.parametrize("exc", INSTANCES, ids=lambda e: type(e).__name__)
def test_the_command_line_prints_each_as_one_line(exc, monkeypatch, capsys):
    from bbb.cli import entry

    def fail(name, argv):
        raise exc

    monkeypatch.setattr(entry, "run_command", fail)
    rc = entry.main(["train"])
    err = capsys.readouterr().err
    assert rc == (130 if isinstance(exc, KeyboardInterrupt) else 2)
    assert err.count("\n") == 1 and err.startswith("bbb train: ") and "Traceback" not in err, err
    assert " ".join(str(exc).split()) in err


# -- the argument checks ----------------------------------------------------------------------

@pytest.mark.parametrize("value", [3, 3.0, np.int64(3), np.float32(3.0), torch.tensor(3)], ids=repr)
def test_check_int_takes_integers(value):
    n = check_int("k", value)
    assert n == 3 and type(n) is int


@pytest.mark.parametrize("value", ["two", "3", None, 1.5, True, False, 0, -1, math.nan, math.inf, [2],
                                   torch.tensor([2, 3]), torch.tensor(2.5)], ids=repr)
def test_check_int_refuses_the_rest(value):
    with pytest.raises(UserError, match=r"^k must be an integer >= 1, got ") as e:
        check_int("k", value)
    assert "\n" not in str(e.value)


def test_check_int_bounds():
    assert check_int("seed", 0, 0) == 0 and check_int("shift", -5, None) == -5
    with pytest.raises(UserError, match=r"^seed must be an integer >= 0, got -1$"):
        check_int("seed", -1, 0)
    with pytest.raises(UserError, match=r"^shift must be an integer, got 'x'$"):
        check_int("shift", "x", None)


def test_check_float():
    assert check_float("lr", 0.1, 0.0, above=True) == 0.1 and check_float("beta", 0, 0.0) == 0.0
    assert check_float("w", torch.tensor(2.0)) == 2.0 and check_float("x", -math.inf, finite=False) == -math.inf
    for bad in (0.0, -1, math.nan, math.inf, "0.1", None, True, [0.1]):
        with pytest.raises(UserError, match=r"^lr must be a finite number > 0, got "):
            check_float("lr", bad, 0.0, above=True)
    with pytest.raises(UserError, match=r"^beta must be a finite number >= 0, got -0.5$"):
        check_float("beta", -0.5, 0.0)


def test_check_bool_and_the_config_switches():
    """TrainConfig's switches took any value by its truth: image_colour="false" (a YAML sweep's quoted
    false, a form's text) trained in colour, and bool() of it set bf16 and the others alike."""
    from bbb.runs import TrainConfig

    assert check_bool("x", True) is True and check_bool("x", 0) is False and check_bool("x", np.bool_(True)) is True
    assert check_bool("x", torch.tensor(False)) is False
    for bad in ("false", "True", None, 2, 0.5, [True]):
        with pytest.raises(UserError, match=r"^x must be True or False, got "):
            check_bool("x", bad)
    for name in ("image_colour", "bf16", "test_each_epoch", "cuda_graph"):
        with pytest.raises(UserError, match=rf"^{name} must be True or False, got 'false'$"):
            TrainConfig(**{name: "false"}, **({"data_file": "x"} if name == "image_colour" else {}))
    assert TrainConfig(data_file="x", image_colour=1).image_colour is True


def _entry_points():
    """(id, call with the value, the argument's name in the message, the values that are valid)."""
    from bbb.elbo import ELBO, kl_weights
    from bbb.engine import Engine
    from bbb.nn import BayesMLP, forward_samples
    from bbb.nn.population import BayesPopulation
    from bbb.runs import TrainConfig
    from bbb.uncertainty import predict, reliability_bins

    net = BayesMLP(4, [5], 3)
    x = torch.zeros(2, 4)
    pop = BayesPopulation(4, [5], 1, bayesian=2)
    probs, labels = torch.full((2, 3), 1 / 3), torch.tensor([0, 1])
    return [
        ("ELBO-num_samples", lambda v: ELBO(net, num_samples=v), "num_samples", ()),
        ("ELBO-num_batches", lambda v: ELBO(net, num_batches=v), "num_batches", ()),
        ("ELBO-kl_samples", lambda v: ELBO(net, kl="mc", kl_samples=v), "kl_samples", (None,)),
        ("kl_weights-num_batches", lambda v: kl_weights(v), "num_batches", ()),
        ("Engine-num_samples", lambda v: Engine(net, num_samples=v, compile=False), "num_samples", (None,)),
        ("Engine-seed", lambda v: Engine(net, seed=v, compile=False), "seed", (0, None)),
        ("Engine-kl_samples", lambda v: Engine(net, kl="mc", kl_samples=v, compile=False), "kl_samples", (None,)),
        ("predict-num_samples", lambda v: predict(net, x, num_samples=v), "num_samples", ()),
        ("forward_samples-num_samples", lambda v: forward_samples(net, x, v), "num_samples", ()),
        ("BayesPopulation-num_samples", lambda v: pop(torch.zeros(2, 3, 4), num_samples=v), "num_samples", (None,)),
        ("BayesPopulation-bayesian", lambda v: BayesPopulation(4, [5], 1, bayesian=v, deterministic=1),
         "bayesian", (0,)),
        ("reliability_bins-num_bins", lambda v: reliability_bins(probs, labels, num_bins=v), "num_bins", ()),
        ("TrainConfig-samples", lambda v: TrainConfig(samples=v), "samples", ()),
        ("TrainConfig-seed", lambda v: TrainConfig(seed=v), "seed", (0,)),
    ]


BAD = ["two", None, 1.5, True, 0, -1]
CASES = [pytest.param(call, name, bad, id=f"{key}-{bad!r}")
         for key, call, name, valid in _entry_points() for bad in BAD if bad not in valid]


@pytest.mark.parametrize(("call", "name", "bad"), CASES)
def test_integer_arguments_are_checked_alike(call, name, bad):
    with pytest.raises(UserError, match=rf"^{name} must be an integer >= \d, got {bad!r}$"):
        call(bad)


def test_importing_bbb_installs_no_warnings_filter():
    """``import bbb`` and its engine leave the process's warnings filters as they were (torch and
    numpy install theirs when imported); so does training with the engine (k > 1, the case whose
    gradient layout torch notes once, which the engine keeps quiet without a filter)."""
    code = textwrap.dedent("""
        import warnings
        import numpy, torch  # (they install filters of their own)
        before = list(warnings.filters)
        import bbb, bbb.engine, bbb.elbo, bbb.nn, bbb.runs
        assert warnings.filters == before, [f for f in warnings.filters if f not in before]
        import sympy  # (torch's compiler imports it when the engine is built: a filter of its own)
        warnings.simplefilter("always")
        before = list(warnings.filters)
        net = bbb.nn.BayesMLP(4, [8], 3)
        elbo = bbb.elbo.ELBO(net, num_samples=2)
        engine = bbb.engine.Engine(elbo, compile=False)
        x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                with engine.sampling():
                    out = elbo(x, y)
                engine.zero_grad()
                out.loss.backward()
                engine.step()
        assert warnings.filters == before
        assert not [w for w in caught if "layout contract" in str(w.message)], [str(w.message) for w in caught]
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def _net() -> torch.nn.Module:
    return bbb.bayesianize(torch.nn.Sequential(torch.nn.Linear(3, 4)))


@pytest.mark.parametrize("call", [
    lambda p: bbb.Engine(p, "adam", lr=1e-3),
    lambda p: bbb.IVON(p, lr=0.1, ess=10),
    lambda p: bbb.ELBO(p, num_batches=1),
    lambda p: bbb.bayesianize(p),
    lambda p: bbb.forward_samples(p, torch.randn(2, 3), 2),
    lambda p: bbb.model_kl(p),
], ids=["Engine", "IVON", "ELBO", "bayesianize", "forward_samples", "model_kl"])
@pytest.mark.parametrize("params", [lambda net: net.parameters(), lambda net: list(net.parameters())],
                         ids=["generator", "list"])
def test_the_parameters_given_for_the_model_are_a_one_line_error(call, params):
    # torch.optim's habit (the optimiser takes model.parameters()); bbb's entry points take the
    # model: an AttributeError deep inside before
    with pytest.raises(UserError, match=r"needs the network \(an nn.Module\), got (generator|list): give the "
                                        r"model itself, not model.parameters\(\)"):
        call(params(_net()))
