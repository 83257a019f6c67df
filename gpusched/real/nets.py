"""The torch side of the real model catalogue (:mod:`gpusched.real.models`): modules and synthetic batches.

Imported only by job processes (and for parameter counts), so the backend itself never loads torch.
"""

from __future__ import annotations

import torch
from torch import nn

from gpusched.real.models import ModelSize


class _ResBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(x + self.b2(self.c2(y)))


class ResNetSmall(nn.Module):
    """ResNet-style CNN: stem conv, ``depth`` residual blocks, global pool, 10-way classifier."""

    def __init__(self, s: ModelSize) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, s.width, 3, padding=1, bias=False), nn.BatchNorm2d(s.width), nn.ReLU())
        self.blocks = nn.Sequential(*[_ResBlock(s.width) for _ in range(s.depth)])
        self.head = nn.Linear(s.width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))


class EncoderSmall(nn.Module):
    """Transformer encoder over token ids: embedding, ``depth`` layers, mean pool, classifier."""

    vocab = 1000

    def __init__(self, s: ModelSize) -> None:
        super().__init__()
        heads = 4 if s.width % 4 == 0 else 1
        self.emb = nn.Embedding(self.vocab, s.width)
        layer = nn.TransformerEncoderLayer(s.width, heads, 2 * s.width, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, s.depth, enable_nested_tensor=False)
        self.head = nn.Linear(s.width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.emb(x)).mean(dim=1))


class MlpSmall(nn.Module):
    """MLP: ``depth`` hidden layers of ``width`` units."""

    def __init__(self, s: ModelSize) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = s.input
        for _ in range(s.depth):
            layers += [nn.Linear(d, s.width), nn.ReLU()]
            d = s.width
        layers.append(nn.Linear(d, 10))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def build(size: ModelSize) -> nn.Module:
    return {"cnn": ResNetSmall, "encoder": EncoderSmall, "mlp": MlpSmall}[size.arch](size)


def synthetic_batch(size: ModelSize, gen: torch.Generator, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of synthetic inputs and labels (drawn from ``gen``)."""
    b = size.batch
    if size.arch == "cnn":
        x = torch.randn(b, 3, size.input, size.input, generator=gen)
    elif size.arch == "encoder":
        x = torch.randint(0, EncoderSmall.vocab, (b, size.input), generator=gen)
    else:
        x = torch.randn(b, size.input, generator=gen)
    y = torch.randint(0, 10, (b,), generator=gen)
    return x.to(device), y.to(device)
