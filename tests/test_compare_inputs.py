"""advisor compare on run directories that were damaged or hand-edited after the run (files written or
changed by others): missing tensor files, garbage tensors, shape and dtype mismatches, steps that do
not exist.  None of them may pass silently."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from advisor.cli import main

capture_mod = pytest.importorskip("advisor.emulator.capture")

STEPS = 4


class TinyTrain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x, y):
        return self.fc2(torch.relu(self.fc1(x)))


def _workload():
    torch.manual_seed(0)
    batches = [(torch.randn(8, 8), 0.1 * torch.randn(8, 4)) for _ in range(STEPS)]
    return TinyTrain().train(), batches, lambda out, b: nn.functional.mse_loss(out, b[1])


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory) -> Path:
    """A training capture (outputs, loss, gradients as tensors) that is within tolerance."""
    return capture_mod.capture(_workload(), tmp_path_factory.mktemp("cap") / "run")


@pytest.fixture
def run(clean_run, tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(clean_run, dst)
    return dst


def _rank_dirs(run: Path, which: str = "mixed") -> list[Path]:
    return sorted((run / "dump" / which).glob("step*/rank0"))


def _edit_dump(rank_dir: Path, fn) -> None:
    f = rank_dir / "dump.json"
    d = json.loads(f.read_text())
    fn(d["data"])
    f.write_text(json.dumps(d))


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("advisor: error:") and err.count("\n") == 1, err
    return err


def test_clean_run_is_within_tolerance(clean_run):
    assert main(["compare", "--run", str(clean_run)]) == 0


# ---------------------------------------------------------------------- missing tensor files
def test_missing_tensor_files_fall_back_to_statistics_and_say_so(run, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    for rd in _rank_dirs(run):
        shutil.rmtree(rd / "dump_tensor_data")
    rc = main(["compare", "--run", str(run)])
    out = capsys.readouterr().out
    assert rc in (0, 1)
    assert "tensor files named in the dumps are missing" in out and "compared by their statistics" in out
    assert f"(first: {_rank_dirs(run)[0] / 'dump_tensor_data'}" in out


def test_missing_tensor_file_without_statistics_is_an_error(run, capsys):
    rd = _rank_dirs(run)[0]
    (rd / "dump_tensor_data" / "Model.output.0.forward.output.0.pt").unlink()

    def strip(data):
        for k in ("Max", "Min", "Mean", "Norm"):
            data["Model.output.0.forward"]["output"][0].pop(k)
    _edit_dump(rd, strip)
    assert main(["compare", "--run", str(run)]) == 2
    err = _one_line_error(capsys)
    assert "Model.output.0.forward.output.0.pt" in err and "missing" in err


# ---------------------------------------------------------------------- garbage tensors
@pytest.mark.parametrize("garbage", [torch.zeros(3, 3), torch.tensor(1.5)], ids=["3x3", "scalar"])
def test_garbage_final_output_is_an_error_naming_both_shapes(run, capsys, garbage):
    for rd in _rank_dirs(run):
        torch.save(garbage.half(), rd / "dump_tensor_data" / "Model.output.0.forward.output.0.pt")
    assert main(["compare", "--run", str(run)]) == 2
    err = _one_line_error(capsys)
    assert "Model.output.0.forward" in err
    assert str(list(garbage.shape)) in err and "[8, 4]" in err


def test_non_float_final_output_is_a_dtype_error(run, capsys):
    def to_int(data):
        data["Model.output.0.forward"]["output"][0]["dtype"] = "torch.int64"
    for rd in _rank_dirs(run):
        _edit_dump(rd, to_int)
    assert main(["compare", "--run", str(run)]) == 2
    err = _one_line_error(capsys)
    assert "Model.output.0.forward" in err and "int64" in err


def test_final_output_replaced_by_a_python_scalar_is_an_error(run, capsys):
    def to_scalar(data):
        data["Model.output.0.forward"]["output"] = [{"type": "float", "value": 1.5}]
    for rd in _rank_dirs(run):
        _edit_dump(rd, to_scalar)
    assert main(["compare", "--run", str(run)]) == 2
    assert "Model.output.0.forward" in _one_line_error(capsys)


def test_garbage_gradient_is_an_error(run, capsys):
    rd = _rank_dirs(run)[1]
    grad = next((rd / "dump_tensor_data").glob("Grad.fc1.weight*.pt"))
    torch.save(torch.zeros(3, 3), grad)
    assert main(["compare", "--run", str(run)]) == 2
    err = _one_line_error(capsys)
    assert "Grad.fc1.weight" in err and "[3, 3]" in err and "[16, 8]" in err


def test_garbage_loss_is_an_error(run, capsys):
    rd = _rank_dirs(run)[0]
    loss = next((rd / "dump_tensor_data").glob("Model.loss.0.forward*.pt"))
    torch.save(torch.zeros(5), loss)
    assert main(["compare", "--run", str(run)]) == 2
    err = _one_line_error(capsys)
    assert "Model.loss.0.forward" in err and "[5]" in err


# ---------------------------------------------------------------------- steps
def test_step_that_does_not_exist_names_the_available_steps(run, capsys):
    for steps in (["--step", "5"], ["--step", "1", "--step", "5"]):
        assert main(["compare", "--run", str(run), *steps]) == 2
        err = _one_line_error(capsys)
        assert "step 5 " in err and "0, 1, 2, 3" in err
    assert main(["compare", "--run", str(run), "--step", "3"]) == 0
