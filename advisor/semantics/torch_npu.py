"""torch_npu's precision semantics: which dtype each aten op of a PyTorch program runs in on an Ascend NPU, eagerly.

The rules, with their sources by file and line, are in docs/semantics.md ("torch_npu"); the tables are data
generated from source (``tools/gen_torch_npu_tables.py`` -> ``advisor/data/torch_npu/``).  This module is the only
place they are applied: the emulator plans a capture with ``plan`` and the advice search (issue 22b) re-plans the
same ``Trace`` under other policies.  It imports no torch.

A ``Trace`` is one step of a program as the dispatcher saw it: ``Call`` s (aten ops below autograd, in order, with
where each tensor input came from) and ``Frame`` s -- the places that cast tensors on their way in:

``autocast``  an op at torch_npu's autocast key (``AutoCastOps.cpp``): its category casts its inputs (lower
              precision, fp32, fp32 unless an explicit dtype, promote) before the op and the ops it decomposes into;
``apex``      an Apex O1-patched Python function (its FP16/FP32/promote list, or a ``register_float_function``);
``module``    a named module's forward (its inputs; a kept module casts them to fp32 and runs with casts disabled,
              Apex O2's model casts them to fp16); ``exit``: a module's outputs on their way out (Apex O2);
``cast``      a ``Tensor.to(dtype)`` / ``type_as``: the ``_to_copy`` inside it produces the target dtype.

Each tensor input of a call lists the frames it passed (``Call.port_frames``, oldest first).  ``plan`` walks the
calls once, keeping every tensor's dtype as torch_npu would have it (the emulator keeps storage in the original
dtype and rounds values: docs/architecture.md), and gives each op an ``OpDecision``: the dtype its kernel
computes in, its outputs' dtype, the dtype of each input it reads, the rule that decided and whether it launches
a kernel.  ``--amp none`` (and any fp32 cube op under every amp) follows the chip's ``ACL_PRECISION_MODE``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Iterable

from ..errors import InputError
from ..oplists import AUX_FP32_OUTPUTS
from ..precision_policy import AMP_MODES, PrecisionPolicy

ENGINES = ("torch_npu", "ge")
ACL_MODES = ("allow_fp32_to_fp16", "must_keep_origin_dtype")
# chips below Ascend910B1 in torch_npu's SocVersion (NpuVariables.h:5-36): allow_fp32_to_fp16 by default
ALLOW_FP32_TO_FP16_SOCS = frozenset({"ascend910", "ascend310p"})
# chips without bf16 (docs/semantics.md: ascend910 and ascend310p have no bf16 kernels): no autocast to bf16 there
NO_BF16_SOCS = frozenset({"ascend910", "ascend310p"})
FLOATS = ("fp16", "bf16", "fp32", "fp64")
LOW = ("fp16", "bf16")
NA = "n/a"
CATEGORIES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote", "banned")
# Apex O1's lists (apex/amp/amp.py:90-171) -> what the wrapper casts
APEX_CATEGORY = {"FP16_FUNCS": "fp16", "FP32_FUNCS": "fp32", "CASTS": "promote", "SEQUENCE_CASTS": "sequence_promote",
                 "BANNED_FUNCS": "banned"}
# ops whose output keeps the dtype of their input with fp32 weights (apex functional_overrides.py:7-9: batch norm
# "correctly handles fp16 in/out with fp32 weights")
FOLLOWS_INPUT = frozenset({"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                           "_native_batch_norm_legit_functional", "batch_norm", "cudnn_batch_norm",
                           "miopen_batch_norm", "instance_norm"})
CAST_OPS = frozenset({"_to_copy"})


# ---------------------------------------------------------------------- the tables (data from source)
def _data(name: str) -> dict:
    return json.loads(resources.files("advisor").joinpath(f"data/torch_npu/{name}").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def autocast_table() -> dict:
    """advisor/data/torch_npu/autocast.json: ``ops`` (key ``op`` or ``op.overload`` -> category, line) and its source."""
    return _data("autocast.json")


@lru_cache(maxsize=1)
def apex_table() -> dict:
    """advisor/data/torch_npu/apex_o1.json: Apex O1's functions by list, and their source."""
    return _data("apex_o1.json")


