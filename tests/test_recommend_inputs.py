"""recommend / diff on files written by others: a measured profile's times are the measured ones,
op types whose precision means nothing are never proposed, a huge --max-edits costs nothing more,
and a user's mixlist with a typo'd type or a key given twice is refused."""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
from pathlib import Path

import pytest

from advisor.oplists import PRECISION_FREE_TYPES, load_lists
from advisor.recommend import recommend, recommend_graph
from advisor.recommend.synthetic import Builder

LISTS = load_lists("ascend910b")
HEAD = ("Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim,Input Shapes,"
        "Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats")
# durations far from what the cost model says for these tiny shapes (it says ~3 us each)
KERNELS = [
    ("MatMulV2_1", "MatMulV2", "AI_CORE", 1000.0, 50.0, "64,64;64,64", "FLOAT16;FLOAT16", "64,64", "FLOAT16"),
    ("ReduceSumD_2", "ReduceSumD", "AI_VECTOR_CORE", 1100.0, 5000.0, "64,64", "FLOAT", "64", "FLOAT"),
    ("Mul_3", "Mul", "AI_VECTOR_CORE", 6200.0, 900.0, "64;64", "FLOAT;FLOAT", "64", "FLOAT"),
    ("ZerosLike_4", "ZerosLike", "AI_VECTOR_CORE", 7200.0, 400.0, "64", "FLOAT", "64", "FLOAT"),
    ("Less_5", "Less", "AI_VECTOR_CORE", 7700.0, 300.0, "64;64", "FLOAT;FLOAT", "64", "BOOL"),
    ("MyFusedOp_6", "MyFusedOp", "AI_VECTOR_CORE", 8100.0, 25.0, "64", "FLOAT", "64", "FLOAT"),
]
STEP_US = sum(k[4] for k in KERNELS)


