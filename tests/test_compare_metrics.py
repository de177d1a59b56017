import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from advisor.compare.metrics import (FP16_MAX, msprobe_pass, stats_metrics, tensor_metrics, headline, worse)
from advisor.compare.tolerance import Tolerance, tolerance_from_options, Verdict


def test_metrics_match_direct_torch_computation():
    g = torch.randn(64, 33, generator=torch.Generator().manual_seed(0))
    t = g.to(torch.float16)
    m = tensor_metrics(t, g)
    td, gd = t.double().flatten(), g.double().flatten()
    assert m["low_dtype"] == "fp16"
    assert m["cosine"] == pytest.approx(torch.nn.functional.cosine_similarity(td, gd, dim=0).item(), abs=1e-12)
    assert m["rel_l2"] == pytest.approx(((td - gd).norm() / gd.norm()).item(), rel=1e-12)
    assert m["max_abs"] == pytest.approx((td - gd).abs().max().item(), rel=1e-12)
    rel = (td - gd).abs() / gd.abs()
    assert m["max_rel"] == pytest.approx(rel.max().item(), rel=1e-12)
    assert m["one_thousandth"] == pytest.approx((rel < 1e-3).double().mean().item())
    assert m["five_thousandth"] == pytest.approx((rel < 5e-3).double().mean().item())
    assert m["sqnr_db"] == pytest.approx(-20 * math.log10(m["rel_l2"]))
    assert m["finite"] and m["target_nan"] == 0 and m["saturated"] == 0


def test_nonfinite_counted_in_target_only():
    g = np.array([1.0, 2.0, np.inf, 4.0, 5.0])
    t = np.array([1.0, np.inf, np.inf, np.nan, 5.0])
    m = tensor_metrics(t, g, "fp16")
    assert m["target_inf"] == 1 and m["target_nan"] == 1 and m["golden_nonfinite"] == 1
    assert not m["finite"] and math.isinf(m["rel_l2"])
    # cosine is undefined (NaN) for a non-finite target; the finite-in-both elements agree exactly
    assert math.isnan(m["cosine"]) and m["cosine_finite"] == pytest.approx(1.0)


def test_saturation_overflow_underflow_subnormal():
    g = torch.tensor([70000.0, -1e5, 1.0, 1e-9, 3e-6, 0.0, 2.0, 1e-8])
    t = g.to(torch.float16)                      # 70000 -> inf in torch; emulate saturation mode
    t = torch.where(t.isinf(), torch.sign(t) * FP16_MAX, t).to(torch.float16)
    m = tensor_metrics(t, g)
    assert m["saturated"] == 2
    assert m["overflow_risk"] == pytest.approx(2 / 8)
    nz = 7
    assert m["underflow"] == pytest.approx(2 / nz)        # 1e-9 and 1e-8 flush to zero in fp16
    assert m["subnormal"] == pytest.approx(3 / nz)        # 1e-9, 3e-6, 1e-8 below 6.1e-5
    mb = tensor_metrics(g.to(torch.bfloat16), g)
    assert mb["saturated"] == 0 and mb["overflow_risk"] == 0 and mb["underflow"] == 0


def test_max_rel_uses_eps_for_zero_golden():
    m = tensor_metrics(np.array([1e-3, 1.0]), np.array([0.0, 1.0]), "fp32")
    assert m["max_rel"] == pytest.approx(1e-3 / np.finfo(np.float32).eps)


def test_zero_and_empty_tensors():
    m = tensor_metrics(np.zeros(4), np.zeros(4))
    assert m["cosine"] == 1.0 and m["rel_l2"] == 0.0
    m = tensor_metrics(np.ones(4), np.zeros(4))
    assert m["cosine"] == 0.0 and math.isinf(m["rel_l2"])
    assert tensor_metrics(np.zeros(0), np.zeros(0))["rel_l2"] == 0.0
    with pytest.raises(ValueError):
        tensor_metrics(np.zeros(3), np.zeros(4))


@settings(max_examples=60, deadline=None)
@given(arrays(np.float32, st.integers(1, 50), elements=st.floats(-1e4, 1e4, width=32)))
def test_properties(a):
    g = a.astype(np.float64)
    m = tensor_metrics(g, g)
    assert m["rel_l2"] == 0.0 and m["max_abs"] == 0.0
    t = torch.from_numpy(a).to(torch.float16)
    m = tensor_metrics(t, g)
    assert -1.0 <= m["cosine"] <= 1.0
    assert m["rel_l2"] >= 0 and m["max_abs"] >= 0
    assert 0 <= m["one_thousandth"] <= m["five_thousandth"] <= 1
    if np.any(g != 0):
        # fp16 rounding of values within range: relative error below half an ulp (2^-11) + subnormal slack
        assert m["rel_l2"] <= 2 ** -11 + 1e-7 / max(np.linalg.norm(g), 1e-30) * math.sqrt(g.size)


