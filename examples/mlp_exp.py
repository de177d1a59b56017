"""MLP with an exp-normalised gate whose pre-activations exceed 11, so exp overflows fp16 (max 65504)."""
from __future__ import annotations

import torch
from torch import nn


class ExpMLP(nn.Module):
    """fc1 -> exp -> divide by the row sum (a hand-written softmax-like gate) -> fc2.

    fc1's bias shifts the pre-activations to ~8..16: exp of anything above ~11.09 is inf in fp16,
    and inf / inf in the normalisation gives NaN.  In fp32 the gate is well defined.
    """

    def __init__(self, d_in: int = 32, hidden: int = 64, d_out: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, d_out)
        with torch.no_grad():
            self.fc1.bias.fill_(12.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(self.fc1(x))
        gate = e / e.sum(dim=-1, keepdim=True)
        return self.fc2(gate)


def workload():
    torch.manual_seed(0)
    model = ExpMLP().eval()
    batches = [(torch.randn(16, 32),) for _ in range(4)]
    return model, batches
