"""Inputs and outputs as models have them (no transformers needed): a tensor, a tuple of arguments
or a mapping of keyword tensors in (``labels`` the targets); a tensor, a tuple, a mapping out; a
table shared by the batch inside a k-sample pass; the warning for a model with no Bayesian layer."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import bbb
from bbb.nn import BayesEmbedding, BayesLinear, SampleRecorder, forward_samples, sampling
from bbb.nn.inputs import fold_inputs, select_output, split_inputs, split_targets
from bbb.uncertainty import evaluate, predict

V, T, D, C = 20, 5, 8, 3


class Keywords(nn.Module):
    """A model called with keywords, as Hugging Face's: ids, a mask, positions from a (1, T) table."""

    def __init__(self, returns: str = "dict"):
        super().__init__()
        self.tok = BayesEmbedding(V, D)
        self.pos = BayesEmbedding(16, D)
        self.head = BayesLinear(D, C)
        self.returns = returns

    def forward(self, input_ids, attention_mask=None, position_ids=None, scale: float = 1.0):
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1]).unsqueeze(0)  # (1, T): shared by the batch
        h = self.tok(input_ids) + self.pos(position_ids)
        m = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        pooled = (h * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True)
        logits = self.head(pooled) * scale
        if self.returns == "dict":
            return {"loss": logits.sum(), "logits": logits, "hidden": pooled}
        if self.returns == "tuple":
            return logits, pooled
        return logits


def _batch(b=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (b, T), generator=g)
    mask = torch.ones(b, T, dtype=torch.long)
    mask[0, 3:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, C, (b,), generator=g)}


def _samples(net, inputs, k, seed=0, **kw):
    with sampling(net, "sample"), SampleRecorder(torch.Generator().manual_seed(seed)):
        return forward_samples(net, inputs, k, **kw)


def test_a_tensor_a_tuple_and_a_mapping_are_the_same_call():
    torch.manual_seed(0)
    net = Keywords("tensor")
    batch = _batch()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    by_kw = _samples(net, {"input_ids": ids, "attention_mask": mask}, 3)
    by_args = _samples(net, (ids, mask), 3)
    assert by_kw.shape == (3, 4, C)
    assert torch.equal(by_kw, by_args)
    assert not torch.equal(_samples(net, ids, 3), by_kw)  # (the mask matters)
    # a non-tensor argument is passed as is, not folded
    assert torch.allclose(_samples(net, {"input_ids": ids, "attention_mask": mask, "scale": 2.0}, 3), 2 * by_kw)


def test_every_tensor_with_the_batch_dimension_is_folded():
    x = {"a": torch.zeros(2, 3), "b": torch.arange(2), "table": torch.ones(1, 3), "n": 7}
    f = fold_inputs(x, 3)
    assert f["a"].shape == (6, 3) and f["table"].shape == (1, 3) and f["n"] == 7
    assert f["b"].tolist() == [0, 1, 0, 1, 0, 1]  # sample j on rows j*B .. j*B+B-1
    chunks = split_inputs(x, 1)
    assert [c["b"].tolist() for c in chunks] == [[0], [1]] and all(c["table"].shape == (1, 3) for c in chunks)
    assert split_targets({"input_ids": x["a"], "labels": x["b"]})[1] is x["b"]
    assert split_targets({"x": x["a"], "y": x["b"]}) == (x["a"], x["b"])
    assert split_targets({"x": x["a"], "y": x["b"], "index": x["b"]}) == (x["a"], x["b"])  # (as before)
    other = {"x": x["a"], "mask": x["b"]}
    assert split_targets(other) == (other, None)  # a model's keywords x and mask: all inputs