@lru_cache(maxsize=1)
def eager_table() -> dict:
    """advisor/data/torch_npu/eager_ops.json: aten op -> the aclnn API op-plugin calls, cube_math_type family."""
    return _data("eager_ops.json")


def table_key(op: str, overload: str = "default") -> str:
    """The autocast table's key of aten ``op.overload`` (the default overload is the bare name)."""
    return op if overload in ("", "default") else f"{op}.{overload}"


def autocast_category(op: str, overload: str = "default") -> str | None:
    """torch_npu's autocast category of aten ``op.overload`` (None: the fallthrough, PyTorch's own promotion)."""
    e = autocast_table()["ops"].get(table_key(op, overload))
    return e["category"] if e else None


def autocast_ops() -> list[tuple[str, str, str]]:
    """(op, overload, category) of every registration in the table, in source order."""
    return [(e["op"], e["overload"], e["category"]) for e in autocast_table()["ops"].values()]


@lru_cache(maxsize=1)
def _apex_index() -> dict[str, str]:
    out: dict[str, str] = {}
    for m, n, c in apex_functions():      # a name in two lists: the first wrap is innermost and casts last
        out.setdefault(f"{m}.{n}", c)
    return out


def apex_functions() -> list[tuple[str, str, str]]:
    """(module, name, category) Apex O1 patches (``torch.Tensor`` also takes every torch entry it has:
    tensor_overrides.py:54-63; in-place ``<name>_`` methods of the Tensor FP16 and CASTS lists match their first
    argument: amp.py:142-149; in-place FP32 functions refuse fp16: amp.py:131-140)."""
    out = [(f["module"], f["name"], APEX_CATEGORY[f["list"]]) for f in apex_table()["functions"]]
    tensor = {(m, n) for m, n, _ in out if m == "torch.Tensor"}
    out += [("torch.Tensor", n, c) for m, n, c in list(out) if m == "torch" and ("torch.Tensor", n) not in tensor]
    for m, n, c in list(out):
        if m == "torch.Tensor" and c in ("fp16", "promote"):
            out.append((m, n + "_", "match_arg0"))
        elif m in ("torch", "torch.Tensor") and c == "fp32":
            out.append((m, n + "_", "err_if_half"))
    return list(dict.fromkeys(out))


def apex_category(function: str) -> str | None:
    """Apex O1's category of a dotted function name (``torch.nn.functional.softmax``; None: Apex leaves it)."""
    return _apex_index().get(function)


def eager_op(op: str, overload: str = "default") -> dict | None:
    """op-plugin's entry of aten ``op.overload`` (a generated overload, else the op_api function of that name)."""
    ops = eager_table()["ops"]
    return ops.get(f"{op}.{overload}") or ops.get(op)


# CompositeImplicitAutograd ops with no op-plugin kernel of their own, as an API-level call names them (an msprobe
# dump records ``F.linear``, a capture the ``addmm`` below it): the cube family of the kernel they decompose into
# (PyTorch aten/src/ATen/native/Linear.cpp: linear -> addmm / matmul, einsum / bilinear / tensordot -> bmm / mm;
# Convolution.cpp: conv*d -> convolution).  Choice: read from PyTorch's source, torch_npu registers no kernel here.
COMPOSITE_CUBE = {"linear": "matmul", "bilinear": "matmul", "einsum": "matmul", "tensordot": "matmul",
                  "chain_matmul": "matmul", "linalg_multi_dot": "matmul", "conv1d": "conv", "conv2d": "conv",
                  "conv3d": "conv", "conv_transpose1d": "conv", "conv_transpose2d": "conv", "conv_transpose3d": "conv",
                  "conv_tbc": "conv"}


def cube_family(op: str, overload: str = "default") -> str | None:
    """matmul | conv | none: the HF32 switch of an op whose aclnn call takes a cube_math_type (a cube op; a composite
    op: the kernel it decomposes into, ``COMPOSITE_CUBE``), else None."""
    e = eager_op(op, overload)
    return e.get("cube") if e else COMPOSITE_CUBE.get(op)


