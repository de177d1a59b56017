"""The GraphDef rewrite that executes a plan: dtypes, Cast insertion, native vs cube-style execution."""
from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from advisor import semantics  # noqa: E402
from advisor.mixlist import Mixlist, effective  # noqa: E402
from advisor.oplists import load_lists  # noqa: E402
from advisor.tf.capture import Session  # noqa: E402
from advisor.tf.freeze import freeze  # noqa: E402
from advisor.tf.graph import build, prune, split_tensor  # noqa: E402
from advisor.tf.rewrite import DT_FLOAT, DT_HALF, apply_plan  # noqa: E402

pytestmark = pytest.mark.tf


def _graph():
    w = tf.constant(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
    f = tf.function(lambda x: tf.reduce_sum(tf.exp(tf.matmul(x, w) + 11.5), axis=-1))
    x = np.ones((2, 4), np.float32)
    fr = freeze(f, [(x,)])
    gd = prune(fr.graph_def, [split_tensor(t)[0] for t in fr.outputs + fr.inputs])
    g, info = build(tf, gd)
    return fr, gd, g, info, x


def _node(gd, op):
    (n,) = [n for n in gd.node if n.op == op and "advisor" not in n.name]
    return n


def test_graph_types_and_roles():
    _, _, g, _, _ = _graph()
    types = {a["type"] for _, a in g.nodes(data=True)}
    assert {"Data", "Const", "MatMulV2", "Add", "Exp", "ReduceSum"} <= types       # the TF parser's types
    (data,) = [n for n, a in g.nodes(data=True) if a["role"] == "data"]
    (mm,) = [n for n, a in g.nodes(data=True) if a["type"] == "MatMulV2"]
    assert g.edges[data, mm]["ports"] == [(0, 0)]
    assert all(a["role"] != "op" or a["type"] not in ("Identity", "NoOp") for _, a in g.nodes(data=True))


def test_the_constant_axes_sum_is_reduce_sum_d_when_ge_judges():
    """The D variant is graph fusion's, as for every framework (ConstToAttrReduceSumFusion, advisor.fusion)."""
    from advisor import fusion
    _, _, g, _, _ = _graph()
    fz = fusion.fuse(g, "ascend910b", load_lists("ascend910b"))
    (rs,) = [a for _, a in fz.graph.nodes(data=True) if a.get("pre_fusion_type") == "ReduceSum"]
    assert (rs["type"], rs["fused_by"], rs["attr_inputs"]) == ("ReduceSumD", "ConstToAttrReduceSumFusion", [1])


def test_default_plan_rewrite_native_half_and_cube_style():
    fr, gd, g, info, x = _graph()
    p = semantics.plan(g, load_lists("ascend910b"), "mixed_float16")
    rw = apply_plan(tf, gd, info, p.precision, "fp16", g)
    # Exp and Add (gray, following the white MatMulV2) run natively in half
    assert _node(rw.graph_def, "Exp").attr["T"].type == DT_HALF
    assert rw.style[_node(gd, "Exp").name] == "native"
    # MatMul keeps an fp32 kernel on inputs rounded to fp16 and rounds its output (fp32 accumulation)
    mm = _node(rw.graph_def, "MatMul")
    assert mm.attr["T"].type == DT_FLOAT and rw.style[mm.name] == "cube-style"
    assert rw.out_dtypes[mm.name] == [DT_HALF] and rw.in_dtypes[mm.name] == [DT_HALF, DT_HALF]
    casts = [n for n in rw.graph_def.node if n.op == "Cast"]
    assert any(n.name.startswith(mm.name + "/advisor_round_out") for n in casts)
    # executing it overflows exactly where fp16 must: exp(>11.09) = inf
    s = Session(tf, rw.graph_def)
    out = s.run([fr.outputs[0]], {fr.inputs[0]: x})[0]
    s.close()
    assert np.isinf(out).all()


def test_black_listed_exp_runs_fp32_after_a_cast():
    fr, gd, g, info, x = _graph()
    base = load_lists("ascend910b")
    lists = effective(base, Mixlist(black_add=("Exp",)))
    p = semantics.plan(g, lists, "mixed_float16")
    rw = apply_plan(tf, gd, info, p.precision, "fp16", g)
    ex = _node(rw.graph_def, "Exp")
    assert ex.attr["T"].type == DT_FLOAT
    (src,) = ex.input
    cast = next(n for n in rw.graph_def.node if n.name == src.split(":")[0])
    assert cast.op == "Cast" and cast.attr["SrcT"].type == DT_HALF and cast.attr["DstT"].type == DT_FLOAT
    # the gray ReduceSumD after it inherits fp32: no low op after Exp
    assert _node(rw.graph_def, "Sum").attr["T"].type == DT_FLOAT
    s = Session(tf, rw.graph_def)
    out = s.run([fr.outputs[0]], {fr.inputs[0]: x})[0]
    s.close()
    assert np.isfinite(out).all()
