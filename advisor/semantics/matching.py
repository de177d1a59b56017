"""GE's choice among a kernel's dtype combinations, as its fusion engine (FE) makes it.

Pure functions over ``Combos`` (one kernel's combinations, one column per port); the rule steps of
``advisor.semantics.rules`` call them.  Sources (``hicann/ge`` master 2026-08, FE = ``compiler/engines/nn_engine/``,
``strategy/`` = ``FE/optimizer/graph_optimizer/op_judge/format_and_dtype/strategy/``):

* one candidate set of combinations, narrowed tensor by tensor: the inputs in ``SortInputBySequence`` order, then
  the outputs (``op_format_dtype_strategy_manager.cc:254-315``; ``op_format_dtype_judge.cc:715-727``); the first
  candidate left is the op's combination (``op_format_dtype_judge.cc:200-216``);
* the matchers: exact, else higher precision (``strategy/matcher/dtype/op_dtype_rise_matcher.cc:20-101``), lower
  precision (``op_dtype_reduce_matcher.cc:28-92``), any fp16/bf16 (``op_dtype_mix_precision_matcher.cc:21-52``),
  exact only for dtypes outside the float priorities (``op_dtype_matcher_base.cc:37-69``); priorities
  fp32 100000, bf16 200000, fp16 200001, gaps 0 / 100 / 1000000 (``FE/inc/common/util/op_info_util.h:80-84``);
* what each strategy expects of one tensor (``strategy/dtype_strategy/``): white ``..._allow_mix_precision_base.cc:
  93-136``, black ``:138-159``, gray ``:161-253``, allow_fp32_to_fp16 ``..._allow_fp32_to_fp16.cc:24-97``,
  allow_fp32_to_bf16 ``..._allow_fp32_to_bf16.cc:23-87``, force_fp32 ``..._force_fp32.cc:26-92``, force_fp16
  ``..._force_fp16.cc:21-54``, must_keep_origin_dtype ``..._default_mode.cc:23-55``; the forbidden dtype per mode
  ``op_format_dtype_strategy_manager.cc:17-53``;
* whether the AI Core kernel takes the op at all (else AI CPU): ``FE/optimizer/ops_kernel_store/sub_ops_store.cc:
  113-182, 244-284``.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from ..overrides import CustomDtypes

FP32, FP16, BF16, FP64 = "fp32", "fp16", "bf16", "fp64"
_FLOATS = frozenset({FP32, FP16, BF16, FP64})

# FE/optimizer/fe_config/fe.ini:117 ``fp16.op_type``: the types allow_fp32_to_fp16 lowers to fp16 and whose first
# input force_fp32 gives fp16 (the cube ops of the precision modes; oplists.is_cube_type is the cost model's wider
# "matrix op" rule).  MatMulV3 / BatchMatMulV3 are not here: they stay fp32 in allow_fp32_to_fp16.
FP16_OP_TYPES = frozenset((
    "MatMul,MatMulV2,BatchMatMul,BatchMatMulV2,Conv2DBackpropFilterD,Conv2DBackpropFilter,Conv2DBackpropInputD,"
    "Conv2DBackpropInput,Conv2DTransposeD,Conv2DTranspose,Conv2D,DepthwiseConv2D,DepthwiseConv2DBackpropFilterD,"
    "DepthwiseConv2DBackpropFilter,DepthwiseConv2DBackpropInputD,DepthwiseConv2DBackpropInput,Conv2DCompress,"
    "FullyConnection,GEMM,Conv3D,Conv3DBackpropInputD,Conv3DTransposeD,Conv3DBackpropInput,Conv3DTranspose,"
    "Conv3DBackpropFilter,Conv3DBackpropFilterD,Deconvolution").split(","))

# op_info_util.h:80-84
_PRIO = {FP32: 100000, BF16: 200000, FP16: 200001}
_CROSS_GAP, _HIGH_GAP = 100, 1000000

# strategies: what one tensor of an op expects (names after GE's strategy classes)
WHITE, BLACK, GRAY, FP32_TO_FP16, FP32_TO_BF16, FORCE_FP32, FORCE_FP16, ORIGIN = range(8)


class Combos:
    """One kernel's dtype combinations: ``ins[j]`` / ``outs[j]`` the column of input / output port j (a tuple,
    one dtype per combination; None = the port declares no dtypes and does not narrow), ``out_ports`` the output
    ports matched (those with a float dtype).  Ports beyond the last take the last one's column (dynamic inputs)."""

    __slots__ = ("ins", "outs", "n", "out_ports", "homogeneous", "cube16", "synthetic")

    def __init__(self, ins: Sequence, outs: Sequence, synthetic: bool = False):
        self.ins, self.outs, self.synthetic = tuple(ins), tuple(outs), synthetic
        cols = [c for c in self.ins + self.outs if c is not None]
        self.n = max((len(c) for c in cols), default=0)
        self.out_ports = tuple(j for j, c in enumerate(self.outs) if c is not None and _FLOATS & set(c))
        fl = [tuple(d if d in _FLOATS else None for d in c) for c in cols if _FLOATS & set(c)]
        # every float port offers the same float dtype in each combination: the first ranked input decides
        self.homogeneous = all(
            len({c[j] for c in fl if c[j] is not None}) <= 1 for j in range(self.n))
        # op_format_dtype_judge.cc:218-266 (IsNodeSupport16In32out): input0 fp16 with output0 fp32 in one column
        i0, o0 = self.col_in(0), self.col_out(0)
        self.cube16 = i0 is not None and o0 is not None and any(
            a == FP16 and b == FP32 for a, b in zip(i0, o0))

    def col_in(self, j: int):
        return self.ins[min(j, len(self.ins) - 1)] if self.ins else None

    def col_out(self, j: int):
        return self.outs[min(j, len(self.outs) - 1)] if self.outs else None


