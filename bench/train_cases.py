"""Generated training cases whose problem appears only after some optimizer steps (``make_train_case(kind,
seed)``), each with the step it must be detected at, worked out by an oracle independent of the emulator:
plain eager PyTorch FP32 training of the same model, batches and optimizer, and the scaler's arithmetic.

Kinds (sizes, rates and scales drawn from ``random.Random(seed)``):

* ``weight_growth`` -- a Linear whose weights grow by a factor r per applied step (the optimizer multiplies
  them: a mis-signed weight decay) feeds a LayerNorm, so the FP32 loss stays bounded while the Linear's output
  grows; in fp16 it overflows at the first step k where the FP32 run's max |output| passes 65504 (the oracle:
  a forward hook in eager FP32 training).  The mixed run's loss turns non-finite at step k.
* ``grad_spiral`` -- a loss multiplied by a large constant C (with the learning rate divided by C, so FP32 trains
  normally): its gradient is beyond fp16's range at every scale down to below 1, so every step overflows in the
  same backward op and the dynamic scale halves until it falls below the floor (1) at step
  ``floor(log2(init_scale)) + 1`` -- the scaler's arithmetic, given the oracle's FP32 gradient magnitude.
* ``bf16_drift`` -- mixed_bfloat16 on ascend910b: a common offset (a parameter the optimizer multiplies by r per
  step) is added to a Linear's output and cancelled by a centring (``h - h.mean(-1)``), exactly in FP32 (the
  offset's gradient is zero there); in bf16 (8 significand bits) ``h`` rounds to a grid of ``ulp(offset)``, so the
  centred signal's error grows with the offset and the loss drifts away from FP32 late.  The oracle: eager PyTorch
  training of the same model with every op's inputs and output cast through ``torch.bfloat16`` (plain PyTorch, not
  the emulator), judged by the loss rule of ``compare.steps`` (relative difference above the tolerance for
  ``LOSS_PATIENCE`` steps).
* ``healthy`` -- a small MLP regression under the default torch_npu scaler: no departure.
* ``diverging`` -- a learning rate far too large: the FP32 run diverges too (not a precision problem); the oracle
  gives the first step where the eager FP32 loss is non-finite or 10x its first value.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from advisor.workload import Workload

FP16_MAX = 65504.0
KINDS = ("weight_growth", "grad_spiral", "bf16_drift", "healthy", "diverging")


class GrowingSGD(torch.optim.SGD):
    """SGD that also multiplies the parameters of its first group flagged ``grow`` by ``factor`` every step."""

    def __init__(self, params, lr: float, grow: tuple = (), factor: float = 1.0):
        super().__init__(params, lr=lr)
        self.grow_ids, self.factor = {id(p) for p in grow}, factor

    @torch.no_grad()
    def step(self, closure=None):
        out = super().step(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if id(p) in self.grow_ids:
                    p.mul_(self.factor)
        return out


class GrowNet(nn.Module):
    def __init__(self, d_in: int, hidden: int, d_out: int):
        super().__init__()
        self.grow, self.norm, self.head = nn.Linear(d_in, hidden), nn.LayerNorm(hidden), nn.Linear(hidden, d_out)

    def forward(self, x, y):
        return self.head(torch.relu(self.norm(self.grow(x))))


class OffsetNet(nn.Module):
    """``head(h - mean(h))`` with ``h = lin(x) + offset``: the centring cancels the common offset exactly in FP32
    (its gradient is zero there).  ``bf16``: every op's inputs and output rounded to bf16 in plain PyTorch (the
    oracle's mixed run)."""

    def __init__(self, d_in: int, hidden: int, d_out: int, offset: float):
        super().__init__()
        self.lin = nn.Linear(d_in, hidden)
        self.offset = nn.Parameter(torch.full((1,), float(offset)))
        self.head = nn.Linear(hidden, d_out)
        self.bf16 = False

    def forward(self, x, y):
        r = (lambda t: t.to(torch.bfloat16).float()) if self.bf16 else (lambda t: t)
        h = r(r(F.linear(r(x), r(self.lin.weight), r(self.lin.bias))) + r(self.offset))
        z = r(h - r(h.mean(-1, keepdim=True)))
        return r(F.linear(z, r(self.head.weight), r(self.head.bias)))


