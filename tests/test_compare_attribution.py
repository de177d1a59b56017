"""Attribution rules on a hand-built graph with in-memory dumps (no emulator needed)."""
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from advisor import graph as G
from advisor import mixlist as mx
from advisor.analysis import analyze
from advisor.ingest.run import Run
from advisor.compare import attribute, Tolerance
from advisor.compare.dumps import DumpView
from advisor.oplists import load_lists


def _rec(t):
    return {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape), "tensor": t}


def _build():
    g = G.new_graph()
    G.add_op(g, "x", "Data", role="data")
    G.add_op(g, "w", "Const", role="const")
    G.add_op(g, "mm", "MatMulV2", dump="mm")
    G.add_op(g, "ln", "LayerNorm", dump="ln")
    G.add_op(g, "relu", "Relu", dump="relu")
    G.connect(g, "x", "mm", 0, 0)
    G.connect(g, "w", "mm", 0, 1)
    G.connect(g, "mm", "ln", 0, 0)
    G.connect(g, "ln", "relu", 0, 0)
    return g


def _dumps(ln_low: bool):
    torch.manual_seed(0)
    x = torch.randn(16, 8)
    w = torch.randn(8, 32) * 0.1
    mm32 = x @ w + 1000.0
    ln32 = torch.nn.functional.layer_norm(mm32, (32,))
    mm16 = mm32.half()
    ln_in = mm16.float()
    ln16 = torch.nn.functional.layer_norm(ln_in, (32,))
    ln16 = ln16.half() if ln_low else ln16
    r32, r16 = torch.relu(ln32), torch.relu(ln16.float()).to(ln16.dtype)
    gold = DumpView({"mm.forward": {"output": [_rec(mm32)]}, "ln.forward": {"output": [_rec(ln32)]},
                     "relu.forward": {"output": [_rec(r32)]}, "Model.output.0.forward": {"output": [_rec(r32)]}})
    targ = DumpView({"mm.forward": {"output": [_rec(mm16)]}, "ln.forward": {"output": [_rec(ln16)]},
                     "relu.forward": {"output": [_rec(r16)]}, "Model.output.0.forward": {"output": [_rec(r16)]}})
    # local errors: the op in fp16 on exact FP32 inputs / in FP32 on fp16-rounded inputs
    def rel(a, b):
        return float((a.double() - b.double()).norm() / b.double().norm())
    ln_local = torch.nn.functional.layer_norm(mm32.half().float(), (32,)).half()
    local = pd.DataFrame([
        {"name": "mm", "type": "MatMulV2", "low_dtype": "fp16", "local_rel_l2": rel(mm16, mm32), "local_nonfinite": 0,
         "inrnd_rel_l2": 0.0, "inrnd_nonfinite": 0},
        {"name": "ln", "type": "LayerNorm", "low_dtype": "fp16", "local_rel_l2": rel(ln_local, ln32),
         "local_nonfinite": 0, "inrnd_rel_l2": rel(ln16.float(), ln32), "inrnd_nonfinite": 0},
        {"name": "relu", "type": "Relu", "low_dtype": "fp16", "local_rel_l2": 1e-4, "local_nonfinite": 0,
         "inrnd_rel_l2": 1e-4, "inrnd_nonfinite": 0},
    ])
    return targ, gold, local


def _run(mixlist=None, local=True, ln_low=True):
    t, g, loc = _dumps(ln_low)
    meta = {"mode": "mixed_float16", "soc": "ascend910b"}
    return analyze(Run(path=Path("."), graph=_build(), kernels=pd.DataFrame(), target_dump={0: t}, golden_dump={0: g},
                       meta=meta, local_errors=loc if local else None,
                       mixlist=mx.parse_obj(mixlist, "t") if mixlist else None))


@pytest.mark.parametrize("local", [True, False])
def test_gray_layernorm_damage_goes_to_producer(local):
    a = _run(local=local).attribution()
    ln = a.ops.loc["ln"]
    assert ln["precision"] == "fp16" and ln["rule"] == "gray-inherit"   # from advisor.semantics
    assert ln["in_from"] == "mm" and ln["growth"] > 10
    assert ln["blamed_on"] == "mm" and a.types.index[0] == "MatMulV2"
    assert a.first_exceeding == "ln"
    assert a.ops.loc["mm", "out_rel_l2"] < 1e-3            # the cause looks harmless at its own output
    assert not a.verdict.ok
    d = a.to_dict()
    json.dumps(d)
    assert d["types"][0]["type"] == "MatMulV2"


@pytest.mark.parametrize("local", [True, False])
def test_black_layernorm_still_blames_the_low_producer(local):
    a = _run({"black-list": {"to-add": ["LayerNorm"]}}, local=local, ln_low=False).attribution()
    assert a.ops.loc["ln", "precision"] == "fp32"
    assert a.ops.loc["ln", "blamed_on"] == "mm"
    assert a.types.index[0] == "MatMulV2"


def test_white_layernorm_is_blamed_itself_and_producer_co_blamed():
    a = _run({"white-list": {"to-add": ["LayerNorm"]}}).attribution()
    ln = a.ops.loc["ln"]
    assert ln["rule"] == "white" and ln["blamed_on"] == "ln" and ln["co_blamed"] == "mm"
    assert set(a.types.index[:2]) == {"MatMulV2", "LayerNorm"}


def test_tolerance_is_applied_to_final_outputs():
    an = _run()
    a = attribute(an.run, tolerance=Tolerance(min_cosine=0.0, max_rel_l2=10.0), plan=an.plan)
    assert a.verdict.ok
    assert a.tolerance.max_rel_l2 == 10.0
