"""The torch modules the case generator composes.

Shapes: every block maps ``(batch, seq, d) -> (batch, seq, d)``; a stem maps the batch's first tensor to that
shape; a head maps it to the model output.  Hazard blocks are residual (``x + out(...)``) so the rest of the
network stays well scaled in FP32, and each one knows the FP32 quantity that decides its fp16 failure
(``stat``), the fp16 limit of that quantity (``threshold``) and how to set its own knob so that the quantity
reaches a target on given inputs (``calibrate``).  fp16 limits used here: max 65504, smallest normal 6.1e-5,
smallest subnormal 6e-8 (docs/benchmarks.md, "Generated case suite").
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

FP16_MAX = 65504.0
EXP_OVERFLOW = math.log(FP16_MAX)            # 11.09: exp(z) is inf in fp16 above this
SIGMOID_ZERO = math.log(2.0 ** -25)          # -17.33: sigmoid(z) ~ e^z rounds to 0 in fp16 below this
SIGMOID_ONE = math.log(2.0 ** 12)            # 8.32: 1 - sigmoid(z) < 2^-12, sigmoid(z) rounds to 1.0 in fp16
SQUARE_OVERFLOW = math.sqrt(FP16_MAX)        # 255.9: x * x is inf in fp16 above this


# ---------------------------------------------------------------------------------------------- norms
class HandLayerNorm(nn.Module):
    """LayerNorm written out: (x - mean) / sqrt(var + eps) * weight + bias (ReduceMean, Sub, Mul, Add, Sqrt,
    RealDiv instead of one LayerNormV4)."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mu = x.mean(-1, keepdim=True)
        xc = x - mu
        var = (xc * xc).mean(-1, keepdim=True)
        return xc / torch.sqrt(var + self.eps) * self.weight + self.bias


class HandRMSNorm(nn.Module):
    """RMSNorm written out: x * rsqrt(mean(x^2) + eps) * weight.  ``square="pow"`` squares with ``x.pow(2)``
    (Pow, black by default: computed in FP32), ``square="mul"`` with ``x * x`` (Mul, gray: inherits fp16)."""

    def __init__(self, d: int, square: str = "pow", eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.square, self.eps = square, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sq = x.pow(2) if self.square == "pow" else x * x
        return x * torch.rsqrt(sq.mean(-1, keepdim=True) + self.eps) * self.weight


NORMS = ("layernorm", "hand_ln", "rms_pow", "none")


def make_norm(kind: str, d: int) -> nn.Module:
    if kind == "layernorm":
        return nn.LayerNorm(d)
    if kind == "hand_ln":
        return HandLayerNorm(d)
    if kind == "rms_pow":
        return HandRMSNorm(d, "pow")
    if kind == "rms_mul":
        return HandRMSNorm(d, "mul")
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}")


ACTS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "silu": nn.SiLU}


# ---------------------------------------------------------------------------------------------- benign blocks
class MLPBlock(nn.Module):
    """x + fc2(act(fc1(norm(x))))."""

    def __init__(self, d: int, act: str = "relu", norm: str = "layernorm", mult: int = 2):
        super().__init__()
        self.norm = make_norm(norm, d)
        self.fc1, self.fc2 = nn.Linear(d, mult * d), nn.Linear(mult * d, d)
        self.act = ACTS[act]()

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class GLUBlock(nn.Module):
    """Gated unit: x + out(a(n) * gate(b(n))), gate sigmoid (GLU) or silu (SwiGLU)."""

    def __init__(self, d: int, gate: str = "sigmoid", norm: str = "layernorm"):
        super().__init__()
        self.norm = make_norm(norm, d)
        self.a, self.b, self.out = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.gate = torch.sigmoid if gate == "sigmoid" else F.silu

    def forward(self, x):
        n = self.norm(x)
        return x + self.out(self.a(n) * self.gate(self.b(n)))