@lru_cache(maxsize=None)
def synthetic(cube16: bool) -> Combos:
    """The combinations taken for a kernel whose ops-info declares no port dtypes (``dynamicFormat`` ops, or no
    kernel table: choice): every float port in fp32, fp16, bf16 or fp64 alike, and for the types of
    ``FP16_OP_TYPES`` also fp16 inputs with an fp32 output (their op-select functions offer it; choice)."""
    ins, outs = (FP32, FP16, BF16, FP64), (FP32, FP16, BF16, FP64)
    if cube16:
        ins, outs = ins + (FP16,), outs + (FP32,)
    return Combos((ins,), (outs,), synthetic=True)


def _padded(port, n: int):
    if port is None:
        return None
    return tuple(port[j] if j < len(port) else port[-1] for j in range(n)) if port else None


def combos_of(kernel, op_type: str) -> Combos:
    """The Combos of an ``advisor.kernels.Kernel`` (None or undeclared: ``synthetic``)."""
    if kernel is None or not kernel.declared:
        return synthetic(op_type in FP16_OP_TYPES)
    n = kernel.n_combos
    return Combos([_padded(p, n) for p in kernel.inputs], [_padded(p, n) for p in kernel.outputs])


# ---------------------------------------------------------------------- fp16 inputs, fp32 output (cube ops)
def combos(src, op_type: str) -> Combos:
    """The dtype combinations GE chooses among for ``op_type``: ``src`` is the lists (``OpLists``, their kernel
    table), a rules ``Context`` (its cached table) or the type's ``Combos`` itself."""
    if isinstance(src, Combos):
        return src
    if hasattr(src, "lists"):                          # a rules.Context: None = undeclared (synthetic)
        k = src.kernel(op_type)
        return k if k is not None else synthetic(op_type in FP16_OP_TYPES)
    return combos_of(src.kernel(op_type), op_type)


