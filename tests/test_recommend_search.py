"""recommend's search on synthetic graphs with per-op evidence (no emulator): the objective, the
cheap-op preference, 1-minimality, received-error culprits, performance edits, profile-only mode."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from advisor.mixlist import Mixlist, effective
from advisor.oplists import load_lists
from advisor.recommend import recommend_graph
from advisor.costmodel import build_time_model
from advisor.recommend.model import ErrorModel, build_evidence
from advisor.recommend.synthetic import Builder
from advisor.semantics import compile_graph, plan

LISTS = load_lists("ascend910b")


G = Builder   # ops in execution order with per-op evidence rows


def _types(rec, kind=None):
    return sorted(e.edit.type for e in rec.edits if kind is None or e.edit.kind == kind)


def test_single_hazard_cheap_op_beats_matmul():
    b = G()
    mm = b.op("MatMulV2", "x", weight=True, shape=(512, 1024))
    ex = b.op("Exp", mm, shape=(512, 1024), local=math.inf, local_nf=1, inrnd=3e-3)
    b.op("MatMulV2", ex, weight=True, shape=(512, 1024))
    rec = recommend_graph(b.g, LISTS, local=b.local())
    assert rec.status == "recommended" and rec.ok and rec.exit_code == 0
    assert [str(e.edit) for e in rec.edits] == ["black-list to-add Exp"]
    assert rec.modify_mixlist.black_add == ("Exp",)
    assert rec.minimality.proved is True
    # black-listing MatMulV2 would also fix it: the model says so, yet the cheap edit wins
    from advisor.recommend.search import Edit, Searcher  # noqa: F401
    c = compile_graph(b.g)
    model = ErrorModel(c, build_evidence(c, None, b.local()), build_time_model(c), "fp16")
    s = Searcher(c, LISTS, "mixed_float16", model, rec_tol())
    mm_fix = s.evaluate(frozenset([Edit("black-add", "MatMulV2")]))
    exp_fix = s.evaluate(frozenset([Edit("black-add", "Exp")]))
    assert mm_fix.ok and exp_fix.ok
    assert exp_fix.pred.low_share > mm_fix.pred.low_share


def rec_tol():
    from advisor.compare.tolerance import Tolerance
    return Tolerance()


def test_two_cheap_edits_beat_one_matmul_and_fewest_alternative_reported():
    b = G()
    mm = b.op("MatMulV2", "x", weight=True, shape=(512, 1024))
    ex = b.op("Exp", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    sg = b.op("Sigmoid", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    b.op("Add", ex, sg, shape=(512, 1024))
    rec = recommend_graph(b.g, LISTS, local=b.local())
    assert _types(rec, "black-add") == ["Exp", "Sigmoid"]
    assert rec.fewest_edit_alternative is not None and [str(e) for e in rec.fewest_edit_alternative.edits] == ["black-list to-add MatMulV2"]
    assert rec.minimality.proved
    checks = rec.minimality.checks
    assert len(checks) == 2 and not any(c.meets_tolerance_without_it for c in checks)


def test_two_independent_hazards_need_both():
    b = G()
    m1 = b.op("MatMulV2", "x", weight=True)
    e1 = b.op("Exp", m1, local=math.inf, local_nf=1)
    m2 = b.op("MatMulV2", "x", weight=True)
    s2 = b.op("Sigmoid", m2, local=0.5)   # large but finite error
    b.op("Add", e1, s2)
    rec = recommend_graph(b.g, LISTS, local=b.local())
    assert rec.status == "recommended"
    # the cheap pair keeps more compute in low precision than the MatMulV2 edit
    assert _types(rec) == ["Exp", "Sigmoid"]
    d = rec.to_dict()
    assert d["confirmed"] is False and d["minimality"]["proved"]
    for e in d["edits"]:
        assert e["predicted_without_this_edit"]["final_nonfinite"] or \
            e["predicted_without_this_edit"]["final_rel_l2"] > d["tolerance"]["rel_l2_max"]


def test_control_needs_no_edit_and_mixlist_still_valid():
    b = G()
    m1 = b.op("MatMulV2", "x", weight=True)
    r = b.op("Relu", m1)
    b.op("MatMulV2", r, weight=True)
    rec = recommend_graph(b.g, LISTS, local=b.local())
    assert rec.status == "no-change-needed" and rec.ok and rec.exit_code == 0
    assert rec.edits == [] and rec.modify_mixlist.is_empty()
    assert rec.modify_mixlist.to_dict() == {"black-list": {"to-add": [], "to-remove": []},
                                     "white-list": {"to-add": [], "to-remove": []}}


def test_received_error_blames_the_producer():
    """LayerNorm after a large-offset linear: its own precision does not matter, its producer's
    output rounding does (inrnd large).  Black-listing the LayerNorm alone cannot fix it."""
    b = G()
    mm = b.op("MatMulV2", "x", weight=True)
    ln = b.op("LayerNorm", mm, local=0.3, inrnd=0.3)
    b.op("MatMulV2", ln, weight=True)
    rec = recommend_graph(b.g, LISTS, local=b.local())
    assert rec.status == "recommended"
    assert "MatMulV2" in _types(rec)
    assert "LayerNorm" not in _types(rec)


def test_no_solution_reports_closest_and_exit_1():
    b = G()
    mm = b.op("MatMulV2", "x", weight=True)
    ex = b.op("Exp", mm, local=math.inf, local_nf=1)
    b.op("MatMulV2", ex, weight=True)
    rec = recommend_graph(b.g, LISTS, local=b.local(), exclude=("Exp", "MatMulV2"))
    assert rec.status == "no-solution" and rec.exit_code == 1 and not rec.ok
    assert rec.closest is not None and "closest" in rec.closest.note
    assert rec.edits == []


def test_calibration_reproduces_measured_final_error():
    b = G()
    m1 = b.op("MatMulV2", "x", weight=True)
    s = b.op("Sigmoid", m1, local=2e-3)
    out = b.op("MatMulV2", s, weight=True)
    ops = pd.DataFrame([dict(node=m1, out_rel_l2=3e-4, in_rel_l2=0.0),
                        dict(node=s, out_rel_l2=2.5e-3, in_rel_l2=3e-4),
                        dict(node=out, out_rel_l2=4.2e-3, in_rel_l2=2.5e-3)])
    rec = recommend_graph(b.g, LISTS, ops=ops, local=b.local(), measured_final=4.2e-3)
    assert rec.predicted.base.final_rel_l2 == pytest.approx(4.2e-3, rel=1e-9)
    assert rec.status == "no-change-needed"


def test_start_mixlist_is_composed_into_the_result():
    b = G()
    mm = b.op("MatMulV2", "x", weight=True)
    ex = b.op("Exp", mm, local=math.inf, local_nf=1)
    b.op("Relu", ex)
    start = Mixlist(black_add=("Gelu",))
    rec = recommend_graph(b.g, LISTS, local=b.local(), base_mixlist=start)
    assert set(rec.modify_mixlist.black_add) == {"Gelu", "Exp"}
    eff = effective(LISTS, rec.modify_mixlist)
    assert eff.list_of("Exp") == "black" and eff.list_of("Gelu") == "black"


def test_performance_edit_for_fp32_by_inheritance():
    """A big gray op kept in fp32 only because it inherits from a black op, with a tiny measured
    local error, is proposed as white to-add with a predicted saving; the accuracy set stays empty."""
    b = G()
    rs = b.op("ReduceSum", "x", shape=(4096, 4096))           # black
    ge = b.op("Gelu", rs, shape=(4096, 4096), local=4e-4)      # gray: inherits fp32
    b.op("Mul", ge, shape=(4096, 4096), local=4e-4)
    rec = recommend_graph(b.g, LISTS, local=b.local())
    assert rec.status == "no-change-needed" and rec.edits == []
    kinds = {str(e.edit) for e in rec.performance_edits}
    assert "white-list to-add Gelu" in kinds
    for e in rec.performance_edits:
        assert e.predicted_time_change_us < 0
    assert rec.performance_mixlist is not None and "Gelu" in rec.performance_mixlist.white_add
    assert rec.predicted.with_performance_edits.time_us < rec.predicted.base.time_us


def test_no_perf_edit_without_headroom():
    b = G()
    rs = b.op("ReduceSum", "x", shape=(4096, 4096))
    b.op("Gelu", rs, shape=(4096, 4096), local=0.2)   # too sensitive in fp16
    rec = recommend_graph(b.g, LISTS, local=b.local())
    assert rec.performance_edits == []
    f = [x for x in rec.findings if x.get("type") == "Gelu"]
    assert f and "headroom" in f[0]["verdict"]


def test_profile_only_mode_says_sensitivity_needs_dumps():
    b = G()
    rs = b.op("ReduceSum", "x", shape=(4096, 4096))
    b.op("Gelu", rs, shape=(4096, 4096))
    rec = recommend_graph(b.g, LISTS)
    assert rec.status == "profile-only" and rec.edits == [] and rec.exit_code == 0
    assert any("dump" in n and "capture" in n for n in rec.notes)
    f = [x for x in rec.findings if x.get("type") == "Gelu" and x["kind"] != "fp32-time"]
    assert f and "sensitivity" in f[0]["verdict"]
    assert rec.predicted.base.final_rel_l2 is None
    t = [x for x in rec.findings if x["kind"] == "fp32-time" and x["type"] == "Gelu"]
    assert t and t[0]["rule"] == "gray-inherit" and t[0]["saving_if_low_us"] > 0
    assert rec.modify_mixlist.is_empty()


def test_flips_in_evidence_match_semantics():
    b = G()
    mm = b.op("MatMulV2", "x", weight=True)
    ex = b.op("Exp", mm, local=math.inf, local_nf=1)
    rl = b.op("Relu", ex)
    b.op("Add", rl, "x")
    rec = recommend_graph(b.g, LISTS, local=b.local())
    (e,) = rec.edits
    before = plan(b.g, LISTS)
    after = plan(b.g, effective(LISTS, rec.modify_mixlist))
    truth = {n for n, p in before.items() if after[n] != p}
    assert {f.node for f in e.predicted_flips} == truth == {"exp1", "relu2", "add3"}
