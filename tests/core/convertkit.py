"""The networks of the conversion tests (tests/core/test_convert*.py): an MLP with a flatten, a
LeNet, a residual block with batch norms, a Conv1d net, and an input for each."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp_with_flatten() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 32), nn.ReLU(), nn.Linear(32, 3))


def lenet() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 5 * 5, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 3))


class ResBlock(nn.Module):
    def __init__(self, c: int = 4) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, c, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.head = nn.Linear(c, 3)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(h + self.bn2(self.conv2(h)))  # residual add
        h = F.adaptive_avg_pool2d(h, 1).flatten(1)
        return self.head(h)


class Conv1dNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 5, padding="same")
        self.pool = nn.MaxPool1d(2)
        self.fc = nn.Linear(4 * 14, 3)

    def forward(self, x):
        return self.fc(self.pool(F.relu(self.conv(x.view(x.shape[0], 1, -1)))).flatten(1))


ARCHS = {"mlp-flatten": mlp_with_flatten, "lenet": lenet, "resblock": ResBlock}


def example_input(arch: str, b: int) -> torch.Tensor:
    return torch.randn(b, 1, 28, 28)
