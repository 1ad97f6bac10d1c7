"""The networks of bench/bench_networks.py and their random data.

LeNet-5, a small LSTM and a small Transformer (issue 14); a BERT-style encoder (transformers'
``BertForSequenceClassification`` from a small config, random init, nothing downloaded) and a
ResNet-18 built by hand (no torchvision) (issue 53). ``tiny=True`` builds each at a width and
input size for the bench's tests only (the same layers, meaningless numbers).
"""

from __future__ import annotations

from typing import Any

NUM_CLASSES = 10
#: distinct random minibatches each child cycles through (made before the timing)
DATA_BATCHES = 4
#: the BERT-style encoder: BERT-mini's shape (4 layers, 256 wide, 4 heads, 1024 feed-forward)
#: with BERT's vocabulary size, over sequences of BERT_SEQ tokens; tiny: 1 layer, 32 wide
BERT = {"vocab_size": 30522, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
        "intermediate_size": 1024, "max_position_embeddings": 512}
BERT_TINY = {"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
             "intermediate_size": 64, "max_position_embeddings": 64}
BERT_SEQ, BERT_SEQ_TINY = 64, 16
#: ResNet-18 (He et al. 2016) in its CIFAR form: a 3x3 stem, no max-pool, widths w, 2w, 4w, 8w
RESNET_WIDTH, RESNET_WIDTH_TINY = 64, 8
RESNET_SIDE, RESNET_SIDE_TINY = 32, 16
#: batch of the tiny builds (tests)
TINY_BATCH = 4

ARCHS: dict[str, dict[str, Any]] = {
    "lenet": {"batch": 128, "text": "LeNet-5 as examples/fashion_cnn.py: conv 1-6 5x5 (pad 2), max-pool, conv 6-16 "
                                    "5x5, max-pool, 400-120-84-10 with ReLU and dropout 0.1; 1x28x28 images"},
    "lstm": {"batch": 64, "text": "1-layer LSTM, 32 features -> 128 hidden, batch_first, over 32 steps; the last "
                                  "step -> Linear(128, 10)"},
    "transformer": {"batch": 64, "text": "Embedding(1000, 64) + 2 TransformerEncoderLayer(64, 4 heads, ff 128, "
                                         "dropout 0.1, batch_first) + mean over 32 tokens + Linear(64, 10)"},
    "bert": {"batch": 32, "steps": 10,
             "text": f"transformers' BertForSequenceClassification from BertConfig(vocab {BERT['vocab_size']}, "
                     f"{BERT['num_hidden_layers']} layers, hidden {BERT['hidden_size']}, "
                     f"{BERT['num_attention_heads']} heads, intermediate {BERT['intermediate_size']}, 10 labels), "
                     f"random init, {BERT_SEQ} tokens; the logits of its output"},
    "resnet18": {"batch": 32, "steps": 10,
                 "text": f"ResNet-18 built by hand (CIFAR form: conv 3x3 stem, no max-pool, 4 stages of 2 basic "
                         f"blocks, widths {RESNET_WIDTH}-{8 * RESNET_WIDTH}, BatchNorm, global average pool, "
                         f"Linear({8 * RESNET_WIDTH}, 10)); 3x{RESNET_SIDE}x{RESNET_SIDE} images"},
}


def _resnet18(width: int):
    import torch.nn as nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            out = self.bn1(self.conv1(x)).relu()
            return (self.bn2(self.conv2(out)) + self.shortcut(x)).relu()

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
            blocks, cin = [], width
            for i, stride in enumerate((1, 2, 2, 2)):
                cout = width * 2 ** i
                blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*blocks)
            self.head = nn.Linear(cin, NUM_CLASSES)

        def forward(self, x):
            return self.head(self.layers(self.stem(x)).mean((2, 3)))

    return ResNet18()


def _bert(tiny: bool):
    import torch.nn as nn

    try:
        from transformers import BertConfig, BertForSequenceClassification
    except ImportError as e:
        raise ModuleNotFoundError(f"transformers: {e}") from None
    config = BertConfig(**(BERT_TINY if tiny else BERT), num_labels=NUM_CLASSES)

    class BertLogits(nn.Module):
        """The model as transformers builds it; the bench's loss reads its output's logits."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = BertForSequenceClassification(config)

        def forward(self, input_ids):
            return self.bert(input_ids=input_ids).logits

    return BertLogits()


def build_network(arch: str, tiny: bool = False):
    import torch.nn as nn

    if arch == "lenet":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, NUM_CLASSES))

    class LSTMClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = nn.LSTM(32, 128, batch_first=True)
            self.head = nn.Linear(128, NUM_CLASSES)

        def forward(self, x):
            out, _ = self.lstm(x)
            return self.head(out[:, -1])

    class TextTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(1000, 64)
            layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.1, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = nn.Linear(64, NUM_CLASSES)

        def forward(self, tokens):
            return self.head(self.encoder(self.emb(tokens)).mean(1))

    if arch == "lstm":
        return LSTMClassifier()
    if arch == "transformer":
        return TextTransformer()
    if arch == "bert":
        return _bert(tiny)
    if arch == "resnet18":
        return _resnet18(RESNET_WIDTH_TINY if tiny else RESNET_WIDTH)
    raise ValueError(f"unknown architecture {arch!r}")


def make_batches(arch: str, batch: int, device, n: int = DATA_BATCHES, seed: int = 0, tiny: bool = False):
    """``n`` random (input, label) minibatches of the architecture's shape."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        if arch == "lenet":
            x = torch.rand(batch, 1, 28, 28, generator=g)
        elif arch == "lstm":
            x = torch.randn(batch, 32, 32, generator=g)
        elif arch == "bert":
            vocab = (BERT_TINY if tiny else BERT)["vocab_size"]
            x = torch.randint(0, vocab, (batch, BERT_SEQ_TINY if tiny else BERT_SEQ), generator=g)
        elif arch == "resnet18":
            side = RESNET_SIDE_TINY if tiny else RESNET_SIDE
            x = torch.randn(batch, 3, side, side, generator=g)
        else:
            x = torch.randint(0, 1000, (batch, 32), generator=g)
        y = torch.randint(0, NUM_CLASSES, (batch,), generator=g)
        out.append((x.to(device), y.to(device)))
    return out
