"""An ONNX model as advisor sees it: the model (file or ModelProto), its input batches, its nodes with the
GE types ATC gives them, and the op graph (graph.py conventions) built from one FP32 run.

Names: a node's name is the ONNX node name (what ATC's --keep_dtype / --customize_dtypes match); an
unnamed node gets ``<OpType>_<k>`` (k counts unnamed nodes of that type), a repeated name ``<name>#<k>``.
Graph inputs are ``Data`` nodes named like the input, initializers ``Const`` nodes named like the
initializer, ``Constant`` nodes ``Const`` nodes named like the node (ATC folds all three into Data/Const).
"""
from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import graph as G
from ..errors import InputError
from ..fsutil import check_user_file, read_user_bytes
from . import opmap, require_onnx

MODEL_WHAT = "an ONNX model (.onnx)"
INPUTS_WHAT = "an .npz file of model inputs (numpy.savez: one array per graph input name)"
_SHAPE = re.compile(r"^\s*([^:;]+?)\s*:\s*(-?\d+(?:\s*,\s*-?\d+)*)?\s*$")


def load_model(src: Any, target: Any = None):
    """``onnx.ModelProto`` of a path or a ModelProto (checked; one InputError line when it is not a model)."""
    onnx = require_onnx(target or src)
    if isinstance(src, onnx.ModelProto):
        m = src
        where = target or "the ONNX model"
    else:
        p = check_user_file(src, MODEL_WHAT)
        where = p
        try:
            m = onnx.load(str(p))
        except Exception as e:  # noqa: BLE001 - protobuf/external-data errors of a user file
            raise InputError(p, f"not a readable ONNX model ({type(e).__name__}: {_first(e)})") from None
    if not m.graph.node:
        raise InputError(where, "the ONNX model has no nodes")
    try:
        onnx.checker.check_model(m)
    except Exception as e:  # noqa: BLE001 - onnx.checker.ValidationError and protobuf errors
        raise InputError(where, f"invalid ONNX model: {_first(e)}") from None
    return m


def _first(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:300]


def opsets(model) -> dict[str, int]:
    return {(imp.domain or "ai.onnx"): int(imp.version) for imp in model.opset_import}


@dataclass
class Node:
    """One ONNX node with what advisor needs about it."""

    index: int
    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    ge: opmap.GeMapping
    const: bool = False           # a Constant node (its value is a Const node of the graph)
    aux: tuple = ()

    @property
    def random(self) -> bool:
        return self.op_type in opmap.RANDOM_OPS


@dataclass
class Model:
    """A loaded ONNX model: nodes with GE types, graph inputs (name, numpy dtype, static shape or None)."""

    proto: Any
    nodes: list[Node]
    inputs: list[tuple[str, np.dtype, list | None]]
    initializers: dict[str, np.ndarray]
    outputs: list[str]
    opset: int
    notes: list[str] = field(default_factory=list)

    @property
    def n_params(self) -> int:
        return int(sum(a.size for a in self.initializers.values()))

    def unmapped(self) -> list[str]:
        return sorted({n.op_type if not n.domain else f"{n.domain}.{n.op_type}" for n in self.nodes
                       if not n.ge.mapped and not n.const})


def read_model(src: Any, target: Any = None) -> Model:
    onnx = require_onnx(target or src)
    from onnx import numpy_helper
    m = load_model(src, target)
    ops = opsets(m)
    opset = ops.get("ai.onnx", 0)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    # node names must not collide with graph inputs / initializers (one namespace of graph nodes)
    names: dict[str, int] = {n: 0 for n in list(inits) + [vi.name for vi in m.graph.input]}
    unnamed: dict[str, int] = {}
    nodes, notes = [], []
    for i, n in enumerate(m.graph.node):
        name = n.name
        if not name:
            k = unnamed.get(n.op_type, 0)
            unnamed[n.op_type] = k + 1
            name = f"{n.op_type}_{k}"
        if name in names:
            names[name] += 1
            name = f"{name}#{names[name]}"
        names.setdefault(name, 0)
        domain = "" if n.domain in ("", "ai.onnx") else n.domain
        ge = opmap.lookup(n.op_type, domain, ops.get(domain or "ai.onnx"))
        if ge.note and ge.note not in notes:
            notes.append(ge.note)
        nodes.append(Node(i, name, n.op_type, domain, list(n.input), list(n.output), ge,
                          const=n.op_type == "Constant" and not domain,
                          aux=opmap.AUX_FP32_OUTPUTS.get(n.op_type, ()) if not domain else ()))
    inputs = []
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        try:
            dt = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except Exception:  # noqa: BLE001 - a sequence/map input or an undefined type
            raise InputError(target or src, f"graph input {vi.name!r} is not a tensor of a numeric type") from None
        shape = None
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            shape = dims
        inputs.append((vi.name, dt, shape))
    return Model(m, nodes, inputs, inits, [o.name for o in m.graph.output], opset, notes)