def aclnn_api(op: str, overload: str = "default") -> str:
    """The aclnn API op-plugin calls for the op (its ND variant), else ``aclnn`` + the op in CamelCase (choice)."""
    e = eager_op(op, overload)
    apis = [a for a in (e or {}).get("aclnn", ()) if "Nz" not in a] or list((e or {}).get("aclnn", ()))
    if apis:
        return apis[0]
    base = op.strip("_")
    inplace = base.endswith("_")
    camel = "".join(p[:1].upper() + p[1:] for p in base.rstrip("_").split("_") if p)
    return "aclnn" + ("Inplace" if inplace else "") + camel


def autocast_target(category: str | None, dtypes: Iterable[str], first_float: bool, dtype_arg: str | None,
                    low: str) -> str | None:
    """The dtype torch_npu's autocast kernel of ``category`` casts an op's eligible (fp16/bf16/fp32) tensor inputs to,
    given their dtypes (in argument order), whether the first argument is a float tensor and an explicit dtype
    argument; None: the op runs on its inputs as they are (PyTorch's autocast_mode.h ``WrapFunction_``:
    lower_precision_fp casts to the autocast dtype, fp32 to fp32, fp32_set_opt_dtype and fp32_append_dtype give
    fp32 when the first argument is eligible -- set_opt_dtype unless a dtype was given --, promote the widest)."""
    if category == "lower_precision_fp":
        return low
    if category == "fp32":
        return "fp32"
    dtypes = list(dtypes)
    first = first_float and bool(dtypes) and dtypes[0] in ("fp16", "bf16", "fp32")
    if category == "fp32_set_opt_dtype":
        return "fp32" if first and dtype_arg is None else None
    if category == "fp32_append_dtype":
        return "fp32" if first else None
    if category == "promote":
        elig = [r for r in dtypes if r in ("fp16", "bf16", "fp32")]
        return "fp32" if any(r != low for r in elig) else low
    return None


# ---------------------------------------------------------------------- the configuration
def has_bf16(soc: str | None) -> bool:
    return str(soc or "").lower() not in NO_BF16_SOCS


def default_acl_mode(soc: str | None) -> str:
    """ACL_PRECISION_MODE torch_npu sets by chip: allow_fp32_to_fp16 below Ascend910B1, else must_keep_origin_dtype."""
    return "allow_fp32_to_fp16" if str(soc or "").lower() in ALLOW_FP32_TO_FP16_SOCS else "must_keep_origin_dtype"


@dataclass(frozen=True)
class AmpConfig:
    """How the program runs: ``amp`` (autocast | apex-o1 | apex-o2 | none), the low dtype (fp16 | bf16), the chip and
    ``acl_mode`` (None: the chip's ACL_PRECISION_MODE default)."""

    amp: str = "autocast"
    dtype: str = "fp16"
    soc: str = "ascend910b"
    acl_mode: str | None = None

    def __post_init__(self):
        if self.amp not in AMP_MODES:
            raise InputError("--amp", f"must be one of {', '.join(AMP_MODES)}, not {self.amp!r}")
        if self.dtype not in LOW:
            raise InputError("--mode", f"the low dtype must be fp16 or bf16, not {self.dtype!r}")
        if self.amp.startswith("apex") and self.dtype != "fp16":
            raise InputError("--mode", f"Apex ({self.amp}) casts to float16 only: use mixed_float16")
        if self.acl_mode is not None and self.acl_mode not in ACL_MODES:
            raise InputError("--mode", f"torch_npu accepts ACL_PRECISION_MODE {' or '.join(ACL_MODES)} only, "
                                       f"not {self.acl_mode!r}")

    @property
    def acl_precision_mode(self) -> str:
        return self.acl_mode or default_acl_mode(self.soc)

    @property
    def allow_fp32_to_fp16(self) -> bool:
        return self.acl_precision_mode == "allow_fp32_to_fp16"

    def to_meta(self) -> dict:
        """run.json's fields (``engine``, ``amp``, ``acl_precision_mode``; the low dtype is ``low_dtype``)."""
        return {"engine": "torch_npu", "amp": self.amp, "acl_precision_mode": self.acl_precision_mode}


# ---------------------------------------------------------------------- the trace (one step, torch-free)
Src = tuple[str, int]      # (producing node: an op's name or a leaf's, its output index)


