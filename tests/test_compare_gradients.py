"""Honest gradient judging: a parameter whose FP32 gradient is negligible against the model's gradient scale (zero
up to rounding, where a cosine is noise) is judged by its absolute error against that scale -- one rule
(``Tolerance.grad_is_negligible``) that compare, recommend, tune and replay reach through ``judged_steps``.
Both sides of the threshold are tested, so the rule is no loophole: a small but real gradient is still judged by
cosine, and a negligible one that is badly wrong still fails."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from advisor.cli import main
from advisor.compare.dumps import DumpView
from advisor.compare.judge import MODEL_OUTPUT, judged_steps
from advisor.compare.tolerance import Tolerance

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "convbn_train.py"
TOL = Tolerance()


def _rec(x: np.ndarray, dtype: str) -> dict:
    return {"type": "torch.Tensor", "dtype": dtype, "shape": list(x.shape), "tensor": x}


def _dump(grads: dict, out: np.ndarray, dtype: str) -> DumpView:
    d = {MODEL_OUTPUT: {"output": [_rec(out, dtype)]}}
    d.update({f"Grad.{k}": {"output": [_rec(v, dtype)]} for k, v in grads.items()})
    return DumpView(d)


def _scale(grads: dict) -> float:
    """The oracle: RMS of every FP32 gradient element (computed here, independently of advisor)."""
    allg = np.concatenate([g.reshape(-1) for g in grads.values()])
    return float(np.sqrt(np.mean(allg ** 2)))


def _judge(golden: dict, target: dict):
    rng = np.random.default_rng(1)
    out = rng.standard_normal(16)
    items, train, notes = judged_steps({0: _dump(target, out, "torch.float16")},
                                       {0: _dump(golden, out, "torch.float32")}, [0], TOL)
    return TOL.judge(items), train, notes


def _case(small_rms_over_scale: float, error_over_scale: float):
    """A model gradient ``w`` (1000 elements) and a small one ``b`` (10 elements) whose FP32 RMS is the given
    fraction of the model's gradient scale; the target's ``b`` is off by an RMS error of the given fraction of it."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(1000)
    b_dir = rng.standard_normal(10)
    # the scale counts b too: S^2 = (sum w^2 + 10 (f S)^2) / 1010  =>  S^2 = sum w^2 / (1010 - 10 f^2)
    s = math.sqrt(float(np.sum(w ** 2)) / (1010 - 10 * small_rms_over_scale ** 2))
    b = b_dir / np.sqrt(np.mean(b_dir ** 2)) * small_rms_over_scale * s
    noise = rng.standard_normal(10)
    golden = {"w": w, "b": b}
    s = _scale(golden)
    target = {"w": w.copy(), "b": b + noise / np.sqrt(np.mean(noise ** 2)) * error_over_scale * s}
    # the case is what it says: b's RMS against the scale of all gradients, and its error against that scale
    assert math.isclose(np.sqrt(np.mean(b ** 2)) / s, small_rms_over_scale, rel_tol=1e-3)
    assert math.isclose(np.sqrt(np.mean((target["b"] - b) ** 2)) / s, error_over_scale, rel_tol=1e-9)
    return golden, target


def test_negligible_gradient_with_an_error_small_against_the_scale_passes():
    golden, target = _case(0.5 * TOL.grad_negligible, 0.5 * TOL.max_grad_abs)
    v, train, notes = _judge(golden, target)
    cos = float(np.dot(golden["b"], target["b"]) / np.linalg.norm(golden["b"]) / np.linalg.norm(target["b"]))
    assert cos < 0.5                          # a cosine would have failed it: it is noise
    assert v.ok, v.reasons
    assert train["negligible"] == ["b"]
    assert train["grad_abs_error_per_step"][0][1] == "b"
    assert train["grad_abs_error_per_step"][0][0] == pytest.approx(0.5 * TOL.max_grad_abs, rel=1e-6)
    assert train["grad_scale_per_step"][0] == pytest.approx(_scale(golden), rel=1e-9)
    assert any("judged by absolute error" in n and "b" in n for n in notes)


def test_negligible_gradient_badly_wrong_against_the_scale_fails():
    golden, target = _case(0.5 * TOL.grad_negligible, 2 * TOL.max_grad_abs)
    v, train, _ = _judge(golden, target)
    assert not v.ok
    assert any("gradient b" in r and "absolute error" in r for r in v.reasons), v.reasons


def test_small_but_real_gradient_is_still_judged_by_cosine():
    """Just above the threshold a gradient is real: an error as large as itself fails by cosine although it is
    tiny against the scale (the absolute-error rule would have passed it)."""
    golden, target = _case(2 * TOL.grad_negligible, 2 * TOL.grad_negligible)
    v, train, _ = _judge(golden, target)
    assert train["negligible"] == []
    assert not v.ok
    assert any("gradient b cosine" in r for r in v.reasons), v.reasons


def test_threshold_zero_judges_every_gradient_by_cosine():
    golden, target = _case(0.5 * TOL.grad_negligible, 0.5 * TOL.max_grad_abs)
    tol = Tolerance(grad_negligible=0.0)
    rng = np.random.default_rng(1)
    out = rng.standard_normal(16)
    items, train, _ = judged_steps({0: _dump(target, out, "torch.float16")},
                                   {0: _dump(golden, out, "torch.float32")}, [0], tol)
    assert train["negligible"] == [] and not tol.judge(items).ok


# ---------------------------------------------------------------------- the model, end to end
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_conv_batchnorm_training_with_biased_convs_passes_compare_and_gets_no_edit(tmp_path, capfd):
    run = tmp_path / "run"
    assert main(["capture", f"{EXAMPLE}:workload", "--out", str(run), "--engine", "ge"]) == 0   # list advice: GE
    capfd.readouterr()
    assert main(["compare", "--run", str(run), "--json"]) == 0
    res = json.loads(capfd.readouterr().out)
    assert res["verdict"]["ok"], res["verdict"]["reasons"]
    # the conv biases (zero in exact arithmetic: the BatchNorm after each conv removes them) were judged by absolute
    # error, and the report says so, with the scale
    assert sorted(res["training"]["negligible"]) == ["body.0.bias", "body.3.bias"]
    assert all(v > 0 for v in res["training"]["grad_scale_per_step"].values())
    assert any("body.0.bias" in n and "gradient scale" in n for n in res["notes"])
    out = tmp_path / "advice"
    assert main(["recommend", "--profile", str(run), "--out", str(out), "--json"]) == 0
    rec = json.loads(capfd.readouterr().out)
    assert rec["status"] == "no-change-needed" and rec["edits"] == []
    assert rec["modify_mixlist"] == json.loads((out / "modify_mixlist.json").read_text())
    assert not any(v["to-add"] for v in rec["modify_mixlist"].values())
    # tune judges the same way: the default lists are confirmed by the first mixed run
    tout = tmp_path / "tune"
    assert main(["tune", "--engine", "ge", f"{EXAMPLE}:workload", "--out", str(tout), "--json"]) == 0
    s = json.loads(capfd.readouterr().out)
    assert s["confirmed"] and s["runs"] == 2
    tuned = json.loads((tout / "modify_mixlist.json").read_text())
    assert not any(v for lst in tuned.values() for v in lst.values())
