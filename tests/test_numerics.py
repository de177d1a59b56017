"""The chip's rounding rule (advisor.numerics): overflow mode per chip and HF32, in its torch and numpy forms.

Oracles are the engines' own documents and tests, vendored in tests/fixtures/real (SOURCES.md): torch_npu's
INF_NAN_MODE_ENABLE examples, GE's allow_hf32 impl-mode files and platform configs, ops-nn's HF32 goldens.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from advisor import numerics as N
from advisor.errors import InputError

REAL = Path(__file__).resolve().parent / "fixtures" / "real"


def _rng_values(n: int = 20000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n) * np.exp(rng.uniform(-40, 40, n))
    special = [np.inf, -np.inf, np.nan, 0.0, -0.0, 65504.0, 65519.0, 65520.0, 1e5, -1e5, 3.4e38, -3.4e38, 1e-40]
    return np.concatenate([a, special]).astype(np.float32)


# ---------------------------------------------------------------------- overflow mode per chip
@pytest.mark.parametrize("soc,mode", [("ascend910", "saturation"), ("ascend310p", "saturation"),
                                      ("ascend910b", "inf_nan"), ("ascend910_93", "inf_nan")])
def test_chip_default_overflow_mode(soc, mode):
    """INF_NAN_MODE_ENABLE.md:10-12: Atlas training/inference support saturation only; A2/A3 default to INF_NAN."""
    doc = (REAL / "torch_npu_inf_nan" / "INF_NAN_MODE_ENABLE.md").read_text(encoding="utf-8")
    assert "仅支持饱和模式" in doc.splitlines()[9] and "默认值为“1”（INF_NAN模式）" in doc.splitlines()[11]
    assert N.default_overflow(soc) == mode
    assert N.resolve(soc)[0].overflow == mode


def test_saturation_override_on_a2():
    nm, notes = N.resolve("ascend910b", "saturation")
    assert nm.saturating and not notes


def test_inf_nan_request_on_a_saturation_only_chip_is_ignored_with_a_note():
    """The environment variable 'has no effect' on Atlas training (INF_NAN_MODE_ENABLE.md:10)."""
    nm, notes = N.resolve("ascend910", "inf_nan")
    assert nm.saturating and "ignored" in notes[0]


def test_recorded_mode_wins_over_chip_default_and_option_over_record():
    assert N.resolve("ascend910b", meta={"overflow_mode": "saturation"})[0].saturating
    assert not N.resolve("ascend910b", "inf_nan", meta={"overflow_mode": "saturation"})[0].saturating


def test_bad_overflow_mode_is_one_line_error():
    with pytest.raises(InputError, match="inf_nan or saturation"):
        N.resolve("ascend910b", "saturate")


# ---------------------------------------------------------------------- the saturation rule
def test_doc_examples_saturation_exp12_gives_65504_and_sqrt_minus1_gives_0():
    """INF_NAN_MODE_ENABLE.md:24-34: exp(12) in fp16 -> 65504, sqrt(-1) -> 0 in saturation mode."""
    doc = (REAL / "torch_npu_inf_nan" / "INF_NAN_MODE_ENABLE.md").read_text(encoding="utf-8")
    assert "tensor([65504.]" in doc and "tensor([0.]" in doc
    e = torch.exp(torch.tensor([12.0]))          # computed in fp32, written as fp16
    s = torch.sqrt(torch.tensor([-1.0]))
    assert N.round_tensor(e, torch.float16, N.SATURATION).item() == 65504.0
    assert N.round_tensor(s, torch.float16, N.SATURATION).item() == 0.0


def test_doc_examples_inf_nan_exp12_gives_inf_and_sqrt_minus1_gives_nan():
    """INF_NAN_MODE_ENABLE.md:38-50: the IEEE results in INF_NAN mode."""
    assert N.round_tensor(torch.exp(torch.tensor([12.0])), torch.float16, N.INF_NAN).item() == float("inf")
    assert torch.isnan(N.round_tensor(torch.sqrt(torch.tensor([-1.0])), torch.float16, N.INF_NAN)).all()


def test_saturation_fp16_overflow_gives_plus_minus_65504():
    x = torch.tensor([1e5, -1e5, 65520.0, -7e4])
    assert N.round_tensor(x, torch.float16, N.SATURATION).tolist() == [65504.0, -65504.0, 65504.0, -65504.0]


def test_saturation_nan_gives_zero():
    x = torch.tensor([float("nan"), 1.0])
    assert N.round_tensor(x, torch.float16, N.SATURATION).tolist() == [0.0, 1.0]
    assert N.round_tensor(x, None, N.SATURATION).tolist() == [0.0, 1.0]


def test_saturation_inf_inputs_give_the_dtype_max():
    """"Inf置为max" (INF_NAN_MODE_ENABLE.md:20): an inf read by a kernel is the dtype's max."""
    x = torch.tensor([float("inf"), float("-inf")])
    assert N.round_tensor(x, torch.float16, N.SATURATION).tolist() == [65504.0, -65504.0]
    assert N.round_tensor(x, None, N.SATURATION).tolist() == [torch.finfo(torch.float32).max,
                                                              -torch.finfo(torch.float32).max]