def fp16_in_fp32_out(src, op_type: str) -> bool:
    """THE rule for "this op can take fp16 inputs and write an fp32 output": its type is one of fe.ini's
    ``fp16.op_type`` (``FP16_OP_TYPES``, ``Configuration::GetFp16OpTypeList``, used by the force_fp32 strategy:
    ``op_dtype_selection_strategy_force_fp32.cc:36-50``) and its kernel has a combination with input 0 fp16 and
    output 0 fp32 (``IsNodeSupport16In32out``, ``op_format_dtype_judge.cc:218-266``; an undeclared kernel: the
    synthetic combinations, which have it for these types -- choice).  force_fp32 / cube_fp16in_fp32out gives
    such an op fp16 inputs and an fp32 output (``rules.mode_force_fp32``); recommend proposes the per-op form,
    a --customize_dtypes line (``fp16_in_fp32_out_entry``).  ``src``: as ``combos``."""
    return op_type in FP16_OP_TYPES and combos(src, op_type).cube16


def custom_matches(src, op_type: str, inputs: Sequence, outputs: Sequence) -> bool | None:
    """Whether some combination of the type's kernel has the dtypes a customize_dtypes entry gives per port
    (``InitMatchedIndexByCustomDtype`` / ``FilterDtypeIndexByCustom``, ``op_format_dtype_judge.cc:610-670``:
    every given port index filters the combinations, an empty slot constrains nothing; when none is left GE
    fails the op: "After filtering dtypes by custom dtypes, the supported dtypes ... are empty").  None: the
    kernel declares no dtypes (its op-select function decides at build time: unknown)."""
    k = combos(src, op_type)
    if k.synthetic:
        return None
    cand = set(range(k.n))
    for cols, given in ((k.col_in, inputs), (k.col_out, outputs)):
        for j, d in enumerate(given):
            col = cols(j) if d is not None else None
            if col is not None:
                cand = {c for c in cand if c < len(col) and col[c] == d}
    return bool(cand)


def fp16_in_fp32_out_entry(src, op_type: str, float_inputs: Sequence[int]) -> CustomDtypes | None:
    """The customize_dtypes entry that gives one op fp16 inputs and an fp32 output -- the per-op form of
    ``cube_fp16in_fp32out`` -- or None where GE would not take
    it: the op is not ``fp16_in_fp32_out``, its input 0 is not a float input (``float_inputs``: the node's float
    input ports), or its declared kernel has no combination with every float input fp16 and output 0 fp32
    (``custom_matches``).  A declared kernel: every float input port is given fp16 (nothing left for GE to
    choose).  An undeclared one (``dynamicFormat``: MatMulV2, Conv2D, ...): the two operands the cube reads (the
    first two float input ports) are given fp16 and any further port (a bias) is left empty, for GE to choose
    among what the op-select function offers -- the line then never asks for a combination the kernel lacks;
    advisor executes the empty slot in fp16, as the synthetic combination has it (choice)."""
    ports = sorted(set(float_inputs))
    if not ports or ports[0] != 0 or not fp16_in_fp32_out(src, op_type):
        return None
    given = ports if not combos(src, op_type).synthetic else ports[:2]
    ins = tuple(FP16 if j in given else None for j in range(given[-1] + 1))
    outs = (FP32,)
    if custom_matches(src, op_type, ins, outs) is False:
        return None
    return CustomDtypes(ins, outs)


# ---------------------------------------------------------------------- the matchers
def _accuracy(col, e, cand, forbid):
    """op_dtype_matcher_base.cc:37-69: exact matches only."""
    hit = [i for i in cand if col[i] != forbid and col[i] == e]
    return hit or None


