"""aten -> GE types as torchair's converters build them (tools/gen_aten_map.py, advisor/data/aten_to_ge.json,
advisor.emulator.opmap).  The oracle is the converter source itself, vendored verbatim in
tests/fixtures/real/torchair_converters (Ascend/torchair, commit in SOURCES.md): the generator's reading of those
files, the lines each rule cites, and what a capture records."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import torch

from advisor.emulator import capture, opmap

REPO = Path(__file__).resolve().parents[1]
REAL = Path(__file__).resolve().parent / "fixtures" / "real" / "torchair_converters"
ATEN = REAL / "python" / "torchair" / "_ge_concrete_graph" / "ge_converter" / "aten"
COMMIT = "fced8842d149f16b587c2c867d427e4b766831ca"

_spec = importlib.util.spec_from_file_location("advisor_gen_aten_map", REPO / "tools" / "gen_aten_map.py")
gen = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gen
_spec.loader.exec_module(gen)


@pytest.fixture(scope="module")
def converters() -> dict:
    files, _ = gen.read_sources(REAL)
    return gen.read_converters(files)


def _src(name: str) -> list[str]:
    return (ATEN / f"{name}.py").read_text(encoding="utf-8").splitlines()


def _table(key: str) -> dict:
    return opmap.table()[key]


def test_table_records_the_torchair_commit():
    src = json.loads((REPO / "advisor" / "data" / "aten_to_ge.json").read_text())["source"]
    assert f"Ascend/torchair commit {COMMIT}" in src


def test_table_agrees_with_the_vendored_converters(converters):
    """Every entry the generator reads from the vendored converters is in the shipped table with that type
    (unless a documented override or call rule sets it)."""
    for op, e in converters.items():
        shipped = _table(op)
        if "by_call" in shipped or shipped.get("note", "").startswith("override"):
            continue
        assert shipped["type"] == e["type"], op
        assert shipped["source"] == e["source"] and shipped["line"] == e["line"], op


@pytest.mark.parametrize("op,want,line", [("rand.default", "StatelessRandomUniformV2", 33),
                                          ("randn.default", "StatelessRandomNormalV2", 33),
                                          ("randint.default", "StatelessRandomUniformV2", 26),
                                          ("uniform.default", "StatelessRandomUniformV2", 23)])
def test_random_ops_map_to_their_stateless_generator_not_concatv2(converters, op, want, line):
    """rand.py:33, randn.py:33, randint.py:26, uniform.py:23 draw with ge.Stateless*; ConcatV2 (rand.py:29, ...)
    only builds the counter (the generator bug the table had)."""
    name = op.split(".")[0]
    text = "\n".join(_src(name))
    assert f"ge.{want}(" in text and re.search(r"ge\.ConcatV2\(\[offset0, offset\]", text)
    assert f"ge.{want}(" in _src(name)[line - 1]
    assert converters[op]["type"] == want and _table(op)["type"] == want
    assert opmap.lookup("uniform_", "default")[0] == "StatelessRandomUniformV2"   # the in-place form


def test_matmul_is_batchmatmul_from_rank_3_and_matmul_for_2d():
    """matmul.py:16-19: ``if self.rank >= 3 or other.rank >= 3: ... ge.BatchMatMul`` else ``ge.MatMul``."""
    lines = _src("matmul")
    assert "self.rank >= 3 or other.rank >= 3" in lines[15] and "ge.BatchMatMul(" in lines[17]
    assert "ge.MatMul(" in lines[18]
    two, three = (torch.zeros(2, 3), torch.zeros(3, 4)), (torch.zeros(5, 2, 3), torch.zeros(3, 4))
    assert opmap.resolve("matmul", "default", two)[0] == "MatMul"
    assert opmap.resolve("matmul", "default", three)[0] == "BatchMatMul"
    assert opmap.resolve("matmul", "default", (torch.zeros(3, 4), torch.zeros(5, 4, 2)))[0] == "BatchMatMul"
    assert _table("matmul.default")["by_call"] == "matmul_rank"


CONVS = """
import torch

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1 = torch.nn.Conv1d(2, 2, 3)
        self.c2 = torch.nn.Conv2d(2, 2, 3)
        self.c3 = torch.nn.Conv3d(2, 2, 3)
        self.t2 = torch.nn.ConvTranspose2d(2, 2, 3)
        self.t3 = torch.nn.ConvTranspose3d(2, 2, 3)

    def forward(self, a, b, c):
        return (self.c1(a).sum() + self.c2(b).sum() + self.c3(c).sum() + self.t2(b).sum() + self.t3(c).sum())

