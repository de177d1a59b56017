"""advisor diff: the flipped instances it predicts are exactly the kernels whose executed dtype
differs between fresh captures with each mixlist (kernel_details.csv), with and without activations."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

capture_mod = pytest.importorskip("advisor.emulator.capture")

from advisor.cli import main  # noqa: E402
from advisor.ingest import read_kernels  # noqa: E402
from advisor.recommend.diffing import diff  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EX = REPO / "examples"

CASES = [
    ("mlp_exp", {"black-list": {"to-add": ["Exp"], "to-remove": []}}),
    ("two_hazards", {"white-list": {"to-add": [], "to-remove": ["MatMulV2"]}}),
    pytest.param("transformer_hazard", {"black-list": {"to-add": ["BatchMatMul", "Gelu"], "to-remove": []},
                                        "white-list": {"to-add": [], "to-remove": ["LayerNormV4"]}},
                 marks=pytest.mark.slow),
]


def _kernel_precision(run: Path) -> dict[str, str]:
    (kd,) = run.glob("profile/*/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    kf = read_kernels(kd)
    kf = kf[kf["step"] == kf["step"].min()]
    return dict(zip(kf["name"].astype(str), kf["precision"].astype(str)))


@pytest.mark.parametrize("name,mixlist", CASES)
def test_diff_flips_equal_fresh_capture_dtypes(tmp_path, name, mixlist):
    target = f"{EX / (name + '.py')}:workload"
    b_file = tmp_path / "b.json"
    b_file.write_text(json.dumps(mixlist))
    run_a = capture_mod.capture(target, tmp_path / "a", batches=1)
    run_b = capture_mod.capture(target, tmp_path / "b", mixlist=str(b_file), batches=1)
    res = diff(run_a, "defaults", str(b_file))
    ka, kb = _kernel_precision(run_a), _kernel_precision(run_b)
    assert set(ka) == set(kb)
    observed = {n for n in ka if ka[n] != kb[n]}
    predicted = {f["node"] for f in res.flips if f["node"] in ka}
    assert observed, "the mixlist should change something"
    assert predicted == observed
    for f in res.flips:
        if f["node"] in kb:
            assert kb[f["node"]] == f["after"]
            assert f["why_after"]["rule"] and f["reason"]
    assert res.list_changes  # effective list changes listed per type
    assert res.predicted["b"]["time_us"] > 0


def test_diff_without_activations_reports_flips_and_time_only(tmp_path, capsys):
    target = f"{EX / 'mlp_exp.py'}:workload"
    run = capture_mod.capture(target, tmp_path / "a", batches=1)
    prof = tmp_path / "profile_only"
    prof.mkdir()
    shutil.copytree(run / "profile", prof / "profile")
    shutil.copytree(run / "graph", prof / "graph")
    shutil.copy(run / "run.json", prof / "run.json")
    b_file = tmp_path / "b.json"
    b_file.write_text(json.dumps({"black-list": {"to-add": ["Exp"], "to-remove": []}}))
    code = main(["diff", "defaults", str(b_file), "--profile", str(prof), "--json", "--out", str(tmp_path / "o")])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["list_changes"] == {"Exp": ["gray", "black"]}
    assert {f["node"] for f in d["flips"]} >= {"Aten.exp.default.0"}
    assert d["predicted"]["a"]["final_rel_l2"] is None and d["predicted"]["b"]["time_us"] > 0
    assert any("no activations" in n for n in d["notes"])
    assert (tmp_path / "o" / "diff.html").is_file()


def test_diff_recommended(tmp_path, capsys):
    target = f"{EX / 'mlp_exp.py'}:workload"
    run = capture_mod.capture(target, tmp_path / "a", batches=2)
    code = main(["diff", "defaults", "recommended", "--profile", str(run), "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["list_changes"] == {"Exp": ["gray", "black"]}
    assert d["predicted"]["a"]["final_nonfinite"] is True and d["predicted"]["b"]["final_nonfinite"] is False
    assert d["b_mixlist"]["black-list"]["to-add"] == ["Exp"]


def test_diff_bad_mixlist_exit_2(tmp_path, capsys):
    target = f"{EX / 'mlp_exp.py'}:workload"
    run = capture_mod.capture(target, tmp_path / "a", batches=1)
    bad = tmp_path / "bad.json"
    bad.write_text('{"black-list": {"to-add": ["Exp"]}, "white-list": {"to-add": ["Exp"]}}')
    assert main(["diff", "defaults", str(bad), "--profile", str(run)]) == 2
    assert main(["diff", "defaults", str(tmp_path / "nope.json"), "--profile", str(run)]) == 2