@dataclass(frozen=True)
class Leaf:
    """A tensor no op produced: a parameter or buffer (``module`` owns it), a model input or a constant."""

    name: str
    dtype: str
    kind: str = "const"            # param | buffer | input | const
    module: str | None = None


@dataclass(frozen=True)
class Frame:
    """A place that casts tensors on their way in (module docstring).  ``srcs``: its float tensor inputs in argument
    order, each with the frames it had passed (``src_frames``); ``first_float``: its first argument is a float
    tensor; ``dtype_arg``: an explicit dtype argument; ``target``: a cast's dtype (``like``: its last source's)."""

    kind: str
    op: str
    module: str = ""
    srcs: tuple[Src, ...] = ()
    src_frames: tuple[tuple[int, ...], ...] = ()
    first_float: bool = True
    dtype_arg: str | None = None
    target: str | None = None
    parent: int = -1               # the frame it opened in (-1: none)


@dataclass(frozen=True)
class Call:
    """One aten op below autograd: ``srcs`` / ``in_dtypes`` / ``in_dims`` per tensor input (``in_dtypes`` and
    ``out_dtypes`` as the recording saw them), ``port_frames`` the frames each input passed, ``module`` the innermost
    named module it ran in, ``frame`` the innermost frame around it (-1: none), ``owner`` the forward op whose
    autograd node ran a backward op (-1: none found)."""

    name: str
    op: str
    overload: str = "default"
    srcs: tuple[Src, ...] = ()
    in_dtypes: tuple[str, ...] = ()
    in_dims: tuple[int, ...] = ()
    out_dtypes: tuple[str, ...] = ()
    port_frames: tuple[tuple[int, ...], ...] = ()
    module: str = ""
    kernel: bool = True
    backward: bool = False
    owner: int = -1
    frame: int = -1
    dtype_arg: str | None = None


@dataclass
class Trace:
    calls: list[Call]
    frames: list[Frame] = field(default_factory=list)
    leaves: dict[str, Leaf] = field(default_factory=dict)
    bn_modules: frozenset = frozenset()    # BatchNorm modules with affine parameters (Apex keep_batchnorm_fp32)


# ---------------------------------------------------------------------- decisions
@dataclass(frozen=True)
class OpDecision:
    """``compute``: the dtype the kernel computes in (its float inputs rounded to it); ``out``: its float outputs'
    dtype; ``reads``: the dtype of each tensor input as the kernel reads it; ``rule`` / ``via``: what decided."""

    compute: str
    out: str
    reads: tuple[str, ...] = ()
    rule: str = ""
    via: str | None = None
    kernel: bool = True

    @property
    def low(self) -> bool:
        return self.compute in LOW


@dataclass
class TorchPlan:
    config: AmpConfig
    policy: PrecisionPolicy | None
    names: list[str]
    decisions: list[OpDecision]
    notes: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.index = {n: i for i, n in enumerate(self.names)}

    def decision(self, name: str) -> OpDecision:
        return self.decisions[self.index[name]]

    def exec_dtypes(self, name: str) -> tuple[str, str]:
        d = self.decision(name)
        return d.compute, d.out

    def low_mask(self) -> list[bool]:
        """Which ops ran in low precision (their kernel computes in fp16/bf16)."""
        return [d.kernel and d.low for d in self.decisions]


def promote_dtypes(a: str, b: str) -> str:
    """torch.promote_types for two float dtype names (fp16 with bf16 is fp32)."""
    if a == b:
        return a
    rank = {"fp16": 1, "bf16": 1, "fp32": 2, "fp64": 3}
    ra, rb = rank.get(a, 0), rank.get(b, 0)
    if ra == rb:
        return "fp32"
    return a if ra > rb else b


def result_dtype(reads: Iterable[str], dims: Iterable[int]) -> str | None:
    """PyTorch's result type of the float tensor inputs: dimensioned tensors decide, zero-dim ones only without them."""
    pairs = [(r, d) for r, d in zip(reads, dims) if r in FLOATS]
    pool = [r for r, d in pairs if d > 0] or [r for r, _ in pairs]
    out = None
    for r in pool:
        out = r if out is None else promote_dtypes(out, r)
    return out