def test_stats_metrics_subset_is_labelled():
    t = {"dtype": "torch.float16", "Max": 65504.0, "Min": -1.0, "Mean": 0.5, "Norm": 10.0}
    g = {"dtype": "torch.float32", "Max": 70000.0, "Min": -1.0, "Mean": 0.4, "Norm": 11.0}
    m = stats_metrics(t, g)
    assert m["kind"] == "stats"
    assert m["max_rel_diff"] == pytest.approx(abs(65504 - 70000) / 70000)
    assert m["min_rel_diff"] == 0.0
    assert m["mean_rel_diff"] == pytest.approx(0.25)
    assert m["norm_rel_diff"] == pytest.approx(1 / 11)
    assert m["saturated"] == 1 and m["overflow_risk"] == 1.0 and m["finite"]
    h = headline(m)
    assert h["kind"] == "stats" and h["rel_l2"] == m["norm_rel_diff"] and math.isnan(h["cosine"])
    m2 = stats_metrics({"dtype": "float16", "Max": "inf", "Min": 0, "Mean": "nan", "Norm": "inf"}, g)
    assert not m2["finite"] and m2["target_nonfinite"] == 1
    assert worse(m, m2) is m2


@pytest.mark.parametrize("cos,mx,ok", [(0.995, 0.5, True), (0.985, 0.0005, True), (0.985, 0.002, False),
                                        (0.89, 0.0, False), (0.9999, 1.5, False), (float("nan"), 0.0, False)])
def test_msprobe_pass_rule(cos, mx, ok):
    assert msprobe_pass(cos, mx) is ok


def test_tolerance_judge_and_serialisation():
    tol = Tolerance()
    good = {"step": 0, "output": {"cosine": 0.9999, "rel_l2": 1e-3, "finite": True, "max_abs": 1e-3}}
    v = tol.judge([good, {**good, "step": 1}])
    assert v.ok and v.reasons == ()
    bad = {"step": 1, "output": {"cosine": 0.99, "rel_l2": 0.05, "finite": True}}
    v = tol.judge([good, bad])
    assert not v.ok and v.worst["step"] == 1 and len(v.reasons) == 2
    v = tol.judge([{"step": 0, "output": {"cosine": 1.0, "rel_l2": 0.0, "finite": False}}])
    assert not v.ok and "non-finite" in v.reasons[0]
    assert Tolerance(require_finite=False).judge([{"output": {"cosine": 1.0, "rel_l2": 0.0, "finite": False}}]).ok
    v = tol.judge([{**good, "loss": {"rel_diff": 0.02, "finite": True}, "grad_min_cosine": 0.98}])
    assert not v.ok and any("loss" in r for r in v.reasons) and any("gradient" in r for r in v.reasons)
    assert not tol.judge([]).ok
    # a step with no float final output, loss or gradient to compare is not a pass
    v = tol.judge([good, {"step": 1, "output": None}])
    assert not v.ok and v.reasons == ("step 1: nothing to judge (no float final output in both runs)",)
    assert Verdict.from_dict(v.to_dict()) == v
    t2 = Tolerance(min_cosine=0.99, use_msprobe_rule=True)
    assert Tolerance.from_dict(t2.to_dict()) == t2
    with pytest.raises(ValueError):
        Tolerance.from_dict({"bogus": 1})
    assert tolerance_from_options(min_cosine=0.9, allow_nonfinite=True) == Tolerance(min_cosine=0.9, require_finite=False)
    with pytest.raises(ValueError):
        tolerance_from_options(min_cosine=2)
    # msprobe rule as an extra criterion
    assert not t2.judge([{"output": {"kind": "tensor", "cosine": 0.995, "rel_l2": 0.005, "max_abs": 2.0,
                                     "finite": True}}]).ok


def test_cli_option_helpers_share_the_defaults():
    from advisor.compare.cli_options import TOLERANCE_OPTIONS as opts
    d = Tolerance()
    assert opts["min_cosine"].default == d.min_cosine and opts["max_rel_l2"].default == d.max_rel_l2
    assert tolerance_from_options(**{k: v.default for k, v in opts.items()}) == d
    assert d.finite is True
