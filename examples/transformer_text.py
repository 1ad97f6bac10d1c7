"""A small Transformer text classifier made Bayesian with ``bbb.bayesianize``, and its uncertainty.

The data is built here: sequences of 12 tokens, each holding one key token (1, 2 or 3: the class)
among filler tokens 4-31. Tokens 32-63 never occur in training. After training, the network is
asked about test sequences like the training ones and about sequences made only of the unseen
tokens: it should be sure of the first and unsure of the second. The embedding, attention and
feed-forward weights all carry a posterior (``bbb.layer_summary`` prints which); the Engine trains
them with the fused kernel, and ``predict`` draws k networks per example.

    python examples/transformer_text.py --steps 300
"""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

import bbb
from bbb.uncertainty import mutual_information, predict, predictive_entropy, predictive_probs

VOCAB, LENGTH, CLASSES, SEEN = 64, 12, 3, 32


class TextClassifier(nn.Module):
    """Embedding + positions -> Transformer encoder -> mean over tokens -> Linear."""

    def __init__(self, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, d)
        self.positions = nn.Embedding(LENGTH, d)
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # positions indexed per example, (B, T): each of k sampled networks gets its own position table
        pos = torch.arange(x.shape[1], device=x.device).expand(x.shape[0], -1)
        h = self.tokens(x) + self.positions(pos)
        return self.head(self.encoder(h).mean(1))


def make_data(n: int, gen: torch.Generator, unseen: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences and their classes; ``unseen=True``: tokens the training never showed, no key."""
    if unseen:
        return torch.randint(SEEN, VOCAB, (n, LENGTH), generator=gen), torch.zeros(n, dtype=torch.long)
    x = torch.randint(CLASSES + 1, SEEN, (n, LENGTH), generator=gen)
    y = torch.randint(0, CLASSES, (n,), generator=gen)
    x[torch.arange(n), torch.randint(0, LENGTH, (n,), generator=gen)] = y + 1
    return x, y


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="Example: python examples/transformer_text.py --steps 300 --samples 20")
    p.add_argument("--steps", type=int, default=300, metavar="N", help="training steps (default: 300)")
    p.add_argument("--batch-size", type=int, default=64, metavar="N", help="minibatch size (default: 64)")
    p.add_argument("--train-size", type=int, default=2048, metavar="N",
                   help="training sequences, generated (default: 2048)")
    p.add_argument("--samples", type=int, default=20, metavar="K",
                   help="weight samples per prediction (default: 20)")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="random seed (default: 0)")
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    x, y = make_data(args.train_size, gen)
    x_test, y_test = make_data(512, gen)
    x_ood, _ = make_data(512, gen, unseen=True)

    net = bbb.bayesianize(TextClassifier(), prior=bbb.GaussianPrior(1.0), from_weights=False,
                          skip=[nn.LayerNorm])  # the norms' scale and shift stay point estimates
    print(bbb.layer_summary(net))
    batches = max(1, args.train_size // args.batch_size)
    elbo = bbb.ELBO(net, "categorical", num_batches=batches, kl_weighting="uniform", num_samples=2)
    engine = bbb.Engine(net, "adam", lr=3e-3, num_samples=2, seed=args.seed)
    net.train()
    for step in range(args.steps):
        i = step % batches
        xb, yb = x[i * args.batch_size:(i + 1) * args.batch_size], y[i * args.batch_size:(i + 1) * args.batch_size]
        with engine.sampling():
            out = elbo(xb, yb, batch_index=i)
        engine.zero_grad()
        (out.loss / len(yb)).backward()
        engine.step()

    with torch.no_grad():
        logits = predict(net, x_test, num_samples=args.samples)
        ood = predict(net, x_ood, num_samples=args.samples)
    res = {
        "test_error": float((predictive_probs(logits).argmax(-1) != y_test).float().mean()),
        "entropy_test": float(predictive_entropy(logits).mean()),
        "entropy_unseen_tokens": float(predictive_entropy(ood).mean()),
        "mutual_information_test": float(mutual_information(logits).mean()),
        "mutual_information_unseen_tokens": float(mutual_information(ood).mean()),
    }
    for k, v in res.items():
        print(f"{k:34} {v:.4f}")
    return res


if __name__ == "__main__":
    main()