class AttnBlock(nn.Module):
    """Pre-norm multi-head self-attention written out (bmm, 1/sqrt(dh) scaling, torch.softmax)."""

    def __init__(self, d: int, heads: int = 2, norm: str = "layernorm"):
        super().__init__()
        self.norm = make_norm(norm, d)
        self.heads, self.dh = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def split(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.dh).transpose(1, 2)

    def attend(self, n, mask_add=None):
        q, k, v = self.split(self.q(n)), self.split(self.k(n)), self.split(self.v(n))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh)
        if mask_add is not None:
            scores = scores + mask_add
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        b, h, s, dh = ctx.shape
        return self.o(ctx.transpose(1, 2).reshape(b, s, h * dh))

    def forward(self, x, mask_add=None):
        return x + self.attend(self.norm(x), mask_add)


class PrefixMeanBlock(nn.Module):
    """x + out(cumsum(norm(x)) / position): a running mean over the sequence (Cumsum, Range, RealDiv)."""

    def __init__(self, d: int, norm: str = "layernorm"):
        super().__init__()
        self.norm = make_norm(norm, d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        n = self.norm(x)
        pos = torch.arange(1, n.shape[1] + 1, dtype=n.dtype)[:, None]
        return x + self.out(torch.cumsum(n, dim=1) / pos)


BENIGN = ("mlp", "glu", "attn", "prefix_mean")


def make_benign(spec: dict, d: int) -> nn.Module:
    """A benign block from its spec: {"kind": mlp|glu|attn|prefix_mean, "norm": ..., "act"/"gate"/"heads"}."""
    kind, norm = spec["kind"], spec["norm"]
    if kind == "mlp":
        return MLPBlock(d, spec["act"], norm)
    if kind == "glu":
        return GLUBlock(d, spec["gate"], norm)
    if kind == "attn":
        return AttnBlock(d, spec["heads"], norm)
    if kind == "prefix_mean":
        return PrefixMeanBlock(d, norm)
    raise ValueError(f"unknown block {kind!r}")


def describe_benign(spec: dict) -> str:
    heads = spec.get("heads")
    detail = spec.get("act") or spec.get("gate") or (f"{heads} head{'s' if heads != 1 else ''}" if heads else None)
    return f"{spec['kind']}({', '.join(x for x in (detail, spec['norm']) if x)})"


# ---------------------------------------------------------------------------------------------- hazard blocks
class Hazard(nn.Module):
    """A residual block with one fp16 hazard.  ``stat(x)``: the FP32 quantity that decides the hazard on
    block input ``x`` (larger = more dangerous); ``threshold``: its fp16 limit; ``calibrate(xs, target)`` sets
    the block's knob so that max over ``xs`` of ``stat`` equals ``target``."""

    threshold: float = math.inf
    limit_text: str = ""
    scale: str = "log"          # targets are threshold + margin ("log") or threshold * (1 + margin) ("ratio")

    def __init__(self, d: int, pre: str):
        super().__init__()
        self.pre = make_norm(pre, d)

    @torch.no_grad()
    def max_stat(self, xs) -> float:
        return max(float(self.stat(x)) for x in xs)

    def target(self, margin: float) -> float:
        """The stat value ``margin`` past the fp16 limit (negative: that far inside it)."""
        return self.threshold + margin if self.scale == "log" else self.threshold * (1.0 + margin)


class _OffsetHazard(Hazard):
    """Hazards whose knob is a constant shift of ``fc``'s bias (the stat moves by exactly the shift)."""

    sign = 1.0

    @torch.no_grad()
    def calibrate(self, xs, target: float) -> None:
        self.fc.bias += self.sign * (target - self.max_stat(xs))


class ExpGate(_OffsetHazard):
    """exp-normalised gate written by hand (no max subtraction): g = exp(z) / sum(exp(z)).  Breaks when a
    row's sum of exp(z) exceeds 65504 (the gray RealDiv casts the FP32 ReduceSum result to fp16: inf) or an
    element's exp does."""

    threshold, limit_text = EXP_OVERFLOW, "log-sum-exp of a row 11.09 (fp16 max 65504)"

    def __init__(self, d: int, pre: str, hidden: int):
        super().__init__(d, pre)
        self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)
        with torch.no_grad():
            self.out.weight.mul_(hidden)

    def z(self, x):
        return self.fc(self.pre(x))

    def stat(self, x):
        return torch.logsumexp(self.z(x), dim=-1).max()

    def forward(self, x):
        e = torch.exp(self.z(x))
        return x + self.out(e / e.sum(-1, keepdim=True))