def workload():
    torch.manual_seed(1)
    return (M(), [(torch.randn(1, 2, 6), torch.randn(1, 2, 6, 6), torch.randn(1, 2, 5, 5, 5))],
            lambda out, batch: out)
"""


def test_convolution_type_follows_rank_and_transposed(tmp_path):
    """convolution.py:47-55 (rank 3/4 -> Conv2D, else Conv3D), 154-159 (transposed: Conv2DTranspose /
    Conv3DTranspose), 215-231 (a 3-D input runs as 2-D); convolution_backward.py:265-290 for the gradients."""
    lines = _src("convolution")
    assert "if dim == 4 or dim == 3:" in lines[48] and "_npu_conv2d(" in lines[49] and "_npu_conv3d(" in lines[54]
    assert "_npu_conv_transpose2d(" in lines[156] and "_convolution_transpose3d_nocheck(" in lines[158]
    f = tmp_path / "convs.py"
    f.write_text(CONVS)
    out = capture(f"{f}:workload", tmp_path / "r", local=False, dump="stats")
    g = json.loads((out / "run.json").read_text())
    assert g["n_ops"] > 0
    from advisor.ingest import load_run
    run = load_run(out)
    fwd = [a["type"] for n, a in sorted(run.graph.nodes(data=True), key=lambda x: x[1].get("order", 0))
           if str(a.get("aten", "")) == "aten.convolution.default"]
    assert fwd == ["Conv2D", "Conv2D", "Conv3D", "Conv2DTranspose", "Conv3DTranspose"]
    bwd = {a["type"] for _, a in run.graph.nodes(data=True) if str(a.get("aten", "")) == "aten.convolution_backward.default"}
    # the first input's gradient is not asked for (a model input): the weight's kernel, by rank
    assert bwd == {"Conv2DBackpropFilter", "Conv3DBackpropFilter"}


def test_convolution_backward_of_the_input_gradient():
    g4, x4, w = torch.zeros(1, 2, 4, 4), torch.zeros(1, 2, 6, 6), torch.zeros(2, 2, 3, 3)
    args = lambda x, transposed, mask: (g4, x, w, None, [1], [0], [1], transposed, [0], 1, mask)
    assert opmap.resolve("convolution_backward", "default", args(x4, False, [True, True, False]))[0] == \
        "Conv2DBackpropInput"
    assert opmap.resolve("convolution_backward", "default", args(torch.zeros(1, 2, 6, 6, 6), False,
                                                                 [True, False, False]))[0] == "Conv3DBackpropInput"
    # a transposed conv's input gradient is a forward Conv (convolution_backward.py:121-129)
    assert opmap.resolve("convolution_backward", "default", args(x4, True, [True, True, True]))[0] == "Conv2D"
    assert "ge.Conv2D(x=grad" in "\n".join(_src("convolution_backward"))


def test_copy__is_assign():
    """copy_.py:4-9: ``return ge.Assign(self, src)`` (not TensorMove)."""
    assert "return ge.Assign(self, src)" in _src("copy_")[8]
    assert _table("copy_.default")["type"] == "Assign" and _table("copy_.default")["line"] == 4


@pytest.mark.parametrize("op,line", [("empty_like", 29), ("new_zeros", 31)])
def test_empty_like_and_new_zeros_are_fill(converters, op, line):
    """empty_like.py:29 / new_zeros.py:31: ``ge.Fill(<shape>, ge.Cast(0., ...))``."""
    assert "ge.Fill(" in _src(op)[line - 1]
    assert converters[f"{op}.default"]["type"] == "Fill" and _table(f"{op}.default")["type"] == "Fill"


SPLIT = """
import torch

