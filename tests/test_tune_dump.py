"""``advisor tune --dump``: the emulator runs' dump kind (tensor dumps let recommend inside tune replay)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from advisor.cli import app


def test_bad_dump_kind_is_one_line_exit_2(tmp_path):
    r = CliRunner().invoke(app, ["tune", "--engine", "ge", "examples/mlp_exp.py:workload", "--out", str(tmp_path / "t"),
                                 "--dump", "everything"])
    assert r.exit_code == 2
    assert "--dump: expected tensors or stats" in r.output
    assert not (tmp_path / "t").exists()


@pytest.mark.slow
def test_dump_kind_reaches_every_run_and_tensors_are_replayed(tmp_path):
    r = CliRunner().invoke(app, ["--quiet", "tune", "--engine", "ge", "examples/mlp_exp.py:workload", "--out", str(tmp_path / "t"),
                                 "--dump", "tensors", "--json"])
    assert r.exit_code == 0, r.output
    runs = sorted((tmp_path / "t").glob("iter_*/run/run.json"))
    assert runs and all(json.loads(p.read_text())["dump"] == "tensors" for p in runs)
    s = json.loads((tmp_path / "t" / "summary.json").read_text())
    assert s["confirmed"] and s["predictions"]["replayed"] >= 1


def test_command_runner_refuses_dump(tmp_path):
    r = CliRunner().invoke(app, ["tune", "--runner", "command", "--cmd", "true", "--out", str(tmp_path / "t"),
                                 "--dump", "stats"])
    assert r.exit_code == 2 and "applied by the emulator runner" in r.output
