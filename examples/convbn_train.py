"""Healthy conv + train-mode BatchNorm training step with biased convs: clean control for gradient judging."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ConvBN(nn.Module):
    """Two conv -> BatchNorm (train mode) -> ReLU blocks, global average pooling and a linear head.

    The convs keep their bias (``bias=True``, PyTorch's default, as many models do before a BatchNorm): the
    BatchNorm subtracts the per-channel batch mean, so each conv bias cancels and its gradient is zero in exact
    arithmetic -- in FP32 it comes out as rounding residue about 1e-7 of the other gradients.  Every other gradient,
    the loss and the outputs agree between fp16 and FP32; a cosine of the residue would be noise.
    """

    def __init__(self, c_in: int = 3, width: int = 8, classes: int = 4):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c_in, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU())
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x).mean(dim=(2, 3)))


def loss_fn(output: torch.Tensor, batch) -> torch.Tensor:
    """Cross-entropy against the batch's labels."""
    return F.cross_entropy(output, batch[1])


def workload():
    torch.manual_seed(0)
    model = ConvBN().train()
    batches = [(torch.randn(8, 3, 12, 12), torch.randint(0, 4, (8,))) for _ in range(4)]
    return model, batches, loss_fn
