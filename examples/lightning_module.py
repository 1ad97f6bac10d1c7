"""Bayes by Backprop in a PyTorch Lightning ``LightningModule``.

The network and its ``ELBO`` sit side by side in the module. The ELBO only references the
network (it does not own it), so the checkpoint holds each weight once, and
``self.parameters()`` already includes the likelihood's own parameters (none for
``"categorical"``; a learned noise for ``bbb.Gaussian(learn_sigma=True)``).

Needs the ``lightning`` extra: ``pip install '.[lightning]'`` (from a clone).

    python examples/lightning_module.py --epochs 1

The data are found where ``bbb`` finds them: ``--data-dir``, else ``$BBB_DATA``, else
``~/.cache/bbb`` (downloaded there when missing); without them it stops with a one-line error.
``--synthetic`` runs on generated images instead, as a smoke test, and says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import bbb
from bbb.data import load_mnist
from bbb.errors import BBBError


class BayesClassifier(pl.LightningModule):
    def __init__(self, num_batches: int, num_samples: int = 1, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = bbb.bayesianize(nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)),
                                   from_weights=False)
        self.elbo = bbb.ELBO(self.net, "categorical", num_batches=num_batches, num_samples=num_samples)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        out = self.elbo(x, y, batch_index=batch_idx % self.elbo.num_batches)
        self.log_dict({"train/nll": out.nll / len(x), "train/kl": out.kl}, prog_bar=True)
        return out.loss / len(x)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = bbb.uncertainty.predict(self.net, x, num_samples=10)
        probs = bbb.uncertainty.predictive_probs(logits)
        self.log("val/error", bbb.uncertainty.error_rate(probs, y))
        self.log("val/mutual_information", bbb.uncertainty.mutual_information(logits).mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def load(split: str, limit: int, data_dir: str | None, seed: int = 0, synthetic: bool = False):
    """(N, 28, 28) floats and labels: MNIST found where ``bbb`` looks (``data_dir``, else $BBB_DATA,
    else ~/.cache/bbb), or generated images when ``synthetic``."""
    if not synthetic:
        x, y = load_mnist(split, "mnist", data_dir)
        return x[:limit].float() / 255.0, y[:limit]
    g = torch.Generator().manual_seed(seed + (split == "test"))
    y = torch.randint(0, 10, (limit,), generator=g)
    return torch.rand(10, 28, 28, generator=torch.Generator().manual_seed(seed))[y] + 0.5 * torch.randn(
        limit, 28, 28, generator=g), y


def main(argv: list[str] | None = None) -> dict[str, float]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                epilog="Example: python examples/lightning_module.py --epochs 1")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="data folder with mnist/ (default: $BBB_DATA, else ~/.cache/bbb, as bbb)")
    p.add_argument("--synthetic", action="store_true",
                   help="generated images instead of MNIST: a smoke test whose numbers mean nothing")
    p.add_argument("--train-size", type=int, default=60000, metavar="N", help="training images used (default: 60000)")
    p.add_argument("--test-size", type=int, default=10000, metavar="N",
                   help="test images used for validation (default: 10000)")
    p.add_argument("--epochs", type=int, default=1, metavar="N", help="training epochs (default: 1)")
    p.add_argument("--batch-size", type=int, default=128, metavar="N", help="minibatch size (default: 128)")
    p.add_argument("--out", default="lightning_logs", metavar="DIR",
                   help="Lightning's default_root_dir (default: lightning_logs)")
    args = p.parse_args(argv)
    pl.seed_everything(0, verbose=False)
    if args.synthetic:
        print("lightning_module: --synthetic: generated images, not MNIST; a smoke test, the numbers below say "
              "nothing about real data", file=sys.stderr)
    train = DataLoader(TensorDataset(*load("train", args.train_size, args.data_dir, synthetic=args.synthetic)),
                       batch_size=args.batch_size, shuffle=True)
    val = DataLoader(TensorDataset(*load("test", args.test_size, args.data_dir, synthetic=args.synthetic)),
                     batch_size=1000)
    model = BayesClassifier(num_batches=len(train), num_samples=2)
    trainer = pl.Trainer(max_epochs=args.epochs, accelerator="cpu", devices=1, default_root_dir=args.out,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    trainer.fit(model, train, val)
    keys = list(model.state_dict())
    assert len(keys) == len(set(keys)) == len(model.net.state_dict()), "ELBO must not duplicate the weights"
    res = {k: float(v) for k, v in trainer.callback_metrics.items()}
    for k, v in sorted(res.items()):
        print(f"{k:>24}: {v:.4f}")
    return res


if __name__ == "__main__":
    try:
        main()
    except BBBError as e:  # missing data, a bad value: one line, as bbb says it
        print(f"{Path(__file__).name}: error: {e}", file=sys.stderr)
        sys.exit(2)