def test_outputs_tuple_mapping_and_output_key():
    t = torch.zeros(2)
    assert select_output((t, torch.ones(1))) is t
    assert select_output({"loss": torch.ones(()), "logits": t}) is t
    assert select_output({"loss": torch.ones(()), "hidden": t}, "hidden") is t
    with pytest.raises(bbb.UserError, match=r"keys loss, hidden, 'logits' not a tensor.*output="):
        select_output({"loss": torch.ones(()), "hidden": t})
    with pytest.raises(bbb.UserError, match=r"returned a str, where a tensor"):
        select_output("nope")
    # a tensor with output= given: the line said "returned a tensor, where a tensor ... was expected"
    with pytest.raises(bbb.UserError, match=r"returned a tensor, which has no part output='logits'.*leave output= out"):
        select_output(t, "logits")
    with pytest.raises(bbb.UserError, match="output= must be"):
        bbb.ELBO(Keywords(), output=1.5)
    torch.manual_seed(0)
    batch = _batch()
    inputs = {key: v for key, v in batch.items() if key != "labels"}
    nets = {r: Keywords(r) for r in ("dict", "tuple", "tensor")}
    for r in ("tuple", "tensor"):
        nets[r].load_state_dict(nets["dict"].state_dict())
    outs = {r: _samples(n, inputs, 2) for r, n in nets.items()}
    assert torch.equal(outs["dict"], outs["tuple"]) and torch.equal(outs["dict"], outs["tensor"])
    assert _samples(nets["dict"], inputs, 2, output="hidden").shape == (2, 4, D)


def test_a_table_shared_by_the_batch_is_each_samples_own():
    torch.manual_seed(0)
    net = Keywords("tensor")
    batch = _batch()
    ids = batch["input_ids"]
    shared = _samples(net, ids, 4)  # positions (1, T) inside the 4-sample pass
    per_example = _samples(net, {"input_ids": ids, "position_ids": torch.arange(T).expand(4, -1)}, 4)
    assert torch.equal(shared, per_example)
    assert all(not torch.allclose(shared[a, 0], shared[b, 0]) for a in range(4) for b in range(a + 1, 4))
    local = Keywords("tensor")
    local.pos = BayesEmbedding(16, D, estimator="local")  # fresh noise per lookup: k lookups, then broadcast
    out = _samples(local, ids[:1].expand(2, -1), 4)
    assert torch.equal(out[:, 0], out[:, 1])  # the same example twice: each sample's B rows alike
    assert all(not torch.allclose(out[a, 0], out[b, 0]) for a in range(4) for b in range(a + 1, 4))
    # any other row count is still the clear error
    with pytest.raises(bbb.UserError, match="BayesEmbedding: inside a 4-sample pass"):
        _samples(net, {"input_ids": ids, "position_ids": torch.arange(T).expand(2, -1)}, 4)


def test_elbo_takes_a_mapping_batch_and_leaves_labels_out():
    torch.manual_seed(0)
    net = Keywords()
    seen = []
    net.register_forward_pre_hook(lambda m, args, kwargs: seen.append(set(kwargs)), with_kwargs=True)
    batch = _batch()
    for k in (1, 3):
        elbo = bbb.ELBO(net, num_batches=1, num_samples=k)
        a = elbo(batch, generator=torch.Generator().manual_seed(1))
        inputs = {key: v for key, v in batch.items() if key != "labels"}
        b = elbo(inputs, batch["labels"], generator=torch.Generator().manual_seed(1))
        assert torch.equal(a.loss, b.loss) and torch.isfinite(a.loss)
        assert a.output.shape == ((4, C) if k == 1 else (k, 4, C))
    assert all("labels" not in s for s in seen)
    old = bbb.ELBO(nn.Sequential(BayesLinear(4, C)), num_batches=1)
    out = old({"x": torch.randn(5, 4), "y": torch.zeros(5, dtype=torch.long)})  # the {"x", "y"} batches
    assert out.output.shape == (5, C)
    with pytest.raises(bbb.UserError, match="needs targets"):
        elbo({"input_ids": batch["input_ids"]})


class _Dicts(Dataset):
    def __init__(self, batch):
        self.batch = batch

    def __len__(self):
        return len(self.batch["labels"])

    def __getitem__(self, i):
        return {key: v[i] for key, v in self.batch.items()}


