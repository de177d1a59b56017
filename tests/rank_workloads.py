"""A workload whose fp16 hazard depends on its input scale: shared by the multi-rank tests (one rank gets inputs
that overflow, the others do not)."""
from __future__ import annotations

import torch
from torch import nn


class ExpNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.exp(self.fc(x))


def exp_workload(scale: float):
    """exp of inputs in [0, scale): fine in fp16 for scale 1, inf from 11.1 on for scale 20."""
    torch.manual_seed(0)
    net = ExpNet()
    with torch.no_grad():
        net.fc.weight.copy_(torch.eye(8))
        net.fc.bias.zero_()
    return net, [(scale * torch.rand(4, 8),) for _ in range(2)]
