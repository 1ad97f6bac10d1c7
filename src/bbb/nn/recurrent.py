"""Bayesian recurrent layers: :class:`BayesRNN`, :class:`BayesLSTM` and :class:`BayesGRU`.

Each is the ``torch.nn`` layer of the same name with a diagonal Gaussian posterior over every
weight (``weight_ih_l{k}{_reverse}``, ``weight_hh_l{k}...``, ``bias_ih_l{k}...``,
``bias_hh_l{k}...`` and the LSTM's ``weight_hr_l{k}...``): parameters ``{name}_mu`` and
``{name}_rho``, the torch name itself reads the posterior mean. The forward pass runs torch's own
kernels (``torch.lstm``, ``torch.gru``, ``torch.rnn_tanh``, ``torch.rnn_relu``) with the sampled
weights, or with the means in ``eval()`` mode. Inside a k-sample fold (:func:`forward_samples`,
the ELBO) the k*B rows along the layer's batch dimension (0 with ``batch_first``, else 1) run
with one weight sample per block of B rows.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, Self

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.utils.rnn import PackedSequence

from ..distributions import Prior
from ..errors import UserError
from .base import DEFAULT_RHO_INIT, BayesModule, Estimator
from .inputs import refold, unfold
from .samples import FOLD, SEQUENCE_FIRST_HINT, fold_samples

__all__ = ["BayesRNN", "BayesLSTM", "BayesGRU"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
_OPS = {"GRU": torch.gru, "RNN_TANH": torch.rnn_tanh, "RNN_RELU": torch.rnn_relu}


class _BayesRNNBase(BayesModule):
    """The shared body of the Bayesian recurrent layers; its constructor takes
    ``torch.nn.LSTM``'s arguments (:class:`BayesLSTM`'s), the other layers pass ``proj_size=0``."""

    estimators = frozenset({Estimator.REPARAM})
    #: torch's ``RNNBase.mode``: "LSTM", "GRU", "RNN_TANH" or "RNN_RELU" (set by each class)
    mode: str

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(prior, estimator, mu_init_scale, rho_init)
        name = type(self).__name__
        for what, v in (("input_size", input_size), ("hidden_size", hidden_size), ("num_layers", num_layers)):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise UserError(f"{name}: {what} must be an integer > 0, got {v!r}")
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise UserError(f"{name}: dropout must be a number in [0, 1], got {dropout!r}")
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or not 0 <= proj_size < hidden_size:
            raise UserError(f"{name}: proj_size must be an integer in [0, hidden_size={hidden_size}), "
                            f"got {proj_size!r}")
        if dropout > 0 and num_layers == 1:
            direct = type(self).__init__ is _BayesRNNBase.__init__  # BayesLSTM: called by the user's code
            warnings.warn(f"{name}: dropout acts between recurrent layers, so dropout={dropout} with "
                          "num_layers=1 has no effect", stacklevel=2 if direct else 3)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self._has_bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        self.proj_size = proj_size
        gate = _GATES[self.mode] * hidden_size
        out = proj_size or hidden_size
        factory = {"device": device, "dtype": dtype}
        names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(num_layers):
            for direction in range(self.num_directions):
                sfx = f"l{layer}" + ("_reverse" if direction else "")
                inp = input_size if layer == 0 else out * self.num_directions
                shapes: list[tuple[str, tuple[int, ...]]] = [(f"weight_ih_{sfx}", (gate, inp)),
                                                             (f"weight_hh_{sfx}", (gate, out))]
                if bias:
                    shapes += [(f"bias_ih_{sfx}", (gate,)), (f"bias_hh_{sfx}", (gate,))]
                if proj_size:
                    shapes.append((f"weight_hr_{sfx}", (proj_size, hidden_size)))
                for n, shape in shapes:
                    self._register_posterior(n, shape, factory)
                names += [n for n, _ in shapes]
                self._all_weights.append([n for n, _ in shapes])
        #: the torch names of the weights, in the order of torch's flat weight list
        self._param_names = self._flat_weights_names = tuple(names)
        self.reset_parameters()

    # -- torch's attributes --------------------------------------------------------------------
    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def bias(self) -> bool:  # type: ignore[override]  # torch's RNNBase.bias is a flag, not a tensor
        """Whether the layer has biases (a bool, as on ``torch.nn.RNNBase``)."""
        return self._has_bias

    @property
    def weight(self) -> Tensor:
        raise AttributeError(f"{type(self).__name__} has no 'weight'; its weights are {', '.join(self._param_names)}")

    @property
    def weight_sigma(self) -> Tensor:
        raise AttributeError(f"{type(self).__name__} has no 'weight'; use posterior(name).sigma for its weights")

    @property
    def all_weights(self) -> list[list[Tensor]]:
        """The posterior means, per layer and direction, as ``torch.nn.RNNBase.all_weights``."""
        return [[self._masked(n, self.mu(n)) for n in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """Nothing to do (as ``torch.nn.RNNBase.flatten_parameters`` on a CPU): the weights are drawn anew
        each forward, never one cuDNN buffer; here so that a ``forward`` that calls it keeps working."""

    def __getattr__(self, name: str) -> Any:
        # the torch names (weight_ih_l0, ...) read the posterior mean (masked once pruned)
        if name in self.__dict__.get("_flat_weights_names", ()):
            return self._mean(name)
        return super().__getattr__(name)

    def _fan_in(self) -> int:
        return self.hidden_size  # torch's init: U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))

    # -- conversion (:meth:`BayesModule.from_torch`) ----------------------------------------------
    _torch_option_names: ClassVar[tuple[str, ...]] = ("input_size", "hidden_size", "num_layers", "bias", "batch_first",
                                                      "dropout", "bidirectional")

    @classmethod
    def _from_options(cls, options: dict[str, Any]) -> Self:
        with warnings.catch_warnings():  # torch has already warned about dropout with one layer
            warnings.filterwarnings("ignore", message=".*dropout acts between recurrent layers", category=UserWarning)
            return super()._from_options(options)

    # -- forward -------------------------------------------------------------------------------
    def _hidden_shapes(self, n: int) -> list[tuple[int, int, int]]:
        ld = self.num_layers * self.num_directions
        h = (ld, n, self.proj_size or self.hidden_size)
        return [h, (ld, n, self.hidden_size)] if self.mode == "LSTM" else [h]

    def _run(self, x: Tensor, hs: list[Tensor], params: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        args = (params, self._has_bias, self.num_layers, self.dropout, self.training, self.bidirectional,
                self.batch_first)
        if self.mode == "LSTM":
            out, h, c = torch.lstm(x, hs, *args)
            return out, [h, c]
        out, h = _OPS[self.mode](x, hs[0], *args)
        return out, [h]

    # torch.nn.RNNBase's signature, not BayesModule's generic forward(x) -> Tensor
    def forward(self, input: Tensor, hx: Tensor | tuple[Tensor, Tensor] | None = None  # type: ignore[override]
                ) -> tuple[Tensor, Any]:
        """``input`` (B, T, in) with ``batch_first``, else (T, B, in), or unbatched (T, in);
        returns (output, h_n), for the LSTM (output, (h_n, c_n)), as the torch layer."""
        name = type(self).__name__
        if isinstance(input, PackedSequence):
            raise UserError(f"{name}: packed sequences are not supported; pad the batch instead")
        if not isinstance(input, Tensor) or input.dim() not in (2, 3):
            got = f"a {input.dim()}-d input" if isinstance(input, Tensor) else type(input).__name__
            raise UserError(f"{name}: expected a 3-d (batched) or 2-d (unbatched) input, got {got}")
        if input.shape[-1] != self.input_size:
            raise UserError(f"{name}: input.size(-1) must be input_size={self.input_size}, got {input.shape[-1]}")
        lstm = self.mode == "LSTM"
        if hx is None:
            hs = None
        elif lstm:
            if not (isinstance(hx, (tuple, list)) and len(hx) == 2 and all(isinstance(t, Tensor) for t in hx)):
                raise UserError(f"{name}: hx must be a pair (h_0, c_0) of tensors, got {type(hx).__name__}")
            hs = list(hx)
        elif isinstance(hx, Tensor):
            hs = [hx]
        else:
            raise UserError(f"{name}: hx must be a tensor, got {type(hx).__name__}")
        batched = input.dim() == 3
        bdim = 0 if self.batch_first else 1
        kf = fold_samples()
        k = kf if self.is_sampling() else None
        if k is not None and (not batched or input.shape[bdim] % k):
            bad = (f"an unbatched {tuple(input.shape)} input" if not batched else
                   f"{input.shape[bdim]} rows along dim {bdim}, not a multiple of {k}")
            raise UserError(
                f"{name}: inside a {k}-sample pass (the samples folded into the batch dimension, k*B rows) it "
                f"got {bad}; its batch dimension is {bdim} (batch_first={self.batch_first}): give it (k*B, T, in) "
                "inputs with batch_first=True, (T, k*B, in) with batch_first=False (forward_samples(..., "
                f"batch_dim={bdim}))" + (SEQUENCE_FIRST_HINT if getattr(FOLD.get(), "dim", 0) else ""))
        if hs is not None and any(t.dim() != (3 if batched else 2) for t in hs):
            raise UserError(f"{name}: a {input.dim()}-d input needs a {input.dim()}-d hx, got "
                            f"{'/'.join(f'{t.dim()}-d' for t in hs)}")
        if not batched:
            input = input.unsqueeze(bdim)
            hs = None if hs is None else [t.unsqueeze(1) for t in hs]
        n = input.shape[bdim]
        rows = n // kf if kf is not None and n % kf == 0 else n  # an hx of B rows serves the k samples
        if hs is None:
            hs = [input.new_zeros(s) for s in self._hidden_shapes(n)]
        else:
            if kf is not None and n != rows:  # an hx whose layers*directions equal B: fold_inputs repeated
                hs = [t[:w[0]] if t.shape == (kf * w[0], rows, w[2]) and w[0] == rows else t  # its dim 0: undo
                      for t, w in zip(hs, self._hidden_shapes(n))]
            for t, want in zip(hs, self._hidden_shapes(n)):
                ok = (t.shape[0], t.shape[2]) == (want[0], want[2]) and t.shape[1] in (n, rows)
                if not ok:
                    raise UserError(f"{name}: expected a hidden state of shape {want}, got {tuple(t.shape)}")
            if k is None:
                hs = [t if t.shape[1] == n else t.repeat(1, n // rows, 1) for t in hs]

        if not self.is_sampling():
            out, hn = self._run(input, hs, [self._masked(p, self.mu(p)) for p in self._param_names])
        elif k is None:
            out, hn = self._run(input, hs, [self._masked(p, self._draw(p, None)[2]) for p in self._param_names])
        else:
            ws = [self._masked(p, self._draw(p, k)[2]) for p in self._param_names]
            xs = unfold(input, k, bdim, name)
            hks = [unfold(t, k, 1, name) if t.shape[1] == n else t.expand(k, *t.shape) for t in hs]
            outs, hns = [], []
            for j in range(k):
                o, h = self._run(xs[j].contiguous(), [t[j].contiguous() for t in hks], [w[j] for w in ws])
                outs.append(o)
                hns.append(h)
            out = refold(torch.stack(outs), bdim)
            hn = [refold(torch.stack([h[i] for h in hns]), 1) for i in range(len(hs))]
        if not batched:
            out = out.squeeze(bdim)
            hn = [t.squeeze(1) for t in hn]
        return out, (tuple(hn) if lstm else hn[0])

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.mode == "RNN_RELU":
            s += ", nonlinearity='relu'"
        if not self._has_bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s + ", " + super().extra_repr()


class BayesRNN(_BayesRNNBase):
    """Bayesian Elman RNN, as ``torch.nn.RNN`` (``nonlinearity`` ``"tanh"`` or ``"relu"``).

    Example:
        >>> rnn = BayesRNN(10, 20, num_layers=2, batch_first=True)
        >>> out, h_n = rnn(torch.zeros(3, 5, 10))     # (3, 5, 20), (2, 3, 20)
    """

    converts = (nn.RNN,)
    mode = "RNN_TANH"
    _torch_option_names = (*_BayesRNNBase._torch_option_names, "nonlinearity")

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise UserError(f"BayesRNN: unknown nonlinearity {nonlinearity!r}; choose 'tanh' or 'relu'")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0, prior,
                         estimator, mu_init_scale, rho_init, device, dtype)
        self.nonlinearity = nonlinearity
        if nonlinearity == "relu":  # the same weights as tanh's, another kernel
            self.mode = "RNN_RELU"


class BayesLSTM(_BayesRNNBase):
    """Bayesian LSTM, as ``torch.nn.LSTM`` (``proj_size`` included).

    Example:
        >>> lstm = BayesLSTM(10, 20, batch_first=True)
        >>> out, (h_n, c_n) = lstm(torch.zeros(3, 5, 10))
    """

    converts = (nn.LSTM,)
    mode = "LSTM"
    _torch_option_names = (*_BayesRNNBase._torch_option_names, "proj_size")


class BayesGRU(_BayesRNNBase):
    """Bayesian GRU, as ``torch.nn.GRU``.

    Example:
        >>> gru = BayesGRU(10, 20, bidirectional=True)
        >>> out, h_n = gru(torch.zeros(5, 3, 10))     # (5, 3, 40), (2, 3, 20)
    """

    converts = (nn.GRU,)
    mode = "GRU"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        prior: Prior | dict | None = None,
        estimator: Estimator | str = Estimator.REPARAM,
        mu_init_scale: float | None = None,
        rho_init: float = DEFAULT_RHO_INIT,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, 0, prior,
                         estimator, mu_init_scale, rho_init, device, dtype)
