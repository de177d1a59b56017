"""tune with per-op advice: keep_dtype lines as candidates beside list edits, applied by the runner in each run,
journaled and resumed exactly, written as keep_dtype.cfg when the confirmed list has them."""
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


def test_onnx_tune_confirms_a_keep_and_the_run_applied_it(tmp_path):
    s = _tune(tmp_path / "t")
    assert s["confirmed"] and s["keep_dtype"], s["stop_reason"]
    assert (tmp_path / "t" / "keep_dtype.cfg").read_text().splitlines() == s["keep_dtype"]
    assert s["low_precision_time_share"] >= 0.80              # measured in the confirming run's own profile
    best = tmp_path / "t" / f"iter_{s['best_iteration']:02d}" / "run"
    meta = json.loads((best / "run.json").read_text())
    applied = (best / meta["keep_dtype"]).read_text().splitlines()
    assert set(s["keep_dtype"]) <= set(applied)                # the run itself applied the lines
    # the journal holds the keep edits and reads back; --resume of a finished tune runs nothing more
    st = read_journal(tmp_path / "t" / "tune_state.json")
    assert any(e.list == "keep_dtype" for it in st.iterations for e in it.edits)
    again = _tune(tmp_path / "t", "--resume")
    assert again["runs"] == s["runs"] and again["keep_dtype"] == s["keep_dtype"]


def test_type_granularity_keeps_tune_type_level(tmp_path):
    s = _tune(tmp_path / "t", "--granularity", "type")
    assert s["confirmed"] and not s["keep_dtype"]
    assert not (tmp_path / "t" / "keep_dtype.cfg").exists()
    assert s["edits"]["black-list"]["to-add"]


def test_bad_granularity_is_exit_2(tmp_path):
    r = CliRunner().invoke(app, ["tune", TARGET, "--out", str(tmp_path / "t"), "--granularity", "ops"])
    assert r.exit_code == 2 and "--granularity" in r.output


def test_a_malformed_keep_edit_in_the_journal_is_refused(tmp_path):
    _tune(tmp_path / "t")
    p = tmp_path / "t" / "tune_state.json"
    d = json.loads(p.read_text())
    it = next(i for i in d["iterations"] if any(e[0] == "keep_dtype" for e in i["edits"]))
    it["edits"] = [["keep_dtype", "keep", "   "] if e[0] == "keep_dtype" else e for e in it["edits"]]
    p.write_text(json.dumps(d))
    r = CliRunner().invoke(app, ["tune", TARGET, "--out", str(tmp_path / "t"), "--resume"])
    assert r.exit_code == 2 and "edits" in r.output


def test_command_runner_hands_the_keep_file_to_the_script(tmp_path):
    script = ("import os, pathlib; d = pathlib.Path(os.environ['ADVISOR_RUN_DIR']); d.mkdir(parents=True); "
              "(d / 'seen.txt').write_text(open(os.environ['ADVISOR_KEEP_DTYPE']).read())")
    r = CommandRunner(f"{sys.executable} -c \"{script}\"")
    r.run(None, "mixed_float16", tmp_path / "iter_00" / "run", keep_dtype=("/fc/Gemm", "OpType::LayerNorm"))
    assert (tmp_path / "iter_00" / "run" / "seen.txt").read_text().splitlines() == ["/fc/Gemm", "OpType::LayerNorm"]
