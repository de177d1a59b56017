"""Two independent hazards in different op types (exp overflow, sigmoid underflow into log): two edits are needed."""
from __future__ import annotations

import torch
from torch import nn


class TwoHazards(nn.Module):
    """Branch A: exp of pre-activations ~8..16 (overflows fp16), normalised by its row sum.
    Branch B: log(sigmoid(z)) with z down to ~-30 (sigmoid underflows to 0 in fp16, log(0) = -inf).
    """

    def __init__(self, d_in: int = 32, hidden: int = 48, d_out: int = 8):
        super().__init__()
        self.fa = nn.Linear(d_in, hidden)
        self.fb = nn.Linear(d_in, hidden)
        self.out = nn.Linear(2 * hidden, d_out)
        with torch.no_grad():
            self.fa.bias.fill_(12.0)
            self.fb.weight.mul_(4.0)
            self.fb.bias.fill_(-22.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(self.fa(x))
        a = e / e.sum(dim=-1, keepdim=True)
        b = torch.log(torch.sigmoid(self.fb(x))) / 30.0
        return self.out(torch.cat([a, b], dim=-1))


def workload():
    torch.manual_seed(0)
    model = TwoHazards().eval()
    batches = [(torch.randn(16, 32),) for _ in range(4)]
    return model, batches
