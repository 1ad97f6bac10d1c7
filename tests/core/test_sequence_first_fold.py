"""k-sample passes through sequence-first models (batch_first=False recurrent or attention layers,
inputs (T, B, ...)): which dimension of a layer's input and of the output holds the k*B rows."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import bbb
from bbb.uncertainty import predict


class _SequenceFirstThenBatchFirst(nn.Module):
    """A sequence-first model (its GRU: batch_first=False, inputs (T, B, E)) whose head reads the
    data batch first, (B, T, E), after a transpose; the embedding likewise for the ids."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.rnn, self.emb, self.head = nn.GRU(4, 4), nn.Embedding(5, 4), nn.Linear(4, 3)

    def forward(self, x, ids):  # x (T, B, 4), ids (T, B)
        return self.head(x.transpose(0, 1) + self.emb(ids.t()))  # (B, T, 3): the GRU only says sequence-first


def test_batch_first_data_inside_a_sequence_first_model_keeps_one_network_per_sample():
    # the head and the embedding unfolded their k*B rows along dim 1, the model's batch dimension,
    # where the data had the T steps: with T a multiple of k each sample's network served T/k of the steps
    net = bbb.bayesianize(_SequenceFirstThenBatchFirst(), skip=["rnn"], rho_init=-1.0)
    t, b, k = 9, 2, 3
    x = torch.randn(1, b, 4).expand(t, b, 4)  # every step the same
    ids = torch.randint(0, 5, (1, b)).expand(t, b)
    out = predict(net, (x, ids), num_samples=k, generator=0)  # (k, B, T, 3)
    assert out.shape == (k, b, t, 3)
    torch.testing.assert_close(out, out[:, :, :1].expand_as(out))  # one network per sample: equal steps
    assert not torch.equal(out[0], out[1])
    torch.testing.assert_close(out[:, :1], predict(net, (x[:, :1], ids[:, :1]), num_samples=k, generator=0))


def test_batch_first_data_of_one_step_inside_a_sequence_first_model_folds_along_dim_0():
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn, self.head = nn.GRU(4, 4), nn.Linear(4, 3)

        def forward(self, x):  # (T, B, 4) -> (B, T, 3)
            return self.head(self.rnn(x)[0].transpose(0, 1))

    net = bbb.bayesianize(Net(), rho_init=-1.0)
    x = torch.randn(1, 2, 4)  # one step: its (k*B, 1, 4) data read 1 row along dim 1, an error
    out = predict(net, x, num_samples=3, generator=0)
    assert out.shape == (3, 2, 1, 3)
    torch.testing.assert_close(out[:, 1:], predict(net, x[:, 1:], num_samples=3, generator=0))


def test_a_sequence_first_classifier_with_k_times_b_classes_predicts_k_b_c():
    # row-by-row MNIST through a sequence-first LSTM, one image, 10 samples of 10 classes: the (k*B, C) output,
    # k*B rows along dim 1 too, was unfolded as per step: predict returned (10, 10, 1), silently
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn, self.head = nn.LSTM(7, 8), nn.Linear(8, 10)

        def forward(self, x):  # (T, B, 7) -> (B, 10)
            return self.head(self.rnn(x)[0][-1])

    net = bbb.bayesianize(Net(), rho_init=-1.0)
    x = torch.randn(7, 2, 7)
    one = predict(net, x[:, :1], num_samples=10, generator=0)
    assert one.shape == (10, 1, 10)
    torch.testing.assert_close(one, predict(net, x, num_samples=10, generator=0)[:, :1])
    out = bbb.ELBO(net, num_batches=1, num_samples=10)(x[:, :1], torch.tensor([3]))
    assert out.output.shape == (10, 1, 10)


def test_a_batch_first_input_transposed_for_a_sequence_first_lstm_is_an_error_that_says_why():
    # the errors blamed a lost batch dimension; the cause is that the model's layers made its inputs (T, B)
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.rnn, self.head = nn.Embedding(10, 4), nn.LSTM(4, 5), nn.Linear(5, 2)

        def forward(self, ids):  # (B, T) ids, made (T, B, 4) for the LSTM (batch_first=False)
            return self.head(self.rnn(self.emb(ids).transpose(0, 1))[0][-1])

    net = bbb.bayesianize(Net())
    for b, t in ((4, 6), (3, 6)):  # an error in the LSTM, and one at the output
        with pytest.raises(bbb.UserError, match="taken as sequence-first.*batch_first=True"):
            predict(net, torch.randint(0, 10, (b, t)), num_samples=3)
    out = bbb.nn.forward_samples(net.train(), torch.randint(0, 10, (4, 6)), 3, batch_dim=0)
    assert out.shape == (3, 4, 2)


class _PaddedEncoder(nn.Module):
    """A sequence-first transformer classifier: x (S, B, 8) and a (B, S) padding mask, batch first
    as torch's modules take it."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
        self.enc, self.head = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False), nn.Linear(8, 3)

    def forward(self, x, src_key_padding_mask):
        return self.head(self.enc(x, src_key_padding_mask=src_key_padding_mask)[0])


@pytest.mark.parametrize("s", [4, 5])  # 4: the mask (B, S) is square, S == B
def test_a_padding_mask_of_a_sequence_first_model_folds_and_splits_along_its_batch_dim(s):
    # the (B, S) mask with S == B was folded along dim 1, the model's batch dimension: a false
    # refusal of the attention ("key_padding_mask has shape (12, 12)"); and predict in chunks
    # (batch_size) left the mask whole, another
    net = bbb.bayesianize(_PaddedEncoder(), rho_init=-1.0, skip=[nn.LayerNorm]).eval()
    b, k = 4, 3
    x = torch.randn(s, b, 8)
    mask = torch.arange(s) >= torch.tensor([s, s - 1, 2, 1])[:, None]  # each example its own padding
    with torch.no_grad():
        want = net(x, mask)  # (predict gives the outputs, logits here)
    for inputs in ((x, mask), {"x": x, "src_key_padding_mask": mask}):
        for batch_size in (None, 3):
            out = predict(net, inputs, num_samples=k, mode="mean", batch_size=batch_size)
            torch.testing.assert_close(out, want[None])
    # k sampled networks, each example with its own mask: as each example alone through the same k networks
    out = predict(net, (x, mask), num_samples=k, generator=0)
    assert out.shape == (k, b, 3) and not torch.equal(out[0], out[1])
    for j in range(b):
        torch.testing.assert_close(out[:, j], predict(net, (x[:, j:j + 1], mask[j:j + 1]), num_samples=k,
                                                      generator=0)[:, 0])