class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(x).split(8, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
        return a @ v

def workload():
    torch.manual_seed(1)
    return M(), [(torch.randn(2, 5, 8),)]
"""


def test_split_is_a_splitv_kernel(tmp_path):
    """split.py:22 / split_with_sizes.py:21: ``return ge.SplitV(...)`` -- a kernel, not a view.  Its size_splits and
    split_dim are constants (a Pack of Python ints, folded by GE's ConstantFoldingPass before graph fusion), so
    ZSplitVFusionPass makes the kernel GE runs a SplitVD (advisor.fusion)."""
    assert "ge.SplitV(" in _src("split")[21] and "ge.SplitV(" in _src("split_with_sizes")[20]
    for key in ("split.Tensor", "split_with_sizes.default"):
        assert _table(key)["type"] == "SplitV" and _table(key)["kernel"] is True
    f = tmp_path / "sp.py"
    f.write_text(SPLIT)
    out = capture(f"{f}:workload", tmp_path / "r", local=False)
    import pandas as pd
    k = pd.read_csv(next(out.rglob("kernel_details.csv")))
    assert (k["Type"] == "SplitVD").sum() == 1 and not (k["Type"] == "SplitV").any()


def test_sdpa_has_no_converter_and_is_decomposed(tmp_path):
    """torchair has no scaled_dot_product_attention converter; its fused flash / efficient attention converters
    raise NotImplementedError: SDPA runs as its math ops (BatchMatMul, SoftmaxV2), never FlashAttentionScore."""
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention"):
        text = "\n".join(_src(name))
        assert "raise NotImplementedError" in text and "ge." not in text.split("raise NotImplementedError")[0]
    assert not any("scaled_dot_product" in k for k in opmap.table())
    f = tmp_path / "attn.py"
    f.write_text(SPLIT.replace("torch.softmax(q @ k.transpose(-1, -2), dim=-1)\n        return a @ v",
                               "None\n        return torch.nn.functional.scaled_dot_product_attention(q, k, v)"))
    out = capture(f"{f}:workload", tmp_path / "r", local=False)
    import pandas as pd
    types = set(pd.read_csv(next(out.rglob("kernel_details.csv")))["Type"])
    assert "FlashAttentionScore" not in types and {"BatchMatMul", "SoftmaxV2"} <= types


def test_rsub_scalar_is_sxpy_off_arch35():
    """rsub.py:47-64: the Axpy/AxpyV2/Sub branches are taken on arch35 chips only; the others build Sxpy."""
    lines = _src("rsub")
    assert "if is_arch35():" in lines[46] and "return ge.Sxpy(other, self, alpha=alpha)" in lines[63]
    assert _table("rsub.Scalar")["type"] == "Sxpy"


def test_div_rounding_mode_picks_floordiv_or_realdiv():
    """div.py:54-66: floor -> FloorDiv, trunc -> RealDiv (+ Trunc), none -> RealDiv."""
    lines = _src("div")
    assert 'rounding_mode == "floor"' in lines[53] and "ge.FloorDiv(" in lines[54]
    a = (torch.ones(2), torch.ones(2))
    assert opmap.resolve("div", "Tensor_mode", a, {"rounding_mode": "floor"})[0] == "FloorDiv"
    assert opmap.resolve("div", "Tensor_mode", a, {"rounding_mode": "trunc"})[0] == "RealDiv"


def test_bitwise_and_is_logical_for_bool():
    """bitwise_and.py:14-17: bool -> LogicalAnd, else BitwiseAnd."""
    lines = _src("bitwise_and")
    assert "torch.bool" in lines[13] and "ge.LogicalAnd(" in lines[14] and "ge.BitwiseAnd(" in lines[16]
    b, i = torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.int32)
    assert opmap.resolve("bitwise_and", "Tensor", (b, b))[0] == "LogicalAnd"
    assert opmap.resolve("bitwise_and", "Tensor", (i, i))[0] == "BitwiseAnd"


def test_every_call_rule_picks_among_the_types_the_table_declares():
    for key, e in opmap.table().items():
        if "by_call" in e:
            assert e["by_call"] in opmap.CALL_RULES, key
            assert e["type"] in e["types"], key


def test_generator_reads_the_vendored_checkout_and_raising_converters_give_no_entry(converters):
    assert "split.default" not in converters            # split.py:44-49 raises NotImplementedError
    assert "_scaled_dot_product_flash_attention.default" not in converters
    assert converters["matmul.default"]["line"] == 11 and converters["matmul.default"]["source"] == "matmul.py"
