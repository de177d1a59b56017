"""Training over 200 optimizer steps where fp16 breaks only late (fc1's weights grow into an fp16 overflow)."""
# A classifier whose first layer's weights grow 8 % per step (a weight decay applied with the wrong sign,
# w <- w * (1 + wd): the kind of bug that shows only after many steps).  A LayerNorm after that layer keeps the FP32
# loss normal, but the layer's output passes fp16's 65504 around step 30 and the mixed run's loss turns non-finite.
#
#     advisor tune examples/train_steps.py:workload --out out/train_steps
#
# runs the 200 steps (FP32 reference and mixed run, torch_npu GradScaler), finds the departure, re-runs candidate
# settings over the steps up to and past it and confirms the chosen one over the 200 steps on the held-out batch;
# out/train_steps/report.html plots both loss curves.
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from advisor.workload import Workload

STEPS = 200
GROWTH = 0.08            # the mis-signed weight decay: fc1's weights grow 8 % per step
OVERFLOW_STEP = 30       # the step the initial weights are scaled for (fc1's output passes 65504 about here)


class Classifier(nn.Module):
    def __init__(self, d_in: int = 32, hidden: int = 32, classes: int = 4):
        super().__init__()
        self.fc1, self.norm = nn.Linear(d_in, hidden), nn.LayerNorm(hidden)
        self.fc2, self.out = nn.Linear(hidden, hidden), nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.fc2(torch.relu(self.norm(self.fc1(x))))))


class SignBugSGD(torch.optim.SGD):
    """SGD whose weight decay on the first layer has the wrong sign: those weights grow by (1 + wd) per step."""

    def __init__(self, params, lr: float, grow: tuple, wd: float):
        super().__init__(params, lr=lr, momentum=0.9)
        self.grow, self.wd = {id(p) for p in grow}, wd

    @torch.no_grad()
    def step(self, closure=None):
        out = super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if id(p) in self.grow:
                    p.mul_(1.0 + self.wd)
        return out


def _loss(out: torch.Tensor, batch) -> torch.Tensor:
    return F.cross_entropy(out, batch[1])


def _optimizer(params):
    params = list(params)
    return SignBugSGD(params, lr=0.05, grow=tuple(params[:2]), wd=GROWTH)   # fc1.weight, fc1.bias


def workload() -> Workload:
    torch.manual_seed(0)
    model = Classifier().train()
    batches = []
    for _ in range(5):                                   # the last one is tune's held-out batch
        x = torch.randn(16, 32)
        batches.append((x, (x[:, :4].argmax(1))))        # a learnable rule: the largest of the first 4 features
    with torch.no_grad():                                # fc1's output reaches 65504 about at OVERFLOW_STEP
        a0 = max(float(model.fc1(b[0]).abs().max()) for b in batches)
        c = 65504.0 / (1.0 + GROWTH) ** OVERFLOW_STEP / a0
        model.fc1.weight.mul_(c)
        model.fc1.bias.mul_(c)
    return Workload(model, batches, _loss, name="train_steps", optimizer=_optimizer, steps=STEPS,
                    scaler="torch_npu", dump_every=50)
