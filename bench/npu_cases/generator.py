"""Deterministic generator of small PyTorch workloads whose hazards matter under torch_npu autocast:
``make_case(seed) -> NpuCase``.

The kind follows the seed (``seed % 3``: hazard, control, hazard) and so does the family (cycling through the
kind's families), so any 3k consecutive seeds hold 2k hazards and k controls.  Everything else is drawn from
``random.Random(seed)``: the width, batch, number of batches, whether a benign block (Linear -> ReLU) sits between
the stem and the hazard, the spelling of the op (``h * h`` / ``torch.mul`` / ``Tensor.mul``), and the margin -- how
far past (hazards) or below (controls of the same construction) the fp16 limit the deciding quantity lands.

Every case is ``stem`` (a Linear, under autocast its output is fp16) -> [``block``] -> ``hz`` (the family's module)
-> ``head`` (a Linear).  Threshold families are *calibrated* on the FP32 run of the case's own batches: the stem's
weights are scaled so that the deciding quantity (``max |h|^2``, ``max |a + b|``, ``max |h / t|``, ``max |prefix
sum|``, the largest logit) is exactly ``margin`` times its limit.

Hazards (the op that fails is in none of torch_npu's autocast tables, so it runs in its fp16 input's dtype):
  mul_square     h * h after the linear: Mul overflows fp16
  add_linears    a + b of two linears, each below the fp16 limit, the sum above it
  div_small      h / t with t a small linear output: RealDiv overflows
  prefix_matmul  a prefix sum written as h @ triu(ones): the matmul's fp16 output overflows
  sigmoid_bce    hand-written BCE: sigmoid in fp16 rounds to exactly 1, log(1 - p) = -inf
  bias_norm      hand-written LayerNorm of h + a large bias: the add rounds away h (cancellation)
Controls (look dangerous, pass):
  pow_square     h ** 2 / torch.square / Tensor.pow on the same large h: pow is in the fp32 table
  mul_small      h * h with the square below the fp16 limit
  cumsum         torch.cumsum on the same large prefix sums: fp32-set-opt-dtype
  bce_logits     F.binary_cross_entropy_with_logits on large logits: in the fp32 table
  layer_norm     F.layer_norm of large activations: in the fp32 table
  softmax_large  torch.softmax of large logits: fp32-set-opt-dtype
  plain          Linear -> ReLU -> Linear
"""
from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

KIND_CYCLE = ("hazard", "control", "hazard")
HAZARDS = ("mul_square", "add_linears", "div_small", "prefix_matmul", "sigmoid_bce", "bias_norm")
CONTROLS = ("pow_square", "mul_small", "cumsum", "bce_logits", "layer_norm", "softmax_large", "plain")
FP16_MAX = 65504.0
GAIN = 16.0                 # add_linears / prefix sums: the hazard op's output is ~GAIN x its input (h < limit)
SIGMOID_ONE = 8.32          # the logit above which fp16 sigmoid rounds to exactly 1.0 (1 - p < 2**-12)