class Softplus(_OffsetHazard):
    """softplus written as log1p(exp(z)): exp overflows to inf above 11.09 (Log1p is black, but gets inf)."""

    threshold, limit_text = EXP_OVERFLOW, "exp argument 11.09 (fp16 max 65504)"

    def __init__(self, d: int, pre: str, hidden: int):
        super().__init__(d, pre)
        self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)
        with torch.no_grad():
            self.out.weight.mul_(0.2)

    def stat(self, x):
        return self.fc(self.pre(x)).max()

    def forward(self, x):
        return x + self.out(torch.log1p(torch.exp(self.fc(self.pre(x)))))


class LogSigmoid(_OffsetHazard):
    """log(sigmoid(z)) (or log(sigmoid(z) + eps)) with strongly negative z: sigmoid's fp16 output is
    subnormal below z = -9.7 and 0 below -17.33, so the log is wrong or -inf."""

    threshold, limit_text, sign = -SIGMOID_ZERO, "-min z 17.33 (sigmoid(z) rounds to 0 in fp16)", -1.0

    def __init__(self, d: int, pre: str, hidden: int, eps: float | None = None):
        super().__init__(d, pre)
        self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.eps = eps
        with torch.no_grad():
            self.out.weight.mul_(0.1)

    def stat(self, x):
        return -self.fc(self.pre(x)).min()

    def forward(self, x):
        p = torch.sigmoid(self.fc(self.pre(x)))
        return x + self.out(torch.log(p) if self.eps is None else torch.log(p + self.eps))


class DivSmall(Hazard):
    """Division by small values: q = a / ((|d| + 1) * s) with a tiny scale s, rescaled afterwards (q * s).
    The quotient overflows fp16 when it exceeds 65504; the divisor is subnormal below 6.1e-5."""

    threshold, limit_text, scale = FP16_MAX, "quotient 65504 (fp16 max)", "ratio"

    def __init__(self, d: int, pre: str, hidden: int):
        super().__init__(d, pre)
        self.fa, self.fd, self.out = nn.Linear(d, hidden), nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.register_buffer("s", torch.tensor(1.0))

    def ratio(self, x):
        n = self.pre(x)
        return self.fa(n) / (self.fd(n).abs() + 1.0)

    def stat(self, x):
        return self.ratio(x).abs().max() / self.s

    @torch.no_grad()
    def calibrate(self, xs, target: float) -> None:
        self.s.fill_(max(float(self.ratio(x).abs().max()) for x in xs) / target)

    def forward(self, x):
        n = self.pre(x)
        q = self.fa(n) / ((self.fd(n).abs() + 1.0) * self.s)
        return x + self.out(q * self.s)


class _ScaleHazard(Hazard):
    """Hazards whose knob scales ``fc`` (weight and bias; the stat is positively homogeneous in that scale).
    ``self.f`` keeps the scale so that the block can divide it out again (a tiny rescaled weight would be
    subnormal in fp16, a hazard of its own)."""

    scale = "ratio"

    def __init__(self, d: int, pre: str):
        super().__init__(d, pre)
        self.register_buffer("f", torch.tensor(1.0))

    @torch.no_grad()
    def calibrate(self, xs, target: float) -> None:
        f = target / self.max_stat(xs)
        self.fc.weight.mul_(f)
        self.fc.bias.mul_(f)
        self.f.mul_(f)


