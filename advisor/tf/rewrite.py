"""Apply a semantics plan to a frozen GraphDef, the way GE executes it.

An op the plan puts in fp16/bf16 gets its float type attributes (``T`` ...) set to
``DT_HALF``/``DT_BFLOAT16`` and Cast nodes are inserted wherever a producer's dtype differs from
what a consumer takes (GE's ``trans_Cast`` nodes).  Two execution styles for a low op:

* native: TF's CPU kernel for the low dtype runs the op (vector ops);
* cube-style: matrix ops (MatMul, BatchMatMul, Conv, ... — ``is_cube_type``; and TF ``Einsum``),
  and ops with no CPU kernel for the low dtype, take inputs rounded to the low dtype, compute in fp32 (fp32
  accumulation, as the Ascend cube unit does) and round their outputs to the low dtype.

Either way every tensor an op consumes and produces carries exactly the dtype the plan gives it
(``Rewritten.in_dtypes``/``out_dtypes``); nothing here decides a precision.

How values are rounded is ``advisor.numerics``' rule, built from TF ops: in saturation mode every float
tensor a kernel reads (after its Cast) or writes gets NaN -> 0 (``IsNan``/``SelectV2``) and ±inf / overflow ->
±max of its dtype (``ClipByValue`` with ``numerics.FLOAT_MAX``); an fp32 kernel that reads HF32
(``Numerics.hf32_on``) gets its fp32 inputs through the bit rounding of ``numerics.hf32_tensor``
(``Bitcast``, ``RightShift``, ``AddV2``, ``LeftShift`` by ``numerics.HF32_DROPPED_BITS``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping

from ..numerics import FLOAT_MAX, HF32_DROPPED_BITS, IEEE, Numerics
from ..oplists import is_cube_type
from . import opmap
from .graph import TFGraphInfo, split_tensor, topo_order

DT_FLOAT, DT_DOUBLE, DT_INT32, DT_BFLOAT16, DT_HALF = 1, 2, 3, 14, 19
# TF contractions that are not GE cube types by name but run as matrix products: executed cube-style
CONTRACTIONS = frozenset({"Einsum"})
FLOAT_ENUMS = (DT_FLOAT, DT_DOUBLE, DT_BFLOAT16, DT_HALF)
LOW_ENUM = {"fp16": DT_HALF, "bf16": DT_BFLOAT16}
ENUM_NAME = {DT_FLOAT: "fp32", DT_DOUBLE: "fp64", DT_BFLOAT16: "bf16", DT_HALF: "fp16"}


@dataclass
class Rewritten:
    graph_def: Any
    tensor: dict[tuple[str, int], str] = field(default_factory=dict)      # original tensor -> new tensor name
    in_dtypes: dict[str, list[int]] = field(default_factory=dict)         # op -> dtype each input is consumed in
    out_dtypes: dict[str, list[int]] = field(default_factory=dict)        # op -> dtype of each output
    style: dict[str, str] = field(default_factory=dict)                   # low op -> "native" | "cube-style"


def _attr_type(nd, opdef, name: str) -> int:
    if name in nd.attr:
        return nd.attr[name].type
    for a in opdef.attr:
        if a.name == name and a.HasField("default_value"):
            return a.default_value.type
    return 0


def arg_types(nd, opdef, args) -> list[int]:
    """The dtype of every tensor of ``args`` (input_arg or output_arg list) under the node's attrs."""
    out: list[int] = []
    for a in args:
        if a.type_list_attr:
            out.extend(nd.attr[a.type_list_attr].list.type)
            continue
        t = a.type if a.type else _attr_type(nd, opdef, a.type_attr)
        n = nd.attr[a.number_attr].i if a.number_attr else 1
        out.extend([t] * n)
    return out


def _float_type_attrs(nd, opdef) -> list[str]:
    """Type attributes bound to tensor args and currently DT_FLOAT, in input-arg order."""
    names: list[str] = []
    for a in list(opdef.input_arg) + list(opdef.output_arg):
        if a.type_attr and a.type_attr not in names and _attr_type(nd, opdef, a.type_attr) == DT_FLOAT:
            names.append(a.type_attr)
    return names


