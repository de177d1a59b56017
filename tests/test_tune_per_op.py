"""tune with per-op advice: keep_dtype / customize_dtypes lines as candidates beside list edits, applied by the runner
in each run, journaled and resumed exactly, written as keep_dtype.cfg / customize_dtypes.cfg when the confirmed list
has them."""
from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.runners import CommandRunner
from advisor.tune import read_journal

pytest.importorskip("onnx")

TARGET = "examples/onnx_models.py:layernorm_bias"


def _tune(out, *extra):
    r = CliRunner().invoke(app, ["--quiet", "tune", TARGET, "--out", str(out), "--json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
def test_onnx_tune_confirms_per_op_lines_and_the_run_applied_them(tmp_path):
    s = _tune(tmp_path / "t")
    lines = {k: s.get(k) or [] for k in ("keep_dtype", "customize_dtypes")}
    assert s["confirmed"] and any(lines.values()), s["stop_reason"]
    assert s["low_precision_time_share"] >= 0.80              # measured in the confirming run's own profile
    best = tmp_path / "t" / f"iter_{s['best_iteration']:02d}" / "run"
    meta = json.loads((best / "run.json").read_text())
    for k, ls in lines.items():
        assert (tmp_path / "t" / f"{k}.cfg").exists() == bool(ls)
        if ls:
            assert (tmp_path / "t" / f"{k}.cfg").read_text().splitlines() == ls
            assert set(ls) <= set((best / meta[k]).read_text().splitlines())   # the run itself applied them
    # the journal holds the per-op edits and reads back; --resume of a finished tune runs nothing more
    st = read_journal(tmp_path / "t" / "tune_state.json")
    assert any(e.per_op for it in st.iterations for e in it.edits)
    again = _tune(tmp_path / "t", "--resume")
    assert again["runs"] == s["runs"] and again.get("keep_dtype") == s.get("keep_dtype")
    assert again.get("customize_dtypes") == s.get("customize_dtypes")


@pytest.mark.slow
def test_type_granularity_keeps_tune_type_level(tmp_path):
    s = _tune(tmp_path / "t", "--granularity", "type")
    assert s["confirmed"] and not s["keep_dtype"]
    assert not (tmp_path / "t" / "keep_dtype.cfg").exists()
    assert s["edits"]["black-list"]["to-add"]


def test_bad_granularity_is_exit_2(tmp_path):
    r = CliRunner().invoke(app, ["tune", TARGET, "--out", str(tmp_path / "t"), "--granularity", "ops"])
    assert r.exit_code == 2 and "--granularity" in r.output


@pytest.mark.slow
@pytest.mark.parametrize("bad", [["keep_dtype", "keep", "   "], ["customize_dtypes", "customize", "   "],
                                 ["customize_dtypes", "customize", "/fc/Gemm::InputDtype:float17"]])
def test_a_malformed_per_op_edit_in_the_journal_is_refused(tmp_path, bad):
    r = CliRunner().invoke(app, ["--quiet", "tune", TARGET, "--out", str(tmp_path / "t"), "--max-runs", "2"])
    assert r.exit_code in (0, 1), r.output
    p = tmp_path / "t" / "tune_state.json"
    d = json.loads(p.read_text())
    it = d["iterations"][0]
    it["edits"] = [*it["edits"], bad]
    p.write_text(json.dumps(d))
    r = CliRunner().invoke(app, ["tune", TARGET, "--out", str(tmp_path / "t"), "--resume"])
    assert r.exit_code == 2 and "edits" in r.output


def test_command_runner_hands_the_keep_file_to_the_script(tmp_path):
    script = ("import os, pathlib; d = pathlib.Path(os.environ['ADVISOR_RUN_DIR']); d.mkdir(parents=True); "
              "(d / 'seen.txt').write_text(open(os.environ['ADVISOR_KEEP_DTYPE']).read())")
    r = CommandRunner(f"{sys.executable} -c \"{script}\"")
    r.run(None, "mixed_float16", tmp_path / "iter_00" / "run", keep_dtype=("/fc/Gemm", "OpType::LayerNorm"))
    assert (tmp_path / "iter_00" / "run" / "seen.txt").read_text().splitlines() == ["/fc/Gemm", "OpType::LayerNorm"]