class RmsSquare(_ScaleHazard):
    """Hand-written RMSNorm on large activations.  ``square="mul"``: x * x overflows to inf above |x| = 255.9,
    the mean is inf, rsqrt(inf) = 0, and the row comes out as zeros (finite but wrong).  ``square="pow"``:
    x.pow(2) is Pow, black by default, so the same activations are safe (a look-alike control)."""

    threshold, limit_text = SQUARE_OVERFLOW, "|x| 255.9 (x*x reaches fp16 max 65504)"

    def __init__(self, d: int, pre: str, square: str = "mul", eps: float = 1e-6):
        super().__init__(d, pre)
        self.fc, self.out = nn.Linear(d, d), nn.Linear(d, d)
        self.square, self.eps = square, eps

    def stat(self, x):
        return self.fc(self.pre(x)).abs().max()

    def forward(self, x):
        z = self.fc(self.pre(x))
        sq = z.pow(2) if self.square == "pow" else z * z
        return x + self.out(z * torch.rsqrt(sq.mean(-1, keepdim=True) + self.eps))


class LargeActivation(_ScaleHazard):
    """Large but safe activations: relu(z) with |z| up to a good fraction of 65504 (fp16 keeps 11 bits at any
    magnitude), divided back down before the next linear."""

    threshold, limit_text = FP16_MAX, "|z| 65504 (fp16 max)"

    def __init__(self, d: int, pre: str, hidden: int):
        super().__init__(d, pre)
        self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def stat(self, x):
        return self.fc(self.pre(x)).abs().max()

    def forward(self, x):
        return x + self.out(torch.relu(self.fc(self.pre(x))) / self.f)


class PrefixSum(_ScaleHazard):
    """Prefix sums of large positive values (running mean = cumsum / position): the cumulative sum
    overflows fp16 above 65504 even though every summand is finite."""

    threshold, limit_text = FP16_MAX, "prefix sum 65504 (fp16 max)"

    def __init__(self, d: int, pre: str, hidden: int):
        super().__init__(d, pre)
        self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)
        with torch.no_grad():
            self.fc.bias.add_(0.5)

    def stat(self, x):
        return torch.cumsum(torch.relu(self.fc(self.pre(x))), dim=1).max()

    def forward(self, x):
        v = torch.relu(self.fc(self.pre(x)))
        pos = torch.arange(1, v.shape[1] + 1, dtype=v.dtype)[:, None]
        return x + self.out(torch.cumsum(v, dim=1) / pos / self.f)


class TempSoftmax(Hazard):
    """Recommender-style head as a block: cosine similarity of tokens to K prototypes, softmax at temperature
    T written by hand (exp(cos / T) / sum: exp overflows fp16 when cos / T > 11.09), or ``stable=True``:
    torch.softmax (SoftmaxV2 subtracts the row max; a look-alike control)."""

    threshold, limit_text = EXP_OVERFLOW, "cos/T 11.09 (fp16 max 65504)"

    def __init__(self, d: int, pre: str, k: int, stable: bool = False):
        super().__init__(d, pre)
        self.protos = nn.Parameter(torch.randn(k, d))
        self.out = nn.Linear(k, d)
        self.stable = stable
        self.register_buffer("temperature", torch.tensor(1.0))
        with torch.no_grad():
            self.out.weight.mul_(k)

    def cos(self, x):
        return F.normalize(self.pre(x), dim=-1) @ F.normalize(self.protos, dim=-1).T

    def stat(self, x):
        return self.cos(x).max() / self.temperature

    @torch.no_grad()
    def calibrate(self, xs, target: float) -> None:
        # prototypes near real inputs (as item embeddings are): the first tokens of the first input + noise
        n = self.pre(xs[0]).reshape(-1, self.protos.shape[1])
        k = min(len(n), self.protos.shape[0])
        self.protos[:k] = n[:k] + 0.3 * n[:k].std() * torch.randn_like(n[:k])
        self.temperature.fill_(max(float(self.cos(x).max()) for x in xs) / target)

    def forward(self, x):
        logits = self.cos(x) / self.temperature
        if self.stable:
            return x + self.out(torch.softmax(logits, dim=-1))
        e = torch.exp(logits)
        return x + self.out(e / e.sum(-1, keepdim=True))


class BiasNorm(Hazard):
    """A linear with a large constant bias B feeding a normalisation (LayerNorm or hand-written): the norm
    removes the offset, so its output depends on the O(1) variation that fp16 storage of ~B (ulp B/1024)
    cannot hold."""

    limit_text = "error ~ ulp(B) / std"

    def __init__(self, d: int, pre: str, hidden: int, bias: float, norm: str):
        super().__init__(d, pre)
        self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.norm = make_norm(norm, hidden)
        with torch.no_grad():
            self.fc.bias.add_(bias)

    def forward(self, x):
        return x + self.out(torch.relu(self.norm(self.fc(self.pre(x)))))