@lru_cache(maxsize=None)
def _cpu_kernel_ok(op: str, assignment: tuple[tuple[str, int], ...]) -> bool:
    from tensorflow.python.framework import kernels  # noqa: PLC0415
    wanted = dict(assignment)
    for k in kernels.get_registered_kernels_for_op(op).kernel:
        if k.device_type != "CPU":
            continue
        if all(c.name not in wanted or wanted[c.name] in c.allowed_values.list.type for c in k.constraint):
            return True
    return False


def low_attrs(nd, opdef, low: int) -> dict[str, int] | None:
    """Type attributes to set for running ``nd`` natively in ``low`` on the CPU, or None when no CPU
    kernel exists (the op then runs cube-style)."""
    names = _float_type_attrs(nd, opdef)
    if not names:
        return None
    fixed = tuple((a, _attr_type(nd, opdef, a)) for a in sorted({c for c in nd.attr if nd.attr[c].type}) if a not in names)
    for cand in (names, names[:1]):
        assign = {a: low for a in cand}
        key = tuple(sorted(assign.items())) + fixed
        if _cpu_kernel_ok(nd.op, key):
            return assign
    return None


class _Builder:
    def __init__(self, tf, out_gd, numerics: Numerics = IEEE):
        self.tf = tf
        self.gd = out_gd
        self.names: set[str] = set()
        self.sat = numerics.saturating
        self.conditioned: set[str] = set()      # tensors a kernel already wrote saturated
        self.memo: dict[tuple[str, str], str] = {}   # (rule, source tensor) -> its rounded tensor

    def add(self, nd):
        self.gd.node.add().CopyFrom(nd)
        self.names.add(nd.name)

    def unique(self, name: str) -> str:
        base, k = name, 1
        while name in self.names:
            name = f"{base}_{k}"
            k += 1
        return name

    def node(self, name: str, op: str, inputs: list[str], **types: int) -> str:
        nd = self.tf.compat.v1.NodeDef(name=self.unique(name), op=op, input=inputs)
        for a, t in types.items():
            nd.attr[a].type = t
        self.add(nd)
        return f"{nd.name}:0"

    def const(self, name: str, value: float, dt: int) -> str:
        nd = self.tf.compat.v1.NodeDef(name=self.unique(name), op="Const")
        nd.attr["dtype"].type = dt
        nd.attr["value"].tensor.CopyFrom(self.tf.make_tensor_proto(value, dtype=self.tf.dtypes.as_dtype(dt)))
        self.add(nd)
        return f"{nd.name}:0"

    def saturate(self, base: str, src: str, dt: int) -> str:
        """``src`` (a float tensor of dtype ``dt``) as saturation mode reads it: NaN -> 0, ±inf -> ±max."""
        if not self.sat or dt not in FLOAT_ENUMS or src in self.conditioned:
            return src
        key = ("sat", src)
        if key not in self.memo:
            m = FLOAT_MAX[ENUM_NAME[dt]]
            nan = self.node(f"{base}/advisor_sat_isnan", "IsNan", [src], T=dt)
            zero = self.node(f"{base}/advisor_sat_zero", "ZerosLike", [src], T=dt)
            sel = self.node(f"{base}/advisor_sat_nan0", "SelectV2", [nan, zero, src], T=dt)
            out = self.node(f"{base}/advisor_sat_clip", "ClipByValue",
                            [sel, self.const(f"{base}/advisor_sat_min", -m, dt), self.const(f"{base}/advisor_sat_max", m, dt)],
                            T=dt)
            self.conditioned.add(out)
            self.memo[key] = out
        return self.memo[key]

    def hf32(self, base: str, src: str) -> str:
        """An fp32 tensor as HF32 reads it (``numerics.hf32_tensor``'s bit rounding)."""
        key = ("hf32", src)
        if key not in self.memo:
            k = HF32_DROPPED_BITS
            b = self.node(f"{base}/advisor_hf32_bits", "Bitcast", [src], T=DT_FLOAT, type=DT_INT32)
            b = self.node(f"{base}/advisor_hf32_shr", "RightShift",
                          [b, self.const(f"{base}/advisor_hf32_k1", k - 1, DT_INT32)], T=DT_INT32)
            b = self.node(f"{base}/advisor_hf32_add", "AddV2", [b, self.const(f"{base}/advisor_hf32_one", 1, DT_INT32)],
                          T=DT_INT32)
            b = self.node(f"{base}/advisor_hf32_half", "RightShift",
                          [b, self.const(f"{base}/advisor_hf32_one2", 1, DT_INT32)], T=DT_INT32)
            b = self.node(f"{base}/advisor_hf32_shl", "LeftShift", [b, self.const(f"{base}/advisor_hf32_k", k, DT_INT32)],
                          T=DT_INT32)
            self.memo[key] = self.node(f"{base}/advisor_hf32", "Bitcast", [b], T=DT_INT32, type=DT_FLOAT)
        return self.memo[key]

    def cast(self, name: str, src: str, src_t: int, dst_t: int) -> str:
        name = self.unique(name)
        nd = self.tf.compat.v1.NodeDef(name=name, op="Cast", input=[src])
        nd.attr["SrcT"].type = src_t
        nd.attr["DstT"].type = dst_t
        nd.attr["Truncate"].b = False
        self.add(nd)
        return f"{name}:0"

    def to_dtype(self, base: str, src: str, src_t: int, want: int) -> str:
        if src_t == want or src_t not in FLOAT_ENUMS or want not in FLOAT_ENUMS:
            return src
        return self.cast(base, src, src_t, want)

    def emit_op(self, nd, name: str, inputs: list[tuple[str, int]], low: int | None, cube: bool,
                opdef, round_out: bool = True, kernel: bool = False, hf32: bool = False,
                raw_in: frozenset = frozenset(), leaves: bool = True) -> tuple[list[str], list[int], list[int], str]:
        """Emit ``nd`` as ``name`` fed by ``inputs`` [(tensor, dtype)] in precision ``low`` (None =
        as in the graph; ``round_out=False``: a cube-style op's fp32 outputs stay fp32, the fp16-in / fp32-out
        kernel).  ``kernel``: the node is a kernel the chip's overflow mode applies to (saturation: every float
        tensor it reads and writes); ``hf32``: an fp32 kernel reading its fp32 inputs as HF32.  A member of a
        fused kernel (advisor.fusion): ``raw_in`` its inputs another member produced, read as they are (neither
        rounded, saturated nor HF32); ``leaves=False``: its outputs never leave the kernel (not saturated).
        Returns (output tensor names, consumed input dtypes, output dtypes, style)."""
        m = self.tf.compat.v1.NodeDef()
        m.CopyFrom(nd)
        m.name = name
        del m.input[:]
        assign = None
        if low is not None and not cube:
            assign = low_attrs(nd, opdef, low)
        for a, t in (assign or {}).items():
            m.attr[a].type = t
        style = "" if low is None else ("native" if assign is not None else "cube-style")
        want = arg_types(m, opdef, opdef.input_arg)
        consumed: list[int] = []
        for i, (src, src_t) in enumerate(inputs):
            w = want[i] if i < len(want) else src_t
            sat = kernel or low is not None
            if i in raw_in:
                m.input.append(self.to_dtype(f"{name}/advisor_cast_in{i}", src, src_t, w))
                consumed.append(w if (src_t in FLOAT_ENUMS and w in FLOAT_ENUMS) else src_t)
            elif style == "cube-style" and w == DT_FLOAT and src_t in FLOAT_ENUMS:
                # inputs rounded to the low dtype, fp32 compute (the cube unit's fp32 accumulation)
                t = self.to_dtype(f"{name}/advisor_round_in{i}", src, src_t, low)
                t = self.saturate(f"{name}/in{i}", t, low) if sat else t
                t = self.to_dtype(f"{name}/advisor_cast_in{i}", t, low, DT_FLOAT)
                m.input.append(t)
                consumed.append(low)
            else:
                t = self.to_dtype(f"{name}/advisor_cast_in{i}", src, src_t, w)
                dt = w if (src_t in FLOAT_ENUMS and w in FLOAT_ENUMS) else src_t
                t = self.saturate(f"{name}/in{i}", t, dt) if sat else t
                if hf32 and low is None and dt == DT_FLOAT:
                    t = self.hf32(f"{name}/in{i}", t)
                m.input.append(t)
                consumed.append(dt)
        self.add(m)
        outs_t = arg_types(m, opdef, opdef.output_arg)
        outs = [f"{name}:{k}" for k in range(len(outs_t))]
        if style == "cube-style" and round_out:
            for k, t in enumerate(outs_t):
                if t == DT_FLOAT:
                    outs[k] = self.cast(f"{name}/advisor_round_out{k}", outs[k], DT_FLOAT, low)
                    outs_t[k] = low
        if (kernel or low is not None) and leaves:
            outs = [self.saturate(f"{name}/out{k}", t, dt) for k, (t, dt) in enumerate(zip(outs, outs_t))]
        return outs, consumed, outs_t, style