class _Planner:
    """One pass over a trace (``plan``)."""

    def __init__(self, trace: Trace, cfg: AmpConfig, policy: PrecisionPolicy | None):
        self.t, self.cfg, self.pol = trace, cfg, policy
        self.low = cfg.dtype
        self.dtype: dict[Src, str] = {}
        self.casts: dict[int, str | None] = {}
        self.cats: dict[int, str | None] = {}
        self.decisions: list[OpDecision] = []
        self.notes: list[str] = []
        self.kept = frozenset(policy.kept_modules()) if policy is not None else frozenset()

    # ------------------------------------------------------------------ tensors
    def leaf_dtype(self, leaf: Leaf) -> str:
        """A leaf's dtype: as recorded; under Apex O2 (``model.half()`` by ``convert_network``) float parameters and
        buffers are fp16 except in affine BatchNorm modules and kept modules (``.float()``)."""
        d = leaf.dtype
        if self.cfg.amp == "apex-o2" and d in FLOATS and leaf.kind in ("param", "buffer"):
            mod = leaf.module or ""
            if mod in self.t.bn_modules or (self.pol is not None and self.pol.keeps_module(mod)):
                return d
            return self.low
        return d

    def src_dtype(self, src: Src, origin: str) -> str:
        d = self.dtype.get(src)
        if d is not None:
            return d
        leaf = self.t.leaves.get(src[0])
        return self.leaf_dtype(leaf) if leaf is not None else origin

    def through(self, d: str, frames: tuple[int, ...]) -> str:
        if d not in FLOATS:
            return d
        for f in frames:
            d = self.apply(f, d)
        return d

    def frame_reads(self, fid: int) -> list[str]:
        f = self.t.frames[fid]
        return [self.through(self.src_dtype(s, "fp32"), fr) for s, fr in zip(f.srcs, f.src_frames or
                                                                            [()] * len(f.srcs))]

    # ------------------------------------------------------------------ frames
    def apply(self, fid: int, d: str) -> str:
        """The dtype a tensor of dtype ``d`` has after passing frame ``fid``."""
        if fid not in self.casts:
            self.casts[fid] = self.frame_cast(fid)
        t = self.casts[fid]
        if t is None:
            return d
        f = self.t.frames[fid]
        if f.kind == "autocast" and d == "fp64":
            return d                  # is_eligible: double tensors are never cast (autocast_mode.h)
        if f.kind == "module" and t == "fp32" and d not in LOW:
            return d                  # a kept module's pre-hook casts fp16/bf16 inputs only
        if f.kind == "apex" and t.startswith("match:"):
            return t[6:]
        return t

    def frame_cast(self, fid: int) -> str | None:
        f = self.t.frames[fid]
        pol = self.pol
        amp = self.cfg.amp
        if f.kind == "autocast":
            if amp != "autocast" or (pol is not None and pol.keeps_module(f.module)):
                return None          # autocast disabled in a kept module
            op, _, ov = f.op.partition(".")
            cat = "fp32" if pol is not None and pol.keeps_op(op, ov or "default", f.module) \
                else autocast_category(op, ov or "default")
            self.cats[fid] = cat
            return self._autocast_target(cat, fid)
        if f.kind == "apex":
            if amp != "apex-o1" or (pol is not None and pol.keeps_module(f.module)):
                return None          # amp.disable_casts() in a kept module
            cat = "fp32" if pol is not None and pol.registers_float(f.op) else apex_category(f.op)
            self.cats[fid] = cat
            return self._apex_target(cat, fid)
        if f.kind == "module":
            if amp == "apex-o2" and f.op == "":
                return self.low      # O2's input caster (_initialize.py:184, 194-201)
            return "fp32" if f.op in self.kept else None
        if f.kind == "exit" and amp == "apex-o2":
            if f.op == "":
                return "fp32"        # O2's output caster (_initialize.py:185-188)
            return self.low if f.op in self.kept else None
        return None

    def _autocast_target(self, cat: str | None, fid: int) -> str | None:
        if cat in ("lower_precision_fp", "fp32", None, "banned"):
            return autocast_target(cat, (), False, None, self.low)
        f = self.t.frames[fid]
        return autocast_target(cat, self.frame_reads(fid), f.first_float, f.dtype_arg, self.low)

    def _apex_target(self, cat: str | None, fid: int) -> str | None:
        if cat == "fp16":
            return "fp16"
        if cat == "fp32":
            return "fp32"
        reads = self.frame_reads(fid)
        kinds = {r for r in reads if r in FLOATS}
        if cat in ("promote", "sequence_promote"):
            if kinds == {"fp16", "fp32"}:
                return "fp32"
            if len(kinds) > 1 and cat == "promote":
                self.notes.append(f"Apex cannot promote {sorted(kinds)} in {self.t.frames[fid].op} "
                                  "(NotImplementedError on a device): left as they are")
            return None
        if cat == "match_arg0" and reads and reads[0] in ("fp16", "fp32"):
            return "match:" + reads[0]
        if cat in ("banned", "err_if_half") and "fp16" in kinds:
            f = self.t.frames[fid]
            raise InputError(f.op, "Apex O1 refuses fp16 arguments here (amp.py:131-140, 164-171: "
                                   "NotImplementedError); use a float function or a *_with_logits loss")
        return None

    # ------------------------------------------------------------------ ops
    def decide(self, i: int, c: Call) -> OpDecision:
        reads = tuple(self.through(self.src_dtype(s, o), fr) for s, o, fr in
                      zip(c.srcs, c.in_dtypes, c.port_frames or [()] * len(c.srcs)))
        frame = self.t.frames[c.frame] if 0 <= c.frame < len(self.t.frames) else None
        if frame is not None and frame.kind == "cast" and c.op in CAST_OPS and reads:
            tgt = frame.target or reads[0]
            if tgt == "like":
                fr = self.frame_reads(c.frame)
                tgt = fr[-1] if fr else reads[0]
            return OpDecision(reads[0], tgt, reads, "cast", frame.op, kernel=c.kernel and reads[0] != tgt)
        if c.backward and 0 <= c.owner < len(self.decisions):
            o = self.decisions[c.owner]
            oc = self.t.calls[c.owner]
            dt = o.reads[0] if oc.op in CAST_OPS and o.reads else o.compute
            if dt in FLOATS:
                r = tuple(dt if x in FLOATS else x for x in reads)
                return self._acl(c, OpDecision(dt, dt, r, "backward", oc.name, c.kernel))
        if self.cfg.amp != "autocast" and self.pol is not None and self.pol.keeps_op(c.op, c.overload, c.module) \
                and c.kernel and c.dtype_arg is None:
            # outside autocast a kept op runs on fp32 inputs and gives its outputs the dtype it would have had
            # (the program stays type-consistent: advisor.npu_policy's dispatch mode does the same)
            was = result_dtype(reads, c.in_dims or [1] * len(reads))
            if was is not None:
                up = tuple("fp32" if r in LOW else r for r in reads)
                comp = result_dtype(up, c.in_dims or [1] * len(up)) or "fp32"
                return self._acl(c, OpDecision(comp, was, up, "keep-op", None, c.kernel))
        rule = ""
        if c.dtype_arg in FLOATS:
            return self._acl(c, OpDecision(c.dtype_arg, c.dtype_arg, reads, rule or "dtype-arg", None, c.kernel))
        comp = result_dtype(reads, c.in_dims or [1] * len(reads))
        if comp is None:
            out = next((d for d in c.out_dtypes if d in FLOATS), NA)
            return OpDecision(out, out, reads, rule or "no-float-input", None, c.kernel)
        if not c.kernel:
            first = next(r for r in reads if r in FLOATS)
            return OpDecision(first, first, reads, rule or "view", None, False)
        out = next(r for r in reads if r in FLOATS) if c.op in FOLLOWS_INPUT else comp
        why, via = self._why(c)
        return self._acl(c, OpDecision(comp, out, reads, rule or why, via, c.kernel))

    def _why(self, c: Call) -> tuple[str, str | None]:
        """(rule, via) of an op computing in its inputs' dtype: the cast that gave it them (the innermost
        autocast / Apex frame around it that cast), else PyTorch's promotion of what it was given."""
        fid = c.frame
        frames = self.t.frames
        while 0 <= fid < len(frames):
            f = frames[fid]
            if f.kind in ("autocast", "apex") and self.casts.get(fid) is not None:
                return f"{f.kind}:{self.cats.get(fid)}", f.op
            fid = f.parent
        return "inputs", None

    def _acl(self, c: Call, d: OpDecision) -> OpDecision:
        """ACL_PRECISION_MODE allow_fp32_to_fp16: an fp32 cube op (its aclnn call takes cube_math_type) reads fp16
        (USE_FP16 / ALLOW_FP32_DOWN_PRECISION: CalcuOpUtil.cpp:416-420, 443-451) and writes its fp32 output."""
        if not (self.cfg.allow_fp32_to_fp16 and d.kernel and d.compute == "fp32" and cube_family(c.op, c.overload)):
            return d
        reads = tuple("fp16" if r == "fp32" else r for r in d.reads)
        return OpDecision("fp16", d.out, reads, "acl-allow_fp32_to_fp16", d.via, d.kernel)

    def run(self) -> list[OpDecision]:
        for i, c in enumerate(self.t.calls):
            d = self.decide(i, c)
            self.decisions.append(d)
            aux = AUX_FP32_OUTPUTS.get(c.op, ())
            for j, od in enumerate(c.out_dtypes):
                if od in FLOATS:
                    self.dtype[(c.name, j)] = "fp32" if j in aux and d.out in LOW else d.out
        return self.decisions


