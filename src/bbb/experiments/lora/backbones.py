"""The pretrained backbones of ``bbb reproduce lora`` and the images they see.

Both backbones are pretrained here on MNIST digits 0-4 (seeded, cached in ``<out>/backbones``) and
then frozen; the few-shot tasks reuse their 5-way head, as BLoB reuses a language model's head on
the answer tokens. Each backbone is split in two: ``stem``, the frozen part before the first
adapted layer (computed once per image: the CNN's convolutions; nothing for the ViT), and
``body``, the module that peft wraps (``LORA_TARGETS``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ...data.mnist import load_mnist
from ...io import atomic_torch_save
from .settings import POOL_PER_CLASS, Arch, Task

__all__ = ["Backbone", "LORA_TARGETS", "TaskData", "build_backbone", "load_or_pretrain", "task_data"]

#: the modules of each body that carry LoRA adapters
LORA_TARGETS: dict[Arch, list[str]] = {Arch.CNN: ["fc", "head"], Arch.VIT: ["q_proj", "v_proj", "classifier"]}
NUM_CLASSES = 5


class CNNStem(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class CNNBody(nn.Module):
    """fc 1568 -> 128, ReLU, head 128 -> 5 (the adapted part of the CNN)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32 * 7 * 7, 128)
        self.head = nn.Linear(128, NUM_CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(torch.relu(self.fc(x)))


class ViTBody(nn.Module):
    """transformers' ViT for 28x28 images (patch 7: 16 tokens + CLS), returning the logits."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import ViTConfig, ViTForImageClassification

        cfg = ViTConfig(image_size=28, patch_size=7, num_channels=1, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
        cfg.num_labels = NUM_CLASSES
        cfg._attn_implementation = "eager"  # faster than sdpa for 17 tokens on a CPU
        self.vit = ViTForImageClassification(cfg)

    def forward(self, x: Tensor) -> Tensor:
        return self.vit(pixel_values=x).logits


@dataclass
class Backbone:
    arch: Arch
    stem: nn.Module  #: frozen, before any adapter (identity for the ViT)
    body: nn.Module  #: what peft wraps

    @torch.no_grad()
    def features(self, images: Tensor, batch: int = 1000) -> Tensor:
        """The stem's output for float images (N, 1, 28, 28), computed once per image."""
        self.stem.eval()
        return torch.cat([self.stem(images[i:i + batch]) for i in range(0, len(images), batch)])


def build_backbone(arch: Arch) -> Backbone:
    if arch is Arch.CNN:
        return Backbone(arch, CNNStem(), CNNBody())
    return Backbone(arch, nn.Identity(), ViTBody())


def _images(x: Tensor) -> Tensor:
    """uint8 (N, 28, 28) -> float (N, 1, 28, 28) in [0, 1]."""
    return (x.float() / 255.0).unsqueeze(1)


_RAW: dict[tuple[str, str, str | None], tuple[Tensor, Tensor]] = {}


def _raw(dataset: str, split: str, data_dir: str | None) -> tuple[Tensor, Tensor]:
    key = (dataset, split, data_dir)
    if key not in _RAW:
        _RAW[key] = load_mnist(split, dataset, data_dir=data_dir)
    return _RAW[key]


def load_or_pretrain(arch: Arch, folder: Path, steps: int, seed: int, data_dir: str | None,
                     log: Any = None) -> tuple[Backbone, dict[str, Any]]:
    """The backbone pretrained on MNIST digits 0-4 (Adam 1e-3, batch 64, ``steps`` steps), from
    ``folder/<arch>-seed<seed>-<steps>.pt`` when there, else trained and saved there; with its
    record (accuracy on the MNIST 0-4 test images, seconds)."""
    path = folder / f"{arch}-seed{seed}-{steps}.pt"
    bb = build_backbone(arch)
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        bb.stem.load_state_dict(saved["stem"])
        bb.body.load_state_dict(saved["body"])
        return bb, {k: v for k, v in saved.items() if k not in ("stem", "body")}
    import time

    start = time.perf_counter()
    x, y = _raw("mnist", "train", data_dir)
    keep = y < NUM_CLASSES
    x, y = _images(x[keep]), y[keep]
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    bb = build_backbone(arch)
    model = nn.Sequential(bb.stem, bb.body)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    bar = None
    if log is not None:
        from ...progress import progress_bar

        bar = progress_bar(total=steps, desc=f"pretraining the {arch}", unit="step")
    for _ in range(steps):
        idx = torch.randint(len(x), (64,), generator=g)
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    model.eval()
    xt, yt = _raw("mnist", "test", data_dir)
    keep = yt < NUM_CLASSES
    with torch.no_grad():
        acc = float(torch.cat([model(_images(xt[keep][i:i + 1000])).argmax(-1)
                               for i in range(0, int(keep.sum()), 1000)]).eq(yt[keep]).float().mean())
    record = {"arch": str(arch), "seed": seed, "steps": steps, "test_accuracy_0_4": acc,
              "seconds": round(time.perf_counter() - start, 1)}
    folder.mkdir(parents=True, exist_ok=True)
    atomic_torch_save(path, {"stem": bb.stem.state_dict(), "body": bb.body.state_dict(), **record})
    if log is not None:
        log(f"pretrained the {arch} on MNIST 0-4: test accuracy {acc:.4f} ({record['seconds']} s); cached in {path}")
    return bb, record


@dataclass
class TaskData:
    """One task's images as the body sees them (stem features): the few-shot pool per class,
    the test set and the out-of-distribution sets."""

    pool: Tensor  #: (P, ...) candidate training images, grouped by class
    pool_y: Tensor
    test: Tensor
    test_y: Tensor
    ood: dict[str, Tensor]  #: name -> images


def _subset(n_total: int, n: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n_total, generator=g)[:n]


def task_data(task: Task, bb: Backbone, n_test: int, n_ood: int, data_dir: str | None,
              pool_per_class: int = POOL_PER_CLASS) -> TaskData:
    """The task's images through the backbone's stem. In-distribution classes are 5-9 of MNIST
    (``digits``) or 0-4 of Fashion-MNIST (``fashion``), relabelled 0-4; the few-shot pool is the
    first ``pool_per_class`` training images of each class after a fixed shuffle; the test and
    out-of-distribution sets are fixed seeded subsets of the test splits (the same for every run)."""
    own, other = ("mnist", "fashion-mnist") if task is Task.DIGITS else ("fashion-mnist", "mnist")
    lo = 5 if task is Task.DIGITS else 0  # the task's classes: lo .. lo+4
    x, y = _raw(own, "train", data_dir)
    order = _subset(len(y), len(y), 1234)
    pool_idx = torch.cat([order[y[order] == lo + c][:pool_per_class] for c in range(NUM_CLASSES)])
    xt, yt = _raw(own, "test", data_dir)
    inside = ((yt >= lo) & (yt < lo + NUM_CLASSES)).nonzero().flatten()
    test_idx = inside[_subset(len(inside), n_test, 1)]
    held = ((yt < lo) | (yt >= lo + NUM_CLASSES)).nonzero().flatten()
    held_idx = held[_subset(len(held), n_ood, 2)]
    xo, _ = _raw(other, "test", data_dir)
    other_idx = _subset(len(xo), n_ood, 3)
    held_name = "mnist0-4" if task is Task.DIGITS else "fashion5-9"
    other_name = "fashion" if task is Task.DIGITS else "mnist"

    def feats(images: Tensor) -> Tensor:
        return bb.features(_images(images))

    return TaskData(pool=feats(x[pool_idx]), pool_y=y[pool_idx] - lo, test=feats(xt[test_idx]),
                    test_y=yt[test_idx] - lo,
                    ood={held_name: feats(xt[held_idx]), other_name: feats(xo[other_idx])})