class MLP(nn.Module):
    def __init__(self, d_in: int, hidden: int, d_out: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, d_out)

    def forward(self, x, y):
        return self.fc2(torch.relu(self.fc1(x)))


@dataclass
class TrainCase:
    """A generated case: ``workload()`` builds a fresh Workload; ``expected_step`` (None: no departure) and
    ``expected_reason`` are the oracle's; ``lead_param`` / ``lead_op`` / ``lead_phase`` what must lead there
    (None: not checked)."""

    name: str
    kind: str
    seed: int
    workload: Callable[[], Workload]
    steps: int
    expected_step: int | None
    expected_reason: str | None
    precision: bool = True
    lead_param: str | None = None
    lead_op: str | None = None
    lead_phase: str | None = None
    capture_kw: dict = field(default_factory=dict)     # capture's chip / mode for the case (default: the defaults)


def make_train_case(kind: str, seed: int) -> TrainCase:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    return {"weight_growth": _weight_growth, "grad_spiral": _grad_spiral, "bf16_drift": _bf16_drift,
            "healthy": _healthy, "diverging": _diverging}[kind](seed)


# ---------------------------------------------------------------------- the cases
def _weight_growth(seed: int) -> TrainCase:
    rnd = random.Random(seed)
    d_in, hidden, d_out = rnd.choice((8, 12, 16)), rnd.choice((16, 24, 32)), rnd.choice((2, 4))
    factor = rnd.uniform(1.15, 1.4)
    k_target = rnd.randint(8, 20)          # the step the overflow is aimed at (the oracle measures the real one)
    n_batches, batch = rnd.randint(2, 4), rnd.choice((8, 16))
    lr = rnd.choice((0.01, 0.02))

    def build(calibrate: bool = True) -> Workload:
        torch.manual_seed(seed)
        model = GrowNet(d_in, hidden, d_out).train()
        batches = [(torch.randn(batch, d_in), torch.randn(batch, d_out)) for _ in range(n_batches)]
        if calibrate:      # initial max |grow(x)| so that r^k_target lands past fp16's max
            with torch.no_grad():
                a0 = max(float(model.grow(b[0]).abs().max()) for b in batches)
                c = FP16_MAX / factor ** (k_target - 0.5) / a0
                model.grow.weight.mul_(c)
                model.grow.bias.mul_(c)
        return Workload(model, batches, _mse, name=f"weight_growth_{seed}",
                        optimizer=lambda p: _growing(p, lr, factor), steps=k_target + 8,
                        scaler="torch_npu", scaler_options={"init_scale": 2.0 ** 10}, dump_every=4)
    k = _first_growth_overflow(build(), k_target + 8)
    return TrainCase(f"weight_growth_{seed}", "weight_growth", seed, build, k_target + 8, k, "non-finite",
                     lead_op="Aten.addmm.default.0")