class KeyBiasAttention(Hazard):
    """Self-attention whose query and key projections carry a large bias, so every score of a row gets the
    same large offset (~score): softmax cancels it in exact arithmetic, fp16 cannot (ulp of 1e4 is 8).
    ``variant="all"``: the bias is on every channel (the key projection's fp16 output is rounded too);
    ``"sink"``: on one constant channel with zero weights (only the scores are rounded)."""

    limit_text = "error ~ ulp(score offset)"

    def __init__(self, d: int, pre: str, heads: int, score: float, variant: str, scaled: bool):
        super().__init__(d, pre)
        self.heads, self.dh, self.scaled = heads, d // heads, scaled
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        eff = score * (math.sqrt(self.dh) if scaled else 1.0)
        with torch.no_grad():
            if variant == "all":
                c = math.sqrt(eff / self.dh)
                sign = torch.where(torch.rand(d) < 0.5, -1.0, 1.0)
                self.q.bias.copy_(c * sign)
                self.k.bias.copy_(c * sign)
            else:
                c = math.sqrt(eff)
                for h in range(heads):
                    for lin in (self.q, self.k):
                        lin.weight[h * self.dh].zero_()
                        lin.bias[h * self.dh] = c

    def split(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.dh).transpose(1, 2)

    def forward(self, x):
        n = self.pre(x)
        q, k, v = self.split(self.q(n)), self.split(self.k(n)), self.split(self.v(n))
        scores = torch.matmul(q, k.transpose(-1, -2))
        if self.scaled:
            scores = scores / math.sqrt(self.dh)
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        b, h, s, dh = ctx.shape
        return x + self.o(ctx.transpose(1, 2).reshape(b, s, h * dh))


class PowCompound(Hazard):
    """Compounding written as (1 + k z / n) ** n (~ exp(k z)): Pow is black, but its input 1 + small is
    rounded to fp16 (ulp 1e-3 near 1) by the gray Add before it, and the power multiplies that relative
    error by n."""

    limit_text = "relative error ~ n * 2.4e-4"

    def __init__(self, d: int, pre: str, hidden: int, n: int, k: float = 1.0):
        super().__init__(d, pre)
        self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.n, self.k = int(n), float(k)
        with torch.no_grad():
            self.out.weight.mul_(0.2)

    def forward(self, x):
        u = 1.0 + (self.k / self.n) * self.fc(self.pre(x))
        return x + self.out(u.pow(self.n))


class VarCancel(Hazard):
    """Hand-written normalisation with variance as E[z^2] - E[z]^2 on values with a large mean M: the two
    terms (~M^2) cancel; in fp16 their rounding (ulp of M^2) swamps the O(1) variance (even negative:
    sqrt gives NaN)."""

    limit_text = "error ~ ulp(M^2) / var"

    def __init__(self, d: int, pre: str, hidden: int, mean: float, eps: float = 1e-5):
        super().__init__(d, pre)
        self.fc, self.out = nn.Linear(d, hidden), nn.Linear(hidden, d)
        self.eps = eps
        with torch.no_grad():
            self.fc.bias.add_(mean)

    def forward(self, x):
        z = self.fc(self.pre(x))
        mu = z.mean(-1, keepdim=True)
        var = (z * z).mean(-1, keepdim=True) - mu * mu
        return x + self.out((z - mu) / torch.sqrt(var + self.eps))


# ---------------------------------------------------------------------------------------------- stems, heads, net
class DenseStem(nn.Module):
    def __init__(self, d_in: int, d: int):
        super().__init__()
        self.fc = nn.Linear(d_in, d)

    def forward(self, x):
        return self.fc(x)


