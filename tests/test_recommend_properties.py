"""Properties of recommend on random synthetic graphs with random planted hazards:
a recommendation meets the tolerance under the model, is 1-minimal (each check is re-evaluated here
independently), its mixlist realises exactly the edits, and every non-finite source ends in fp32
under the semantics plan of the emitted mixlist."""
from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.mixlist import effective
from advisor.oplists import load_lists
from advisor.recommend import recommend_graph
from advisor.costmodel import build_time_model
from advisor.recommend.model import ErrorModel, build_evidence
from advisor.recommend.search import Searcher
from advisor.recommend.synthetic import Builder
from advisor.compare.tolerance import Tolerance
from advisor.semantics import LOW, compile_graph, plan

LISTS = load_lists("ascend910b")
TYPES = ["MatMulV2", "BatchMatMul", "Add", "Mul", "Exp", "Sigmoid", "Relu", "Gelu", "SoftmaxV2", "ReduceSum",
         "LayerNormV4", "RealDiv"]

op_spec = st.tuples(st.sampled_from(TYPES), st.integers(0, 10), st.integers(0, 10),
                    st.sampled_from(["ok", "ok", "ok", "big", "nonfinite"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op_spec, min_size=2, max_size=14))
def test_recommendation_is_feasible_and_one_minimal(spec):
    b = Builder()
    names = ["x"]
    for typ, i1, i2, hazard in spec:
        two = typ in ("Add", "Mul", "BatchMatMul", "RealDiv")
        ins = [names[-1 - (i1 % len(names))]]
        if two:
            ins.append(names[-1 - (i2 % len(names))])
        kw = {}
        if hazard == "big":
            kw["local"] = 0.3
        elif hazard == "nonfinite":
            kw.update(local=math.inf, local_nf=1)
        names.append(b.op(typ, *dict.fromkeys(ins), weight=typ.startswith("MatMul"), **kw))
    rec = recommend_graph(b.g, LISTS, local=b.local())
    assert rec.status in ("recommended", "no-change-needed", "no-solution")
    tol = Tolerance()
    c = compile_graph(b.g)
    model = ErrorModel(c, build_evidence(c, None, b.local()), build_time_model(c), "fp16", c.plan(LISTS))
    s = Searcher(c, LISTS, "mixed_float16", model, tol)
    edits = frozenset(e.edit for e in rec.edits)
    if rec.status == "no-solution":
        assert rec.exit_code == 1 and rec.closest is not None and not edits
        return
    assert rec.exit_code == 0
    full = s.evaluate(edits)
    assert full.ok and tol.predicted_ok(full.pred.final_rel_l2, full.pred.final_nonfinite)
    for e in edits:                                      # 1-minimality, re-checked independently
        assert not s.evaluate(edits - {e}).ok
    assert rec.minimality.proved
    # the emitted mixlist realises exactly the edits
    eff = effective(LISTS, rec.modify_mixlist)
    for e in edits:
        assert eff.list_of(e.type) == e.target
    # semantics plan of the emitted file: every op whose low-precision run is non-finite is fp32
    p = plan(b.g, eff)
    nf_nodes = {r["node"] for r in b.rows if r["local_nonfinite"]}
    for n in nf_nodes:
        assert p[n] not in LOW