def _grad_spiral(seed: int) -> TrainCase:
    rnd = random.Random(seed)
    d_in, hidden, d_out = rnd.choice((8, 16)), rnd.choice((16, 32)), rnd.choice((2, 4))
    scaler, init_log2 = rnd.choice(("torch_npu", "apex")), rnd.choice((10, 12, 14, 16))
    n_batches, batch = rnd.randint(2, 4), rnd.choice((8, 16))
    big = 10.0 ** rnd.uniform(8.0, 9.0)
    lr = 1e-4 / big
    opts = {"init_scale": 2.0 ** init_log2}

    def build() -> Workload:
        torch.manual_seed(seed)
        model = MLP(d_in, hidden, d_out).train()
        batches = [(torch.randn(batch, d_in), torch.randn(batch, d_out)) for _ in range(n_batches)]
        return Workload(model, batches, lambda o, b: big * _mse(o, b), name=f"grad_spiral_{seed}",
                        optimizer=lambda p: torch.optim.SGD(p, lr=lr), steps=init_log2 + 4, scaler=scaler,
                        scaler_options=dict(opts), dump_every=4)
    steps = init_log2 + 4
    g = _min_output_grad(build(), steps)     # the smallest max |dL/d output| of FP32 training over the steps
    # every step overflows while scale * g > fp16 max; the scale halves from 2^init each step, so step s uses
    # 2^(init - s): the overflow must last past the collapse step (scale 2^-1) to step init + 2 (scale 2^-2)
    assert g * 2.0 ** -2 > FP16_MAX, "the generated constant is too small for a spiral"
    collapse = int(math.floor(math.log2(2.0 ** init_log2 / 1.0))) + 1     # first step whose scale < 1
    return TrainCase(f"grad_spiral_{seed}", "grad_spiral", seed, build, steps, collapse, "scale-collapse",
                     lead_param="fc2.weight", lead_phase="bwd")


def _bf16_drift(seed: int) -> TrainCase:
    rnd = random.Random(seed)
    d_in, hidden, d_out = rnd.choice((8, 12, 16)), rnd.choice((16, 24, 32)), rnd.choice((2, 4))
    factor = rnd.uniform(1.15, 1.3)
    offset0 = rnd.uniform(0.5, 1.0)
    n_batches, batch, lr = rnd.randint(2, 4), rnd.choice((8, 16)), rnd.choice((0.01, 0.02))
    steps = 40

    def build() -> Workload:
        torch.manual_seed(seed)
        model = OffsetNet(d_in, hidden, d_out, offset0).train()
        batches = [(torch.randn(batch, d_in), torch.randn(batch, d_out)) for _ in range(n_batches)]
        return Workload(model, batches, _mse, name=f"bf16_drift_{seed}",
                        optimizer=lambda p: _growing_offset(p, lr, factor), steps=steps, dump_every=10)
    k = _bf16_oracle_departure(build(), steps)
    return TrainCase(f"bf16_drift_{seed}", "bf16_drift", seed, build, steps, k, "loss",
                     capture_kw={"soc": "ascend910b", "mode": "mixed_bfloat16"})


def _healthy(seed: int) -> TrainCase:
    rnd = random.Random(seed)
    d_in, hidden, d_out = rnd.choice((8, 16, 32)), rnd.choice((16, 32, 48)), rnd.choice((2, 4))
    n_batches, batch, lr = rnd.randint(2, 5), rnd.choice((8, 16)), rnd.choice((0.01, 0.03, 0.05))
    steps = rnd.randint(30, 50)
    momentum = rnd.choice((0.0, 0.9))

    def build() -> Workload:
        torch.manual_seed(seed)
        model = MLP(d_in, hidden, d_out).train()
        batches = [(torch.randn(batch, d_in), torch.randn(batch, d_out)) for _ in range(n_batches)]
        return Workload(model, batches, _mse, name=f"healthy_{seed}",
                        optimizer=lambda p: torch.optim.SGD(p, lr=lr, momentum=momentum), steps=steps,
                        scaler="torch_npu", dump_every=10)
    return TrainCase(f"healthy_{seed}", "healthy", seed, build, steps, None, None)


def _diverging(seed: int) -> TrainCase:
    rnd = random.Random(seed)
    d_in, hidden, d_out = rnd.choice((8, 16)), rnd.choice((16, 32)), rnd.choice((2, 4))
    n_batches, batch = rnd.randint(2, 4), rnd.choice((8, 16))
    lr = rnd.uniform(3.0, 6.0)
    steps = 30

    def build() -> Workload:
        torch.manual_seed(seed)
        model = MLP(d_in, hidden, d_out).train()
        batches = [(torch.randn(batch, d_in), 3.0 * torch.randn(batch, d_out)) for _ in range(n_batches)]
        return Workload(model, batches, _mse, name=f"diverging_{seed}",
                        optimizer=lambda p: torch.optim.SGD(p, lr=lr), steps=steps, scaler="torch_npu", dump_every=10)
    k = _fp32_diverges(build(), steps)
    return TrainCase(f"diverging_{seed}", "diverging", seed, build, steps, k, None, precision=False)