# ---------------------------------------------------------------------- input batches
def parse_input_shapes(specs: list[str] | None, source: str = "--input-shape") -> dict[str, list[int]]:
    """``name:1,3,224,224`` (repeatable, or ATC's ``a:1,3;b:2`` in one value) -> {name: shape}."""
    out: dict[str, list[int]] = {}
    for spec in specs or []:
        for part in str(spec).split(";"):
            if not part.strip():
                continue
            m = _SHAPE.match(part)
            if m is None:
                raise InputError(source, f"{part.strip()!r} is not name:d0,d1,... (e.g. input:1,3,224,224)")
            dims = [int(x) for x in m.group(2).split(",")] if m.group(2) else []
            if any(d < 0 for d in dims):
                raise InputError(source, f"{part.strip()!r}: dimensions must be >= 0")
            if int(np.prod(dims, dtype=np.float64)) > 1 << 28:
                raise InputError(source, f"{part.strip()!r}: more than 2^28 elements")
            out[m.group(1)] = dims
    return out


def _fill(name: str, dt: np.dtype, shape: list[int], rng: np.random.Generator) -> np.ndarray:
    """Generated data for an input: standard normal floats, ones for integers and booleans (valid token
    ids, masks and indices for typical models)."""
    if np.issubdtype(dt, np.floating):
        return rng.standard_normal(shape).astype(dt)
    return np.ones(shape, dtype=dt)


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    raw = read_user_bytes(path, INPUTS_WHAT)
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            return {k: np.asarray(z[k]) for k in z.files}
    except Exception as e:  # noqa: BLE001 - not a zip, a pickled array, a truncated file
        raise InputError(path, f"not {INPUTS_WHAT} ({type(e).__name__}: {_first(e)})") from None


def batches_for(model: Model, inputs: list[str] | None = None, shapes: dict[str, list[int]] | None = None,
                batches: Any = None, seed: int = 0, source: Any = None) -> list[dict[str, np.ndarray]]:
    """The model's batches (batch i = step i): ``batches`` as a Python workload gave them (a list of dicts
    name -> array, or of tuples in graph-input order), else one batch per ``inputs`` .npz file, else one
    batch generated from ``shapes`` (``--input-shape``) or the model's static input shapes."""
    names = [n for n, _, _ in model.inputs]
    out: list[dict[str, np.ndarray]] = []
    if batches is not None:
        bs = batches if isinstance(batches, list) else [batches]
        for k, b in enumerate(bs):
            if isinstance(b, dict):
                out.append({str(n): np.asarray(v) for n, v in b.items()})
            else:
                b = b if isinstance(b, (tuple, list)) else (b,)
                out.append({n: np.asarray(v) for n, v in zip(names, b)})
    elif inputs:
        out = [read_npz(p) for p in inputs]
    else:
        shapes = shapes or {}
        unknown = sorted(set(shapes) - set(names))
        if unknown:
            raise InputError("--input-shape", f"no graph input named {unknown[0]!r}; inputs: {', '.join(names)}")
        rng = np.random.default_rng(seed)
        b = {}
        for n, dt, shape in model.inputs:
            s = shapes.get(n, shape)
            if s is None or any(d is None or d <= 0 for d in s):
                raise InputError(source, f"graph input {n!r} has a dynamic shape {_show(shape)}: give "
                                         f"--input-shape {n}:d0,d1,... or --inputs FILE.npz")
            b[n] = _fill(n, dt, list(s), rng)
        out = [b]
    if not out:
        raise InputError(source, "no input batch")
    for k, b in enumerate(out):
        where = inputs[k] if inputs and batches is None else source
        missing = [n for n in names if n not in b]
        extra = sorted(set(b) - set(names))
        if missing or extra:
            raise InputError(where, (f"missing graph input {missing[0]!r}" if missing else f"no graph input named "
                                     f"{extra[0]!r}") + f"; the model's inputs: {', '.join(names)}")
        for n, dt, shape in model.inputs:
            a = b[n]
            if a.dtype != dt:
                if not np.can_cast(a.dtype, dt, casting="same_kind"):
                    raise InputError(where, f"input {n!r} is {a.dtype}, the model expects {dt}")
                b[n] = a.astype(dt)
            if shape is not None and (len(shape) != a.ndim or any(d not in (None, 0) and d != s
                                                                  for d, s in zip(shape, a.shape))):
                raise InputError(where, f"input {n!r} has shape {list(a.shape)}, the model expects {_show(shape)}")
    return out


