"""The named rule steps: which dtype each node of a compiled graph runs in, and why (sources: docs/semantics.md).

A step decides node i from its predecessors' output dtypes (``emit``) and returns a ``Decision``
(compute dtype, output dtype, Rule, deciding predecessor or -1, root).  ``Compiled.step`` picks the step by the
node's kind and, for ops, by a per-op override, where the op runs (AI CPU), its ops-info (opFile Null) and the
list its type is in (mixed modes) or the mode.  Where the chip's kernel table declares an op's dtype combinations,
the step asks ``matching.judge`` for GE's choice among them; without one (or for undeclared ports) the closed
forms below are what ``judge`` gives for the ``matching.synthetic`` combinations (a property test checks it).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Any, Hashable, Mapping

from ..oplists import BLACK, GRAPH_ENGINE_TYPES, GRAY, WHITE, OpLists
from ..overrides import NO_OVERRIDES, CustomDtypes, Overrides, lowest_float
from . import matching as M
from .matching import FP16_OP_TYPES

FP32, FP16, BF16, NA = "fp32", "fp16", "bf16", "n/a"
LOW = (FP16, BF16)
FLOATS = frozenset({FP32, FP16, BF16, "fp64"})

# mode name -> (family, low dtype)
MODES: dict[str, tuple[str, str | None]] = {
    "mixed_float16": ("mixed", FP16),
    "allow_mix_precision": ("mixed", FP16),
    "allow_mix_precision_fp16": ("mixed", FP16),
    "mixed_bfloat16": ("mixed", BF16),
    "allow_mix_precision_bf16": ("mixed", BF16),
    "must_keep_origin_dtype": ("origin", None),
    "origin": ("origin", None),
    "force_fp32": ("force_fp32", None),
    "cube_fp16in_fp32out": ("force_fp32", None),
    "force_fp16": ("force_low", FP16),
    "fp16": ("force_low", FP16),
    "allow_fp32_to_fp16": ("fp32_to_low", FP16),
    "allow_fp32_to_bf16": ("fp32_to_low", BF16),
}
DEFAULT_MODE = "mixed_float16"

# compiler/engines/hccl_engine/hcom_graph_adaptor/ge_plugin/common/op_hcom_comm.h:257-261 (names: base/common/types.cc)
HCCL_TYPES = frozenset({"HcomBroadcast", "HcomReduce", "HcomAllReduce", "HcomAllGather", "HcomAllGatherV",
                        "HcomReduceScatter", "HcomReduceScatterV", "HcomSend", "HcomReceive", "HcomAllToAllV",
                        "HcomAllToAllVC", "HcomAllToAll"})
# placeholder types of framework ops with no known GE type (emulators, replay): their GE type, so whether it has an
# AI Core kernel, is unknown; they are judged as gray (choice)
UNMAPPED_PREFIXES = ("aten.", "onnx:", "Unknown:")
# a producer of these types ranks after every other input (op_format_dtype_judge.cc:692-697)
WEAK_PRODUCER_TYPES = frozenset({"Const", "Constant", "Variable"})
# Casts a gray consumer looks through, by the mode's low dtype (allow_mix_precision_base.cc:49-55): (from, to)
CAST_SKIPPED = {FP16: frozenset({(FP16, FP32), (FP16, BF16)}), BF16: frozenset({(BF16, FP32), (BF16, FP16)})}


def mode_info(mode: str) -> tuple[str, str | None]:
    """(family, low dtype) of a precision_mode / precision_mode_v2 value."""
    try:
        return MODES[mode]
    except KeyError:
        raise ValueError(f"unknown precision mode {mode!r}; choose one of {', '.join(MODES)}") from None


def uses_mixlist(mode: str) -> bool:
    """GE (and the TF adapter) apply a modify_mixlist only in the mixed-precision modes."""
    return mode_info(mode)[0] == "mixed"


class Rule(str, Enum):
    """The named rules of the decision chain (values are the strings reports and JSON carry)."""

    GRAPH_INPUT = "graph-input"
    CONSTANT = "constant"
    NON_FLOAT = "non-float"
    FOLLOW = "follow"
    CAST_DTYPE = "cast-dtype"
    ORIGIN = "must_keep_origin_dtype"
    FORCE_FP32 = "force_fp32"
    FORCE_FP32_CUBE = "force_fp32-cube"
    FORCE_LOW = "force_fp16"
    FP32_TO_LOW_CUBE = "allow_fp32_to_low-cube"
    FP32_TO_LOW_VECTOR = "allow_fp32_to_low-vector"
    WHITE = "white"
    WHITE_NO_LOW_KERNEL = "white-no-low-kernel"
    BLACK = "black"
    CAST_ALLOW = "cast-allow_fp32_to_fp16"
    DTYPE_SENSITIVE = "dtype-sensitive"
    GRAY_NO_PRODUCER = "gray-no-producer"
    GRAY_CONST_INPUTS = "gray-const-inputs"
    GRAY_SKIP_CAST = "gray-skip-cast"
    GRAY_INHERIT = "gray-inherit"
    RISE = "rise"
    REDUCE = "reduce"
    HCCL = "hccl-graph-dtype"
    AI_CPU = "ai-cpu"
    AI_CPU_DTYPE = "ai-cpu-dtype"
    KEEP_DTYPE = "keep-dtype"
    CUSTOMIZE_DTYPE = "customize-dtype"

    def __str__(self) -> str:
        return self.value


# rules under which an op runs fp32 only because of its list or its producer (not its mode or role)
FP32_BY_LIST = frozenset({Rule.BLACK, Rule.GRAY_INHERIT, Rule.GRAY_SKIP_CAST, Rule.GRAY_CONST_INPUTS})
# rules under which an op's precision is taken from a predecessor
INHERITED = frozenset({Rule.GRAY_INHERIT, Rule.GRAY_SKIP_CAST, Rule.GRAY_CONST_INPUTS, Rule.FOLLOW})
# rules that place an op on AI CPU (its original dtype)
AI_CPU_RULES = frozenset({Rule.AI_CPU, Rule.AI_CPU_DTYPE})


class NodeKind(IntEnum):
    """What a node of the compiled graph is, for the decision chain."""

    OP = 0          # a kernel with a precision decision
    DATA = 1        # graph input (a real producer)
    CONST = 2       # constant / variable (its dtype is the model's)
    NONFLOAT = 3    # int/bool op: precision n/a
    FOLLOW = 4      # no kernel (view) or excluded from decisions (MemSet, bookkeeping): passes its input's precision
    CAST = 5        # Cast with a known destination dtype
    HCCL = 6        # collective communication op with a stated graph dtype


@dataclass(frozen=True)
class Why:
    """Why an op got its precision: the rule, the immediate predecessor that decided it
    (None for rules that need none) and the root op whose own rule started the chain."""

    rule: str
    via: Hashable | None = None
    root: Hashable | None = None

    def to_dict(self) -> dict:
        return {"rule": str(self.rule), "via": _s(self.via), "root": _s(self.root)}


def _s(x: Any) -> Any:
    return None if x is None else str(x)


# plain ints in the hot loops (an IntEnum comparison costs several times more)
K_OP, K_DATA, K_CONST, K_NONFLOAT, K_FOLLOW, K_CAST, K_HCCL = (int(k) for k in NodeKind)

Decision = tuple  # (compute dtype, output dtype, Rule, via index or -1, root index)


class Context:
    """What the rules read besides the compiled graph: the lists (with their kernel table), the mode, the
    overrides (by node index) and the per-type facts derived from them (cached)."""

    __slots__ = ("lists", "family", "low", "cast_black", "_by_type", "overrides", "keep", "custom", "special",
                 "skip", "forbid", "black", "_kernels", "_memo", "_fast")

    def __init__(self, lists: OpLists, family: str, low: str | None, overrides: Overrides = NO_OVERRIDES,
                 keep: frozenset = frozenset(), custom: Mapping[int, CustomDtypes] | None = None,
                 static: Mapping[int, Any] | None = None):
        self.lists, self.family, self.low = lists, family, low
        self.cast_black = lists.list_of("Cast") == BLACK
        self._by_type: dict[str, Any] = {}
        self._kernels: dict[str, Any] = {}
        self._memo: dict = {}
        self.black: dict[str, bool] = {}
        self._fast: dict = {}
        self.overrides, self.keep, self.custom = overrides, keep, dict(custom or {})
        self.special = {**(static or {}), **{i: keep_dtype for i in keep if family != "origin"},
                        **dict.fromkeys(self.custom, customize_dtype)}
        self.skip = CAST_SKIPPED[BF16 if family == "mixed" and low == BF16 else FP16]
        # the dtype the mode never picks for a tensor, by the tensor's original dtype
        self.forbid = {o: M.forbidden(family, low, o) for o in FLOATS}

    def op_step(self, op_type: str):
        """The step deciding an op of this type: AI CPU without an AI Core kernel; the fp16 list logic for an
        ops-info ``opFile`` Null; its list's step in the mixed modes, else the mode's."""
        step = self._by_type.get(op_type)
        if step is None:
            k = self.lists.kernel(op_type)
            if not (self.lists.on_ai_core(op_type) or op_type in GRAPH_ENGINE_TYPES
                    or op_type.startswith(UNMAPPED_PREFIXES)):
                step = ai_cpu
            elif k is not None and k.no_kernel and self.family != "force_low":
                step = NULL_OP_STEPS[self.lists.list_of(op_type)]
                if self.kernel(op_type) is not None:
                    step = KERNEL_STEPS[step]
            else:
                step = self.list_or_mode_step(op_type)
            self._by_type[op_type] = step
        return step

    def list_or_mode_step(self, op_type: str):
        """The list's step (mixed modes) or the mode's, without the AI CPU and opFile checks."""
        step = LIST_STEPS[self.lists.list_of(op_type)] if self.family == "mixed" else OP_STEP_BY_FAMILY[self.family]
        return KERNEL_STEPS[step] if self.kernel(op_type) is not None else step

    def kernel(self, op_type: str):
        """The type's declared dtype combinations (``matching.Combos``), or None (none declared: closed forms)."""
        k = self._kernels.get(op_type, 0)
        if k == 0:
            kern = self.lists.kernel(op_type)
            k = self._kernels[op_type] = M.combos_of(kern, op_type) if kern is not None and kern.declared else None
        return k


