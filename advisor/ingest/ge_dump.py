"""GE graph dumps: write a GE-style ONNX-text dump of an op graph, read ``ge_onnx_*.pbtxt`` and
``ge_proto_*.txt`` back into an op graph (advisor/graph.py conventions) with true dataflow edges.

The exact subset written and read is documented in docs/formats.md ("GE graph dumps").
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import networkx as nx

from ..errors import InputError
from ..fsutil import atomic_write_text, read_user_text
from ..graph import is_float_dtype, normalize_dtype
from .common import (GE_DTYPE_VALUE, GRAPH_OUTPUT_TYPES, from_ge_dtype, is_bookkeeping, shape_ints, shape_str,
                     to_ge_dtype)
from .textproto import Message, first, parse, quote

ROLE_TYPES = {"data": "Data", "const": "Const", "variable": "Variable"}
# GE node types that are graph inputs, constants and variables (GE's PLACE_OR_END_SET and types.h):
# PlaceHolder = the input of a partitioned subgraph (its producer is in another partition)
TYPE_ROLES = {"Data": "data", "RefData": "data", "AippData": "data", "AnnData": "data",
              "PlaceHolder": "data", "Placeholder": "data",
              "Const": "const", "Constant": "const", "FileConstant": "const", "ConstPlaceHolder": "const",
              "Variable": "variable", "VariableV2": "variable", "VarHandleOp": "variable"}
NO_KERNEL_TYPES = GRAPH_OUTPUT_TYPES | frozenset({"Identity", "IdentityN", "NoOp", "Reshape", "Squeeze",
                             "Unsqueeze", "ExpandDims", "Flatten", "FlattenV2"})
_MAX_SLOTS = 1 << 16
_ADV = "_advisor."  # prefix of advisor's own round-trip attributes (ignored by GE tools)
_WRITTEN = {"type", "name", "role", "kernel", "decides", "float", "dtype", "cast_to", "origin_dtype",
            "in_shapes", "out_shapes", "in_dtypes", "out_dtypes", "order", "stream", "precision", "why",
            "in_origin_dtypes"}
# list attributes of graph fusion (advisor.fusion) and graph outputs, written as JSON strings
_JSON_ATTRS = frozenset({"members", "member_types", "ports_in", "ports_out", "internal", "net_outputs", "value",
                         "attr_ports", "member_onnx"})
FUSION_MARK = "advisor: graph fusion applied"      # doc_string of a dump of a post-fusion graph


# --------------------------------------------------------------------------------------------
# writing

def dump_file_name(seq: int = 0, graph_id: int = 0, stage: str = "Build") -> str:
    return f"ge_onnx_{seq:05d}_graph_{graph_id}_{stage}.pbtxt"


def _node_out_dtypes(n: Any, a: dict, prec: dict | None, n_out: int) -> list[str]:
    if a.get("out_dtypes"):
        d = [normalize_dtype(x) for x in a["out_dtypes"]]
        return (d + [d[-1]] * n_out)[:max(n_out, len(d))]
    role = a.get("role", "op")
    if role != "op":
        dt = normalize_dtype(a.get("dtype", "fp32"))
    elif not a.get("float", True):
        dt = "int64"
    elif a.get("type") == "Cast" and a.get("cast_to"):
        dt = normalize_dtype(a["cast_to"])
    elif prec is not None and prec.get(n) in ("fp32", "fp16", "bf16"):
        dt = prec[n]
    else:
        dt = normalize_dtype(a.get("origin_dtype", "fp32"))
    return [dt] * n_out


def _attr(lines: list[str], name: str, value: Any) -> None:
    lines.append("    attribute {")
    lines.append(f"      name: {quote(name)}")
    if isinstance(value, bool):
        lines.append(f"      i: {int(value)}")
        lines.append("      type: INT")
    elif isinstance(value, int):
        lines.append(f"      i: {value}")
        lines.append("      type: INT")
    elif isinstance(value, float):
        lines.append(f"      f: {value!r}")
        lines.append("      type: FLOAT")
    elif isinstance(value, (list, tuple)):
        for v in value:
            lines.append(f"      ints: {int(v)}")
        lines.append("      type: INTS")
    else:
        lines.append(f"      s: {quote(str(value))}")
        lines.append("      type: STRING")
    lines.append("    }")


def _order_key(g: nx.DiGraph):
    try:
        topo = {n: i for i, n in enumerate(nx.topological_sort(g))}
    except nx.NetworkXUnfeasible:
        topo = {n: i for i, n in enumerate(g.nodes)}
    return lambda n: (g.nodes[n].get("order", float("inf")) if isinstance(g.nodes[n].get("order"), (int, float)) else float("inf"), topo[n])


def render_ge_onnx(g: nx.DiGraph, plan: Any = None, graph_name: str = "graph_0") -> str:
    """The ONNX-text dump of ``g`` as a string (see ``write_ge_onnx``)."""
    prec = dict(plan.precision) if plan is not None else None
    nodes = sorted(g.nodes, key=_order_key(g))
    ids = {n: i for i, n in enumerate(nodes)}
    out_dt = _output_dtypes(g, nodes, prec)
    lines = ["ir_version: 3", 'producer_name: "GE"']
    if g.graph.get("fusion") == "applied":
        lines.append(f"doc_string: {quote(FUSION_MARK)}")
    lines += ["graph {", f"  name: {quote(graph_name)}"]
    for n in nodes:
        _node_lines(lines, g, n, ids[n], out_dt)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _output_dtypes(g: nx.DiGraph, nodes: list, prec: dict | None) -> dict[Any, list[str]]:
    """Each node's output dtypes; its number of outputs is the highest used output port + 1, or the
    described outputs."""
    n_out: dict[Any, int] = {}
    for u, v, d in g.edges(data=True):
        for o, _ in d.get("ports", [(0, 0)]):
            n_out[u] = max(n_out.get(u, 1), int(o) + 1)
    out_dt: dict[Any, list[str]] = {}
    for n in nodes:
        a = g.nodes[n]
        k = max(n_out.get(n, 1), len(a.get("out_dtypes") or ()), len(a.get("out_shapes") or ()))
        out_dt[n] = _node_out_dtypes(n, a, prec, k)
    return out_dt


def _node_lines(lines: list[str], g: nx.DiGraph, n: Any, node_id: int, out_dt: dict[Any, list[str]]) -> None:
    """One ``node { ... }`` block: inputs, name, type, id and stream, the input and output
    descriptions, then the GE and advisor attributes."""
    a = g.nodes[n]
    role = a.get("role", "op")
    typ = ROLE_TYPES.get(role, a.get("type", "")) if role != "op" else a.get("type", "")
    if role != "op" and a.get("type") in TYPE_ROLES:
        typ = a["type"]
    # inputs indexed by consumer input index ("" for a gap)
    slots: dict[int, tuple[Any, int, bool]] = {}
    for u, _, d in g.in_edges(n, data=True):
        for o, i in d.get("ports", [(0, 0)]):
            slots[int(i)] = (u, int(o), d.get("float", True))
    n_in = max([len(a.get("in_dtypes") or ()), len(a.get("in_shapes") or ())] + [i + 1 for i in slots])
    lines.append("  node {")
    for i in range(n_in):
        if i in slots:
            u, o, _ = slots[i]
            lines.append(f"    input: {quote(str(g.nodes[u].get('name', u)) + ':' + str(o))}")
        else:
            lines.append('    input: ""')
    lines.append(f"    name: {quote(str(a.get('name', n)))}")
    lines.append(f"    op_type: {quote('ge:' + str(typ))}")
    _attr(lines, "id", int(node_id))
    _attr(lines, "stream_id", int(a.get("stream", 0) or 0) if str(a.get("stream", 0)).lstrip("-").isdigit() else 0)
    _input_descs(lines, g, a, n_in, slots, out_dt)
    _output_descs(lines, a, role, out_dt[n])
    _node_attrs(lines, a, typ)
    lines.append("  }")


def _input_descs(lines: list[str], g: nx.DiGraph, a: dict, n_in: int, slots: dict[int, tuple[Any, int, bool]],
                 out_dt: dict[Any, list[str]]) -> None:
    """``input_desc_*`` attributes: the node's own input dtypes, else its producer's output dtype."""
    _attr(lines, "input_desc_nums", n_in)
    in_dt = [normalize_dtype(x) for x in (a.get("in_dtypes") or [])]
    in_sh = list(a.get("in_shapes") or [])
    for i in range(n_in):
        if i < len(in_dt):
            dt = in_dt[i]
            src_origin = "fp32" if is_float_dtype(dt) else dt
        elif i in slots:
            u, o, fl = slots[i]
            pd = out_dt.get(u, ["fp32"])
            dt = pd[o] if o < len(pd) else pd[-1]
            if not fl and is_float_dtype(dt):
                dt = "int64"
            ua = g.nodes[u]
            src_origin = normalize_dtype(ua.get("origin_dtype", "fp32")) if is_float_dtype(dt) else dt
        else:
            dt, src_origin = "n/a", "n/a"
        _attr(lines, f"input_desc_dtype:{i}", to_ge_dtype(dt))
        _attr(lines, f"input_desc_origin_dtype:{i}", to_ge_dtype(src_origin))
        if i < len(in_sh):
            _attr(lines, f"input_desc_shape:{i}", shape_ints(in_sh[i]))
        _attr(lines, f"input_desc_layout:{i}", "ND")


def _output_descs(lines: list[str], a: dict, role: str, outs: list[str]) -> None:
    """``output_desc_*`` attributes: dtype as built, origin dtype, shape, layout."""
    out_sh = list(a.get("out_shapes") or [])
    origin = normalize_dtype(a.get("origin_dtype", "fp32"))
    _attr(lines, "output_desc_nums", len(outs))
    for i, dt in enumerate(outs):
        _attr(lines, f"output_desc_dtype:{i}", to_ge_dtype(dt))
        if role != "op":
            odt = dt
        else:
            odt = origin if is_float_dtype(dt) or a.get("float", True) else dt
        _attr(lines, f"output_desc_origin_dtype:{i}", to_ge_dtype(odt))
        if i < len(out_sh):
            _attr(lines, f"output_desc_shape:{i}", shape_ints(out_sh[i]))
        _attr(lines, f"output_desc_layout:{i}", "ND")


def _node_attrs(lines: list[str], a: dict, typ: Any) -> None:
    """GE's own attributes (``dst_type`` of a Cast, ``_no_task``) and advisor's round-trip ones."""
    if typ == "Cast" and a.get("cast_to"):
        _attr(lines, "dst_type", GE_DTYPE_VALUE.get(to_ge_dtype(a["cast_to"]), 28))
    if a.get("kernel", True) is False:
        _attr(lines, "_no_task", True)
    if a.get("decides", True) is False:
        _attr(lines, _ADV + "decides", False)
    if a.get("float", True) is False:
        _attr(lines, _ADV + "float", False)
    if "order" in a and isinstance(a["order"], int):
        _attr(lines, _ADV + "order", int(a["order"]))
    if "stream" in a and not str(a["stream"]).lstrip("-").isdigit():
        _attr(lines, _ADV + "stream", str(a["stream"]))
    for k, v in a.items():
        if k in _WRITTEN or v is None:
            continue
        if k in _JSON_ATTRS and isinstance(v, (list, tuple, dict)):
            _attr(lines, _ADV + k, json.dumps(v, separators=(",", ":")))
        elif isinstance(v, (bool, int, float, str)):
            _attr(lines, _ADV + k, v if not isinstance(v, bool) else ("true" if v else "false"))


def write_ge_onnx(g: nx.DiGraph, path: str | os.PathLike, plan: Any = None) -> Path:
    """Write ``g`` as a GE-style ONNX-text graph dump.

    ``path`` is a file path, or a directory (then the file is ``ge_onnx_00000_graph_0_Build.pbtxt``
    inside it).  With ``plan`` (an ``advisor.semantics.Plan``) float ops' output dtypes are the
    planned precisions (what GE would have built); otherwise ``out_dtypes`` / ``origin_dtype``.
    Written atomically; returns the file path.
    """
    p = Path(path)
    if p.is_dir() or str(path).endswith(os.sep):
        p = p / dump_file_name()
    atomic_write_text(p, render_ge_onnx(g, plan, graph_name=str(g.graph.get("name", "graph_0"))))
    return p


def render_ge_proto(g: nx.DiGraph, plan: Any = None) -> str:
    """The same graph as GE ``ModelDef`` text (``ge_proto_*.txt``), used by tests of the reader."""
    onnx_text = render_ge_onnx(g, plan)
    onnx = _parse_onnx_nodes(parse(onnx_text))
    lines = ['name: "advisor"', "graph {", '  name: "graph_0"']
    for nd in onnx:
        lines.append("  op {")
        lines.append(f"    name: {quote(nd['name'])}")
        lines.append(f"    type: {quote(nd['type'])}")
        for s in nd["inputs"]:
            lines.append(f"    input: {quote(s)}")
        at = nd["attrs"]
        for k, v in at.items():
            if k.startswith(("input_desc", "output_desc", "id", "stream_id")):
                continue
            lines.append("    attr {")
            lines.append(f"      key: {quote(k)}")
            if isinstance(v, list):
                lines.append("      value { list { " + " ".join(f"i: {x}" for x in v) + " } }")
            elif isinstance(v, int):
                lines.append(f"      value {{ i: {v} }}")
            else:
                lines.append(f"      value {{ s: {quote(str(v))} }}")
            lines.append("    }")
        for kind in ("input", "output"):
            for i in range(int(at.get(f"{kind}_desc_nums", 0))):
                lines.append(f"    {kind}_desc {{")
                lines.append(f"      dtype: {at.get(f'{kind}_desc_dtype:{i}', 'DT_UNDEFINED')}")
                sh = at.get(f"{kind}_desc_shape:{i}")
                if sh is not None:
                    lines.append("      shape { " + " ".join(f"dim: {x}" for x in sh) + " }")
                lines.append('      layout: "ND"')
                od = at.get(f"{kind}_desc_origin_dtype:{i}")
                if od:
                    lines.append(f'      attr {{ key: "origin_data_type" value {{ s: {quote(od)} }} }}')
                lines.append("    }")
        lines.append(f"    id: {at.get('id', 0)}")
        lines.append(f"    stream_id: {at.get('stream_id', 0)}")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# reading

def _onnx_attr_value(a: Message) -> Any:
    t = first(a, "type", "")
    if "ints" in a or t == "INTS":
        return [int(x) for x in a.get("ints", [])]
    if "strings" in a or t == "STRINGS":
        return list(a.get("strings", []))
    if "floats" in a or t == "FLOATS":
        return [float(x) for x in a.get("floats", [])]
    if "i" in a:
        return int(first(a, "i"))
    if "f" in a:
        return float(first(a, "f"))
    if "s" in a:
        return first(a, "s")
    return None


def _parse_onnx_nodes(root: Message) -> list[dict]:
    graphs = root.get("graph") or []
    if not graphs:
        raise ValueError("no graph { ... } message")
    out = []
    for nd in graphs[0].get("node", []):
        attrs = {}
        for a in nd.get("attribute", []):
            nm = first(a, "name")
            if nm is not None:
                attrs[nm] = _onnx_attr_value(a)
        typ = str(first(nd, "op_type", ""))
        if typ.startswith("ge:"):
            typ = typ[3:]
        out.append({"name": str(first(nd, "name", "")), "type": typ,
                    "inputs": [str(x) for x in nd.get("input", [])], "attrs": attrs})
    return out


def _proto_attr_map(msg: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in msg.get("attr", []):
        k = first(a, "key")
        v = first(a, "value", {})
        if k is None or not isinstance(v, dict):
            continue
        if "list" in v:
            lst = first(v, "list", {})
            out[k] = [int(x) for x in lst.get("i", [])] if "i" in lst else list(lst.get("s", []))
        elif "i" in v:
            out[k] = int(first(v, "i"))
        elif "b" in v:
            out[k] = str(first(v, "b")).lower() in ("true", "1")
        elif "f" in v:
            out[k] = float(first(v, "f"))
        elif "s" in v:
            out[k] = first(v, "s")
    return out


def _parse_proto_nodes(root: Message) -> list[dict]:
    ops = root.get("op")
    if not ops:
        ops = []
        for gr in root.get("graph", []):
            ops.extend(gr.get("op", []))
    if not ops and "graph" not in root:
        raise ValueError("no graph { op { ... } } messages")
    out = []
    for op in ops:
        attrs = _proto_attr_map(op)
        for kind in ("input", "output"):
            descs = op.get(f"{kind}_desc", [])
            attrs[f"{kind}_desc_nums"] = len(descs)
            for i, d in enumerate(descs):
                attrs[f"{kind}_desc_dtype:{i}"] = first(d, "dtype", "DT_UNDEFINED")
                sh = first(d, "shape")
                if isinstance(sh, dict):
                    attrs[f"{kind}_desc_shape:{i}"] = [int(x) for x in sh.get("dim", [])]
                da = _proto_attr_map(d)
                if "origin_data_type" in da:
                    attrs[f"{kind}_desc_origin_dtype:{i}"] = da["origin_data_type"]
        for k in ("id", "stream_id"):
            if k in op:
                attrs[k] = int(first(op, k))
        out.append({"name": str(first(op, "name", "")), "type": str(first(op, "type", "")),
                    "inputs": [str(x) for x in op.get("input", [])], "attrs": attrs})
    return out


def _bool_attr(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes")
    return bool(v)


def nodes_to_graph(nodes: list[dict], path: object = None) -> nx.DiGraph:
    """Build the op graph from parsed dump nodes (name, type, inputs "src:idx", attrs)."""
    g = nx.DiGraph()
    node_rows = []
    names = set()
    for nd in nodes:
        name = nd["name"]
        if not name:
            raise InputError(path, "a node has no name")
        names.add(name)
        node_rows.append((name, _graph_node(nd, path)))
    g.add_nodes_from(node_rows)
    edges: dict[tuple[str, str], dict] = {}
    for nd in nodes:
        _add_input_edges(edges, g, nd, names, path)
    g.add_edges_from((u, v, d) for (u, v), d in edges.items())
    return g


def _slot_count(at: dict, kind: str, declared: int) -> int:
    """Tensor slots of one kind (input/output): the declared count or the highest described index + 1."""
    prefix = f"{kind}_desc_dtype:"
    return max(declared, 1 + max([int(k.rsplit(":", 1)[1]) for k in at if k.startswith(prefix)], default=-1))


def _graph_node(nd: dict, path: object) -> dict[str, Any]:
    """The op-graph attributes of one parsed dump node: type, role, dtypes and shapes per slot,
    order and stream, advisor's round-trip attributes, then what an op's dtypes imply."""
    name, at, typ = nd["name"], nd["attrs"], nd["type"]
    role = TYPE_ROLES.get(typ, "op")
    n_in = int(at.get("input_desc_nums", 0) or 0)
    n_out = int(at.get("output_desc_nums", 0) or 0)
    n_in, n_out = _slot_count(at, "input", n_in), _slot_count(at, "output", n_out)
    if n_in > _MAX_SLOTS or n_out > _MAX_SLOTS or n_in < 0 or n_out < 0:
        raise InputError(path, f"node {name!r} declares {max(n_in, n_out)} tensor slots; not a plausible GE dump")
    in_dt = [from_ge_dtype(at.get(f"input_desc_dtype:{i}", "DT_UNDEFINED")) for i in range(n_in)]
    out_dt = [from_ge_dtype(at.get(f"output_desc_dtype:{i}", "DT_UNDEFINED")) for i in range(n_out)]
    a: dict[str, Any] = {"type": typ, "name": name, "role": role,
                         "in_dtypes": in_dt, "out_dtypes": out_dt,
                         }
    if any(f"input_desc_origin_dtype:{i}" in at for i in range(n_in)):
        # the dtypes before GE's precision judge (what fusion passes check: advisor.fusion)
        a["in_origin_dtypes"] = [from_ge_dtype(at.get(f"input_desc_origin_dtype:{i}", "DT_UNDEFINED"))
                                 for i in range(n_in)]
    if any(f"input_desc_shape:{i}" in at for i in range(n_in)):
        a["in_shapes"] = [shape_str(at.get(f"input_desc_shape:{i}")) for i in range(n_in)]
    if any(f"output_desc_shape:{i}" in at for i in range(n_out)):
        a["out_shapes"] = [shape_str(at.get(f"output_desc_shape:{i}")) for i in range(n_out)]
    if "id" in at:
        a["order"] = int(at["id"])
    if "stream_id" in at:
        a["stream"] = int(at["stream_id"])
    for k, v in at.items():
        if k.startswith(_ADV):
            key = k[len(_ADV):]
            if key in ("decides", "float", "kernel"):
                a[key] = _bool_attr(v)
            elif key in _JSON_ATTRS and isinstance(v, str):
                a[key] = _json_list(v, name, key, path)
            elif isinstance(v, str) and v in ("true", "false"):
                a[key] = v == "true"
            else:
                a[key] = v
    if role != "op":
        a["dtype"] = out_dt[0] if out_dt else "fp32"
    else:
        _op_facts(a, at, typ, n_out)
    return a


def _json_list(v: str, name: str, key: str, path: object) -> Any:
    try:
        out = json.loads(v)
    except ValueError:
        out = None
    if not isinstance(out, dict if key == "member_onnx" else list):
        raise InputError(path, f"node {name!r} attribute {_ADV + key} is not a JSON "
                               f"{'object' if key == 'member_onnx' else 'list'}")
    return out


def _op_facts(a: dict[str, Any], at: dict, typ: str, n_out: int) -> None:
    """What an op node's dump says beyond its slots: origin dtype, float or not, a Cast's target
    dtype, no kernel (``_no_task``, no-kernel types), no precision decision (bookkeeping types)."""
    in_dt, out_dt = a["in_dtypes"], a["out_dtypes"]
    origins = [from_ge_dtype(at[f"output_desc_origin_dtype:{i}"]) for i in range(n_out)
               if f"output_desc_origin_dtype:{i}" in at]
    fo = [o for o in origins if is_float_dtype(o)]
    if fo:
        a["origin_dtype"] = fo[0]
    if "float" not in a and (in_dt or out_dt):
        known = [d for d in in_dt + out_dt if d not in ("n/a", "undefined")]
        if known:
            a["float"] = any(is_float_dtype(d) for d in known)
    if typ == "Cast":
        src = from_ge_dtype(at.get("input_desc_origin_dtype:0", "DT_UNDEFINED"))
        if is_float_dtype(src):
            a["cast_from"] = src     # the model's input dtype: what GE's Cast look-through reads
        if "dst_type" in at and isinstance(at["dst_type"], int):
            a["cast_to"] = from_ge_dtype(at["dst_type"])
        elif out_dt and out_dt[0] != "n/a":
            a["cast_to"] = out_dt[0]
    if _bool_attr(at.get("_no_task", False)) or typ in NO_KERNEL_TYPES:
        a["kernel"] = False
    if typ in GRAPH_OUTPUT_TYPES or ("decides" not in a and is_bookkeeping(typ)
                                     and typ not in NO_KERNEL_TYPES):
        a["decides"] = False


def _add_input_edges(edges: dict[tuple[str, str], dict], g: nx.DiGraph, nd: dict, names: set, path: object) -> None:
    """The dataflow edges into one node from its ``"producer:out_idx"`` inputs (control edges, index
    < 0, skipped); several ports between the same two nodes share one edge."""
    dst = nd["name"]
    in_dt = g.nodes[dst]["in_dtypes"]
    for i, s in enumerate(nd["inputs"]):
        if not s:
            continue
        src, sep, idx = s.rpartition(":")
        if not sep:
            src, idx = s, "0"
        try:
            o = int(idx)
        except ValueError:
            src, o = s, 0
        if o < 0:
            continue  # control edge
        if src not in names:
            raise InputError(path, f"node {dst!r} input {s!r} names a node that is not in the dump")
        dt = in_dt[i] if i < len(in_dt) else "n/a"
        if dt in ("n/a", "undefined"):
            po = g.nodes[src]["out_dtypes"]
            dt = po[o] if o < len(po) else "n/a"
        fl = is_float_dtype(dt) if dt not in ("n/a", "undefined") else True
        e = edges.get((src, dst))
        if e is None:
            edges[(src, dst)] = {"ports": [(o, i)], "float": fl, "confidence": 1.0}
        else:
            e["ports"].append((o, i))
            e["float"] = e["float"] or fl


def read_ge_dump(path: str | os.PathLike) -> nx.DiGraph:
    """Read a GE graph dump (``ge_onnx_*.pbtxt`` ONNX text or ``ge_proto_*.txt`` ModelDef text) into
    an op graph with true dataflow edges (ports from "producer:out_idx" inputs)."""
    p = Path(path)
    text = read_user_text(p, "a text GE graph dump (ge_onnx_*.pbtxt / ge_proto_*.txt)")
    root = parse(text, p)
    try:
        if "graph" in root and any("node" in gr for gr in root["graph"] if isinstance(gr, dict)) \
                or "producer_name" in root or "ir_version" in root:
            nodes = _parse_onnx_nodes(root)
            kind = "ge_onnx"
        else:
            nodes = _parse_proto_nodes(root)
            kind = "ge_proto"
    except (ValueError, TypeError, AttributeError) as e:
        raise InputError(p, f"not a GE graph dump: {e}") from None
    if not nodes:
        raise InputError(p, "GE graph dump contains no nodes")
    try:
        g = nodes_to_graph(nodes, p)
    except (ValueError, TypeError, KeyError) as e:
        raise InputError(p, f"malformed GE graph dump: {e}") from None
    g.graph.update(source=str(p), format=kind)
    if FUSION_MARK in str(first(root, "doc_string", "") or ""):
        g.graph["fusion"] = "applied"
    return g
