"""Every command validates all of its inputs before its first run or capture, by one rule each, and leaves nothing
behind when it refuses: exit 2, one line, no output folder, no run (through the CLI as a user runs it: a new
process).  The workload file leaves a marker when it is imported and another when its model runs, so "before any
run" is checked by what happened, not by a clock; how long a refusal takes is measured by bench/refusals.py.  Mixlist op types are checked by one rule (``mixlist.check_op_types``) in capture, replay,
tune, recommend and diff alike."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.cli import main

pytestmark = pytest.mark.timeout(600)
ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = """
from pathlib import Path
import torch

HERE = Path(__file__).resolve().parent
(HERE / "imported.marker").touch()


class Ran(torch.nn.Module):
    def forward(self, x):
        (HERE / "ran.marker").touch()
        return x


def workload():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), Ran(), torch.nn.Linear(8, 2))
    return model, [(torch.randn(3, 4),) for _ in range(4)]
"""
TYPO = {"black-list": {"to-add": ["Expp"]}}     # Exp mistyped
MARKERS = ("imported.marker", "ran.marker")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "ADVISOR_PROGRESS": "0"}


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``python -m advisor ARGS`` in a new process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "advisor", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=300)


def _touched(d: Path) -> set[str]:
    """Which of the workload's markers exist: imported (its file was loaded), ran (its model was called)."""
    return {m.split(".")[0] for m in MARKERS if (d / m).exists()}


def _refused(p: subprocess.CompletedProcess, *words: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    errs = [ln for ln in p.stderr.splitlines() if ln.startswith("advisor: error: ")]
    assert len(errs) == 1 and "Traceback" not in p.stderr and p.stdout == "", p.stderr
    for w in words:
        assert w in errs[0], errs[0]
    return errs[0]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "wl.py").write_text(WORKLOAD)
    (tmp_path / "typo.json").write_text(json.dumps(TYPO))
    return tmp_path


def _left_behind(d: Path) -> list[str]:
    return sorted(q.name for q in d.iterdir() if q.name not in ("wl.py", "typo.json", "__pycache__", *MARKERS))


# ---------------------------------------------------------------------- tune: refused before any run
def test_tune_refuses_an_unknown_chip_before_any_run(workdir):
    p = _cli(["tune", "wl.py:workload", "--out", "out", "--soc", "nosoc"], workdir)
    _refused(p, "nosoc", "ascend910b")
    assert _left_behind(workdir) == []
    assert _touched(workdir) == set()           # refused before the workload was even loaded


def test_tune_refuses_a_mistyped_mixlist_type_before_any_run(workdir):
    p = _cli(["tune", "wl.py:workload", "--out", "out", "--mixlist", "typo.json"], workdir)
    _refused(p, "typo.json", "'Expp'", "did you mean 'Exp'")
    assert _left_behind(workdir) == []
    assert _touched(workdir) == set()


@pytest.mark.slow
def test_tune_refuses_a_holdout_that_leaves_no_calibration_batch_before_any_run(workdir):
    p = _cli(["tune", "wl.py:workload", "--out", "out", "--holdout", "4"], workdir)
    _refused(p, "--holdout", "4 batches", "at most 3")
    assert _left_behind(workdir) == []          # no out/, no journal, no partial run folder
    assert _touched(workdir) == {"imported"}    # counting the batches loads the workload; its model never ran


def test_tune_refusal_leaves_an_existing_out_where_it_was(workdir):
    out = workdir / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    p = _cli(["tune", "wl.py:workload", "--out", "out", "--mixlist", "typo.json"], workdir)
    _refused(p, "'Expp'")
    assert (out / "mine.txt").read_text() == "keep me" and _left_behind(workdir) == ["out"]   # no out.bak