def _rise(col, e, cand, forbid):
    """op_dtype_rise_matcher.cc:20-101: the exact dtype (all such), else higher precision in the same class."""
    ep = _PRIO.get(e)
    if ep is None:
        return _accuracy(col, e, cand, forbid)
    m: dict = {}
    inc, exact = 1, False
    for i in cand:
        k = col[i]
        kp = _PRIO.get(k)
        if kp is None or k == forbid:
            continue
        gap = ep - kp
        if gap == 0:
            if not exact:
                m.clear()
                inc, exact = 1, True
            else:
                gap, inc = gap + inc, inc + 1
            m.setdefault(gap, i)
        elif not exact and _CROSS_GAP < gap < _HIGH_GAP:
            if gap in m:
                gap, inc = gap + inc, inc + 1
            m.setdefault(gap, i)
    return [m[g] for g in sorted(m)] if m else None


def _reduce(col, e, cand, forbid):
    """op_dtype_reduce_matcher.cc:28-92: lower precision in the same class, nearest first."""
    ep = _PRIO.get(e)
    if ep is None:
        return _accuracy(col, e, cand, forbid)
    m: dict = {}
    inc = 1
    for i in cand:
        k = col[i]
        kp = _PRIO.get(k)
        if kp is None or k == forbid:
            continue
        gap = kp - ep
        if 0 < gap < _HIGH_GAP:
            if gap in m:
                gap, inc = gap + inc, inc + 1
            m.setdefault(gap, i)
    return [m[g] for g in sorted(m)] if m else None


def _mix(col, cand, forbid):
    """op_dtype_mix_precision_matcher.cc:21-52: any fp16/bf16 combination; the forbidden ones are dropped even
    when none is found."""
    kept = [i for i in cand if col[i] != forbid]
    low = [i for i in kept if col[i] in (FP16, BF16)]
    return low or kept


def _rise_else_reduce(col, e, cand, forbid):
    r = _rise(col, e, cand, forbid)
    if r is None:
        r = _reduce(col, e, cand, forbid)
    return r if r is not None else cand


def _tensor(st, col, cand, father, origin, data_low, forbid, fp16_type, keep, first_input, cube16):
    """The candidates left after one tensor under strategy ``st``; second value: an fp32 tensor was reduced by
    allow_fp32_to_fp16 (its ``kForceFp32ToFp16`` attribute)."""
    if st == WHITE:
        if origin not in (FP32, FP16, BF16):            # allow_mix_precision_base.cc:99-112: default mode
            return (_rise(col, origin, cand, None) or cand), False
        return _mix(col, cand, forbid), False
    if st == BLACK or st == ORIGIN:
        return (_rise(col, origin, cand, forbid) or cand), False
    if st == GRAY:
        if father is None:                               # allow_mix_precision_base.cc:197-215
            st = FP32_TO_FP16 if data_low == FP16 else FP32_TO_BF16
        else:                                            # MatchForGray :161-184
            return _rise_else_reduce(col, father, cand, forbid), False
    if st == FP32_TO_FP16:
        e = FP16 if origin == FP32 and fp16_type and not keep else origin
        r = _rise(col, e, cand, forbid)
        if r is not None:
            return r, False
        if e in (FP32, BF16):
            r = _reduce(col, e, cand, forbid)
            if r is not None:
                return r, e == FP32
        return cand, False
    if st == FP32_TO_BF16:
        return _rise_else_reduce(col, origin, cand, forbid), False
    if st == FORCE_FP32:
        if first_input and fp16_type and origin in (FP32, FP16, BF16) and cube16:
            e = FP16
        else:
            e = FP32 if origin in (FP16, BF16) else origin
        return _rise_else_reduce(col, e, cand, forbid), False
    # FORCE_FP16
    e = FP16 if origin in (FP32, BF16) else origin
    return (_rise(col, e, cand, forbid) or cand), False


def forbidden(family: str, low: str | None, origin: str) -> str | None:
    """The dtype a mode never picks for a tensor of ``origin`` (op_format_dtype_strategy_manager.cc:17-53)."""
    if family == "force_fp32" or family == "force_low":
        return BF16
    if family in ("mixed", "fp32_to_low"):
        if low == FP16:
            return None if origin == BF16 else BF16
        return None if origin == FP16 else FP16
    return None


