"""Transformer block whose unscaled attention scores reach ~1e4 before softmax: fp16 rounding of the scores (ulp 8) wipes out their small differences."""
from __future__ import annotations

import torch
from torch import nn

D_MODEL = 32
N_HEADS = 2
SEQ = 16
BATCH = 2
SINK = 100.0          # constant query/key channel: adds SINK**2 = 1e4 to every score of a row


class Block(nn.Module):
    """Pre-LN-free post-norm transformer block with hand-written (unfused) attention.

    Channel 0 of every head's query and key carries a constant SINK (an "attention sink"-like
    channel from a bias, with a zero weight row).  It adds SINK**2 = 1e4 to all scores of a row,
    which softmax cancels in exact arithmetic; the informative part of the scores is O(1).
    In fp16 the scores are rounded to multiples of 8, so the attention pattern is destroyed.
    """

    def __init__(self, d: int = D_MODEL, heads: int = N_HEADS):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, 4 * d)
        self.ff2 = nn.Linear(4 * d, d)
        self.ln2 = nn.LayerNorm(d)
        with torch.no_grad():
            for lin in (self.q, self.k):
                lin.weight.mul_(1.5)
                lin.bias.zero_()
                for h in range(heads):
                    lin.weight[h * self.dh].zero_()       # sink channel: no dependence on x
                    lin.bias[h * self.dh] = SINK
            self.v.weight.mul_(3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q = self.q(x).view(b, s, self.heads, self.dh).transpose(1, 2)
        k = self.k(x).view(b, s, self.heads, self.dh).transpose(1, 2)
        v = self.v(x).view(b, s, self.heads, self.dh).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1))   # unscaled: ~1e4 (no 1/sqrt(d))
        attn = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(attn, v).transpose(1, 2).reshape(b, s, d)
        h = self.ln1(x + self.o(ctx))
        return self.ln2(h + self.ff2(torch.relu(self.ff1(h))))


def workload():
    torch.manual_seed(0)
    model = Block().eval()
    batches = [(torch.randn(BATCH, SEQ, D_MODEL),) for _ in range(4)]
    return model, batches
