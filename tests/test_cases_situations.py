"""The named situations of bench/cases/situations.py, checked by fresh captures (mixed_float16, ascend910b,
the CANN 8.1.RC1 default lists they were measured with, default tolerance, ``dump="stats"``, no local-error pass).
(With CANN 9.2.0's tables LayerNormV4 is gray: attention_key_bias's MatMulV2 + BatchMatMul then passes at share 0 %,
the same as adding LayerNormV4.)

Measured on this project's machine (final outputs: worst step; share = search.low_precision_share):

a. sigmoid_log_head: base -inf (non-finite); Sigmoid passes (rel L2 1.9e-4, share 25.0 %); Add alone fails
   (rel L2 0.0197 > 0.01, finite); the over-fix MatMulV2 passes at share 0 %.
a. sigmoid_log_two_branches: base non-finite; Exp + Sigmoid passes (rel L2 1.8e-4, share 23.1 %); Add + Exp
   fails (rel L2 0.0139); Sigmoid alone and Exp alone stay non-finite; MatMulV2 passes at share 0 %.
b. attention_key_bias: base rel L2 0.086 (cosine 0.9963); BatchMatMul alone fails (rel L2 0.0138); MatMulV2
   alone fails (rel L2 0.084); MatMulV2 + BatchMatMul passes (rel L2 3.2e-4, share 10.0 %); adding LayerNormV4
   passes at share 0 %.
c. minilm_temperature (real weights, 6 layers): base non-finite (exp(50 cos) overflows); Exp alone passes
   (rel L2 1.8e-3, share 89.6 %); MatMul + RealDiv passes too (rel L2 1.5e-3, share 74.7 %).
d. softplus_nll: the output (per-sample log-likelihood) is non-finite (-inf) on every batch; Exp passes
   (share 33.3 %), MatMulV2 passes at share 0 %.
d. rmsnorm_square: finite on every batch but wrong (cosine 0.66, rel L2 0.75); Mul passes (rel L2 5.3e-4,
   share 28.6 %); MatMulV2 passes at share 0 %.
e. hf_mask_control: passes with no edit (rel L2 5.3e-4, share 75.0 %).
e. hf_mask_bce: base non-finite; Sigmoid passes (share 56.8 %); MatMulV2 passes at share 35.1 %.
f. prefix_sum_overflow: base non-finite; CumsumD passes (share 42.8 %: torch.cumsum is a CumsumD for GE,
   ConstToAttrPass, so a Cumsum entry changes nothing; Range, no producer, runs fp32 as GE keeps its origin dtype,
   so CumsumD + Range is CumsumD's share); CumsumD + MatMulV2 passes at 0 %.
f. l2norm_gate: base non-finite; MatMulV2 alone passes at share 0 %; Mul + Sigmoid passes (rel L2 2.1e-3,
   share 25.0 %); Mul alone fails (rel L2 0.018), Sigmoid alone stays non-finite.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.cases import situations as S  # noqa: E402
from bench.cases.search import low_precision_share  # noqa: E402


def measure(name: str, edits: tuple[str, ...], tmp: Path) -> dict:
    """Fresh capture of situation ``name`` with ``edits`` black-listed: the compare verdict, per-step final
    output metrics, the low-precision share."""
    from advisor.compare import Tolerance
    from advisor.comparison import run_attribution
    from advisor.emulator import capture
    from advisor.mixlist import Mixlist
    d = capture(getattr(S, name)(), tmp / ("_".join(edits) or "base"), dump="stats", local=False,
                mixlist=Mixlist(black_add=edits) if edits else None, cann="8.1")
    att, _ = run_attribution(str(d), Tolerance())
    return {"ok": att.verdict.ok, "reasons": att.verdict.reasons, "share": low_precision_share(d),
            "final": [f["output"] for f in att.final]}


def _params():
    for s in S.SITUATIONS.values():
        yield pytest.param(s.name, marks=[pytest.mark.slow] if s.slow else [], id=s.name)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_params()))
def test_situation_facts(name, tmp_path):
    sit = S.SITUATIONS[name]
    base = measure(name, (), tmp_path)
    assert base["ok"] == (sit.base == "passes"), base["reasons"]
    if sit.base_output == "nonfinite_every_step":
        assert base["final"] and all(not o["finite"] for o in base["final"])
    if sit.base_output == "finite_but_wrong":
        assert all(o["finite"] for o in base["final"])
        assert min(o["cosine"] for o in base["final"]) < 0.999
    runs = {(): base}
    for edits in sit.passes:
        runs[edits] = r = measure(name, edits, tmp_path)
        assert r["ok"], (edits, r["reasons"])
    for edits in sit.fails:
        runs[edits] = r = measure(name, edits, tmp_path)
        assert not r["ok"], edits
    if sit.over_fix is not None:
        better, worse = sit.over_fix
        for e in (better, worse):
            if e not in runs:
                runs[e] = measure(name, e, tmp_path)
            assert runs[e]["ok"], (e, runs[e]["reasons"])
        assert runs[worse]["share"] < runs[better]["share"], (runs[worse]["share"], runs[better]["share"])


def test_situation_a_add_alone_fails_finite_but_over_tolerance(tmp_path):
    """Black-listing Add (where the -inf shows) leaves a finite output still over the tolerance."""
    r = measure("sigmoid_log_head", ("Add",), tmp_path)
    assert not r["ok"]
    assert all(o["finite"] for o in r["final"]) and max(o["rel_l2"] for o in r["final"]) > 0.01


def test_situation_facts_name_real_workloads():
    for name, sit in S.SITUATIONS.items():
        assert callable(getattr(S, name)) and sit.name == name and sit.base in ("fails", "passes")
        for edits in sit.passes + sit.fails + (sit.over_fix or ()):
            assert list(edits) == sorted(edits)
