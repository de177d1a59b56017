import math

import numpy as np
import pytest
import torch

from advisor.compare.dumps import DumpView
from advisor.compare.metrics import FP16_MAX
from advisor.compare.training import recommend_loss_scale, training_signals


def _fp16_underflow(g: np.ndarray, scale: float) -> float:
    """Share of elements that are non-zero in fp32 but zero after fp16 rounding of g*scale."""
    t = torch.from_numpy(g * scale).to(torch.float16).double().numpy()
    return float(np.count_nonzero((t == 0) & (g != 0))) / g.size


def test_recommended_scale_moves_underflow_below_one_percent():
    rng = np.random.default_rng(0)
    g = rng.standard_normal(20000) * 10.0 ** rng.uniform(-12, -7, 20000)
    assert _fp16_underflow(g, 1.0) > 0.01
    rec = recommend_loss_scale(np.abs(g), "fp16")
    s = rec["static"]
    assert not rec["dynamic"] and s == 2 ** rec["log2"]
    assert _fp16_underflow(g, s) < 0.01                   # verified by real fp16 rounding
    assert not np.isinf(torch.from_numpy(g * s).to(torch.float16).numpy()).any()
    # minimal: half the scale leaves more than 1 % below the smallest normal
    assert float(np.count_nonzero(np.abs(g) * s / 2 < 6.103515625e-05)) / g.size >= 0.01


def test_range_too_wide_asks_for_dynamic_scaling():
    g = np.concatenate([np.full(500, 1e-12), np.full(500, 100.0)])
    rec = recommend_loss_scale(g, "fp16")
    assert rec["dynamic"]
    assert rec["max_scaled"] > FP16_MAX / 16


def test_bf16_and_healthy_gradients_need_no_scale():
    g = np.abs(np.random.default_rng(1).standard_normal(1000)) * 1e-1
    assert recommend_loss_scale(g, "fp16")["static"] == 1
    assert recommend_loss_scale(g * 1e-9, "bf16")["static"] == 1
    assert recommend_loss_scale(np.zeros(10), "fp16")["static"] == 1


def _grad_dump(grads: dict, dtype: str = "torch.float16") -> DumpView:
    return DumpView({f"Grad.{k}": {"output": [{"type": "torch.Tensor", "dtype": dtype, "shape": list(v.shape),
                                               "tensor": v}]} for k, v in grads.items()})


def test_training_signals_per_parameter():
    rng = np.random.default_rng(2)
    gw = rng.standard_normal((8, 8)) * 1e-9
    gb = rng.standard_normal(8) * 1e-2
    golden = _grad_dump({"w": gw, "b": gb}, "torch.float32")
    tw = torch.from_numpy(gw).to(torch.float16).double().numpy()
    tb = gb.copy()
    tb[0] = np.inf
    target = _grad_dump({"w": tw, "b": tb})
    out = training_signals({0: target}, {0: golden}, [0])
    p = {r["param"]: r for r in out["params"]}
    assert p["w"]["underflow_ratio"] == pytest.approx(np.count_nonzero((tw == 0) & (gw != 0)) / gw.size)
    assert p["w"]["underflow_exceeds"] and not p["b"]["underflow_exceeds"]
    assert p["b"]["target_nonfinite"] == 1 and out["overflow"]
    assert out["low_dtype"] == "fp16"
    assert out["grad_min_cosine_per_step"][0][1] in ("w", "b")
    assert training_signals({0: DumpView({})}, {0: DumpView({})}, [0]) is None


def test_statistics_only_gradients_flag_all_zero_and_overflow():
    def stats(norm, dtype="torch.float16"):
        return {"type": "torch.Tensor", "dtype": dtype, "shape": [4], "Max": 0.0, "Min": 0.0, "Mean": 0.0, "Norm": norm}
    # every gradient tiny (an underflowing model): w's is of the model's own scale, so its flush to zero counts
    t = DumpView({"Grad.w": {"output": [stats(0.0)]}, "Grad.b": {"output": [stats(float("inf"))]},
                  "Grad.c": {"output": [stats(1e-9)]}})
    g = DumpView({"Grad.w": {"output": [stats(1e-9, "torch.float32")]}, "Grad.b": {"output": [stats(2e-9, "torch.float32")]},
                  "Grad.c": {"output": [stats(1e-9, "torch.float32")]}})
    out = training_signals({0: t}, {0: g}, [0])
    assert out["all_zero_in_target"] == ["w"] and out["underflow_exceeds"]
    assert out["overflow"] and "loss_scale" not in out


def test_statistics_only_negligible_gradient_flushed_to_zero_is_not_underflow():
    """A golden gradient 10^-9 of the others' (zero up to rounding) that the target gives as exactly zero: its
    absolute error is 10^-9 of the scale -- within the tolerance, not an all-zero gradient."""
    def stats(norm, dtype="torch.float16"):
        return {"type": "torch.Tensor", "dtype": dtype, "shape": [4], "Max": 0.0, "Min": 0.0, "Mean": 0.0, "Norm": norm}
    t = DumpView({"Grad.w": {"output": [stats(0.0)]}, "Grad.c": {"output": [stats(1.0)]}})
    g = DumpView({"Grad.w": {"output": [stats(1e-9, "torch.float32")]}, "Grad.c": {"output": [stats(1.0, "torch.float32")]}})
    out = training_signals({0: t}, {0: g}, [0])
    assert out["all_zero_in_target"] == [] and not out["underflow_exceeds"]
    assert out["negligible"] == ["w"] and out["grad_abs_error_per_step"][0][1] == "w"
    assert out["grad_abs_error_per_step"][0][0] < 1e-8