class EmbedStem(nn.Module):
    """Token + position embeddings (GatherV2); ``scale`` multiplies the token table (large embeddings)."""

    def __init__(self, vocab: int, seq: int, d: int, scale: float = 1.0):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        with torch.no_grad():
            self.tok.weight.mul_(scale)

    def forward(self, ids):
        return self.tok(ids) + self.pos(torch.arange(ids.shape[1]))[None]


class ConvStem(nn.Module):
    """Conv2d (stride 2) + ReLU, feature map flattened into tokens: (B, C, H, W) -> (B, H*W/4, d)."""

    def __init__(self, c_in: int, d: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, d, 3, stride=2, padding=1)

    def forward(self, img):
        return torch.relu(self.conv(img)).flatten(2).transpose(1, 2)


class PoolHead(nn.Module):
    """Pool the tokens (mean: ReduceMean, sum: ReduceSum / seq, last token, or keep every token) -> Linear."""

    def __init__(self, d: int, d_out: int, pool: str):
        super().__init__()
        self.pool, self.fc = pool, nn.Linear(d, d_out)

    def forward(self, h, *extra):
        if self.pool == "mean":
            h = h.mean(1)
        elif self.pool == "sum":
            h = h.sum(1) / h.shape[1]
        elif self.pool == "last":
            h = h[:, -1]
        return self.fc(h)


class BCEHead(_OffsetHazard):
    """Per-token binary cross-entropy written by hand: -(y log p + (1 - y) log(1 - p)), p = sigmoid(z).  In
    fp16 p rounds to 1.0 above z = 8.32, log(1 - p) = log(0) = -inf; below that 1 - p keeps few bits."""

    threshold, limit_text = SIGMOID_ONE, "max z 8.32 (sigmoid rounds to 1.0 in fp16)"

    def __init__(self, d: int, pre: str, outputs: int = 1):
        super().__init__(d, pre)
        self.fc = nn.Linear(d, outputs)
        with torch.no_grad():
            self.fc.weight.mul_(0.5)

    def z(self, h):
        z = self.fc(self.pre(h))
        return z.squeeze(-1) if z.shape[-1] == 1 else z

    def stat(self, x):
        return self.z(x).max()

    def forward(self, h, y):
        p = torch.sigmoid(self.z(h))
        return -(y * torch.log(p) + (1.0 - y) * torch.log(1.0 - p))


class Net(nn.Module):
    """stem -> blocks -> head; ``forward(x, *extra)`` passes the batch's extra tensors to the head."""

    def __init__(self, stem: nn.Module, blocks: list[nn.Module], head: nn.Module):
        super().__init__()
        self.stem, self.blocks, self.head = stem, nn.ModuleList(blocks), head

    @torch.no_grad()
    def input_of(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """The input of block ``index`` (``len(blocks)``: of the head) for the batch tensor ``x``."""
        h = self.stem(x)
        for b in self.blocks[:index]:
            h = b(h)
        return h

    def forward(self, x, *extra):
        h = self.stem(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h, *extra)


class CosineSoftmaxHead(Hazard):
    """Recommender head on pooled embeddings: softmax over the cosine similarities to K item embeddings at
    temperature T, written by hand (exp(cos / T) / sum): exp overflows fp16 when cos / T > 11.09."""

    threshold, limit_text = EXP_OVERFLOW, "cos/T 11.09 (fp16 max 65504)"

    def __init__(self, items: torch.Tensor, temperature: float = 1.0):
        super().__init__(items.shape[1], "none")
        self.register_buffer("items", F.normalize(items.detach(), dim=-1))
        self.register_buffer("temperature", torch.tensor(float(temperature)))

    def cos(self, e):
        return F.normalize(e, dim=-1) @ self.items.T

    def stat(self, e):
        return self.cos(e).max() / self.temperature

    @torch.no_grad()
    def calibrate(self, xs, target: float) -> None:
        self.temperature.fill_(max(float(self.cos(x).max()) for x in xs) / target)

    def forward(self, e, *extra):
        ex = torch.exp(self.cos(e) / self.temperature)
        return ex / ex.sum(-1, keepdim=True)


class Passthrough(nn.Module):
    """Head that returns its input (the pooled embeddings themselves are the output)."""

    def forward(self, h, *extra):
        return h