def _opdef(op: str):
    from tensorflow.python.framework import op_def_registry  # noqa: PLC0415
    od = op_def_registry.get(op)
    if od is None:
        raise ValueError(f"unknown TensorFlow op {op!r}")
    return od


def apply_plan(tf, graph_def, info: TFGraphInfo, precision: Mapping[str, str], low_dtype: str,
               g=None, outputs: Mapping[str, str] | None = None, numerics: Numerics = IEEE,
               members: Mapping[str, Any] | None = None, types: Mapping[str, str] | None = None,
               through: Mapping[str, str] | None = None) -> Rewritten:
    """The GraphDef that executes ``precision`` (node -> fp32/fp16/bf16/n/a from a semantics Plan) with the
    output dtypes ``outputs`` (node -> the plan's output dtype; default: its precision), the way the chip
    rounds (``numerics``: its overflow mode and HF32).  ``members``: the members of fused kernels
    (``fusion.Member``: ``internal_in``, ``round_out``), executed cube-style (fp32 compute) so a value one member
    hands another is never rounded; ``types``: the GE type each node executes as (post-fusion; default its graph
    type), which decides HF32; ``through``: each Cast GE's TransNodeMerging removes (advisor.fusion.transnodes) ->
    the Cast whose input it passes on unrounded."""
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    b = _Builder(tf, out, numerics)
    rw = Rewritten(out)
    cur: dict[tuple[str, int], tuple[str, int]] = {}
    nodes = {n.name: n for n in graph_def.node}

    def src_of(inp: str) -> tuple[str, int]:
        node, k = split_tensor(inp)
        if (node, k) in cur:
            return cur[(node, k)]
        return f"{node}:{k}", DT_FLOAT

    for name in topo_order(graph_def):
        nd = nodes[name]
        opdef = _opdef(nd.op)
        ins = [src_of(i) for i in nd.input if not i.startswith("^")]
        head = nodes.get((through or {}).get(name, ""))
        if head is not None:        # an inverse Cast pair GE removed: the head Cast's input, unrounded
            t, dt = src_of(next(i for i in head.input if not i.startswith("^")))
            cur[(name, 0)] = (t, dt)
            rw.tensor[(name, 0)] = t
            rw.in_dtypes[name], rw.out_dtypes[name] = [dt], [dt]
            continue
        if nd.op in opmap.BYPASS:
            m = tf.compat.v1.NodeDef()
            m.CopyFrom(nd)
            del m.input[:]
            m.input.extend(t for t, _ in ins)
            if nd.op == "IdentityN":
                del m.attr["T"].list.type[:]
                m.attr["T"].list.type.extend(t for _, t in ins)
            elif "T" in m.attr and ins:
                m.attr["T"].type = ins[0][1]
            b.add(m)
            for k, (_, t) in enumerate(ins if nd.op == "IdentityN" else ins[:1]):
                cur[(name, k)] = (f"{name}:{k}", t)
            continue
        p = precision.get(name, "fp32")
        is_op = g is None or (name in g and g.nodes[name].get("role") == "op")
        want_low = is_op and p in LOW_ENUM
        # random ops draw in fp32 and round (same numbers as the FP32 run, as a fixed-seed NPU run
        # draws the same bits whatever the output dtype); contractions accumulate in fp32
        cube = (nd.op in CONTRACTIONS or opmap.is_random(nd.op)
                or (is_cube_type(g.nodes[name]["type"]) if (g is not None and name in g) else False))
        # fp16 inputs with an fp32 output (force_fp32's cube ops): inputs rounded, fp32 compute, output kept
        round_out = (outputs or {}).get(name, p) in LOW_ENUM
        mem = (members or {}).get(name)
        if mem is not None:     # inside a fused kernel: fp32 compute, only what leaves the kernel is rounded
            cube, round_out = True, round_out and mem.round_out
        cube = cube or not round_out
        a = g.nodes[name] if (g is not None and name in g) else {}
        kernel = is_op and bool(a.get("kernel", True)) and p in ("fp16", "bf16", "fp32")
        hf32 = kernel and p == "fp32" and numerics.hf32_on((types or {}).get(name, a.get("type")))
        outs, consumed, outs_t, style = b.emit_op(
            nd, name, ins, LOW_ENUM[p] if want_low else None, cube, opdef, round_out, kernel=kernel, hf32=hf32,
            raw_in=mem.internal_in if mem is not None else frozenset(), leaves=mem is None or mem.round_out)
        for k, (t, dt) in enumerate(zip(outs, outs_t)):
            cur[(name, k)] = (t, dt)
            rw.tensor[(name, k)] = t
        rw.in_dtypes[name] = consumed
        rw.out_dtypes[name] = outs_t
        if style:
            rw.style[name] = style
    # bypassed tensors resolve to their sources' new names
    for (n, k), (t, _) in cur.items():
        rw.tensor.setdefault((n, k), t)
    return rw


