"""all-MiniLM-L6-v2 (real weights, examples/minilm.py) with a multi-label head whose sigmoid saturates in FP16.

The encoder is the checkpoint's six layers and mean pooling; the head scores 8 labels per sentence: logits from
a linear layer, ``p = sigmoid(z)``, and the per-label binary log-likelihood ``-(y log p + (1 - y) log(1 - p))``
against the batch's labels (what a multi-label classifier reports for each label).  Its confident logits lie
above 8.32, where ``1 - sigmoid(z) < 2^-12``: in FP16 the sigmoid rounds to exactly 1.0 there and
``log(1 - p)`` is ``log(0)`` -- the scores turn infinite wherever such a label is absent.  The model has 22 M
parameters, so ``advisor capture`` / ``tune`` dump statistics by default (tensors only up to 2 M).

    advisor tune examples/minilm_multilabel.py:workload --engine ge --out out/minilm_multilabel
"""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import torch
from torch import nn

LABELS = 8
SATURATES = math.log(2.0 ** 12)       # 8.32: above it sigmoid(z) rounds to 1.0 in fp16
CONFIDENT = 0.85                      # the quantile of the logits placed just above SATURATES


def _minilm():
    """examples/minilm.py as a module (it is not a package)."""
    name = "_advisor_example_minilm"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "minilm.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


class MultiLabelHead(nn.Module):
    """Linear -> sigmoid -> per-label binary log-likelihood against the labels ``y`` (written out, as scoring
    code often is)."""

    def __init__(self, d: int, labels: int = LABELS):
        super().__init__()
        self.fc = nn.Linear(d, labels)

    def forward(self, pooled: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        p = torch.sigmoid(self.fc(pooled))
        return -(y * torch.log(p) + (1.0 - y) * torch.log(1.0 - p))


class MultiLabelMiniLM(nn.Module):
    """MiniLM (mean-pooled, not normalised) -> MultiLabelHead."""

    def __init__(self):
        super().__init__()
        self.encoder = _minilm().load_model(normalize=False)
        self.head = MultiLabelHead(self.encoder.embeddings.word_embeddings.weight.shape[1])

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(ids, mask), y)


def workload():
    """``(model, [(input_ids, attention_mask, labels), ...])``: 3 batches of 4 real sentences, 8 labels each.
    The head's bias is set so that the most confident 15 % of the logits (over all batches) lie just above
    8.32; the labels are fixed random bits."""
    torch.manual_seed(0)
    m = _minilm()
    model = MultiLabelMiniLM().eval()
    tok = m.load_tokenizer()
    sents = m.SENTENCES[:3 * m.SENTENCES_PER_BATCH]
    g = torch.Generator().manual_seed(1)
    batches = []
    for i in range(0, len(sents), m.SENTENCES_PER_BATCH):
        ids, mask = tok.batch(sents[i:i + m.SENTENCES_PER_BATCH])
        batches.append((ids, mask, (torch.rand(ids.shape[0], LABELS, generator=g) < 0.5).float()))
    with torch.no_grad():
        z = torch.cat([model.head.fc(model.encoder(ids, mask)) for ids, mask, _ in batches]).flatten()
        model.head.fc.bias += SATURATES + 0.25 - torch.quantile(z, CONFIDENT)
    return model, batches