# ---------------------------------------------------------------------- kernel-table matching (declared kernels)
def _fathers(c, ranked: tuple, emit: list, ctx: Context, gray: bool) -> tuple:
    """(kernel port, producer's output dtype or None) of the ranked float inputs; a gray op looks through the
    Casts its mode skips."""
    if not gray:
        return tuple((port, None) for port, _ in ranked)
    out = []
    for port, s in ranked:
        d = _looked_through(c, s, ctx)
        p = emit[d if d >= 0 else s]
        out.append((port, p if p in FLOATS else None))
    return tuple(out)


def _looked_through(c, s: int, ctx: Context) -> int:
    """The producer a gray consumer of node s matches: the input of a non-black Cast the mode skips, else -1."""
    if c.kind[s] == K_CAST and not ctx.cast_black and (c.cast_from[s], c.dtype[s]) in ctx.skip:
        return c.decider[s]
    return -1


def _matched(c, i: int, emit: list, ctx: Context, k, st: int, *, low: str | None, forbid, keep: bool = False):
    """(compute dtype, output dtype) GE picks among the declared combinations ``k``; None when the AI Core kernel
    cannot take the op in its original dtype (it then runs on AI CPU).  A homogeneous kernel (every float port
    offers the same float dtype in each combination) is decided by its first ranked input alone."""
    t, o = c.types[i], c.dtype[i]
    ranked = c.ranked[i]
    if k.homogeneous:
        ranked = ranked[:1]
    fathers = _fathers(c, ranked, emit, ctx, st == M.GRAY)
    black = ctx.black.get(t)
    if black is None:
        black = ctx.black[t] = ctx.lists.list_of(t) == BLACK
    key = (t, st, o, low, forbid, keep, fathers, black)
    hit = ctx._memo.get(key)
    if hit is None:
        ports = tuple(p for p, _ in ranked)
        if not M.ai_core_takes(k, ports, o, black, ctx.family, ctx.low, keep):
            hit = ctx._memo[key] = (None,)
        else:
            ci = M.judge(k, st, o, fathers, data_low=low or FP16, forbid=forbid, fp16_type=t in FP16_OP_TYPES,
                         keep=keep, fp32_to_fp16_mode=ctx.family == "fp32_to_low" and ctx.low == FP16)
            hit = ctx._memo[key] = M.dtypes_at(k, ci, ports, o)
    return None if hit[0] is None else hit