@dataclass(frozen=True)
class NpuCase:
    seed: int
    kind: str
    family: str
    spec: dict = field(hash=False)

    @property
    def name(self) -> str:
        return f"npu-{self.family}-s{self.seed}"

    @property
    def fingerprint(self) -> str:
        """Hash of the spec and the generator's source-relevant version: a changed case gets new cache keys."""
        return hashlib.sha256(json.dumps({"v": 1, **self.spec}, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def description(self) -> str:
        s = self.spec
        return (f"{self.family} ({s.get('spelling', '-')}), width {s['width']}, batch {s['batch']}, "
                f"{s['batches']} batches, {'a benign block, ' if s['block'] else ''}margin {s['margin']:.3g}")

    def workload(self):
        """``(model, batches)``: the docs/cli.md workload contract (inference, >= 3 batches)."""
        return build(self.spec)


def make_case(seed: int) -> NpuCase:
    kind = KIND_CYCLE[seed % 3]
    fams = HAZARDS if kind == "hazard" else CONTROLS
    n = seed // 3
    family = fams[(n * (2 if kind == "hazard" else 1) + (seed % 3 == 2)) % len(fams)]
    rng = random.Random(seed)
    spec = {"family": family, "seed": seed, "width": rng.choice((8, 12, 16, 24)), "batch": rng.choice((2, 4, 6)),
            "batches": rng.choice((3, 4)), "block": rng.random() < 0.5}
    if family in ("mul_square", "mul_small"):
        spec["spelling"] = rng.choice(("h * h", "torch.mul", "Tensor.mul"))
    elif family == "pow_square":
        spec["spelling"] = rng.choice(("h ** 2", "torch.square", "Tensor.pow"))
    if kind == "hazard":
        spec["margin"] = {"sigmoid_bce": rng.uniform(1.25, 2.5), "add_linears": rng.uniform(1.2, 1.9)}.get(
            family, _loguniform(rng, 1.5, 20.0))
    elif family in ("mul_small",):
        spec["margin"] = _loguniform(rng, 0.02, 0.3)
    elif family == "plain":
        spec["margin"] = 1.0
    else:
        spec["margin"] = _loguniform(rng, 1.5, 20.0)
    if family == "bias_norm":
        spec["margin"] = _loguniform(rng, 2.0, 8.0)       # bias / fp16 spacing-at-std: the add rounds h away
    return NpuCase(seed, kind, family, spec)


def _loguniform(rng, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


# ---------------------------------------------------------------------- the modules
class Square(torch.nn.Module):
    def __init__(self, spelling: str):
        super().__init__()
        self.spelling = spelling
        self.scale = 1.0

    def forward(self, h):
        s = self.spelling
        if s == "h * h":
            y = h * h
        elif s == "torch.mul":
            y = torch.mul(h, h)
        elif s == "Tensor.mul":
            y = h.mul(h)
        elif s == "h ** 2":
            y = h ** 2
        elif s == "torch.square":
            y = torch.square(h)
        else:
            y = h.pow(2)
        return y * self.scale


class AddLinears(torch.nn.Module):
    def __init__(self, d: int, k: float):
        super().__init__()
        self.fc_a, self.fc_b, self.k, self.scale = torch.nn.Linear(d, d), torch.nn.Linear(d, d), k, 1.0

    def forward(self, h):
        return (self.fc_a(h) + self.fc_b(h)) * self.scale


class DivSmall(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc_t, self.scale = torch.nn.Linear(d, d), 1.0

    def forward(self, h):
        t = self.fc_t(h).abs() * 0.02 + 0.002
        return h / t * self.scale


class Prefix(torch.nn.Module):
    def __init__(self, d: int, builtin: bool):
        super().__init__()
        self.builtin, self.scale = builtin, 1.0
        self.register_buffer("tri", torch.triu(torch.ones(d, d)) * GAIN)

    def forward(self, h):
        p = torch.cumsum(h * GAIN, -1) if self.builtin else h @ self.tri
        return p * self.scale


class BCE(torch.nn.Module):
    """Per-sample binary cross-entropy of ``z`` (logits) against fixed 0/1 labels: hand-written or built in."""

    def __init__(self, d: int, builtin: bool, seed: int):
        super().__init__()
        self.builtin = builtin
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("y", (torch.rand(d, generator=g) < 0.5).float())

    def forward(self, z):
        if self.builtin:
            return F.binary_cross_entropy_with_logits(z, self.y.expand_as(z), reduction="none")
        p = torch.sigmoid(z)
        return -(self.y * torch.log(p) + (1 - self.y) * torch.log(1 - p))


class HandNorm(torch.nn.Module):
    """LayerNorm of ``h + bias``: hand-written (mean, subtract, ``** 2``) or ``F.layer_norm``."""

    def __init__(self, builtin: bool, bias: float):
        super().__init__()
        self.builtin, self.bias = builtin, bias

    def forward(self, h):
        u = h + self.bias
        if self.builtin:
            return F.layer_norm(u, u.shape[-1:])
        mu = u.mean(-1, keepdim=True)
        c = u - mu
        return c / torch.sqrt((c ** 2).mean(-1, keepdim=True) + 1e-5)


class Softmax(torch.nn.Module):
    def forward(self, h):
        return torch.softmax(h, -1)


class Relu(torch.nn.Module):
    def forward(self, h):
        return torch.relu(h)


class Block(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, h):
        return torch.relu(self.fc(h)) + h


class NpuNet(torch.nn.Module):
    def __init__(self, d_in: int, d: int, hz: torch.nn.Module, block: bool, d_out: int):
        super().__init__()
        self.stem = torch.nn.Linear(d_in, d)
        self.block = Block(d) if block else None
        self.hz = hz
        self.head = torch.nn.Linear(d, d_out)

    def trunk(self, x):
        h = self.stem(x)
        return self.block(h) if self.block is not None else h

    def forward(self, x):
        return self.head(self.hz(self.trunk(x)))


# ---------------------------------------------------------------------- building and calibrating
def _hz(spec: dict, d: int) -> torch.nn.Module:
    f = spec["family"]
    if f in ("mul_square", "mul_small", "pow_square"):
        return Square(spec["spelling"])
    if f == "add_linears":
        hz = AddLinears(d, 1.0)
        with torch.no_grad():           # b = a: each half of the sum below the fp16 limit, the sum above it;
            hz.fc_a.weight.mul_(GAIN)   # the gain keeps h itself well below the limit
            hz.fc_b.load_state_dict(hz.fc_a.state_dict())
        return hz
    if f == "div_small":
        return DivSmall(d)
    if f in ("prefix_matmul", "cumsum"):
        return Prefix(d, builtin=f == "cumsum")
    if f in ("sigmoid_bce", "bce_logits"):
        return BCE(d, builtin=f == "bce_logits", seed=spec["seed"])
    if f in ("bias_norm", "layer_norm"):
        return HandNorm(builtin=f == "layer_norm", bias=0.0)
    if f == "softmax_large":
        return Softmax()
    return Relu()


@torch.no_grad()
def _quantity(net: NpuNet, spec: dict, batches) -> float:
    """The deciding quantity of the case's family on the FP32 run of its batches (module docstring)."""
    f = spec["family"]
    hs = [net.trunk(x) for (x,) in batches]
    if f in ("mul_square", "mul_small", "pow_square"):
        return max(float(h.abs().max()) ** 2 for h in hs) / FP16_MAX
    if f == "add_linears":
        return max(float((net.hz.fc_a(h) + net.hz.fc_b(h)).abs().max()) for h in hs) / FP16_MAX
    if f == "div_small":
        return max(float((h / (net.hz.fc_t(h).abs() * 0.02 + 0.002)).abs().max()) for h in hs) / FP16_MAX
    if f in ("prefix_matmul", "cumsum"):
        return max(float(torch.cumsum(h * GAIN, -1).abs().max()) for h in hs) / FP16_MAX
    if f in ("sigmoid_bce", "bce_logits"):
        return max(float(h.max()) for h in hs) / SIGMOID_ONE
    if f in ("layer_norm", "softmax_large"):
        return max(float(h.abs().max()) for h in hs) / 1000.0      # "large": |h| around margin x 1000
    return 1.0


def _scale_stem(net: NpuNet, factor: float) -> None:
    with torch.no_grad():
        net.stem.weight.mul_(factor)
        net.stem.bias.mul_(factor)
        if net.block is not None:
            net.block.fc.bias.mul_(factor)


def build(spec: dict):
    torch.manual_seed(spec["seed"])
    d, b = spec["width"], spec["batch"]
    d_in = d
    net = NpuNet(d_in, d, _hz(spec, d), spec["block"], d_out=4)
    g = torch.Generator().manual_seed(spec["seed"] + 7)
    batches = [(torch.randn(b, d_in, generator=g),) for _ in range(spec["batches"])]
    f, m = spec["family"], spec["margin"]
    if f == "bias_norm" or f == "layer_norm":
        with torch.no_grad():
            std = max(float(net.trunk(x).std()) for (x,) in batches)
        # fp16 spacing at the bias is 2**(e-10): the bias where spacing = std / margin, so h rounds to ~margin steps
        if f == "bias_norm":
            net.hz.bias = float(2.0 ** (math.floor(math.log2(std / m)) + 10))
        else:
            _scale_stem(net, m * 1000.0 / max(std, 1e-6))
    elif f != "plain":
        exp = 0.5 if f in ("mul_square", "mul_small", "pow_square") else 1.0      # h^2 scales as gain^2
        for _ in range(6):              # fixed point: the biases of the hazard's own linears are not scaled
            q = _quantity(net, spec, batches)
            factor = (m / q) ** exp if q > 0 else 1.0
            _scale_stem(net, factor)
            if f == "div_small":        # t = fc_t(h) stays as it was: only h grows
                with torch.no_grad():
                    net.hz.fc_t.weight.div_(factor)
    _finish_scale(net, spec, batches)
    net.eval()
    return net, batches


@torch.no_grad()
def _finish_scale(net: NpuNet, spec: dict, batches) -> None:
    """The hazard module's output scaled back to O(1) (a constant multiply, as a real model's next layer would
    see normalised values), so the head's fp16 matmul does not overflow by itself."""
    hz = net.hz
    if not hasattr(hz, "scale"):
        return
    outs = [hz(net.trunk(x)) for (x,) in batches]
    peak = max(float(o.abs().max()) for o in outs)
    hz.scale = 1.0 / peak if peak > 0 else 1.0
