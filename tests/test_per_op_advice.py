"""Per-op advice (ATC --keep_dtype / --customize_dtypes lines) beside type-level list edits (recommend's
granularity).

Every claim is checked by an independent oracle: a fresh emulator capture with the written files
(modify_mixlist.json + keep_dtype.cfg / customize_dtypes.cfg), judged by compare and measured for its
low-precision share from its own kernel_details.csv -- not by the replay that chose the advice.
"""
from __future__ import annotations

import json

import pytest

from advisor.analysis import analyze
from advisor.compare import Tolerance
from advisor.comparison import run_attribution
from advisor.emulator import capture
from advisor.mixlist import load as load_mixlist
from advisor.overrides import load as load_overrides
from advisor.recommend import recommend, write_outputs
from advisor.recommend.edits import KEEP, Edit, lists_with, overrides_with
from advisor.recommend.replay_search import KEEP_MARGIN
from advisor.workload import load_target


def _fresh(target: str, out, advice_dir, mode: str = "mixed_float16"):
    """A fresh capture with the advice files; (compare verdict ok, measured low-precision share)."""
    from advisor.semantics import uses_mixlist
    ml = load_mixlist(advice_dir / "modify_mixlist.json") if uses_mixlist(mode) else None   # ATC refuses one there
    keep, custom = advice_dir / "keep_dtype.cfg", advice_dir / "customize_dtypes.cfg"
    d = capture(load_target(target), out, mode=mode, mixlist=ml, dump="stats", local=False,
                keep_dtype=str(keep) if keep.exists() else None,
                customize_dtypes=str(custom) if custom.exists() else None)
    att, _ = run_attribution(str(d), Tolerance())
    return att.verdict.ok, analyze(d).measured_low_share