# ---------------------------------------------------------------------- helpers and oracles (eager FP32)
def _mse(out, batch):
    return F.mse_loss(out, batch[1])


def _growing(params, lr: float, factor: float) -> GrowingSGD:
    """GrowNet's first two parameters (``grow.weight``, ``grow.bias``: registered first) grow."""
    params = list(params)
    return GrowingSGD(params, lr=lr, grow=tuple(params[:2]), factor=factor)


def _growing_offset(params, lr: float, factor: float) -> GrowingSGD:
    """OffsetNet's ``offset`` (its own parameter: the first ``parameters()`` yields, before its submodules') grows."""
    params = list(params)
    return GrowingSGD(params, lr=lr, grow=(params[0],), factor=factor)


def _bf16_oracle_departure(wl: Workload, steps: int) -> int | None:
    """The first step whose loss relative difference (the bf16-cast eager run against FP32) exceeds the tolerance for
    ``LOSS_PATIENCE`` consecutive steps (or up to the last step)."""
    import copy

    from advisor.compare.steps import LOSS_PATIENCE
    from advisor.compare.tolerance import Tolerance, loss_rel_diff
    mixed = copy.deepcopy(wl)
    mixed.model.bf16 = True
    ref, low = _eager(wl, steps), _eager(mixed, steps)
    tol = Tolerance().max_loss_rel
    over = [not math.isfinite(b) or loss_rel_diff(b, a) > tol for a, b in zip(ref, low)]
    for s in range(steps):
        run = over[s:s + LOSS_PATIENCE]
        if over[s] and (all(run) and len(run) == LOSS_PATIENCE or all(over[s:])):
            return s
    return None


def _eager(wl: Workload, steps: int, hook=None) -> list[float]:
    """Plain FP32 training of the workload (no emulator): the loss of every step."""
    model = wl.model
    opt = wl.optimizer(model.parameters())
    losses = []
    for s in range(steps):
        batch = wl.batches[s % len(wl.batches)]
        opt.zero_grad(set_to_none=True)
        loss = wl.loss_fn(model(*batch), batch)
        loss.backward()
        if hook is not None:
            hook(s, model)
        losses.append(float(loss.detach()))
        opt.step()
    return losses


def _first_growth_overflow(wl: Workload, steps: int) -> int | None:
    seen: dict[int, float] = {}
    step = [0]
    h = wl.model.grow.register_forward_hook(lambda m, i, o: seen.__setitem__(step[0], float(o.detach().abs().max())))

    def mark(s, model):
        step[0] = s + 1
    _eager(wl, steps, mark)
    h.remove()
    return next((s for s in sorted(seen) if seen[s] > FP16_MAX), None)


def _min_output_grad(wl: Workload, steps: int) -> float:
    """The smallest, over the steps, of the max |dL/d(model output)| of eager FP32 training: the gradient the
    backward's first fp16 op reads."""
    out: list[float] = []
    def keep(m, i, o):
        o.register_hook(lambda g: out.append(float(g.abs().max())))
    h = wl.model.fc2.register_forward_hook(keep)
    _eager(wl, steps)
    h.remove()
    return min(out)


def _fp32_diverges(wl: Workload, steps: int) -> int | None:
    losses = _eager(wl, steps)
    first = abs(losses[0])
    return next((s for s, v in enumerate(losses) if not math.isfinite(v) or abs(v) > 10.0 * first), None)


__all__ = ["KINDS", "TrainCase", "make_train_case", "GrowingSGD"]
