"""advisor tune end to end on the real stages (emulator -> compare -> recommend), through the CLI."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from advisor.cli import main
from advisor.mixlist import load

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"


def _strict(x):
    raise ValueError(f"non-standard JSON constant {x}")


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text(), parse_constant=_strict)   # strict JSON


@pytest.mark.slow
def test_planted_hazard_confirmed_within_three_runs_after_reference(tmp_path):
    out = tmp_path / "tune"
    rc = main(["tune", "--engine", "ge", f"{EX / 'mlp_exp.py'}:workload", "--out", str(out)])
    s = _summary(out)
    assert rc == 0 and s["confirmed"]
    assert s["runs"] - 1 <= 3
    assert "Exp" in s["edits"]["black-list"]["to-add"]
    assert s["final"]["finite"] and s["final"]["rel_l2"] <= 1e-2 and s["final"]["cosine"] >= 0.999
    assert 0 < s["low_precision_time_share"] <= 1
    assert load(out / "modify_mixlist.json").black_add == tuple(s["edits"]["black-list"]["to-add"])
    first, last = s["history"][0], s["history"][s["best_iteration"]]
    assert first["ok"] is False and last["ok"] and last["holdout_ok"] and last["calibration_ok"]
    assert s["holdout_steps"] == [3]            # 4 batches: the last is held out
    html = (out / "report.html").read_text()
    assert 'id="error-plot"' in html and 'data-status="confirmed"' in html
    assert html.count("class='iteration ") == len(s["history"])
    for h in s["history"]:
        d = out / h["dir"]
        assert h["dir"] in html
        assert (d / "run" / "run.json").exists() and (d / "final_metrics.json").exists()
        assert (d / "comparison" / "comparison.json").exists()
    assert (out / "iter_00" / "recommendation" / "modify_mixlist.json").exists()
    # the run that confirmed used exactly the emitted list
    used = json.loads((out / last["dir"] / "run" / "run.json").read_text())
    assert "Exp" in json.dumps(used.get("mixlist"))


@pytest.mark.slow
def test_control_confirms_without_black_list_edit(tmp_path, capsys):
    out = tmp_path / "tune"
    rc = main(["tune", "--engine", "ge", f"{EX / 'cnn_control.py'}:workload", "--out", str(out), "--max-runs", "4", "--json"])
    s = _summary(out)
    assert json.loads(capsys.readouterr().out)["runs"] == s["runs"]
    assert rc == 0 and s["confirmed"]
    assert s["edits"]["black-list"]["to-add"] == []
    assert s["history"][0]["ok"] is True


@pytest.mark.slow
def test_command_runner_end_to_end_with_npu_script(tmp_path):
    out = tmp_path / "tune"
    cmd = f"{sys.executable} {EX / 'npu_script.py'} {EX / 'mlp_exp.py'}:workload"
    rc = main(["tune", "--runner", "command", "--cmd", cmd, "--out", str(out), "--timeout", "600"])
    s = _summary(out)
    assert rc == 0 and s["confirmed"] and "Exp" in s["edits"]["black-list"]["to-add"]
    assert s["runs"] == 3                   # golden embedded in the script's run: reference counted once
    assert "framework=none mode=mixed_float16" in (out / "iter_00" / "stdout.txt").read_text()
    assert "mixlist=" in (out / "iter_01" / "stdout.txt").read_text()


@pytest.mark.slow
def test_command_runner_separate_reference(tmp_path):
    # the script writes no golden (like a real NPU run): tune runs it once as the FP32 reference
    out = tmp_path / "tune"
    cmd = f"{sys.executable} {EX / 'npu_script.py'} {EX / 'mlp_exp.py'}:workload --no-golden"
    rc = main(["tune", "--runner", "command", "--cmd", cmd, "--out", str(out)])
    s = _summary(out)
    state = json.loads((out / "tune_state.json").read_text())
    assert state["reference"]["kind"] == "separate"
    assert (out / "reference" / "run" / "dump" / "mixed").is_dir()
    assert (out / "iter_00" / "run" / "dump" / "fp32" / "step0" / "rank0" / "dump.json").exists()
    assert not (out / "iter_00" / "run" / "local_error.csv").exists()
    assert rc == 0 and s["confirmed"] and s["runs"] == 3


@pytest.mark.slow
def test_failing_gradients_are_judged_like_compare_judges_them_and_fixed_by_the_loss_scale(tmp_path):
    # the outputs and the loss are fine, the fp16 gradients underflow: compare, recommend and tune judge
    # the same figures (final outputs, loss and gradients on every batch); no list edit fixes it, so tune
    # runs the same list again with recommend's static loss scale -- and that run is judged by a fresh capture
    out = tmp_path / "tune"
    rc = main(["tune", "--engine", "ge", f"{EX / 'mlp_train_underflow.py'}:workload", "--out", str(out), "--max-runs", "3"])
    s = _summary(out)
    h0, h1 = s["history"][0], s["history"][1]
    assert h0["ok"] is False and any("gradient fc1.weight cosine" in r for r in h0["reasons"])
    comparison = json.loads((out / "iter_00" / "comparison" / "comparison.json").read_text())
    assert comparison["verdict"]["ok"] is False
    assert main(["compare", "--run", str(out / "iter_00" / "run")]) == 1
    rec = json.loads((out / "iter_00" / "recommendation" / "recommendation.json").read_text())
    assert rec["status"] == "loss-scale" and rec["ok"] is False
    scale = rec["loss_scale"]["loss_scale"]["static"]
    assert scale > 1 and h1["loss_scale"] == scale and h1["edits"] == h0["edits"]
    assert rc == 0 and s["confirmed"] and s["loss_scale"] == scale and s["runs"] == 3
    run1 = json.loads((out / "iter_01" / "run" / "run.json").read_text())
    assert run1["loss_scale"] == scale
    assert main(["compare", "--run", str(out / "iter_01" / "run")]) == 0     # the independent check


def test_bad_target_is_one_line_error(tmp_path, capsys):
    rc = main(["tune", "--engine", "ge", f"{EX / 'nope.py'}:workload", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("advisor: error:") and len(err.strip().splitlines()) == 1


def test_mode_without_mixlist_refused(tmp_path, capsys):
    rc = main(["tune", "--engine", "ge", f"{EX / 'mlp_exp.py'}:workload", "--out", str(tmp_path / "o"), "--mode", "force_fp32"])
    assert rc == 2 and "does not apply a mixlist" in capsys.readouterr().err


@pytest.mark.slow
def test_command_runner_crashing_job_is_recorded(tmp_path):
    out = tmp_path / "tune"
    cmd = f"{sys.executable} {EX / 'npu_script.py'} {EX / 'mlp_exp.py'}:workload --fail-if-edit Exp"
    rc = main(["tune", "--runner", "command", "--cmd", cmd, "--out", str(out), "--max-runs", "4"])
    s = _summary(out)
    h1 = s["history"][1]
    assert rc in (0, 1) and h1["status"] == "failed" and "code 3" in h1["message"]
    assert "simulated device error" in (out / "iter_01" / "stderr.txt").read_text()
    assert [["black", "to-add", "Exp"]] in [x["edits"] for x in s["excluded"]]
    assert (out / "report.html").exists() and (out / "modify_mixlist.json").exists()


@pytest.mark.slow
def test_cli_sigkill_during_recapture_then_resume(tmp_path):
    import os
    import signal
    import subprocess
    import time

    out = tmp_path / "tune"
    argv = [sys.executable, "-m", "advisor", "tune", "--engine", "ge", f"{EX / 'mlp_exp.py'}:workload", "--out", str(out)]
    p = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marker = out / "iter_01" / "mixlist_used.json"       # written just before the re-capture starts
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert p.poll() is None, p.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = json.loads((out / "tune_state.json").read_text())
    done = [e["step"] for e in before["events"]]
    assert done[:3] == ["iter_00:run", "iter_00:judge", "iter_00:decide"]
    mtime = (out / "iter_00" / "run" / "run.json").stat().st_mtime_ns
    r = subprocess.run(argv + ["--resume"], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    after = json.loads((out / "tune_state.json").read_text())
    steps = [e["step"] for e in after["events"]]
    assert steps[:len(done)] == done and len(steps) == len(set(steps))
    assert (out / "iter_00" / "run" / "run.json").stat().st_mtime_ns == mtime
    s = _summary(out)
    assert s["confirmed"] and s["runs"] == 3 and "Exp" in s["edits"]["black-list"]["to-add"]


HOLDOUT_WORKLOAD = '''
import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        with torch.no_grad():
            self.lin.weight.copy_(torch.eye(8))
            self.lin.bias.zero_()

    def forward(self, x):
        e = torch.exp(self.lin(x))
        return e / e.sum(-1, keepdim=True)


def workload():
    g = torch.Generator().manual_seed(0)
    calm = [(torch.randn(4, 8, generator=g),) for _ in range(3)]
    hot = (torch.randn(4, 8, generator=g) * 0.1 + 12.0,)     # exp(12) > 65504: fp16 overflow, last batch only
    return M(), calm + [hot]
'''


def _tune_holdout_workload(tmp_path) -> tuple[int, dict]:
    wl = tmp_path / "holdout_wl.py"
    wl.write_text(HOLDOUT_WORKLOAD)
    out = tmp_path / "tune"
    rc = main(["tune", "--engine", "ge", f"{wl}:workload", "--out", str(out)])
    return rc, _summary(out)


@pytest.mark.slow
def test_hazard_only_in_held_out_batch_blocks_confirmation(tmp_path):
    rc, s = _tune_holdout_workload(tmp_path)
    h0 = s["history"][0]
    # the default lists pass the calibration batches; only the held-out batch shows the overflow
    assert h0["calibration_ok"] is True and h0["holdout_ok"] is False and h0["ok"] is False
    assert any("step 3" in r for r in h0["reasons"])
    assert s["holdout_consumed"] is True
    # a list that fails a held-out batch is never reported as confirmed
    assert all(h["holdout_ok"] for h in s["history"] if h["ok"])
    assert (rc == 0) == s["confirmed"]


@pytest.mark.slow
def test_hazard_only_in_held_out_batch_is_fixed(tmp_path):
    rc, s = _tune_holdout_workload(tmp_path)
    assert rc == 0 and s["confirmed"] and "Exp" in s["edits"]["black-list"]["to-add"]