def _profile(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    rows = [HEAD] + [f'1,{n},{t},{core},{start},{dur},0,20,"""{ish}""",{idt},FORMAT_ND,"""{osh}""",{odt},FORMAT_ND'
                     for n, t, core, start, dur, ish, idt, osh, odt in KERNELS]
    (d / "kernel_details.csv").write_text("\n".join(rows) + "\n")
    return d


def cli(*args):
    from advisor.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


# --- 1. measured kernel time, not the cost model ------------------------------------------------------------
def test_profile_only_findings_report_the_measured_kernel_time(tmp_path):
    rec = recommend(_profile(tmp_path / "p"))
    assert rec.status == "profile-only"
    fp32 = {f["type"]: f for f in rec.findings if f["kind"] == "fp32-time"}
    rs = fp32["ReduceSumD"]
    assert rs["fp32_time_us"] == pytest.approx(5000.0)                 # the cost model says ~3 us
    assert rs["share_of_step"] == pytest.approx(5000.0 / STEP_US, rel=1e-4)
    assert rs["time_source"] == "measured" and "fp32_time_us" not in rs["estimated"]
    assert fp32["Mul"]["fp32_time_us"] == pytest.approx(900.0)
    assert "measured" in rec.predicted.time_model
    # the predicted step time of the run's own plan is the measured kernel time (plus modelled casts)
    base = rec.predicted.base
    assert STEP_US <= base.time_us <= STEP_US + 10 * (base.casts + 1)


def test_times_are_labelled_estimated_where_only_the_model_has_them():
    b = Builder()
    rs = b.op("ReduceSum", "x", shape=(4096, 4096))
    b.op("Gelu", rs, shape=(4096, 4096))
    rec = recommend_graph(b.g, LISTS)
    (f,) = [x for x in rec.findings if x["kind"] == "fp32-time" and x["type"] == "Gelu"]
    assert f["time_source"] == "cost model" and {"fp32_time_us", "share_of_step"} <= set(f["estimated"])
    assert "cost model" in rec.predicted.time_model


# --- 2. op types whose precision means nothing are never proposed ----------------------------------------------
def _proposed_types(rec) -> set[str]:
    types = {e.edit.type for e in rec.edits} | {e.edit.type for e in rec.performance_edits}
    for f in rec.findings:
        if f.get("edit"):
            types.add(str(f["edit"]).rsplit(" ", 1)[-1])
        best = f.get("edit_removing_most")
        if best:
            types.add(best["edit"].rsplit(" ", 1)[-1])
    return types


def test_profile_only_never_proposes_constant_or_boolean_ops(tmp_path):
    rec = recommend(_profile(tmp_path / "p"))
    assert not _proposed_types(rec) & PRECISION_FREE_TYPES
    assert not {f.get("type") for f in rec.findings} & PRECISION_FREE_TYPES


def test_a_precision_free_culprit_is_never_an_edit():
    """A Less that (per the evidence) produces non-finite values in low precision: the fix must be
    elsewhere on its decision chain, never a list move of Less."""
    b = Builder()
    mm = b.op("MatMulV2", "x", weight=True, shape=(512, 1024))
    less = b.op("Less", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    zl = b.op("ZerosLike", less, shape=(512, 1024), local=math.inf, local_nf=1)
    b.op("Add", zl, mm, shape=(512, 1024))
    rec = recommend_graph(b.g, LISTS, local=b.local())
    assert not _proposed_types(rec) & PRECISION_FREE_TYPES
    assert rec.status == "recommended" and [str(e.edit) for e in rec.edits] == ["black-list to-add MatMulV2"]


# --- 5. a huge --max-edits costs what a sensible one costs ------------------------------------------------------
def test_search_never_enumerates_sets_larger_than_the_candidate_types(monkeypatch):
    b = Builder()
    mm = b.op("MatMulV2", "x", weight=True, shape=(512, 1024))
    ex = b.op("Exp", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    sg = b.op("Sigmoid", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    b.op("Add", ex, sg, shape=(512, 1024))
    sizes = []
    real = itertools.combinations

    def counting(it, k):
        sizes.append(k)
        return real(it, k)

    import advisor.recommend.search as search_mod
    monkeypatch.setattr(search_mod.itertools, "combinations", counting)
    huge = recommend_graph(b.g, LISTS, local=b.local(), max_edits=1000)
    assert sizes and max(sizes) <= huge.search.candidates       # not 1000
    types = huge.search.candidate_types
    assert max(sizes) == huge.search.largest_set == types
    sensible = recommend_graph(b.g, LISTS, local=b.local(), max_edits=types)
    assert [str(e.edit) for e in huge.edits] == [str(e.edit) for e in sensible.edits]
    assert huge.search.evaluations == sensible.search.evaluations


# --- 6, 7. the user's mixlist: a key given twice, a type that exists nowhere -------------------------------------
def test_recommend_refuses_a_typo_in_the_start_mixlist_with_did_you_mean(tmp_path):
    prof = _profile(tmp_path / "p")
    m = tmp_path / "start.json"
    m.write_text('{"black-list": {"to-add": ["Exp", "MatMu1V2"]}}')
    code, out, err = cli("recommend", "--profile", str(prof), "--mixlist", str(m), "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1 and not out, err
    assert str(m) in err and "'MatMu1V2'" in err and "did you mean 'MatMulV2'" in err
    assert not (tmp_path / "o").exists()


def test_recommend_accepts_a_custom_op_type_of_the_run_graph(tmp_path):
    prof = _profile(tmp_path / "p")
    m = tmp_path / "start.json"
    m.write_text('{"black-list": {"to-add": ["MyFusedOp"]}}')
    code, out, err = cli("recommend", "--profile", str(prof), "--mixlist", str(m), "--out", str(tmp_path / "o"))
    assert code == 0, err
    assert json.loads((tmp_path / "o" / "modify_mixlist.json").read_text())["black-list"]["to-add"] == ["MyFusedOp"]


def test_recommend_refuses_a_duplicate_key_naming_key_and_line(tmp_path):
    prof = _profile(tmp_path / "p")
    m = tmp_path / "start.json"
    m.write_text('{\n "black-list": {"to-add": ["Exp"]},\n "black-list": {"to-add": ["Mul"]}\n}\n')
    code, out, err = cli("recommend", "--profile", str(prof), "--mixlist", str(m), "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1, err
    assert str(m) in err and "'black-list'" in err and "line 3" in err


@pytest.mark.parametrize("side", ["a", "b"])
def test_diff_refuses_a_typo_on_either_side(tmp_path, side):
    prof = _profile(tmp_path / "p")
    m = tmp_path / "typo.json"
    m.write_text('{"white-list": {"to-add": ["Loglp"]}}')
    a, b = (str(m), "defaults") if side == "a" else ("defaults", str(m))
    code, out, err = cli("diff", a, b, "--profile", str(prof), "--out", str(tmp_path / "o"))
    assert code == 2 and err.count("\n") == 1 and str(m) in err and "did you mean 'Log1p'" in err, err