def test_predict_and_evaluate_take_mappings_and_loaders_of_them():
    torch.manual_seed(0)
    net = Keywords()
    batch = _batch(6)
    inputs = {key: v for key, v in batch.items() if key != "labels"}
    whole = predict(net, inputs, num_samples=3, generator=0)
    assert whole.shape == (3, 6, C)
    assert torch.equal(predict(net, batch, num_samples=3, generator=0), whole)  # labels left out
    torch.testing.assert_close(predict(net, inputs, num_samples=3, generator=0, batch_size=4), whole)
    out, y = predict(net, DataLoader(_Dicts(batch), batch_size=4), num_samples=3, generator=0, return_targets=True)
    torch.testing.assert_close(out, whole)
    assert torch.equal(y, batch["labels"])
    tuples = DataLoader(TensorDataset(batch["input_ids"], batch["labels"]), batch_size=4)
    assert predict(net, tuples, num_samples=2, return_targets=True)[0].shape == (2, 6, C)
    m1 = evaluate(net, batch, num_samples=3, generator=0)
    assert m1 == evaluate(net, (inputs, batch["labels"]), num_samples=3, generator=0)
    assert m1 == pytest.approx(evaluate(net, DataLoader(_Dicts(batch), batch_size=4), num_samples=3, generator=0))
    with pytest.raises(bbb.UserError, match="under 'labels'"):
        evaluate(net, inputs)
    with pytest.raises(bbb.UserError, match="return_targets needs a DataLoader"):
        predict(net, inputs, return_targets=True)


def test_no_bayesian_layer_warns_once_and_a_baseline_can_say_so():
    x, y = torch.randn(4, 3), torch.zeros(4, dtype=torch.long)
    net = nn.Sequential(nn.Linear(3, C))
    with pytest.warns(UserWarning, match=r"predict: Sequential has no Bayesian layer.*bayesianize"):
        predict(net, x, num_samples=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predict(net, x, num_samples=2)  # once per model
        evaluate(net, (x, y), num_samples=2)
        predict(bbb.nn.mark_deterministic(nn.Sequential(nn.Linear(3, C))), x, num_samples=2)
        bbb.ELBO(nn.Sequential(BayesLinear(3, C)))(x, y)  # a Bayesian model: no warning
    with pytest.warns(UserWarning, match="the ELBO: Sequential has no Bayesian layer"):
        bbb.ELBO(nn.Sequential(nn.Linear(3, C)), num_batches=1)(x, y)
    with pytest.warns(UserWarning, match="evaluate: Sequential has no Bayesian layer") as seen:
        evaluate(nn.Sequential(nn.Linear(3, C)), (x, y), num_samples=2)
    assert "dropout" not in str(seen[0].message)
    # a network with dropout (a loaded --method dropout run's): its advice was bayesianize alone
    with pytest.warns(UserWarning, match=r"has dropout layers, which this does not sample: for MC dropout a loaded "
                                         r"run's sample_outputs\(x, k\) does"):
        predict(nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.2), nn.Linear(8, C)), x, num_samples=2)


@pytest.mark.parametrize("layer", ["linear", "conv"])
def test_a_model_that_changes_its_input_in_place_is_sampled_on_the_changed_input(layer):
    # the first layer of a k-sample pass read the input as the caller gave it, not as the model's own
    # x.div_(255) had left it: every prediction was on the raw pixels, silently
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layer = nn.Linear(3, 2) if layer == "linear" else nn.Sequential(nn.Conv1d(1, 2, 3), nn.Flatten())

        def forward(self, x):
            x.div_(255.0)
            return self.layer(x)

    net = bbb.bayesianize(Net(), rho_init=-30.0)  # sigma ~ 1e-13: every sample is the mean network
    x = torch.full((2, 3) if layer == "linear" else (2, 1, 3), 255.0)
    want = net.eval()(x.clone())
    out = bbb.uncertainty.predict(net, x.clone(), num_samples=3)
    torch.testing.assert_close(out, want.expand(3, *want.shape))
