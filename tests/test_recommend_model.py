"""The error and time models behind recommend: regimes of the gain, calibration, cost weighting."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from advisor.oplists import load_lists
from advisor.costmodel import build_time_model
from advisor.recommend.model import ROUNDING_REL, ErrorModel, build_evidence
from advisor.recommend.edits import Edit, lists_with
from advisor.recommend.synthetic import Builder
from advisor.semantics import compile_graph

LISTS = load_lists("ascend910b")
U = ROUNDING_REL["fp16"]


def _model(b, ops=None, lists=LISTS):
    c = compile_graph(b.g)
    m = ErrorModel(c, build_evidence(c, ops, b.local()), build_time_model(c), "fp16", c.plan(lists))
    return c, m


def _final(c, m, edits=()):
    p = c.plan(lists_with(LISTS, edits))
    return m.evaluate(p)


def test_amplifier_after_rounded_input_vs_after_fp32_producer():
    """A softmax-like op amplifying input *rounding* 2000x (inrnd): fed by a low producer it is far
    off even in fp32; once its producer runs fp32, the small upstream error passes with gain <= 1."""
    b = Builder()
    q = b.op("MatMulV2", "x", weight=True, local=1e-5, inrnd=1e-5)
    s = b.op("BatchMatMul", q, q, local=2e-4)
    b.op("SoftmaxV2", s, local=0.6, inrnd=0.6)
    c, m = _model(b)
    base = _final(c, m)
    assert base.final_rel_l2 > 0.1
    bmm_black = _final(c, m, [Edit("black-add", "BatchMatMul")])   # softmax follows in fp32
    assert bmm_black.final_rel_l2 < 1e-3
    sm_black = _final(c, m, [Edit("black-add", "SoftmaxV2")])      # its input is still rounded
    assert sm_black.final_rel_l2 > 0.1


def test_teacher_forced_calibration_reproduces_measured_errors():
    b = Builder()
    a = b.op("MatMulV2", "x", weight=True, local=3e-4)
    r = b.op("Relu", a, local=2e-4)
    o = b.op("MatMulV2", r, weight=True, local=3e-4)
    ops = pd.DataFrame([dict(node=a, out_rel_l2=3e-4, in_rel_l2=0.0), dict(node=r, out_rel_l2=5e-4, in_rel_l2=3e-4),
                        dict(node=o, out_rel_l2=9e-4, in_rel_l2=5e-4)])
    c, m = _model(b, ops)
    pred = m.evaluate(c.plan(LISTS), keep_arrays=True)
    for n, want in ((a, 3e-4), (r, 5e-4), (o, 9e-4)):
        assert pred.errors[c.index[n]] == pytest.approx(want, rel=1e-6)


def test_nonfinite_source_and_absorption():
    b = Builder()
    a = b.op("MatMulV2", "x", weight=True)
    e = b.op("Exp", a, local=math.inf, local_nf=1)
    mask = b.op("Mul", e)                                    # e.g. a masking op that removes infs
    b.op("Add", mask, a)
    ops = pd.DataFrame([dict(node=e, out_rel_l2=math.inf, out_nonfinite=5, in_rel_l2=U),
                        dict(node=mask, out_rel_l2=1e-3, out_nonfinite=0, in_rel_l2=math.inf, in_nonfinite=1)])
    c, m = _model(b, ops)
    pred = m.evaluate(c.plan(LISTS), keep_arrays=True)
    assert pred.nonfinite[c.index[e]] and not pred.nonfinite[c.index[mask]]
    assert not pred.final_nonfinite
    c2, m2 = _model(b)                                       # no measurement: the inf propagates
    assert m2.evaluate(c2.plan(LISTS)).final_nonfinite


def test_cost_weighting_cube_vs_vector():
    b = Builder()
    mm = b.op("MatMulV2", "x", weight=True, shape=(4096, 4096))
    b.op("Exp", mm, shape=(4096, 4096))
    c = compile_graph(b.g)
    t = build_time_model(c)
    i_mm, i_exp = c.index[mm], c.index["exp1"]
    cube_ratio = t.t_fp32[i_mm] / t.t_low[i_mm]
    vec_ratio = t.t_fp32[i_exp] / t.t_low[i_exp]
    assert cube_ratio > vec_ratio > 1.0
    assert (t.t_fp32[i_mm] - t.t_low[i_mm]) > 10 * (t.t_fp32[i_exp] - t.t_low[i_exp])
    low = np.ones(len(c), bool)
    tot, casts, share, lost = t.plan_time(low)
    assert share == pytest.approx(1.0) and lost == 0.0 and casts == 0
    low[i_exp] = False
    tot2, casts2, share2, lost2 = t.plan_time(low)
    assert casts2 == 1 and lost2 > 0 and share2 < 1.0 and tot2 > tot


def test_pytorch_eager_policy_forces_the_black_listed_ops_to_fp32():
    """The autocast snippet realises the decision in eager PyTorch: black-listed types (Exp, Sigmoid)
    compute in fp32, everything else is untouched (run on CPU: DEVICE swapped)."""
    torch = pytest.importorskip("torch")
    from advisor.recommend.snippets import mixlist_snippets
    code = mixlist_snippets("/x/modify_mixlist.json", "mixed_float16", ["Exp", "Sigmoid"])["pytorch_eager_autocast"]
    saved = (torch.exp, torch.sigmoid)
    try:
        ns: dict = {}
        exec(code.replace("DEVICE = 'npu'", "DEVICE = 'cpu'"), ns)
        ns["apply_policy"]()
        ns["apply_policy"]()                      # idempotent
        x = torch.randn(8).half()
        assert torch.exp(x).dtype == torch.float32 and torch.sigmoid(x).dtype == torch.float32
        assert torch.tanh(x).dtype == torch.float16
        assert torch.allclose(torch.exp(x), saved[0](x.float()))
    finally:
        torch.exp, torch.sigmoid = saved
