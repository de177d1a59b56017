"""Acceptance on emulator captures of the example workloads: single hazard -> exactly one (cheap)
edit and a re-capture with the emitted modify_mixlist.json meets the tolerance; two hazards -> both
edits; clean controls -> no black-list edit.  Plus the CLI contract (files, --json, exit codes)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

capture_mod = pytest.importorskip("advisor.emulator.capture")

from advisor.cli import main  # noqa: E402
from advisor.compare.attribution import attribute  # noqa: E402
from advisor.analysis import analyze  # noqa: E402
from advisor.recommend import recommend, write_outputs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EX = REPO / "examples"


def _target(name: str) -> str:
    return f"{EX / (name + '.py')}:workload"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("recommend_runs")
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            cache[name] = capture_mod.capture(_target(name), base / name)
        return cache[name]
    get.base = base
    return get


def _recapture_ok(name: str, mixlist: Path, out: Path) -> bool:
    d = capture_mod.capture(_target(name), out, mixlist=str(mixlist))
    return analyze(d).attribution().verdict.ok


def test_mlp_exp_one_cheap_edit_and_recapture_meets_tolerance(runs, tmp_path):
    run = runs("mlp_exp")
    assert not analyze(run).attribution().verdict.ok          # the hazard is real
    rec = recommend(run)
    assert rec.status == "recommended" and rec.ok
    assert [str(e.edit) for e in rec.edits] == ["black-list to-add Exp"]
    assert rec.minimality.proved
    paths = write_outputs(rec, tmp_path / "advice")
    assert json.loads(paths["mixlist"].read_text())["black-list"]["to-add"] == ["Exp"]
    assert _recapture_ok("mlp_exp", paths["mixlist"], tmp_path / "re")


@pytest.mark.slow
def test_transformer_hazard_one_edit_recapture_ok(runs, tmp_path):
    rec = recommend(runs("transformer_hazard"))
    assert rec.status == "recommended"
    assert len(rec.edits) == 1
    assert rec.edits[0].edit.kind == "black-add"
    paths = write_outputs(rec, tmp_path / "advice")
    assert _recapture_ok("transformer_hazard", paths["mixlist"], tmp_path / "re")


@pytest.mark.slow
def test_two_hazards_both_edits(runs, tmp_path):
    rec = recommend(runs("two_hazards"))
    assert sorted(str(e.edit) for e in rec.edits) == ["black-list to-add Exp", "black-list to-add Sigmoid"]
    # one MatMulV2 edit would also do, with less compute in low precision: reported as the alternative
    assert rec.fewest_edit_alternative is not None and len(rec.fewest_edit_alternative.edits) == 1
    assert all(not c.meets_tolerance_without_it for c in rec.minimality.checks)
    paths = write_outputs(rec, tmp_path / "advice")
    assert _recapture_ok("two_hazards", paths["mixlist"], tmp_path / "re")


@pytest.mark.slow
def test_layernorm_bias_blames_the_producer(runs, tmp_path):
    rec = recommend(runs("layernorm_bias"))
    types = sorted(e.edit.type for e in rec.edits)
    assert "MatMulV2" in types                 # the cause sits one op upstream of where the error shows
    paths = write_outputs(rec, tmp_path / "advice")
    assert _recapture_ok("layernorm_bias", paths["mixlist"], tmp_path / "re")


def test_cnn_control_no_blacklist_edit(runs):
    rec = recommend(runs("cnn_control"))
    assert rec.status == "no-change-needed" and rec.exit_code == 0
    assert rec.modify_mixlist.black_add == ()
    assert not any(e.edit.kind == "black-add" for e in rec.edits + rec.performance_edits)


def test_cli_recommend_outputs_json_and_no_silent_overwrite(runs, tmp_path, capsys):
    run = runs("mlp_exp")
    out = tmp_path / "adv"
    out.mkdir()
    (out / "modify_mixlist.json").write_text('{"black-list": {"to-add": ["Mine"]}}\n')
    code = main(["recommend", "--profile", str(run), "--out", str(out), "--json"])
    assert code == 0
    captured = capsys.readouterr()
    d = json.loads(captured.out)
    assert d["confirmed"] is False and d["status"] == "recommended"
    assert d["modify_mixlist"]["black-list"]["to-add"] == ["Exp"]
    assert {"tf2_npu_device", "tf1_session_config", "atc", "ge_option", "pytorch_eager_autocast"} <= set(d["snippets"])
    assert "torch.exp" in d["snippets"]["pytorch_eager_autocast"]
    assert "--modify_mixlist=" in d["snippets"]["atc"]
    # the user's file was kept, not overwritten silently
    assert json.loads((out / "modify_mixlist.json.bak").read_text())["black-list"]["to-add"] == ["Mine"]
    assert json.loads((out / "modify_mixlist.json").read_text())["black-list"]["to-add"] == ["Exp"]
    assert (out / "report.html").is_file() and (out / "recommendation.json").is_file()


def test_cli_exit_1_when_nothing_meets_tolerance(runs, tmp_path, capsys):
    run = runs("mlp_exp")
    code = main(["recommend", "--profile", str(run), "--out", str(tmp_path / "a"), "--exclude", "Exp",
                 "--exclude", "MatMulV2", "--exclude", "RealDiv", "--exclude", "ReduceSum"])
    out = capsys.readouterr().out
    assert code == 1
    assert "closest" in out
    # the file is still written (the start mixlist unchanged)
    assert (tmp_path / "a" / "modify_mixlist.json").is_file()


def test_cli_exit_2_on_bad_input(tmp_path, capsys):
    assert main(["recommend", "--profile", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    (tmp_path / "run").mkdir()
    assert main(["recommend", "--profile", str(tmp_path / "run"), "--mixlist", str(bad)]) == 2


@pytest.mark.slow
def test_gradient_underflow_gets_loss_scale_not_list_edit(runs):
    rec = recommend(runs("mlp_train_underflow"))
    assert rec.status == "loss-scale" and rec.exit_code == 0
    assert rec.edits == [] and rec.modify_mixlist.is_empty()
    ls = rec.to_dict()["loss_scale"]
    assert ls["underflow_exceeds"] is True
    assert ls["loss_scale"]["dynamic"] or ls["loss_scale"]["static"] > 1
    assert any("loss scale" in n for n in rec.notes)


def test_profile_only_mode_from_a_profile_directory(runs, tmp_path, capsys):
    import shutil
    run = runs("mlp_exp")
    prof = tmp_path / "npu_run"
    shutil.copytree(run / "profile", prof / "profile")     # a profile alone: no dumps, no local errors
    code = main(["recommend", "--profile", str(prof), "--json"])
    assert code == 0
    d = json.loads(capsys.readouterr().out)
    assert d["status"] == "profile-only" and d["edits"] == []
    assert any("sensitivity" in n and "capture" in n for n in d["notes"])
    assert d["predicted"]["base"]["final_rel_l2"] is None
    assert json.loads((prof / "advice" / "modify_mixlist.json").read_text()) == {
        "black-list": {"to-add": [], "to-remove": []}, "white-list": {"to-add": [], "to-remove": []}}


def test_profile_only_with_target_dump_names_the_overflowing_op(runs, tmp_path, capsys):
    """A real-NPU-like directory: profile, graph and the low-precision dump only (no FP32 golden):
    the statistics prove where the overflow starts; sensitivity still needs a golden or a capture."""
    import shutil
    run = runs("mlp_exp")
    d = tmp_path / "npu_run"
    for part in ("profile", "graph"):
        shutil.copytree(run / part, d / part)
    shutil.copy(run / "run.json", d / "run.json")
    shutil.copytree(run / "dump" / "mixed", d / "dump" / "mixed")
    assert main(["recommend", "--profile", str(d), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["status"] == "profile-only"
    ov = [f for f in rec["findings"] if f["kind"] == "overflow-in-dump"]
    assert [f["type"] for f in ov] == ["Exp"] and ov[0]["edit"] == "black-list to-add Exp"