def plan(trace: Trace, config: AmpConfig, policy: PrecisionPolicy | None = None) -> TorchPlan:
    """Every call's ``OpDecision`` under ``config`` and ``policy`` (one O(ops + ports) pass)."""
    if policy is not None and policy.amp != config.amp:
        raise InputError(policy.source or "precision_policy.json",
                         f"the policy is for amp {policy.amp}, the run uses {config.amp}")
    p = _Planner(trace, config, policy)
    decisions = p.run()
    return TorchPlan(config, policy, [c.name for c in trace.calls], decisions, p.notes)


def policy_matches(trace: Trace, policy: PrecisionPolicy) -> list[str]:
    """The policy's rules that match nothing in the trace (a module no op ran in, an op never called; under
    autocast an op counts where it reached the autocast key, not inside another table op), as notes."""
    mods = {c.module for c in trace.calls} | {f.module for f in trace.frames} | {f.op for f in trace.frames
                                                                                if f.kind == "module"}
    ops = {(f.op.partition(".")[0], f.op.partition(".")[2] or "default") for f in trace.frames if f.kind == "autocast"}
    if policy.amp != "autocast":
        ops |= {(c.op, c.overload) for c in trace.calls}
    funcs = {f.op for f in trace.frames if f.kind == "apex"}
    out = []
    for r in policy.rules.keep_fp32:
        if r.module is not None and not any(r.covers_module(m) for m in mods):
            out.append(f"{r}: no module {r.module!r} ran")
        elif r.op is not None and not any(r.names_op(o, ov) for o, ov in ops):
            out.append(f"{r}: aten op {r.op} was not called" + (" at the autocast key (an op inside another "
                                                                 "autocast op, e.g. addmm inside linear, is not "
                                                                 "reached: name that op)" if policy.amp ==
                                                                 "autocast" else ""))
    out += [f"register_float_function {f}: Apex never called it" for f in policy.rules.register_float_function
            if f not in funcs]
    return out


def describe(d: OpDecision) -> str:
    """One line: the dtype and why (reports)."""
    via = f" via {d.via}" if d.via else ""
    return f"{d.compute}" + (f"->{d.out}" if d.out != d.compute else "") + f" ({d.rule}{via})"


__all__ = ["ENGINES", "ACL_MODES", "CATEGORIES", "AmpConfig", "Leaf", "Frame", "Call", "Trace", "OpDecision",
           "TorchPlan", "plan", "autocast_category", "autocast_ops", "apex_functions", "apex_category", "eager_op",
           "cube_family", "aclnn_api", "default_acl_mode", "promote_dtypes", "result_dtype", "policy_matches",
           "describe", "autocast_target", "has_bf16", "NO_BF16_SOCS"]
