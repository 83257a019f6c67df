"""The four models of the measured H100 pairs (data/calibration/colocation-h100), in plain torch.

No torchvision or transformers (neither is a dependency): ResNet-50 (bottleneck blocks [3, 4, 6, 3],
224x224, 1000 classes, 25.6 M parameters), BERT-base (12 layers, d 768, 12 heads, 128 tokens) and
GPT-2 small (12 pre-norm causal layers, d 768, 512 tokens, tied LM head) with random weights, as the
measurements used. ``scale="cpu"`` gives small stand-ins of the same shape (fewer, narrower layers,
smaller inputs) so a pair runs on a few CPU cores, as :mod:`gpusched.real.nets` does for the replay jobs.

Imported only by pair worker processes (and tests), never by the orchestrator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

#: model name -> role: "hp" (an inference service, batch 1) or "be" (a training job)
PAIR_MODELS: dict[str, str] = {
    "resnet50_inf": "hp", "bert_inf": "hp", "resnet50_train": "be", "gpt2_train": "be",
}
SCALES = ("full", "cpu")


@dataclass(frozen=True)
class Shape:
    """Size of one pair model. resnet: ``layers`` bottleneck blocks per stage, ``width`` = stem
    channels, ``input`` = image side. Transformers: ``layers``, ``width`` = d_model, ``heads``,
    ``input`` = tokens, ``vocab``."""

    kind: str  # resnet | bert | gpt2
    layers: tuple[int, ...]
    width: int
    input: int
    batch: int
    heads: int = 1
    vocab: int = 10
    classes: int = 1000


SHAPES: dict[tuple[str, str], Shape] = {
    ("resnet50_inf", "full"): Shape("resnet", (3, 4, 6, 3), 64, 224, 1),
    ("resnet50_train", "full"): Shape("resnet", (3, 4, 6, 3), 64, 224, 64),
    ("bert_inf", "full"): Shape("bert", (12,), 768, 128, 1, heads=12, vocab=30522, classes=2),
    ("gpt2_train", "full"): Shape("gpt2", (12,), 768, 512, 8, heads=12, vocab=50257),
    ("resnet50_inf", "cpu"): Shape("resnet", (1, 1, 1, 1), 8, 32, 1, classes=10),
    ("resnet50_train", "cpu"): Shape("resnet", (1, 1, 1, 1), 8, 32, 8, classes=10),
    ("bert_inf", "cpu"): Shape("bert", (2,), 64, 32, 1, heads=4, vocab=1000, classes=2),
    ("gpt2_train", "cpu"): Shape("gpt2", (2,), 64, 64, 4, heads=4, vocab=1000),
}


class _Bottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, stride: int) -> None:
        super().__init__()
        cout = 4 * mid
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.down(x))


class ResNet(nn.Module):
    """ResNet-50 layout (torchvision's, v1.5: stride in the 3x3 conv)."""

    def __init__(self, s: Shape) -> None:
        super().__init__()
        w = s.width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 7, 2, 3, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        blocks: list[nn.Module] = []
        cin = w
        for i, n in enumerate(s.layers):
            mid = w * 2**i
            for j in range(n):
                blocks.append(_Bottleneck(cin, mid, 2 if j == 0 and i > 0 else 1))
                cin = 4 * mid
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, s.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.blocks(self.stem(x)).mean(dim=(2, 3)))


class Transformer(nn.Module):
    """BERT-style encoder (post-norm, classifier on token 0) or GPT-2-style decoder (pre-norm,
    causal mask, LM head tied to the token embedding)."""

    def __init__(self, s: Shape) -> None:
        super().__init__()
        self.causal = s.kind == "gpt2"
        d = s.width
        self.tok = nn.Embedding(s.vocab, d)
        self.pos = nn.Embedding(s.input, d)
        layer = nn.TransformerEncoderLayer(d, s.heads, 4 * d, dropout=0.1, activation="gelu", batch_first=True,
                                           norm_first=self.causal)
        self.layers = nn.TransformerEncoder(layer, s.layers[0], enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        if self.causal:
            self.head = nn.Linear(d, s.vocab, bias=False)
            self.head.weight = self.tok.weight
        else:
            self.head = nn.Linear(d, s.classes)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(s.input) if self.causal else None,
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], device=x.device)
        h = self.layers(self.tok(x) + self.pos(pos), mask=self.mask, is_causal=self.causal)
        h = self.norm(h)
        return self.head(h) if self.causal else self.head(h[:, 0])


def build(name: str, scale: str) -> tuple[nn.Module, Shape]:
    s = SHAPES[(name, scale)]
    return (ResNet(s) if s.kind == "resnet" else Transformer(s)), s


def make_step(name: str, scale: str, device: torch.device, seed: int) -> Callable[[], None]:
    """One unit of work of model ``name``: a batch-1 inference request (hp) or one SGD training
    iteration (be), on synthetic inputs; returns when the work is queued (the caller synchronises)."""
    torch.manual_seed(seed)
    model, s = build(name, scale)
    model = model.to(device)
    gen = torch.Generator().manual_seed(seed)
    if s.kind == "resnet":
        x = torch.randn(s.batch, 3, s.input, s.input, generator=gen).to(device)
    else:
        x = torch.randint(0, s.vocab, (s.batch, s.input), generator=gen).to(device)
    if PAIR_MODELS[name] == "hp":
        model.eval()

        def infer() -> None:
            with torch.inference_mode():
                model(x)

        return infer
    n_out = s.vocab if s.kind == "gpt2" else s.classes
    y_shape = (s.batch, s.input) if s.kind == "gpt2" else (s.batch,)
    y = torch.randint(0, n_out, y_shape, generator=gen).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    model.train()

    def train() -> None:
        opt.zero_grad(set_to_none=True)
        out = model(x)
        loss = loss_fn(out.reshape(-1, n_out), y.reshape(-1))
        loss.backward()
        opt.step()

    return train