_ORDER = {FP16: 0, BF16: 0, FP32: 1, "fp64": 2}


def _finish(c, i: int, emit, ctx, st: int, want: Decision, *, low=None, forbid=None, keep=False) -> Decision:
    """``want`` (the closed form) unless the type's declared kernel makes GE pick otherwise: AI CPU, or a
    higher / lower dtype (``RISE`` / ``REDUCE``; a white op without a low kernel: ``WHITE_NO_LOW_KERNEL``)."""
    k = ctx.kernel(c.types[i])
    if k is None:
        return want
    return _resolve(c, i, want, _matched(c, i, emit, ctx, k, st, low=low, forbid=forbid, keep=keep))


def _resolve(c, i: int, want: Decision, got) -> Decision:
    if got is None:
        o = c.dtype[i]
        return o, o, Rule.AI_CPU_DTYPE, -1, i
    if got[0] == want[0] and got[1] == want[1]:
        return want
    if want[2] is Rule.WHITE:
        return got[0], got[1], Rule.WHITE_NO_LOW_KERNEL, -1, i
    up = _ORDER.get(got[0], 1) > _ORDER.get(want[0], 1)
    return got[0], got[1], (Rule.RISE if up else Rule.REDUCE), want[3], want[4]


def _with_kernel(step, st, null: bool = False):
    """The kernel-table variant of a list or mode step: its closed form checked against the declared
    combinations (``_finish``).  For a homogeneous kernel GE's pick depends only on the type, the op's origin
    dtype and its first ranked input (port, producer dtype): memoised on those per context."""
    gray = st == M.GRAY

    def args(ctx: Context, o: str) -> tuple:
        s = st if st is not None else (M.FP32_TO_FP16 if ctx.low == FP16 else M.FP32_TO_BF16)
        return (s, FP16, None) if null else (s, ctx.low, ctx.forbid.get(o))

    def kernel_step(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
        want = step(c, i, emit, root, ctx)
        t, o = c.types[i], c.dtype[i]
        k = ctx._kernels[t]
        r = c.ranked[i]
        if k.homogeneous and (not gray or not r or c.kind[r[0][1]] != K_CAST):
            key = (t, o, r[0][0], emit[r[0][1]] if gray else None) if r else (t, o)
            got = ctx._fast.get(key, 0)
            if got == 0:
                s, low, forbid = args(ctx, o)
                got = ctx._fast[key] = _matched(c, i, emit, ctx, k, s, low=low, forbid=forbid)
        else:
            s, low, forbid = args(ctx, o)
            got = _matched(c, i, emit, ctx, k, s, low=low, forbid=forbid)
        if got is not None and got[0] == want[0] and got[1] == want[1]:
            return want
        return _resolve(c, i, want, got)
    kernel_step.__name__ = kernel_step.__qualname__ = f"{step.__name__}_with_kernel"
    kernel_step.__doc__ = step.__doc__
    return kernel_step


# ---------------------------------------------------------------------- the decision chain, step by step
def graph_input(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """Data nodes are real producers in their own dtype (an fp32 model input keeps a gray consumer fp32)."""
    d = c.dtype[i]
    return d, d, Rule.GRAPH_INPUT, -1, i


def constant(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """Constants and variables are not judged: they keep the model's dtype."""
    d = c.dtype[i]
    return d, d, Rule.CONSTANT, -1, i


def non_float(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """int/bool ops have no float precision."""
    return NA, NA, Rule.NON_FLOAT, -1, i


def follow(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """No kernel (views) or excluded from decisions: the first input's precision passes through; with no
    float input, the mode's default."""
    d = c.decider[i]
    if d < 0:
        v = (ctx.low or c.dtype[i]) if ctx.family in ("mixed", "force_low") else c.dtype[i]
        return v, v, Rule.FOLLOW, -1, i
    p = emit[d]
    v = p if p != NA else c.dtype[i]
    return v, v, Rule.FOLLOW, d, root[d]


def cast_dtype(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """Cast is dtype-sensitive: it produces its destination dtype."""
    d = c.dtype[i]
    return d, d, Rule.CAST_DTYPE, -1, i


def hccl(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """HCCL ops are not judged by FE: they keep their graph dtype; force_fp16 turns their fp32 tensors fp16
    (hcom_fusion_optimizer.cc:91-137)."""
    d = c.dtype[i]
    if ctx.family == "force_low" and d == FP32:
        d = FP16
    return d, d, Rule.HCCL, -1, i


def ai_cpu(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """A type without an AI Core kernel is not judged (IsNoNeedJudge) and runs on AI CPU in its original dtype."""
    d = c.dtype[i]
    return d, d, Rule.AI_CPU, -1, i


def dtype_sensitive(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """Cast (without a known destination) and ops with complex tensors are dtype-sensitive: allow_fp32_to_fp16 on
    their own dtypes, which keeps them (op_format_dtype_strategy_manager.cc:229-233)."""
    o = c.dtype[i]
    want = (o, o, Rule.CAST_ALLOW if c.types[i] == "Cast" else Rule.DTYPE_SENSITIVE, -1, i)
    return _finish(c, i, emit, ctx, M.FP32_TO_FP16, want, low=FP16)



def mode_origin(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """must_keep_origin_dtype reduces nothing."""
    o = c.dtype[i]
    return o, o, Rule.ORIGIN, -1, i


def mode_force_fp32(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """force_fp32 / cube_fp16in_fp32out: fp32; an op that can take fp16 inputs with an fp32 output
    (``matching.fp16_in_fp32_out``) gets its first input (and so, the kernel being homogeneous, its inputs) fp16
    and its output fp32 -- when input 0 ranks first."""
    o, t = c.dtype[i], c.types[i]
    r = c.ranked[i]
    if o in (FP32, FP16, BF16) and r and r[0][0] == 0 and M.fp16_in_fp32_out(ctx, t):
        return FP16, FP32, Rule.FORCE_FP32_CUBE, -1, i
    v = FP32 if o in (FP16, BF16, FP32) else o
    return v, v, Rule.FORCE_FP32, -1, i


def mode_force_low(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """force_fp16: every float op fp16, fp32 where its kernel has no fp16."""
    o = c.dtype[i]
    v = FP16 if o in (FP32, BF16) else o
    return v, v, Rule.FORCE_LOW, -1, i


def mode_fp32_to_low(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """allow_fp32_to_fp16: the ``FP16_OP_TYPES`` fp16, the others their dtype where their kernel has it, else
    lower; allow_fp32_to_bf16: every op its dtype where supported, else bf16 (no cube special case)."""
    o = c.dtype[i]
    if ctx.low == FP16 and o == FP32 and c.types[i] in FP16_OP_TYPES:
        return FP16, FP16, Rule.FP32_TO_LOW_CUBE, -1, i
    return o, o, Rule.FP32_TO_LOW_VECTOR, -1, i


def _white(c, i, low, forbid) -> Decision:
    o = c.dtype[i]
    if not c.low_kernel[i] or o not in (FP32, FP16, BF16):
        return o, o, Rule.WHITE_NO_LOW_KERNEL, -1, i
    v = FP16 if low == BF16 and forbid is None else low
    return v, v, Rule.WHITE, -1, i


def _gray(c, i, emit, root, ctx, low, forbid) -> Decision:
    """Follow the producer of the first ranked input (a Const/Variable is a producer with the model's dtype),
    looking through a Cast the mode skips; a forbidden dtype rises to fp32; with no float producer the
    allow_fp32_to_fp16 (bf16: allow_fp32_to_bf16) path, which keeps the origin dtype."""
    d = c.decider[i]
    p = emit[d] if d >= 0 else NA
    if p not in FLOATS:
        o = c.dtype[i]
        v = FP16 if low == FP16 and o == FP32 and c.types[i] in FP16_OP_TYPES else o
        return v, v, Rule.GRAY_NO_PRODUCER, d, i
    k = c.kind[d]
    if k == K_CAST and not ctx.cast_black and (c.cast_from[d], c.dtype[d]) in ctx.skip and c.decider[d] >= 0:
        via = c.decider[d]
        p, rule = emit[via], Rule.GRAY_SKIP_CAST
    else:
        rule, via = (Rule.GRAY_CONST_INPUTS if k == K_CONST else Rule.GRAY_INHERIT), d
    if p == forbid:
        p, rule = FP32, Rule.RISE
    return p, p, rule, via, root[via]


def white(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """A white-list op runs in the low dtype (in mixed_bfloat16 an fp16 op may keep fp16), unless its kernel
    has none."""
    return _white(c, i, ctx.low, ctx.forbid.get(c.dtype[i]))


def black(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """A black-list op keeps its original dtype."""
    o = c.dtype[i]
    return o, o, Rule.BLACK, -1, i


def gray(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """A gray op follows its first ranked input's producer (``_gray``; its common case inlined: this is the
    hottest step of a plan)."""
    d = c.decider[i]
    if d >= 0:
        p = emit[d]
        k = c.kind[d]
        if p in FLOATS and k != K_CAST:
            if p == ctx.forbid.get(c.dtype[i]):
                return FP32, FP32, Rule.RISE, d, root[d]
            return p, p, (Rule.GRAY_CONST_INPUTS if k == K_CONST else Rule.GRAY_INHERIT), d, root[d]
    return _gray(c, i, emit, root, ctx, ctx.low, ctx.forbid.get(c.dtype[i]))


def null_white(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """An op whose ops-info ``opFile`` is Null takes the mixed-fp16 list logic in every mode but force_fp16,
    nothing forbidden (op_format_dtype_strategy_manager.cc:224-243): white -> fp16."""
    return _white(c, i, FP16, None)


def null_gray(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """opFile Null, gray: the producer's dtype, nothing forbidden."""
    return _gray(c, i, emit, root, ctx, FP16, None)


def keep_dtype(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """ATC --keep_dtype: the op keeps the original model's dtype (its successors inherit it)."""
    o = c.dtype[i]
    return _finish(c, i, emit, ctx, M.FP32_TO_FP16, (o, o, Rule.KEEP_DTYPE, -1, i), low=FP16, keep=True)


def customize_dtype(c, i: int, emit: list, root: list, ctx: Context) -> Decision:
    """ATC --customize_dtypes: the lowest float dtype given for the inputs (else the outputs); empty ports take it;
    the successors see the first output's given dtype; with no float dtype given, the decision without the entry
    (keep_dtype, the list or the mode) stands."""
    cd = ctx.custom[i]
    p = lowest_float(cd.inputs) or lowest_float(cd.outputs)
    if p is None:
        base = (keep_dtype if i in ctx.keep and ctx.family != "origin" else
                c.static_special.get(i) or ctx.op_step(c.types[i]))
        return base(c, i, emit, root, ctx)
    out = cd.outputs[0] if cd.outputs and cd.outputs[0] in FLOATS else p
    return p, out, Rule.CUSTOMIZE_DTYPE, -1, i


# the mixed modes decide an op by the list its type is in; the other modes by the mode alone
LIST_STEPS = {WHITE: white, BLACK: black, GRAY: gray}
NULL_OP_STEPS = {WHITE: null_white, BLACK: black, GRAY: null_gray}
OP_STEP_BY_FAMILY = {"origin": mode_origin, "force_fp32": mode_force_fp32, "force_low": mode_force_low,
                     "fp32_to_low": mode_fp32_to_low}
# the same steps for a type whose kernel table declares its dtype combinations
KERNEL_STEPS = {s: _with_kernel(s, st, null) for s, st, null in (
    (white, M.WHITE, False), (black, M.BLACK, False), (gray, M.GRAY, False), (null_white, M.WHITE, True),
    (null_gray, M.GRAY, True), (mode_origin, M.ORIGIN, False), (mode_force_fp32, M.FORCE_FP32, False),
    (mode_force_low, M.FORCE_FP16, False), (mode_fp32_to_low, None, False))}
STEPS_BY_KIND = {NodeKind.DATA: graph_input, NodeKind.CONST: constant, NodeKind.NONFLOAT: non_float,
                 NodeKind.FOLLOW: follow, NodeKind.CAST: cast_dtype, NodeKind.HCCL: hccl}
