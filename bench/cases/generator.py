"""Deterministic generator of small workloads: ``make_case(seed) -> Case``.

The kind follows the seed (``seed % 4``: hazard, control, hazard, training) and so does the family (cycling
through the kind's families), so any 4k consecutive seeds hold 2k hazards, k controls and k training cases and
cover the families evenly; so is whether a threshold hazard shows only in the last (held-out) batch
(``is_late``).  Everything else is drawn from ``random.Random(seed)``: the host network (stem:
dense / embedding / conv; 0-2 benign blocks among MLP, gated unit, attention, prefix mean, each with a
LayerNorm, a hand-written LayerNorm or a hand-written RMSNorm; the pooling head), sizes (width, batch, sequence,
number of batches), where the hazard sits (before block i, or in the head), its pre-norm, its strength (how far
past the fp16 limit: barely or far).

Hazards whose failure is a threshold (overflow, underflow) are *calibrated* on the FP32 run of the case's own
batches: the block's knob is set so that its deciding quantity lands exactly ``margin`` past the fp16 limit
(blocks.py).  Controls use the same blocks on the safe side of the limit, or constructions that look dangerous
but are not (a Hugging Face additive mask of float32 min, large activations, Pow-squared RMSNorm, ...).

A Case's ``workload`` is a zero-argument function returning ``(model, batches)`` or ``(model, batches,
loss_fn)`` (docs/cli.md workload contract; >= 3 batches, the last one is the one ``advisor tune`` holds out).
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F

from . import blocks as B

KIND_CYCLE = ("hazard", "control", "hazard", "training")
HAZARDS = ("exp_gate", "softplus", "log_sigmoid", "div_small", "bias_norm", "key_bias_attention",
           "temp_softmax", "rms_square", "prefix_sum", "pow_compound", "var_cancel", "bce_head",
           "minilm_temperature", "minilm_mask_bce")
CONTROLS = ("hf_mask_attention", "large_safe", "rms_pow_large", "exp_bounded", "log_sigmoid_mild",
            "stable_softmax_temp", "large_embedding_ln", "prefix_sum_safe", "minilm_hf_mask", "plain")
TRAINING = ("train_clean", "train_loss_scale", "train_forward_hazard", "train_bce_loss")

# calibrated blocks (hazards and their safe-side controls): family -> block class
CALIBRATED = {"exp_gate": B.ExpGate, "softplus": B.Softplus, "log_sigmoid": B.LogSigmoid, "div_small": B.DivSmall,
              "temp_softmax": B.TempSoftmax, "rms_square": B.RmsSquare, "prefix_sum": B.PrefixSum,
              "large_safe": B.LargeActivation}
LATE_OK = ("exp_gate", "softplus", "log_sigmoid", "rms_square", "prefix_sum")
MARGINS = {"log": {"barely": (0.1, 0.6), "far": (2.0, 8.0)}, "ratio": {"barely": (0.02, 0.15), "far": (0.5, 8.0)}}


@dataclass(frozen=True)
class Case:
    """One generated workload.  ``spec`` (JSON) determines it completely; ``workload()`` builds it."""

    seed: int
    name: str
    kind: str
    family: str
    description: str
    spec: dict = field(repr=False)
    workload: Callable[[], tuple] = field(repr=False, compare=False)

    @property
    def fingerprint(self) -> str:
        """Short hash of the spec (every decision of the generator; not the code in blocks.py)."""
        return hashlib.sha256(json.dumps(self.spec, sort_keys=True).encode()).hexdigest()[:12]


def hazard_ordinal(seed: int) -> int:
    """The seed's position among hazard seeds (hazard seeds are 0 and 2 mod 4)."""
    return 2 * (seed // len(KIND_CYCLE)) + (seed % len(KIND_CYCLE) == 2)


def kind_and_family(seed: int) -> tuple[str, str]:
    kind = KIND_CYCLE[seed % len(KIND_CYCLE)]
    cycle = seed // len(KIND_CYCLE)
    if kind == "hazard":
        return kind, HAZARDS[hazard_ordinal(seed) % len(HAZARDS)]
    families = CONTROLS if kind == "control" else TRAINING
    return kind, families[cycle % len(families)]


def is_late(seed: int) -> bool:
    """Late hazards alternate over the passes through the hazard families: family i of pass r is late when
    i + r is odd (so about half of the threshold hazards of any seed range show only in the last batch)."""
    kind, family = kind_and_family(seed)
    h = hazard_ordinal(seed)
    return kind == "hazard" and family in LATE_OK and (h % len(HAZARDS) + h // len(HAZARDS)) % 2 == 1


def make_case(seed: int) -> Case:
    """The case of ``seed`` (same seed -> same case: spec, model weights and batches)."""
    kind, family = kind_and_family(seed)
    rng = random.Random(seed)
    spec = SPECS[family](rng)
    if is_late(seed):
        _make_late(spec, rng)
    spec = {"seed": seed, "kind": kind, "family": family, **spec}
    spec = json.loads(json.dumps(spec))          # plain JSON: what the fingerprint and the builder see
    if (spec.get("hazard") or {}).get("late"):
        # a late hazard needs the last batch pushed over the limit; when this host cannot be, the case falls
        # back to a hazard calibrated on every batch (decided here, so the description stays true)
        notes: dict = {}
        build(spec, notes)
        spec["hazard"]["late"] = notes["late"]
    return Case(seed, f"{kind}-{family}-s{seed}", kind, family, describe(spec), spec,
                functools.partial(build, spec))


# =============================================================================================== specs
def _loguniform(rng, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


# weighted choices (a hand-written norm brings five or six op types, the LayerNorm one: what the oracle enumerates)
BLOCK_NORMS = ("layernorm", "layernorm", "layernorm", "hand_ln", "rms_pow")
PRE_NORMS = ("layernorm", "layernorm", "none", "none", "none", "hand_ln", "rms_pow")
N_BLOCKS = (0, 0, 1, 1, 1, 2)


def _benign(rng, kinds=B.BENIGN, norms=BLOCK_NORMS) -> dict:
    kind = rng.choice(kinds)
    spec = {"kind": kind, "norm": rng.choice(norms)}
    if kind == "mlp":
        spec["act"] = rng.choice(sorted(B.ACTS))
    elif kind == "glu":
        spec["gate"] = rng.choice(["sigmoid", "silu"])
    elif kind == "attn":
        spec["heads"] = rng.choice([1, 2, 4])
    return spec


def _host(rng, stems=("dense", "dense", "embed", "conv"), n_blocks=N_BLOCKS,
          pools=("mean", "last", "sum", "tokens"), kinds=B.BENIGN, norms=BLOCK_NORMS) -> dict:
    stem = rng.choice(stems)
    h = {"stem": stem, "d": rng.choice([16, 24, 32]), "batch": rng.choice([2, 4, 8]),
         "batches": rng.choice([3, 3, 4]), "d_out": rng.choice([4, 8])}
    if stem == "conv":
        h["side"] = rng.choice([4, 8])
        h["seq"] = (h["side"] // 2) ** 2
    else:
        h["seq"] = rng.choice([4, 8, 16])
    if stem == "dense":
        h["d_in"] = rng.choice([8, 16, 32])
    if stem == "embed":
        h["vocab"] = 64
    h["blocks"] = [_benign(rng, kinds, norms) for _ in range(rng.choice(n_blocks))]
    h["pool"] = rng.choice(pools)
    return h


def _strength(rng) -> str:
    return rng.choice(["barely", "far"])


def _calibrated(family: str, control_margin: tuple[float, float] | None = None, **fixed):
    """Spec maker of a calibrated hazard block family (``control_margin``: a control on the safe side)."""
    def spec(rng) -> dict:
        host = _host(rng)
        hz = {"type": family, "pre": rng.choice(PRE_NORMS), "pos": rng.randint(0, len(host["blocks"])),
              "hidden": rng.choice([16, 32, 48]), **fixed}
        scale = CALIBRATED[family].scale
        if control_margin is None:
            hz["strength"] = _strength(rng)
            hz["margin"] = rng.uniform(*MARGINS[scale][hz["strength"]])
        else:
            hz["strength"] = "safe"
            hz["margin"] = rng.uniform(*control_margin)
        if family == "log_sigmoid":
            hz["eps"] = rng.choice([None, 1e-8])
        if family == "temp_softmax":
            hz["k"] = rng.choice([4, 8, 16])
        return {"host": host, "hazard": hz}
    return spec


def _make_late(spec: dict, rng) -> None:
    """The hazard shows only in the last (held-out) batch: one sample of it is scaled up.  That needs a
    scale-sensitive path from the input: a dense stem and no norm before the hazard, placed first."""
    host, hz = spec["host"], spec["hazard"]
    host["stem"], hz["pos"], hz["pre"], hz["late"] = "dense", 0, "none", True
    host.setdefault("d_in", rng.choice([8, 16, 32]))
    host.pop("side", None)
    host.pop("vocab", None)
    host["seq"] = rng.choice([4, 8, 16])


def _bias_norm(rng) -> dict:
    host = _host(rng)
    bias = _loguniform(rng, 16, 4096)
    return {"host": host, "hazard": {"type": "bias_norm", "pre": rng.choice(PRE_NORMS),
                                     "pos": rng.randint(0, len(host["blocks"])), "hidden": rng.choice([16, 32, 48]),
                                     "bias": bias, "norm": rng.choice(["layernorm", "hand_ln"]),
                                     "strength": "barely" if bias < 128 else ("far" if bias > 512 else "mid")}}


def _key_bias(rng) -> dict:
    host = _host(rng)
    score = _loguniform(rng, 400, 30000)
    return {"host": host, "hazard": {"type": "key_bias_attention", "pre": rng.choice(BLOCK_NORMS),
                                     "pos": rng.randint(0, len(host["blocks"])), "heads": rng.choice([1, 2]),
                                     "score": score, "variant": rng.choice(["all", "sink"]),
                                     "scaled": rng.random() < 0.5,
                                     "strength": "barely" if score < 1500 else ("far" if score > 8000 else "mid")}}


def _pow(rng) -> dict:
    host = _host(rng)
    n = int(round(_loguniform(rng, 32, 1024)))
    return {"host": host, "hazard": {"type": "pow_compound", "pre": rng.choice(BLOCK_NORMS),
                                     "pos": rng.randint(0, len(host["blocks"])), "hidden": rng.choice([16, 32]),
                                     "n": n, "k": rng.uniform(0.5, 1.5),
                                     "strength": "barely" if n < 96 else ("far" if n > 320 else "mid")}}


def _var_cancel(rng) -> dict:
    host = _host(rng)
    mean = _loguniform(rng, 4, 180)
    return {"host": host, "hazard": {"type": "var_cancel", "pre": rng.choice(BLOCK_NORMS),
                                     "pos": rng.randint(0, len(host["blocks"])), "hidden": rng.choice([16, 32]),
                                     "mean": mean,
                                     "strength": "barely" if mean < 12 else ("far" if mean > 48 else "mid")}}


def _bce_head(rng) -> dict:
    host = _host(rng, pools=("tokens",))
    strength = _strength(rng)
    return {"host": host, "hazard": {"type": "bce_head", "pre": rng.choice(BLOCK_NORMS), "pos": "head",
                                     "strength": strength, "margin": rng.uniform(*MARGINS["log"][strength])}}


def _hf_mask(rng) -> dict:
    host = _host(rng, stems=("dense", "embed"))
    host["blocks"] = [{"kind": "attn", "norm": rng.choice(BLOCK_NORMS), "heads": rng.choice([1, 2, 4])}
                      for _ in range(rng.randint(1, 2))]
    return {"host": host, "mask": {"value": "float32_min", "min_len": 1}}


def _large_embedding(rng) -> dict:
    host = _host(rng, stems=("embed",))
    first = _benign(rng)
    first["norm"] = rng.choice(["layernorm", "rms_pow"])
    host["blocks"] = [first]
    return {"host": host, "embed_scale": _loguniform(rng, 100, 2000)}


def _minilm(head: str):
    def spec(rng) -> dict:
        s = {"layers": 1, "batches": 3, "per_batch": rng.choice([2, 3]),
             "mask_value": rng.choice(["float32_min", -10000.0]) if head == "temperature" else "float32_min",
             "head": head, "sentence_seed": rng.randrange(2 ** 31)}
        if head == "temperature":
            s["strength"] = _strength(rng)
            s["margin"] = rng.uniform(*MARGINS["log"][s["strength"]])
            s["items"] = rng.choice([6, 10])
        if head == "bce":
            s["strength"] = _strength(rng)
            s["margin"] = rng.uniform(*MARGINS["log"][s["strength"]])
            s["labels"] = rng.choice([4, 8])
        return s
    return spec


def _plain(rng) -> dict:
    host = _host(rng, n_blocks=(1, 2, 3))
    if not host["blocks"]:
        host["blocks"] = [_benign(rng)]
    return {"host": host}


def _training(variant: str):
    def spec(rng) -> dict:
        # no attention in training hosts: the gradient of a key bias is exactly zero in real arithmetic
        # (softmax ignores a per-row constant), so its fp16 and FP32 round-off would be compared
        # small hosts: the backward pass brings a second set of op types for the oracle to enumerate
        host = _host(rng, stems=("dense", "dense", "embed"), n_blocks=(0, 0, 1), pools=("mean", "last"),
                     kinds=("mlp",), norms=("layernorm",))
        s: dict[str, Any] = {"host": host, "loss": rng.choice(["ce", "mse"]), "factor": 1.0}
        if variant == "loss_scale":
            s["factor"] = _loguniform(rng, 1e-9, 1e-4)
        if variant == "forward_hazard":
            fam = rng.choice(["exp_gate", "log_sigmoid", "rms_square", "prefix_sum"])
            scale = CALIBRATED[fam].scale
            strength = _strength(rng)
            s["hazard"] = {"type": fam, "pre": "none", "pos": rng.randint(0, len(host["blocks"])),
                           "hidden": 16, "strength": strength, "margin": rng.uniform(*MARGINS[scale][strength])}
        if variant == "bce_loss":
            s["loss"] = "bce"
            s["strength"] = _strength(rng)
            s["margin"] = rng.uniform(*MARGINS["log"][s["strength"]])
        return s
    return spec


SPECS: dict[str, Callable[[random.Random], dict]] = {
    "exp_gate": _calibrated("exp_gate"), "softplus": _calibrated("softplus"),
    "log_sigmoid": _calibrated("log_sigmoid"), "div_small": _calibrated("div_small"),
    "bias_norm": _bias_norm, "key_bias_attention": _key_bias, "temp_softmax": _calibrated("temp_softmax"),
    "rms_square": _calibrated("rms_square", square="mul"), "prefix_sum": _calibrated("prefix_sum"),
    "pow_compound": _pow, "var_cancel": _var_cancel, "bce_head": _bce_head,
    "minilm_temperature": _minilm("temperature"), "minilm_mask_bce": _minilm("bce"),
    "hf_mask_attention": _hf_mask, "large_safe": _calibrated("large_safe", (-0.7, -0.4)),
    "rms_pow_large": _calibrated("rms_square", (0.2, 10.0), square="pow"),
    "exp_bounded": _calibrated("exp_gate", (-4.0, -1.5)), "log_sigmoid_mild": _calibrated("log_sigmoid", (-11.0, -8.5)),
    "stable_softmax_temp": _calibrated("temp_softmax", (-6.0, -1.0), stable=True),
    "large_embedding_ln": _large_embedding, "prefix_sum_safe": _calibrated("prefix_sum", (-0.8, -0.5)),
    "minilm_hf_mask": _minilm("plain"), "plain": _plain,
    "train_clean": _training("clean"), "train_loss_scale": _training("loss_scale"),
    "train_forward_hazard": _training("forward_hazard"), "train_bce_loss": _training("bce_loss"),
}


# =============================================================================================== building
def _stem(h: dict):
    if h["stem"] == "dense":
        return B.DenseStem(h["d_in"], h["d"])
    if h["stem"] == "embed":
        return B.EmbedStem(h["vocab"], h["seq"], h["d"])
    return B.ConvStem(3, h["d"])


def _inputs(h: dict) -> torch.Tensor:
    if h["stem"] == "dense":
        return torch.randn(h["batch"], h["seq"], h["d_in"])
    if h["stem"] == "embed":
        return torch.randint(0, h["vocab"], (h["batch"], h["seq"]))
    return torch.randn(h["batch"], 3, h["side"], h["side"])


def _hazard_block(hz: dict, d: int):
    t, pre = hz["type"], hz["pre"]
    if t in ("exp_gate", "softplus", "div_small", "prefix_sum", "large_safe"):
        return CALIBRATED[t](d, pre, hz["hidden"])
    if t == "log_sigmoid":
        return B.LogSigmoid(d, pre, hz["hidden"], hz.get("eps"))
    if t == "temp_softmax":
        return B.TempSoftmax(d, pre, hz["k"], hz.get("stable", False))
    if t == "rms_square":
        return B.RmsSquare(d, pre, hz.get("square", "mul"))
    if t == "bias_norm":
        return B.BiasNorm(d, pre, hz["hidden"], hz["bias"], hz["norm"])
    if t == "key_bias_attention":
        return B.KeyBiasAttention(d, pre, hz["heads"], hz["score"], hz["variant"], hz["scaled"])
    if t == "pow_compound":
        return B.PowCompound(d, pre, hz["hidden"], hz["n"], hz["k"])
    if t == "var_cancel":
        return B.VarCancel(d, pre, hz["hidden"], hz["mean"])
    raise ValueError(f"unknown hazard {t!r}")


def _calibrate(net: B.Net, block, index: int, batches: list[tuple], hz: dict, notes: dict) -> None:
    """Set a calibrated block's knob on the FP32 run of the batches (module docstring)."""
    if not hasattr(block, "calibrate"):
        return
    if not hz.get("late"):
        block.calibrate([net.input_of(index, b[0]) for b in batches], block.target(hz["margin"]))
        return
    safe = block.target(-1.0 if block.scale == "log" else -0.5)
    block.calibrate([net.input_of(index, b[0]) for b in batches[:-1]], safe)
    last = batches[-1][0]
    want = block.target(hz["margin"])

    def stat(f: float) -> float:
        x = last.clone()
        x[0] *= f
        return block.max_stat([net.input_of(index, x)])

    lo, hi = 1.0, 1e4
    if stat(hi) < want:            # cannot be pushed over in this host: calibrate every batch instead
        notes["late"] = False
        block.calibrate([net.input_of(index, b[0]) for b in batches], want)
        return
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if stat(mid) < want else (lo, mid)
    last[0] *= hi
    notes["late"], notes["late_scale"] = True, hi


def _build_host_net(spec: dict, notes: dict):
    """A Net from spec["host"] (+ spec["hazard"] inserted and calibrated), its batches."""
    h = spec["host"]
    d = h["d"]
    blocks = [B.make_benign(b, d) for b in h["blocks"]]
    hz = spec.get("hazard")
    head: torch.nn.Module = B.PoolHead(d, h["d_out"], h["pool"])
    block = None
    if hz is not None and hz["pos"] == "head":
        block = head = B.BCEHead(d, hz["pre"])
        index = len(blocks)
    elif hz is not None:
        block = _hazard_block(hz, d)
        index = hz["pos"]
        blocks.insert(index, block)
    net = B.Net(_stem(h), blocks, head)
    batches = []
    for _ in range(h["batches"]):
        x = _inputs(h)
        batches.append((x, (torch.rand(h["batch"], h["seq"]) < 0.5).float()) if isinstance(head, B.BCEHead)
                       else (x,))
    if block is not None:
        _calibrate(net, block, index, batches, hz, notes)
    return net, batches


def _hf_mask_net(spec: dict):
    h = spec["host"]
    net = MaskedAttentionNet(_stem(h), [B.AttnBlock(h["d"], b["heads"], b["norm"]) for b in h["blocks"]],
                             torch.nn.Linear(h["d"], h["d_out"]))
    batches = []
    for _ in range(h["batches"]):
        lengths = torch.randint(spec["mask"]["min_len"], h["seq"] + 1, (h["batch"],))
        mask = (torch.arange(h["seq"])[None] < lengths[:, None]).long()
        batches.append((_inputs(h), mask))
    return net, batches


class MaskedAttentionNet(torch.nn.Module):
    """stem -> attention blocks with a Hugging-Face-style additive padding mask ((1 - mask) * float32 min,
    -inf once rounded to fp16; harmless after softmax while a row keeps one unmasked key) -> masked mean -> linear."""

    def __init__(self, stem, blocks, head):
        super().__init__()
        self.stem, self.blocks, self.head = stem, torch.nn.ModuleList(blocks), head

    def forward(self, x, mask):
        h = self.stem(x)
        mask_add = (1.0 - mask[:, None, None, :].to(h.dtype)) * torch.finfo(torch.float32).min
        for b in self.blocks:
            h = b(h, mask_add)
        m = mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1))


def _minilm_net(spec: dict):
    from . import realmodel as R
    rng = random.Random(spec["sentence_seed"])
    groups, rest = R.sentence_batches(rng, spec["batches"], spec["per_batch"])
    tok = R.tokenizer()
    batches = [tok.batch(g) for g in groups]
    mv = R.HF_MASK_MIN if spec["mask_value"] == "float32_min" else float(spec["mask_value"])
    enc = R.HFEncoder(spec["layers"], mv).eval()
    if spec["head"] == "temperature":
        with torch.no_grad():
            items = enc(*tok.batch(rest[:spec["items"]]))
        head = B.CosineSoftmaxHead(items)
    elif spec["head"] == "bce":
        head = B.BCEHead(enc.embeddings.word_embeddings.weight.shape[1], "none", spec["labels"])
    else:
        head = B.Passthrough()
    net = R.RealNet(enc, head).eval()
    if spec["head"] == "bce":
        batches = [(ids, m, (torch.rand(ids.shape[0], spec["labels"]) < 0.5).float()) for ids, m in batches]
    if spec["head"] in ("temperature", "bce"):
        head.calibrate([net.input_of(b[0], b[1]) for b in batches], head.target(spec["margin"]))
    return net, batches


def _train_net(spec: dict, notes: dict):
    net, batches = _build_host_net(spec, notes)
    c = spec["host"]["d_out"]
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    out = []
    for (x,) in batches:
        n = x.shape[0]
        if spec["loss"] == "ce":
            y = torch.randint(0, c, (n,), generator=g)
        elif spec["loss"] == "mse":
            y = torch.randn(n, c, generator=g)
        else:
            y = (torch.rand(n, c, generator=g) < 0.5).float()
        out.append((x, y))
    if spec["loss"] == "bce":                       # shift the head so its largest logit lands past the limit
        with torch.no_grad():
            top = max(float(net(x).max()) for x, _ in out)
            net.head.fc.bias += B.SIGMOID_ONE + spec["margin"] - top
    return net.train(), out, functools.partial(_loss, spec["loss"], spec["factor"])


def _loss(kind: str, factor: float, out: torch.Tensor, batch) -> torch.Tensor:
    y = batch[1]
    if kind == "ce":
        loss = F.cross_entropy(out, y)
    elif kind == "mse":
        loss = F.mse_loss(out, y)
    else:                                            # binary cross-entropy written by hand
        p = torch.sigmoid(out)
        loss = -(y * torch.log(p) + (1.0 - y) * torch.log(1.0 - p)).mean()
    return loss * factor if factor != 1.0 else loss


def build(spec: dict, notes: dict | None = None):
    """Build the workload of a spec: ``(model, batches)`` or ``(model, batches, loss_fn)``.  ``notes`` receives
    what calibration decided (``late``, ``late_scale``)."""
    notes = {} if notes is None else notes
    torch.manual_seed(spec["seed"])
    fam = spec["family"]
    if fam.startswith("minilm_"):
        net, batches = _minilm_net(spec)
        return net, batches
    if fam == "hf_mask_attention":
        net, batches = _hf_mask_net(spec)
        return net.eval(), batches
    if spec["kind"] == "training":
        return _train_net(spec, notes)
    if fam == "large_embedding_ln":
        net, batches = _build_host_net(spec, notes)
        with torch.no_grad():
            net.stem.tok.weight.mul_(spec["embed_scale"])
        return net.eval(), batches
    net, batches = _build_host_net(spec, notes)
    return net.eval(), batches


# =============================================================================================== descriptions
PLANTED = {
    "exp_gate": "hand-written exp-normalised gate exp(z)/sum(exp(z)) whose row sums overflow fp16",
    "softplus": "softplus as log1p(exp(z)): exp overflows fp16",
    "log_sigmoid": "log(sigmoid(z)) with strongly negative z: sigmoid underflows (subnormal, then 0) in fp16",
    "div_small": "division by small values: the quotient overflows fp16",
    "bias_norm": "large-bias linear feeding a normalisation: fp16 cannot hold the O(1) variation on top of the bias",
    "key_bias_attention": "attention scores with a large common offset from biased query/key projections",
    "temp_softmax": "hand-written softmax at a low temperature over cosine similarities: exp overflows fp16",
    "rms_square": "hand-written RMSNorm squaring with x*x on large activations: x*x overflows, rsqrt(inf) = 0 "
                  "zeroes the row",
    "prefix_sum": "prefix sums (cumsum) of large positive values overflow fp16",
    "pow_compound": "(1 + k z / n) ** n: the fp16 rounding of 1 + small is raised to the n-th power",
    "var_cancel": "variance as E[z^2] - E[z]^2 on values with a large mean: catastrophic cancellation",
    "bce_head": "hand-written per-token BCE: log(1 - p) with p = sigmoid(z) rounding to 1.0 in fp16",
    "large_safe": "(control) large but safe activations relu(z), |z| a good fraction of 65504",
    "rms_pow_large": "(control) hand-written RMSNorm on activations above 256, squared with pow (black: FP32)",
    "exp_bounded": "(control) the exp-normalised gate with row sums safely below 65504",
    "log_sigmoid_mild": "(control) log(sigmoid(z)) with z only moderately negative (sigmoid stays normal)",
    "stable_softmax_temp": "(control) torch.softmax (stable SoftmaxV2) at a low temperature",
    "prefix_sum_safe": "(control) prefix sums of positive values safely below 65504",
}


def describe(spec: dict) -> str:
    fam, kind = spec["family"], spec["kind"]
    if fam.startswith("minilm_"):
        head = {"temperature": f"recommender head: hand-written softmax over cosine similarity to {spec.get('items')} "
                               f"real sentence embeddings, temperature calibrated so max cos/T = 11.09 + "
                               f"{spec.get('margin', 0):.2f} ({spec.get('strength')}): exp overflows fp16",
                "bce": f"multi-label BCE head written by hand on the pooled embedding, max logit 8.32 + "
                       f"{spec.get('margin', 0):.2f} ({spec.get('strength')}): log(1 - sigmoid) = log(0) in fp16",
                "plain": "(control) pooled embeddings, no head"}[spec["head"]]
        mask = "Hugging Face additive mask float32 min (-inf in fp16)" if spec["mask_value"] == "float32_min" \
            else "additive mask -10000"
        return (f"real all-MiniLM-L6-v2 weights, first {spec['layers']} encoder layer(s), {mask}, mean pooling; "
                f"{head}; {spec['batches']} batches of {spec['per_batch']} real sentences")
    h = spec["host"]
    stem = {"dense": f"dense stem {h.get('d_in')}->{h['d']}", "embed": f"embedding stem (vocab {h.get('vocab')})",
            "conv": f"conv stem ({h.get('side')}x{h.get('side')} images)"}[h["stem"]]
    parts = [B.describe_benign(b) for b in h["blocks"]]
    hz = spec.get("hazard")
    where = ""
    if hz is not None:
        if hz["pos"] == "head":
            where = "in the head"
        else:
            parts.insert(hz["pos"], f"[{hz['type']}]")
            where = f"block {hz['pos'] + 1} of {len(parts)}, pre-norm {hz['pre']}"
    host = (f"{stem}, d={h['d']}, blocks: {', '.join(parts) or 'none'}, {h['pool']} head -> {h['d_out']}; "
            f"{h['batches']} batches of {h['batch']}x{h['seq']}")
    if fam == "hf_mask_attention":
        return f"(control) Hugging Face additive padding mask of float32 min (-inf in fp16) in attention; {host}"
    if fam == "large_embedding_ln":
        return f"(control) token embeddings scaled x{spec['embed_scale']:.0f} into a normalisation; {host}"
    if fam == "plain":
        return f"(control) plain well-scaled network; {host}"
    if kind == "training":
        loss = {"ce": "cross-entropy", "mse": "MSE", "bce": "hand-written BCE"}[spec["loss"]]
        what = f"training step, {loss} loss"
        if spec["factor"] != 1.0:
            what += f" scaled by {spec['factor']:.2g} (fp16 gradients underflow below 6e-8)"
        if spec["loss"] == "bce":
            what += f", largest logit 8.32 + {spec['margin']:.2f} ({spec['strength']}): log(1 - sigmoid) = log(0)"
        if hz is not None:
            what += f"; forward hazard: {PLANTED[hz['type']]}, margin {hz['margin']:.2f} ({hz['strength']}), {where}"
        if spec["factor"] == 1.0 and spec["loss"] != "bce" and hz is None:
            what += " (clean)"
        return f"{what}; {host}"
    return f"{_hazard_text(fam, hz)}; {where}; {host}"


def _hazard_text(fam: str, hz: dict) -> str:
    t = hz["type"]
    what = PLANTED.get(fam) or PLANTED[t]
    if t in CALIBRATED or t == "bce_head":
        cls = B.BCEHead if t == "bce_head" else CALIBRATED[t]
        m = hz["margin"]
        rel = f"{m:+.2f}" if cls.scale == "log" else f"x{1 + m:.3g}"
        txt = f"{what}; calibrated: limit {cls.limit_text}, stat = limit {rel} ({hz['strength']})"
        if t == "log_sigmoid" and hz.get("eps"):
            txt += f", log(p + {hz['eps']:g})"
        if t == "rms_square" and hz.get("square") == "pow":
            txt += ", squared with pow (black)"
        if hz.get("late"):
            txt += "; shows only in the last (held-out) batch: one of its samples is scaled up"
        return txt
    knob = {"bias_norm": lambda: f"bias {hz['bias']:.0f}, {hz['norm']}",
            "key_bias_attention": lambda: f"score offset {hz['score']:.0f}, bias on {hz['variant']} channel(s), "
                                          f"{'scaled' if hz['scaled'] else 'unscaled'}",
            "pow_compound": lambda: f"n = {hz['n']}, k = {hz['k']:.2f}",
            "var_cancel": lambda: f"mean {hz['mean']:.1f}"}[t]()
    return f"{what}; {knob} ({hz['strength']})"
