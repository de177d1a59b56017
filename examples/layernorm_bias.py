"""LayerNorm right after a linear with bias 1000: fp16 rounding of the linear's output (ulp 0.5-1) shows up one op later, in LayerNorm."""
from __future__ import annotations

import torch
from torch import nn


class LinearLN(nn.Module):
    """fc (bias 1000) -> LayerNorm -> relu [-> depth x (linear, relu)] -> head.  The LayerNorm removes the
    1000 offset, so its output depends only on the O(1) variation that fp16 storage of ~1000 cannot hold.
    ``depth`` adds well-scaled layers after it (examples/onnx_models.py's export uses 8)."""

    def __init__(self, d_in: int = 32, hidden: int = 64, d_out: int = 8, depth: int = 0):
        super().__init__()
        self.fc = nn.Linear(d_in, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.body = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(hidden, hidden), nn.ReLU())])
        self.head = nn.Linear(hidden, d_out)
        with torch.no_grad():
            self.fc.bias.fill_(1000.0)
            for m in self.body:
                if isinstance(m, nn.Linear):     # He-scaled, no bias: the LayerNorm's error reaches the output
                    nn.init.orthogonal_(m.weight, gain=2 ** 0.5)
                    m.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(torch.relu(self.ln(self.fc(x)))))


def workload():
    torch.manual_seed(0)
    model = LinearLN().eval()
    batches = [(torch.randn(16, 32),) for _ in range(4)]
    return model, batches


def deep_workload():
    """The same hazard before 8 well-scaled (Linear, ReLU) layers (examples/onnx_models.py's export): most of
    the compute is after the LayerNorm, so keeping only the two faulty ops keeps most of it in fp16."""
    torch.manual_seed(0)
    model = LinearLN(depth=8).eval()
    batches = [(torch.randn(16, 32),) for _ in range(4)]
    return model, batches