@pytest.fixture(scope="module")
def deep_ln(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deep_ln")
    return capture(load_target("examples/layernorm_bias.py:deep_workload"), tmp / "run")


def test_keep_edit_text_and_overrides():
    e = Edit(KEEP, "MatMulV2", "/fc/Gemm")
    t = Edit(KEEP, "LayerNorm")
    assert str(e) == "keep_dtype /fc/Gemm (MatMulV2)" and e.line == "/fc/Gemm" and e.per_op
    assert t.line == "OpType::LayerNorm" and not t.per_op
    ov = overrides_with(None, [e, t, Edit("black-add", "Exp")])
    assert ov.keep_names == {"/fc/Gemm"} and ov.keep_types == {"LayerNorm"}
    from advisor.oplists import load_lists
    base = load_lists("ascend910b")
    assert lists_with(base, [e, t]) == base                         # keeps never move the lists


@pytest.mark.slow
def test_pytorch_biased_linear_layernorm_per_op_passes_fresh_capture(deep_ln, tmp_path):
    """--granularity op on the PyTorch model: the advice keeps >= 80 % of compute low and passes a fresh
    capture, where the best type-level advice (shown beside it) keeps far less."""
    rec = recommend(deep_ln, granularity="op")
    assert rec.status == "recommended"
    assert rec.keep_dtype or rec.customize_dtypes, "per-op advice expected"
    tl = rec.type_level_alternative
    assert tl is not None and not any(e.per_op for e in tl.edits)
    paths = write_outputs(rec, tmp_path / "advice")
    for name, lines in (("keep_dtype", rec.keep_dtype), ("customize_dtypes", rec.customize_dtypes)):
        assert (name in paths) == bool(lines)
        if lines:
            assert (tmp_path / "advice" / f"{name}.cfg").read_text().splitlines() == lines
    assert "type_level_mixlist" in paths
    ok, share = _fresh("examples/layernorm_bias.py:deep_workload", tmp_path / "fresh", tmp_path / "advice")
    assert ok
    assert share >= 0.80
    # the type-level alternative passes a fresh capture too, keeping less
    tl_ok, tl_share = _fresh_type_level(tmp_path, tl)
    assert tl_ok and tl_share < share - KEEP_MARGIN
    d = json.loads((tmp_path / "advice" / "recommendation.json").read_text())
    if rec.keep_dtype:
        assert "--keep_dtype=" in d["snippets"]["atc"] and "keep_dtype" in d["snippets"]["ir_build_options"]
    if rec.customize_dtypes:
        assert "--customize_dtypes=" in d["snippets"]["atc"]
        assert "ge.customizeDtypes" in d["snippets"]["ir_build_options"]
    assert d["type_level_alternative"]["edits"] == [str(e) for e in tl.edits]


def _fresh_type_level(tmp_path, tl):
    ml = tl.modify_mixlist
    d = capture(load_target("examples/layernorm_bias.py:deep_workload"), tmp_path / "fresh_tl", mixlist=ml,
                dump="stats", local=False)
    att, _ = run_attribution(str(d), Tolerance())
    return att.verdict.ok, analyze(d).measured_low_share


def test_pytorch_runs_get_type_level_advice_by_default(deep_ln):
    rec = recommend(deep_ln)                                   # auto: torch_npu takes no keep_dtype file
    assert rec.status == "recommended" and not rec.keep_dtype
    assert all(not e.edit.is_keep for e in rec.edits)
    assert rec.type_level_alternative is None


def test_granularity_is_checked(deep_ln):
    from advisor.errors import InputError
    with pytest.raises(InputError):
        recommend(deep_ln, granularity="instance")


onnx = pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def onnx_ln(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("onnx_ln")
    return capture(load_target("examples/onnx_models.py:layernorm_bias"), tmp / "run")


def test_onnx_biased_linear_layernorm_per_op_advice_names_the_gemm(onnx_ln, tmp_path):
    """ONNX (ATC) runs get per-op advice by default; its lines (keep_dtype or customize_dtypes) name the ONNX
    node, a fresh capture with the files passes and keeps >= 80 % of the compute low."""
    rec = recommend(onnx_ln)
    assert rec.status == "recommended" and (rec.keep_dtype or rec.customize_dtypes)
    names = ({n for n in rec.keep_dtype if not n.startswith("OpType::")}
             | {ln.split("::")[0] for ln in rec.customize_dtypes})
    assert names and all(n.startswith("/") for n in names)       # ONNX node names
    write_outputs(rec, tmp_path / "advice")
    ok, share = _fresh("examples/onnx_models.py:layernorm_bias", tmp_path / "fresh", tmp_path / "advice")
    assert ok and share >= 0.80
    assert rec.type_level_alternative.predicted.low_precision_share < share - KEEP_MARGIN


def test_force_fp16_advice_is_per_op_lines_only(tmp_path):
    """force_fp16 applies no mixlist: the advice is keep_dtype lines (OpType:: for whole types) and customize_dtypes
    lines, the mixlist stays empty, and a fresh force_fp16 capture with the files passes."""
    run = capture(load_target("examples/onnx_models.py:layernorm_bias"), tmp_path / "run", mode="force_fp16")
    rec = recommend(run)
    assert rec.status == "recommended"
    assert rec.modify_mixlist.is_empty() and (rec.keep_dtype or rec.customize_dtypes)
    assert all(e.edit.is_override for e in rec.edits)
    write_outputs(rec, tmp_path / "advice")
    if rec.keep_dtype:
        keep = load_overrides(tmp_path / "advice" / "keep_dtype.cfg")
        assert keep.keep_names or keep.keep_types
    ok, share = _fresh("examples/onnx_models.py:layernorm_bias", tmp_path / "fresh", tmp_path / "advice",
                       mode="force_fp16")
    assert ok and share > 0.5


def test_controls_get_no_keep(tmp_path):
    """A control that needs nothing gets nothing, at either granularity."""
    run = capture(load_target("examples/onnx_models.py:cnn"), tmp_path / "run", dump="stats")
    for g in ("auto", "op"):
        rec = recommend(run, granularity=g)
        assert rec.status == "no-change-needed" and not rec.keep_dtype and not rec.edits


@pytest.mark.parametrize("name", ["mlp_exp", "two_hazards", "transformer_hazard", "cnn_control"])
def test_per_op_only_where_it_beats_type_level(name, tmp_path):
    """On the shipped planted and control runs: per-op advice appears only with a type-level alternative that
    keeps at least KEEP_MARGIN less float time low; where it appears, a fresh capture with the files passes."""
    from pathlib import Path
    prof = Path(__file__).resolve().parents[1] / "profiles" / name
    rec = recommend(prof, granularity="op")
    typed = recommend(prof, granularity="type")
    assert rec.status == typed.status
    if not (rec.keep_dtype or rec.customize_dtypes):
        assert [str(e.edit) for e in rec.edits] == [str(e.edit) for e in typed.edits]
        return
    assert name != "cnn_control"
    mine = rec.predicted.recommended.low_precision_share
    assert rec.type_level_alternative.predicted.low_precision_share < mine - KEEP_MARGIN
    write_outputs(rec, tmp_path / "advice")
    target = json.loads((prof / "run.json").read_text())["target"]
    ok, share = _fresh(target, tmp_path / "fresh", tmp_path / "advice")
    assert ok


def test_force_fp16_names_a_better_mixed_mode(tmp_path):
    """The what-if search in the matching mixed mode: a list found there is reported (note and
    mixed_mode_alternative) only when it keeps more than KEEP_MARGIN more compute low than the keeps.  Here the
    keeps' share is stood in by -1 (any passing mixed list beats it; here the only one keeps 0 %) and by 1
    (nothing can)."""
    from types import SimpleNamespace

    from advisor.recommend.core import SearchContext
    run = capture(load_target("examples/onnx_models.py:layernorm_bias"), tmp_path / "run", mode="force_fp16")
    a = analyze(run)
    ctx = SearchContext(a, None, set(), 4, None, notes=[], per_op=True)
    low = ctx.mixed_mode_alternative(SimpleNamespace(share=-1.0), 200, set(), "replayed")
    assert low is not None and low.mode == "mixed_float16" and low.modify_mixlist is not None
    assert any("switching to --precision_mode_v2=mixed_float16" in n for n in ctx.notes)
    ml_ok, _ = _fresh_with(low.modify_mixlist, tmp_path / "fresh")
    assert ml_ok                                                # the named mixed-mode list passes a fresh capture
    ctx.notes.clear()
    assert ctx.mixed_mode_alternative(SimpleNamespace(share=1.0), 200, set(), "replayed") is None
    assert not ctx.notes


def _fresh_with(mixlist, out):
    d = capture(load_target("examples/onnx_models.py:layernorm_bias"), out, mode="mixed_float16",
                mixlist=mixlist, dump="stats", local=False)
    att, _ = run_attribution(str(d), Tolerance())
    return att.verdict.ok, analyze(d).measured_low_share