def test_saturation_bf16_and_fp32_clamp_to_their_own_max():
    """"对应数据类型的最大值" (INF_NAN_MODE_ENABLE.md:18): each dtype saturates at its own max."""
    x = torch.tensor([3.4e38, float("inf")])
    bf = N.round_tensor(x, torch.bfloat16, N.SATURATION)
    assert bf.tolist() == [torch.finfo(torch.bfloat16).max] * 2
    assert N.round_tensor(x * 2, None, N.SATURATION).tolist() == [torch.finfo(torch.float32).max] * 2


def test_inf_nan_mode_is_ieee_round_to_nearest_even():
    a = _rng_values()
    t = torch.from_numpy(a)
    for low in (torch.float16, torch.bfloat16):
        ieee = t.to(low).to(torch.float32)
        assert torch.equal(N.round_tensor(t, low, N.INF_NAN).nan_to_num(7.0), ieee.nan_to_num(7.0))
    assert N.round_tensor(t, None, N.INF_NAN) is t


def test_finite_values_inside_the_range_round_the_same_in_both_modes():
    a = _rng_values()
    fin = a[np.isfinite(a) & (np.abs(a) < 65504)]
    t = torch.from_numpy(fin)
    assert torch.equal(N.round_tensor(t, torch.float16, N.SATURATION), N.round_tensor(t, torch.float16, N.INF_NAN))


@pytest.mark.parametrize("mode", N.OVERFLOW_MODES)
@pytest.mark.parametrize("dt", ["fp16", "bf16", "fp32"])
def test_numpy_form_equals_torch_form(mode, dt):
    a = _rng_values()
    low = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": None}[dt]
    t = N.round_tensor(torch.from_numpy(a.copy()), low, mode).numpy()
    n = N.round_array(a.copy(), dt, mode)
    assert n.dtype == np.float32
    assert np.array_equal(np.nan_to_num(t, nan=7.0), np.nan_to_num(n, nan=7.0))


def test_in_place_form_equals_out_of_place():
    a = torch.from_numpy(_rng_values())
    for mode in N.OVERFLOW_MODES:
        want = N.round_tensor(a.clone(), torch.float16, mode)
        got = N.round_tensor_(a.clone(), torch.float16, mode)
        assert torch.equal(got.nan_to_num(7.0), want.nan_to_num(7.0))


# ---------------------------------------------------------------------- HF32
def _golden(name: str, fn: str):
    ns = {"np": np}
    exec((REAL / "ops_nn_hf32" / name).read_text(encoding="utf-8"), ns)   # vendored verbatim lines
    return ns[fn]


def test_hf32_rounding_equals_ops_nn_convolution_golden():
    """ops-nn conv/convolution_forward/tests/assets/golden.py:84-97, the Ascend910B branch (11 mantissa bits)."""
    golden = _golden("convolution_forward_golden_simulate_hf32_precision.py", "simulate_hf32_precision")
    a = _rng_values()
    want = golden(a.copy(), "Ascend910B")
    assert np.array_equal(N.hf32_array(a.copy()).view(np.int32), want.view(np.int32))
    assert np.array_equal(N.hf32_tensor(torch.from_numpy(a.copy())).numpy().view(np.int32), want.view(np.int32))


def test_hf32_rounding_equals_ops_nn_matmul_golden():
    """ops-nn matmul/common/tests/st/arch35/matmul_golden_util.py:161-170 (uint32 view, same rule)."""
    golden = _golden("matmul_golden_util_hf32_truncate_np.py", "hf32_truncate_np")
    a = _rng_values()
    a = a[~np.isnan(a)]
    assert np.array_equal(N.hf32_array(a.copy()).view(np.int32), golden(a.copy()).view(np.int32))