def judge(k: Combos, st: int, origin: str, inputs: Sequence, *, data_low: str = FP16, forbid: str | None = None,
          fp16_type: bool = False, keep: bool = False, fp32_to_fp16_mode: bool = False) -> int:
    """The index of the combination GE picks: ``inputs`` = ((kernel input port, producer's dtype or None), ...) in
    ranked order, then every float output port (``has_no_father`` for outputs: op_info_common.cc:609-619)."""
    cand = list(range(k.n))
    force16 = False
    cube16 = k.cube16
    for port, father in inputs:
        col = k.col_in(port)
        if col is None:
            continue
        if force16 and fp32_to_fp16_mode:               # strategy_manager.cc:244-248
            cand = _rise(col, FP16 if origin in (FP32, BF16) else origin, cand, None) or cand
            continue
        cand, red = _tensor(st, col, cand, father, origin, data_low, forbid, fp16_type, keep, port == 0, cube16)
        force16 = force16 or red
    for j in k.out_ports:
        col = k.col_out(j)
        if force16 and fp32_to_fp16_mode:
            cand = _rise(col, FP16 if origin in (FP32, BF16) else origin, cand, None) or cand
            continue
        cand, red = _tensor(st, col, cand, None, origin, data_low, forbid, fp16_type, keep, False, cube16)
        force16 = force16 or red
    return cand[0] if cand else 0


_ORDER = {FP16: 0, BF16: 0, FP32: 1, FP64: 2}


def dtypes_at(k: Combos, c: int, in_ports: Sequence[int], origin: str) -> tuple[str, str]:
    """(compute dtype, output dtype) of combination ``c``: the lowest float dtype at the op's input ports (else
    its output's), and the first float output port's dtype (else the compute dtype)."""
    lo = None
    for p in in_ports:
        col = k.col_in(p)
        d = col[c] if col is not None and c < len(col) else None
        if d in _ORDER and (lo is None or _ORDER[d] < _ORDER[lo]):
            lo = d
    out = None
    for j in k.out_ports:
        d = k.outs[j][c] if c < len(k.outs[j]) else None
        if d in _FLOATS:
            out = d
            break
    if lo is None:
        lo = out or origin
    return lo, (out or lo)


# ---------------------------------------------------------------------- does the AI Core take the op at all?
def _reduce_ok(desc: str, stored: str, black: bool, family: str, low: str | None, keep: bool) -> bool:
    """sub_ops_store.cc:113-182 (CheckPrecisionReduce, PrecisionReduceToFp16 / ToBf16)."""
    if keep or family == "origin":
        return False
    mixed16, mixed_b = family == "mixed" and low == FP16, family == "mixed" and low == BF16
    to16, tob = family == "fp32_to_low" and low == FP16, family == "fp32_to_low" and low == BF16
    if stored == FP16 and desc in (FP32, BF16):
        return not ((family == "force_fp32" or mixed16) and black) and not (tob or mixed_b)
    if stored == BF16 and desc == FP32:
        return not ((family == "force_fp32" or mixed_b) and black) and not (to16 or mixed16)
    return False


def ai_core_takes(k: Combos, in_ports: Sequence[int], origin: str, black: bool, family: str, low: str | None,
                  keep: bool) -> bool:
    """sub_ops_store.cc:244-284 (CheckDtypeSupported): every float port of the op, in its original dtype, is
    offered by the kernel as is, in fp32 for an fp16/bf16 tensor, or in a lower dtype the mode lets it reduce to."""
    if origin not in _FLOATS:
        return True
    ports = [k.col_in(p) for p in in_ports] + [k.outs[j] for j in k.out_ports]
    for col in ports:
        if col is None:
            continue
        s = set(col)
        if not s & _FLOATS:      # not a float port of the kernel (a framework port order that is not GE's)
            continue
        if origin in s or (origin in (FP16, BF16) and FP32 in s):
            continue
        if not any(_reduce_ok(origin, d, black, family, low, keep) for d in s if d in _FLOATS):
            return False
    return True