def _show(shape) -> str:
    return "unknown" if shape is None else "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


# ---------------------------------------------------------------------- the op graph
def dtype_name(a: Any) -> str:
    return G.normalize_dtype(str(np.asarray(a).dtype)) if a is not None else "n/a"


def is_float_array(a: Any) -> bool:
    return a is not None and dtype_name(a) in G.FLOAT_DTYPES


def build_graph(model: Model, vals: dict[str, Any], name: str = "model"):
    """The op graph of one FP32 run (``vals``: every value of the run by ONNX value name)."""
    g = G.new_graph(framework="onnx", step=0, name=name)
    producer: dict[str, tuple[str, int]] = {}
    outputs = set(model.outputs)
    for n, dt, _ in model.inputs:
        a = vals.get(n)
        G.add_op(g, n, "Data", role="data", dtype=dtype_name(a), kernel=False,
                 out_shapes=[list(np.shape(a))], out_dtypes=[dtype_name(a)])
        producer[n] = (n, 0)
    used = {i for nd in model.nodes for i in nd.inputs if i}
    for n, a in model.initializers.items():
        if n in used and n not in producer:
            G.add_op(g, n, "Const", role="const", dtype=dtype_name(a), kernel=False,
                     out_shapes=[list(a.shape)], out_dtypes=[dtype_name(a)], **_small_value(a))
            producer[n] = (n, 0)
    for nd in model.nodes:
        outs = [vals.get(o) for o in nd.outputs]
        if nd.const:
            a = outs[0] if outs else None
            G.add_op(g, nd.name, "Const", role="const", dtype=dtype_name(a), kernel=False,
                     out_shapes=[list(np.shape(a))], out_dtypes=[dtype_name(a)], onnx_op=nd.op_type,
                     **_small_value(a))
            for j, o in enumerate(nd.outputs):
                producer[o] = (nd.name, j)
            continue
        ins = [vals.get(i) if i else None for i in nd.inputs]
        is_float = any(is_float_array(x) for x in ins + outs)
        origin = next((dtype_name(x) for x in outs if is_float_array(x)), "fp32")
        attrs = dict(kernel=nd.ge.kernel, float=is_float, origin_dtype=origin, order=nd.index, dump=nd.name,
                     in_shapes=[list(np.shape(x)) if x is not None else None for x in ins],
                     out_shapes=[list(np.shape(x)) if x is not None else None for x in outs],
                     in_dtypes=[dtype_name(x) for x in ins], out_dtypes=[dtype_name(x) for x in outs],
                     mapped=nd.ge.mapped, onnx_op=nd.op_type, onnx_domain=nd.domain or "ai.onnx")
        if nd.ge.type == "Cast" and outs and is_float_array(outs[0]):
            attrs["cast_to"] = dtype_name(outs[0])
        if nd.op_type == "Einsum":    # read by GE's EinsumPass (advisor.fusion)
            attrs["equation"] = _attr_str(model.proto.graph.node[nd.index], "equation")
        net = [j for j, o in enumerate(nd.outputs) if o and o in outputs]
        if net:
            attrs["net_outputs"] = net
        G.add_op(g, nd.name, nd.ge.type, role="op", **attrs)
        for k, i in enumerate(nd.inputs):
            if not i:
                continue
            src = producer.get(i)
            if src is None:
                raise InputError(None, f"node {nd.name!r} reads {i!r}, which no node, input or initializer produces")
            G.connect(g, src[0], nd.name, src[1], k, float=is_float_array(vals.get(i)))
        for j, o in enumerate(nd.outputs):
            if o:
                producer[o] = (nd.name, j)
    return g


def _small_value(a: Any) -> dict:
    """``value`` of a constant with at most 8 elements (scalars such as a Pow exponent or an epsilon, axes): what
    GE's fusion passes read from Const nodes (advisor.fusion)."""
    if not isinstance(a, np.ndarray) or a.size > 8 or a.dtype.kind not in "fiub":
        return {}
    v = a.reshape(-1).tolist()
    return {"value": v[0] if a.ndim == 0 else v}


def _attr_str(node: Any, name: str) -> str | None:
    for at in node.attribute:
        if at.name == name:
            return at.s.decode("utf-8", "replace") if isinstance(at.s, bytes) else str(at.s)
    return None


__all__ = ["Model", "Node", "read_model", "load_model", "batches_for", "parse_input_shapes", "read_npz",
           "build_graph", "dtype_name", "is_float_array", "opsets"]