@pytest.mark.parametrize("args, words", [
    (["--mode", "fp17"], ["--mode", "fp17"]),
    (["--mode", "force_fp16"], ["does not apply a mixlist"]),
    (["--max-runs", "1"], ["--max-runs"]),
    (["--holdout", "-1"], ["--holdout"]),
    (["--timeout", "-5"], ["--timeout"]),
    (["--min-cosine", "2"], ["--min-cosine"]),
    (["--dump", "everything"], ["--dump"]),
    (["--inputs", "missing.npz"], ["missing.npz"]),
    (["--keep-dtype", "missing.cfg"], ["missing.cfg"]),
], ids=["mode", "mode-without-mixlist", "max-runs", "holdout", "timeout", "tolerance", "dump", "inputs", "keep-dtype"])
def test_tune_refuses_each_bad_option_before_any_run(workdir, capfd, args, words):
    capfd.readouterr()
    code = main(["tune", str(workdir / "wl.py") + ":workload", "--out", str(workdir / "out"), *args])
    out, err = capfd.readouterr()
    assert code == 2, err
    assert all(w in err for w in words), err
    assert _left_behind(workdir) == []


# ---------------------------------------------------------------------- capture
def test_capture_refuses_a_mistyped_mixlist_type_before_the_capture(workdir):
    p = _cli(["capture", "wl.py:workload", "--out", "run", "--mixlist", "typo.json"], workdir)
    _refused(p, "'Expp'", "did you mean 'Exp'")
    assert _left_behind(workdir) == []
    assert "ran" not in _touched(workdir)


def test_capture_refuses_an_unknown_chip_and_mode_before_the_capture(workdir, capfd):
    for args, word in ((["--soc", "nosoc"], "nosoc"), (["--mode", "fp17"], "fp17"),
                       (["--input-shape", "x:1,a"], "x:1,a"), (["--loss-scale", "-2"], "--loss-scale")):
        capfd.readouterr()
        assert main(["capture", str(workdir / "wl.py") + ":workload", "--out", str(workdir / "run"), *args]) == 2
        assert word in capfd.readouterr().err
        assert _left_behind(workdir) == []


def test_capture_accepts_a_type_only_the_emulator_maps_to(workdir):
    """The rule's graph types before a capture: every type the emulator's tables map ops to (ONNX's Trilu is in no
    chip table) and the emulator's names of unmapped ops."""
    from advisor.inputs import load_mixlist
    from advisor.oplists import load_default
    for t in ("Trilu", "aten.my_custom_op"):
        f = workdir / f"{t}.json"
        f.write_text(json.dumps({"black-list": {"to-add": [t]}}))
        assert t in load_mixlist(str(f), load_default("ascend910b")).black_add
    bad = workdir / "bad.json"
    bad.write_text(json.dumps({"black-list": {"to-add": ["Triluu"]}}))
    from advisor.errors import InputError
    with pytest.raises(InputError, match="Triluu"):
        load_mixlist(str(bad), load_default("ascend910b"))


# ---------------------------------------------------------------------- replay: the same rule as recommend and diff
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from advisor.emulator import capture
    d = tmp_path_factory.mktemp("rd")
    (d / "wl.py").write_text(WORKLOAD)
    return capture(f"{d / 'wl.py'}:workload", d / "run")


@pytest.mark.parametrize("command", ["replay", "recommend", "diff"])
def test_every_command_refuses_a_mistyped_mixlist_type_by_the_same_rule(run_dir, tmp_path, capfd, command):
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps(TYPO))
    args = {"replay": ["replay", "--run", str(run_dir), "--mixlist", str(typo)],
            "recommend": ["recommend", "--profile", str(run_dir), "--mixlist", str(typo), "--out", str(tmp_path / "a")],
            "diff": ["diff", "defaults", str(typo), "--profile", str(run_dir), "--out", str(tmp_path / "a")]}[command]
    capfd.readouterr()
    assert main(args) == 2
    err = capfd.readouterr().err
    assert "'Expp'" in err and "did you mean 'Exp'" in err and "would match nothing" in err, err
