"""Training MLP whose loss is scaled by 1e-5, so fp16 gradients underflow (flush to zero): needs a larger loss scale."""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

LOSS_FACTOR = 1e-5


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, hidden: int = 48, d_out: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def loss_fn(output: torch.Tensor, batch) -> torch.Tensor:
    """MSE against the batch's target, multiplied by a tiny factor (a mis-set loss scale)."""
    return F.mse_loss(output, batch[1]) * LOSS_FACTOR


def workload():
    torch.manual_seed(0)
    model = MLP().train()
    batches = []
    for _ in range(4):
        x = torch.randn(16, 32)
        batches.append((x, 0.1 * torch.randn(16, 4)))
    return model, batches, loss_fn