def local_graph(tf, graph_def, info: TFGraphInfo, g, low_dtype: str,
                numerics: Numerics = IEEE) -> tuple[Any, dict[str, tuple[list[str], list[str]]]]:
    """The FP32 graph plus, for every float kernel op X, two clones fed by X's FP32 inputs:
    ``X/advisor_local`` (X executed in the low dtype exactly as the mixed run would) and
    ``X/advisor_inrnd`` (X in fp32 on inputs rounded to the low dtype), both under the chip's overflow
    mode.  Returns the GraphDef and node -> (local output tensors, inrnd output tensors)."""
    low = LOW_ENUM.get(low_dtype, DT_HALF)
    out = tf.compat.v1.GraphDef()
    out.CopyFrom(graph_def)
    b = _Builder(tf, out, numerics)
    b.names = {n.name for n in graph_def.node}
    clones: dict[str, tuple[list[str], list[str]]] = {}
    for name in info.order:
        a = g.nodes[name]
        if a.get("role") != "op" or not a.get("float", True) or not a.get("kernel", True):
            continue
        nd = info.nodes[name]
        if opmap.is_random(nd.op):
            continue
        opdef = _opdef(nd.op)
        fp32_in = arg_types(nd, opdef, opdef.input_arg)
        ins = []
        for i, (src, k) in enumerate(info.inputs[name]):
            t = fp32_in[i] if i < len(fp32_in) else DT_FLOAT
            ins.append((f"{src}:{k}", t))
        lo, _, _, _ = b.emit_op(nd, f"{name}/advisor_local", ins, low, is_cube_type(a["type"]) or nd.op in CONTRACTIONS,
                                opdef)
        rnd = [(b.saturate(f"{name}/inrnd{i}", b.to_dtype(f"{name}/advisor_inrnd_r{i}", s, t, low), low)
                if t == DT_FLOAT else s, low if t == DT_FLOAT else t) for i, (s, t) in enumerate(ins)]
        rnd = [(b.to_dtype(f"{name}/advisor_inrnd_c{i}", s, t, DT_FLOAT) if t == low else s,
                DT_FLOAT if t == low else t) for i, (s, t) in enumerate(rnd)]
        ir, _, _, _ = b.emit_op(nd, f"{name}/advisor_inrnd", rnd, None, False, opdef)
        clones[name] = (lo, ir)
    return out, clones
