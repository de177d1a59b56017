"""Named situations: small workloads whose measured facts later work can assert advisor's behaviour on.

Each function below is a capture target (``bench/cases/situations.py:sigmoid_log_head``); ``SITUATIONS``
states its facts under the default lists (mixed_float16, ascend910b) and the default tolerance, each checked
by a fresh capture in tests/test_cases_situations.py (measured figures in that file's docstring):

* ``base``: "fails" or "passes" with the default lists;
* ``passes`` / ``fails``: black-list edit sets that do / do not meet the tolerance;
* ``over_fix``: (better, worse): both pass, and ``worse`` keeps a lower low-precision share of kernel time
  (search.low_precision_share) -- ``worse`` is the over-fix;
* ``base_output``: "nonfinite_every_step" (the final output is non-finite on every batch) or
  "finite_but_wrong" (finite on every batch, cosine below the tolerance).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from . import blocks as B


@dataclass(frozen=True)
class Situation:
    name: str
    summary: str
    base: str
    passes: tuple[tuple[str, ...], ...] = ()
    fails: tuple[tuple[str, ...], ...] = ()
    over_fix: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    base_output: str | None = None
    slow: bool = False


# ----------------------------------------------------------------------------------------- a. log(sigmoid + eps)
class SigmoidLogHead(nn.Module):
    """Linear -> sigmoid -> log(p + 1e-8).  z reaches -30: fp16 sigmoid output is subnormal below z = -9.7 and
    0 below -17.3 (z ~ -14 +- 7 here), and the gray Add that adds 1e-8 follows sigmoid into fp16 where 1e-8 itself is 0.
    ``two_branches``: a second branch computes sigmoid by hand, 1 / (1 + exp(-z)) (exp overflows)."""

    def __init__(self, d_in: int = 16, hidden: int = 32, bias: float = -14.0, scale: float = 4.0,
                 two_branches: bool = False):
        super().__init__()
        self.fc = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(d_in, hidden) if two_branches else None
        with torch.no_grad():
            for fc in (self.fc, self.fc2):
                if fc is not None:
                    fc.weight.mul_(scale)
                    fc.bias.fill_(bias)

    def forward(self, x):
        a = torch.log(torch.sigmoid(self.fc(x)) + 1e-8)
        if self.fc2 is None:
            return a
        b = torch.log(1.0 / (1.0 + torch.exp(-self.fc2(x))) + 1e-8)
        return torch.cat([a, b], dim=-1)


def _rows(n_batches: int, *shape, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(*shape, generator=g),) for _ in range(n_batches)]


def sigmoid_log_head():
    torch.manual_seed(0)
    return SigmoidLogHead().eval(), _rows(4, 16, 16)


def sigmoid_log_two_branches():
    torch.manual_seed(0)
    return SigmoidLogHead(two_branches=True).eval(), _rows(4, 16, 16)


# ----------------------------------------------------------------------------------------- b. key-bias attention
class KeyBiasBlock(nn.Module):
    """Attention (unscaled) whose query and key projections carry a bias of 25 on every channel: scores
    ~ 25 * 25 * 16 = 1e4.  The key projection's fp16 output (ulp of 25: 0.016) is already off before the
    scores are formed, so fp32 scores alone (BatchMatMul) do not help.  Post-norm LayerNorm."""

    def __init__(self, d: int = 32, heads: int = 2, c: float = 25.0):
        super().__init__()
        self.attn = B.KeyBiasAttention(d, "none", heads, c * c * (d // heads), "all", scaled=False)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 8)

    def forward(self, x):
        return self.head(self.ln(self.attn(x)))


def attention_key_bias():
    torch.manual_seed(0)
    return KeyBiasBlock().eval(), _rows(4, 2, 16, 32)


# ----------------------------------------------------------------------------------------- c. real MiniLM
def minilm_temperature():
    """Real all-MiniLM-L6-v2 (6 layers, checkpoint mask -10000) -> mean pooling -> recommender head: hand-written
    softmax over cosine similarity to 8 real sentence embeddings at temperature 0.02 (exp(50 cos) overflows
    fp16 for cos > 0.22).  4 batches of 4 sentences."""
    from . import realmodel as R
    torch.manual_seed(0)
    tok = R.tokenizer()
    sents = R.sentences()
    enc = R.HFEncoder(6, -10000.0).eval()
    with torch.no_grad():
        items = enc(*tok.batch(sents[16:24]))
    model = R.RealNet(enc, B.CosineSoftmaxHead(items, 0.02)).eval()
    return model, [tok.batch(sents[i:i + 4]) for i in range(0, 16, 4)]


# ----------------------------------------------------------------------------------------- d. measured fails
class SoftplusNLL(nn.Module):
    """Per-sample Bernoulli log-likelihood written as -sum(log1p(exp(-z))) (softplus by hand): for z < -11.09
    exp overflows fp16, log1p(inf) = inf (Log1p is black, but receives inf), the output is -inf."""

    def __init__(self, d_in: int = 16, labels: int = 8):
        super().__init__()
        self.fc = nn.Linear(d_in, labels)
        with torch.no_grad():
            self.fc.weight.mul_(6.0)
            self.fc.bias.fill_(-4.0)

    def forward(self, x):
        return -torch.log1p(torch.exp(-self.fc(x))).sum(-1)


def softplus_nll():
    torch.manual_seed(0)
    return SoftplusNLL().eval(), _rows(4, 16, 16)


class RMSNormSquare(nn.Module):
    """Linear with large outputs (|h| up to ~600) -> hand-written RMSNorm h * rsqrt(mean(h * h)) -> linear.
    h * h overflows fp16 for |h| > 255.9, the mean is inf, rsqrt(inf) = 0: those rows become 0 (finite)."""

    def __init__(self, d_in: int = 16, d: int = 32, scale: float = 200.0):
        super().__init__()
        self.fc = nn.Linear(d_in, d)
        self.head = nn.Linear(d, 8)
        with torch.no_grad():
            self.fc.weight.mul_(scale)

    def forward(self, x):
        h = self.fc(x)
        return self.head(h * torch.rsqrt((h * h).mean(-1, keepdim=True) + 1e-6))


def rmsnorm_square():
    torch.manual_seed(0)
    return RMSNormSquare().eval(), _rows(4, 16, 16)


# ----------------------------------------------------------------------------------------- e. HF mask
class MaskedEncoder(nn.Module):
    """Embedding -> attention with a Hugging-Face-style additive mask ((1 - mask) * float32 min: -inf in fp16,
    harmless after softmax) -> masked mean.  ``bce=True`` adds a hand-written per-sample BCE on 4 labels
    whose logits reach ~12: log(1 - sigmoid(z)) = log(0) in fp16."""

    def __init__(self, vocab: int = 64, seq: int = 12, d: int = 32, bce: bool = False):
        super().__init__()
        self.stem = B.EmbedStem(vocab, seq, d)
        self.attn = B.AttnBlock(d, 2, "layernorm")
        self.mlp = B.MLPBlock(d, "gelu", "layernorm")
        self.out = nn.Linear(d, 4)
        self.bce = bce
        with torch.no_grad():
            if bce:
                self.out.weight.mul_(4.0)
                self.out.bias.fill_(6.0)

    def forward(self, ids, mask, y=None):
        h = self.stem(ids)
        mask_add = (1.0 - mask[:, None, None, :].to(h.dtype)) * torch.finfo(torch.float32).min
        h = self.mlp(self.attn(h, mask_add))
        m = mask.unsqueeze(-1).to(h.dtype)
        z = self.out((h * m).sum(1) / m.sum(1))
        if not self.bce:
            return z
        p = torch.sigmoid(z)
        return -(y * torch.log(p) + (1.0 - y) * torch.log(1.0 - p))


def _masked_batches(bce: bool, n: int = 4, batch: int = 4, seq: int = 12, vocab: int = 64):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        lengths = torch.randint(3, seq + 1, (batch,), generator=g)
        mask = (torch.arange(seq)[None] < lengths[:, None]).long()
        y = (torch.rand(batch, 4, generator=g) < 0.5).float()
        out.append((ids, mask, y) if bce else (ids, mask))
    return out


def hf_mask_control():
    torch.manual_seed(0)
    return MaskedEncoder().eval(), _masked_batches(False)


def hf_mask_bce():
    torch.manual_seed(0)
    return MaskedEncoder(bce=True).eval(), _masked_batches(True)


# ----------------------------------------------------------------------------------------- f. over-fixes
class PrefixMean(nn.Module):
    """Linear -> relu (values up to ~4000) -> running mean cumsum / arange(1..64) over 64 positions -> linear.
    The cumulative sum passes 65504 (fp16 max) within the sequence.  arange in float is a Range kernel (gray,
    no producer: GE's allow_fp32_to_fp16 path keeps it fp32, so black-listing it changes nothing; the over-fix
    is black-listing the head's MatMulV2 as well)."""

    def __init__(self, d_in: int = 16, d: int = 16, scale: float = 1500.0):
        super().__init__()
        self.fc = nn.Linear(d_in, d)
        self.head = nn.Linear(d, 4)
        self.scale = scale
        with torch.no_grad():
            self.fc.weight.mul_(scale)
            self.fc.bias.fill_(0.5 * scale)

    def forward(self, x):
        v = torch.relu(self.fc(x))
        pos = torch.arange(1, v.shape[1] + 1, dtype=v.dtype)[:, None]
        return self.head(torch.cumsum(v, dim=1) / pos / self.scale)


def prefix_sum_overflow():
    torch.manual_seed(0)
    return PrefixMean().eval(), _rows(4, 2, 64, 16)


class L2NormGate(nn.Module):
    """v = h * sigmoid(g) with g ~ -14 (sigmoid ~ 1e-6: subnormal in fp16), then L2-normalised by hand,
    v * rsqrt(sum(v * v)): v * v (~1e-12) is 0 in fp16, rsqrt(0) = inf.  Every op after the two linears is
    gray or black, so black-listing MatMulV2 puts the whole model in fp32 (share 0); black-listing Mul and
    Sigmoid keeps the linears in fp16."""

    def __init__(self, d_in: int = 16, d: int = 32):
        super().__init__()
        self.h, self.g = nn.Linear(d_in, d), nn.Linear(d_in, d)
        with torch.no_grad():
            self.g.bias.fill_(-14.0)

    def forward(self, x):
        v = self.h(x) * torch.sigmoid(self.g(x))
        return v * torch.rsqrt((v * v).sum(-1, keepdim=True))


def l2norm_gate():
    torch.manual_seed(0)
    return L2NormGate().eval(), _rows(4, 16, 16)


SITUATIONS = {s.name: s for s in (
    Situation("sigmoid_log_head", "a. Linear -> sigmoid -> log(p + 1e-8): sigmoid subnormal/0 in fp16",
              base="fails", passes=(("Sigmoid",),), fails=(("Add",),),
              over_fix=(("Sigmoid",), ("MatMulV2",))),
    Situation("sigmoid_log_two_branches", "a. two branches: torch.sigmoid and 1 / (1 + exp(-z)), each into log(+1e-8)",
              base="fails", passes=(("Exp", "Sigmoid"),), fails=(("Add", "Exp"), ("Sigmoid",), ("Exp",)),
              over_fix=(("Exp", "Sigmoid"), ("MatMulV2",))),
    Situation("attention_key_bias", "b. attention scores ~1e4 from a biased key (and query) projection",
              base="fails", passes=(("BatchMatMul", "MatMulV2"),), fails=(("BatchMatMul",), ("MatMulV2",)),
              over_fix=(("BatchMatMul", "MatMulV2"), ("BatchMatMul", "LayerNormV4", "MatMulV2"))),
    Situation("minilm_temperature", "c. real MiniLM, recommender head: hand-written softmax at temperature 0.02",
              base="fails", passes=(("Exp",), ("MatMul", "RealDiv")), over_fix=(("Exp",), ("MatMul", "RealDiv")),
              slow=True),
    Situation("softplus_nll", "d. log1p(exp(-z)) softplus in a log-likelihood: -inf on every batch",
              base="fails", base_output="nonfinite_every_step", passes=(("Exp",),),
              over_fix=(("Exp",), ("MatMulV2",))),
    Situation("rmsnorm_square", "d. hand-written RMSNorm, x*x overflows, rsqrt(inf) = 0: finite but wrong",
              base="fails", base_output="finite_but_wrong", passes=(("Mul",),), over_fix=(("Mul",), ("MatMulV2",))),
    Situation("hf_mask_control", "e. Hugging Face additive mask (float32 min, -inf in fp16): needs no edit",
              base="passes"),
    Situation("hf_mask_bce", "e. the same mask with a hand-written BCE: log(1 - p) needs Sigmoid",
              base="fails", passes=(("Sigmoid",),), over_fix=(("Sigmoid",), ("MatMulV2",))),
    # torch.cumsum's dim is a constant: GE's ConstToAttrPass makes the Cumsum a CumsumD before it judges
    Situation("prefix_sum_overflow", "f. prefix sum overflows: CumsumD suffices, CumsumD + MatMulV2 is not minimal",
              base="fails", passes=(("CumsumD",),), over_fix=(("CumsumD",), ("CumsumD", "MatMulV2"))),
    Situation("l2norm_gate", "f. L2-normalised sigmoid gate: MatMulV2 passes at share 0, Mul + Sigmoid keeps more",
              base="fails", passes=(("MatMulV2",), ("Mul", "Sigmoid")), fails=(("Mul",), ("Sigmoid",)),
              over_fix=(("Mul", "Sigmoid"), ("MatMulV2",))),
)}
