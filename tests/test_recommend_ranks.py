"""advisor recommend on a multi-rank run: every rank's evidence.  A 2-rank run where only rank 1's inputs overflow
exp in fp16: the measured verdict fails (rank 1), the edit is proposed and names rank 1, a fresh capture of rank 1's
workload with the list passes; rank 0 alone (``--rank 0``) needs no edit; a single-rank run is recommended as
before (no ``ranks``)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.analysis import analyze
from advisor.cli import app
from advisor.recommend import recommend
from rank_workloads import exp_workload  # tests/ is on sys.path (pytest's rootdir import)

capture_mod = pytest.importorskip("advisor.emulator.capture")


def _cli(args):
    r = CliRunner().invoke(app, args)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    """Rank 0: the clean capture; rank 1: the dumps of the same model on hot inputs (dump/*/step*/rank1)."""
    base = tmp_path_factory.mktemp("cap")
    ok = capture_mod.capture(exp_workload(1.0), base / "ok")
    hot = capture_mod.capture(exp_workload(20.0), base / "hot")
    run = base / "run"
    shutil.copytree(ok, run)
    for side in ("mixed", "fp32"):
        for step_dir in sorted((ok / "dump" / side).glob("step*")):
            shutil.copytree(hot / "dump" / side / step_dir.name / "rank0", run / "dump" / side / step_dir.name / "rank1")
    return run


@pytest.mark.slow
def test_the_edit_only_rank_1_needs_is_proposed_names_rank_1_and_a_fresh_capture_passes(two_ranks, tmp_path):
    code, out, err = _cli(["recommend", "--profile", str(two_ranks), "--out", str(tmp_path / "advice"), "--json",
                           "--workers", "2"])
    assert code == 0, err
    d = json.loads(out)
    assert d["status"] == "recommended" and d["ok"]
    assert [(e["edit"], e["ranks"]) for e in d["edits"]] == [("black-list to-add Exp", [1])]
    assert "Driven by rank 1 (overflow in Exp)" in d["edits"][0]["explanation"]
    assert d["edits"][0]["driven"] == "driven by rank 1 (overflow in Exp)"
    assert "black-list to-add Exp: driven by rank 1 (overflow in Exp)" in " ".join(err.split())   # terminal
    r = d["ranks"]
    assert r["ranks"] == [0, 1] and r["failing"] == [1] and r["recommended_on"] == [1]
    assert [p["with_list"]["ok"] for p in r["per_rank"]] == [True, True]        # replayed on every rank
    assert [p["measured"]["ok"] for p in r["per_rank"]] == [True, False]
    assert d["predicted"]["measured"]["meets_tolerance"] is False and d["predicted"]["measured"]["failing_ranks"] == [1]
    assert d["minimality"]["proved"] and d["minimality"]["checks"] == [
        {"edit": "black-list to-add Exp", "ranks_failing_without_it": [1]}]
    # a fresh capture of rank 1's workload with the recommended list meets the tolerance; without it, it does not
    fixed = capture_mod.capture(exp_workload(20.0), tmp_path / "rank1_fixed", mixlist=tmp_path / "advice" /
                                "modify_mixlist.json")
    assert analyze(fixed).verdict().ok
    assert not analyze(capture_mod.capture(exp_workload(20.0), tmp_path / "rank1_default")).verdict().ok


def test_rank_0_alone_needs_no_edit_and_rank_1_alone_gets_it(two_ranks, tmp_path):
    code, out, err = _cli(["recommend", "--profile", str(two_ranks), "--rank", "0", "--out", str(tmp_path / "a0"),
                           "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert d["status"] == "no-change-needed" and d["edits"] == [] and "ranks" not in d
    code, out, err = _cli(["recommend", "--profile", str(two_ranks), "--rank", "1", "--out", str(tmp_path / "a1"),
                           "--json"])
    assert code == 0, err
    assert [e["edit"] for e in json.loads(out)["edits"]] == ["black-list to-add Exp"]


def test_a_single_rank_run_is_recommended_as_before(two_ranks, tmp_path):
    one = tmp_path / "one"
    shutil.copytree(two_ranks, one)
    for f in one.glob("dump/*/step*/rank1"):
        shutil.rmtree(f)
    code, out, err = _cli(["recommend", "--profile", str(one), "--out", str(tmp_path / "o"), "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert "ranks" not in d and all("ranks" not in e for e in d["edits"])
    direct = recommend(one).to_dict()
    assert {k: v for k, v in d.items() if k not in ("snippets", "files")} == \
        {k: v for k, v in json.loads(json.dumps(direct)).items() if k not in ("snippets", "files")}


def test_workers_and_ray_together_are_one_line(two_ranks):
    code, _, err = _cli(["recommend", "--profile", str(two_ranks), "--workers", "2", "--ray", "local"])
    assert code == 2 and err.strip().count("\n") == 0 and "not both" in err