def test_hf32_keeps_11_mantissa_bits():
    """GE docs --allow_hf32.md:30: HF32 has fp32's range and an 11-bit mantissa."""
    x = torch.tensor([1.0 + 2.0 ** -11, 1.0 + 2.0 ** -12 + 2.0 ** -13, 1.0 + 2.0 ** -13, 3e38])
    y = N.hf32_tensor(x)
    assert y[0].item() == 1.0 + 2.0 ** -11          # representable: kept
    assert y[1].item() == 1.0 + 2.0 ** -11          # above half an ulp: rounds up
    assert y[2].item() == 1.0                       # below half an ulp: rounds down
    assert abs(y[3].item() / 3e38 - 1) < 2.0 ** -11
    assert N.hf32_tensor(x.half()).dtype == torch.float16   # only fp32 values are HF32


def _ini(name: str) -> dict[str, str]:
    text = (REAL / "ge_hf32" / f"{name}.ini").read_text(encoding="utf-8")
    return dict(line.split("=", 1) for line in text.split() if "=" in line)


def test_hf32_types_cover_ge_impl_mode_tables():
    """GE's allow_hf32_matmul_t_conv_t.ini lists the Conv / MatMul types that run enable_hi_float_32_execution."""
    both = _ini("allow_hf32_matmul_t_conv_t")
    assert set(both.values()) == {"enable_hi_float_32_execution"}
    for t in both:
        assert (t in N.HF32_TYPES["conv"]) != (t in N.HF32_TYPES["matmul"]), t


def test_hf32_default_is_conv_on_matmul_off():
    """op_impl_mode_config_parser.cc:36 kAllowHF32DefaultMode = "10" -> allow_hf32_matmul_f_conv_t.ini: Conv types
    HF32, MatMul types fp32; torch_npu LazyInitAclops.cpp:94,101 (mm "0", conv "1")."""
    default = _ini("allow_hf32_matmul_f_conv_t")
    nm = N.resolve("ascend910b")[0]
    for t, impl in default.items():
        assert nm.hf32_on(t) == (impl == "enable_hi_float_32_execution"), t
    assert nm.hf32 == {"conv"} and nm.to_meta() == {"overflow_mode": "inf_nan", "allow_hf32": "conv"}


@pytest.mark.parametrize("soc,hf32", [("ascend910b", True), ("ascend910_93", True), ("ascend910", False),
                                      ("ascend310p", False)])
def test_hf32_only_where_the_cube_has_h322f32(soc, hf32):
    """platform_utils.cc:415-429: HF32 is enabled where Intrinsic_mmad lists h322f32 (Ascend910B1.ini, not
    Ascend910A.ini / Ascend310P3.ini)."""
    lines = (REAL / "ge_hf32" / "platform_mmad_intrinsics.txt").read_text().splitlines()
    has = {ln.split(".ini")[0]: "h322f32" in ln for ln in lines}
    assert has == {"Ascend910B1": True, "Ascend910A": False, "Ascend310P3": False}
    assert bool(N.resolve(soc)[0].hf32) == hf32
    nm, notes = N.resolve(soc, allow_hf32="conv,matmul")
    assert bool(nm.hf32) == hf32 and (not hf32) == bool(notes)


@pytest.mark.parametrize("text,fams", [("conv,matmul", {"conv", "matmul"}), ("conv", {"conv"}),
                                       ("matmul", {"matmul"}), ("none", set()), ("true", {"conv", "matmul"}),
                                       ("false", set())])
def test_allow_hf32_option_values(text, fams):
    assert N.parse_allow_hf32(text) == fams
    nm = N.resolve("ascend910b", allow_hf32=text)[0]
    assert nm.hf32_on("Conv2D") == ("conv" in fams) and nm.hf32_on("MatMulV2") == ("matmul" in fams)


def test_bad_allow_hf32_is_one_line_error():
    with pytest.raises(InputError, match="conv,matmul"):
        N.parse_allow_hf32("conv,gemm")


def test_hf32_note_names_the_chip_and_the_switch():
    nm = N.resolve("ascend910b")[0]
    text = N.hf32_note("Conv2D", nm, "ascend910b")
    assert "HF32" in text and "ascend910b" in text and re.search(r"allow_hf32", text)
    assert N.hf32_note("MatMulV2", nm, "ascend910b") == ""
    assert N.hf32_note("Conv2D", N.resolve("ascend910")[0], "ascend910") == ""
