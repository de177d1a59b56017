"""The static loss scale end to end: the emulator scales a training workload's backward (both runs), run.json
records it, recommend's advice is absolute (the run's scale times compare's factor), the command runner passes
ADVISOR_LOSS_SCALE, and the journal keeps which scale each list ran with."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from advisor.analysis import analyze
from advisor.cli import main
from advisor.compare.training import scale_text
from advisor.emulator import capture
from advisor.errors import InputError
from advisor.npu import settings
from advisor.recommend import recommend
from advisor.recommend.core import scaled_advice
from advisor.runners import CommandRunner
from advisor.tune import read_journal, tune
from test_tune_loop import FakeRunner, FakeStages, World

EX = Path(__file__).resolve().parents[1] / "examples"
UNDERFLOW = f"{EX / 'mlp_train_underflow.py'}:workload"


def _grads(run: Path, which: str) -> dict:
    d = json.loads(next((run / "dump" / which).rglob("dump.json")).read_text())["data"]
    out = {}
    for k, v in d.items():
        if k.startswith("Grad."):
            rec = v["output"][0]
            f = next((run / "dump" / which).rglob(rec["data_name"]))
            out[k] = torch.load(f, weights_only=True)
    return out


def test_capture_scales_the_backward_and_records_it(tmp_path):
    plain = capture(UNDERFLOW, tmp_path / "plain", batches=1)
    scaled = capture(UNDERFLOW, tmp_path / "scaled", batches=1, loss_scale=2.0 ** 20)
    assert json.loads((scaled / "run.json").read_text())["loss_scale"] == 2.0 ** 20
    assert json.loads((plain / "run.json").read_text()).get("loss_scale") is None
    g0, g1 = _grads(plain, "fp32"), _grads(scaled, "fp32")
    assert g0.keys() == g1.keys() and g0
    for k in g0:       # FP32: scaling by a power of two is exact -- the dumped gradients are the scaled ones
        assert torch.equal(g1[k], g0[k] * 2.0 ** 20), k
    # in fp16 the scaled backward keeps the gradients the unscaled one flushes to zero
    m0, m1 = _grads(plain, "mixed"), _grads(scaled, "mixed")
    w = next(k for k in m0 if k.endswith("fc1.weight"))
    assert (m0[w] == 0).float().mean() > (m1[w] == 0).float().mean() + 0.01
    assert analyze(scaled).loss_scale == 2.0 ** 20 and analyze(plain).loss_scale == 1.0
    assert main(["compare", "--run", str(plain)]) == 1 and main(["compare", "--run", str(scaled)]) == 0


def test_recommend_advice_is_absolute_on_a_scaled_run(tmp_path):
    run = capture(UNDERFLOW, tmp_path / "small", batches=1, loss_scale=4.0)
    rec = recommend(run)
    assert rec.status == "loss-scale"
    ls = rec.loss_scale["loss_scale"]
    assert ls["current"] == 4.0 and ls["static"] == 4.0 * ls["factor"] and ls["static"] > 4.0
    fixed = capture(UNDERFLOW, tmp_path / "fixed", batches=1, loss_scale=ls["static"])
    assert recommend(fixed).status == "no-change-needed"


def test_scaled_advice_and_its_text():
    a = {"static": 1024, "log2": 10, "dynamic": False}
    assert scaled_advice(a, 1.0)["static"] == 1024 and scaled_advice(a, 1.0)["current"] == 1
    b = scaled_advice(a, 8.0)
    assert b["static"] == 8192 and b["factor"] == 1024 and b["log2"] == 13
    assert scale_text(2.0 ** 20) == "1048576 (2^20)" and scale_text(1000.0) == "1000"


@pytest.mark.parametrize("bad", ["0", "-2", "nan", "inf"])
def test_bad_loss_scale_is_one_line(tmp_path, capsys, bad):
    rc = main(["capture", UNDERFLOW, "--out", str(tmp_path / "o"), "--loss-scale", bad])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("advisor: error:") and len(err.strip().splitlines()) == 1
    assert main(["capture", UNDERFLOW, "--out", str(tmp_path / "o"), "--loss-scale", "abc"]) == 2   # a usage error


def test_loss_scale_needs_a_training_workload(tmp_path):
    with pytest.raises(InputError, match="training workload"):
        capture(f"{EX / 'mlp_exp.py'}:workload", tmp_path / "o", loss_scale=8)


def test_command_runner_and_npu_settings_carry_the_scale(tmp_path):
    seen = tmp_path / "env.txt"
    script = tmp_path / "show.py"
    script.write_text("import os, pathlib\n"
                      f"pathlib.Path({str(seen)!r}).write_text(os.environ.get('ADVISOR_LOSS_SCALE', 'unset'))\n")
    r = CommandRunner(f"python {script}")
    r.run(None, "mixed_float16", tmp_path / "a" / "run", loss_scale=2.0 ** 24)
    assert float(seen.read_text()) == 2.0 ** 24
    r.run(None, "mixed_float16", tmp_path / "b" / "run")
    assert seen.read_text() == ""
    assert settings({"ADVISOR_LOSS_SCALE": "65536"}).loss_scale == 65536.0
    assert settings({}).loss_scale is None
    with pytest.raises(InputError):
        settings({"ADVISOR_LOSS_SCALE": "-1"})


class ScaleWorld(World):
    """Gradients fail unless the run's loss scale is at least ``need``."""

    def __init__(self, need):
        super().__init__({})
        self.need = need


class ScaleRunner(FakeRunner):
    def run(self, mixlist, mode, run_dir, loss_scale=None):
        self.scales = getattr(self, "scales", []) + [loss_scale]
        r = super().run(mixlist, mode, run_dir)
        res = json.loads((Path(run_dir) / "result.json").read_text())
        res["grad_ok"] = (loss_scale or 1) >= self.world.need
        (Path(run_dir) / "result.json").write_text(json.dumps(res))
        return r


class ScaleStages(FakeStages):
    def write_recommendation(self, proposal, out_dir):
        Path(out_dir).mkdir(parents=True, exist_ok=True)

    def final_metrics(self, run, steps=None):
        items = [dict(s) for s in super().final_metrics(run, steps)]
        if not run["grad_ok"]:
            for s in items:
                s["grad_min_cosine"], s["grad_worst"] = 0.0, "fc1.weight"
        return items

    def recommend(self, run, base, exclude_types, steps=None, avoid=(), widen=False):
        p = super().recommend(run, base, exclude_types, steps, avoid, widen)
        if not run["grad_ok"]:
            from advisor.recommend import Recommendation
            from advisor.mixlist import Mixlist
            return Recommendation("loss-scale", True, modify_mixlist=base or Mixlist(), loss_scale={
                "loss_scale": {"static": 2.0 ** 12, "dynamic": False, "reason": "test"}})
        return p


def test_tune_raises_the_scale_once_and_resumes_with_it(tmp_path):
    runner = ScaleRunner(ScaleWorld(2.0 ** 12))
    s = tune(runner, tmp_path / "out", stages=ScaleStages([]), max_runs=5)
    assert s["confirmed"] and s["loss_scale"] == 2.0 ** 12 and runner.scales == [None, 2.0 ** 12]
    st = read_journal(tmp_path / "out" / "tune_state.json")
    assert [it.loss_scale for it in st.iterations] == [None, 2.0 ** 12]
    j = json.loads((tmp_path / "out" / "tune_state.json").read_text())
    j["iterations"][1]["loss_scale"] = "big"
    (tmp_path / "out" / "tune_state.json").write_text(json.dumps(j))
    with pytest.raises(InputError, match="loss_scale"):
        read_journal(tmp_path / "out" / "tune_state.json")


def test_tune_loss_scale_option_starts_scaled(tmp_path):
    runner = ScaleRunner(ScaleWorld(2.0 ** 12))
    s = tune(runner, tmp_path / "out", stages=ScaleStages([]), max_runs=5, loss_scale=2.0 ** 13)
    assert s["confirmed"] and s["runs"] == 2 and runner.scales == [2.0 ** 13]
    with pytest.raises(InputError):
        tune(runner, tmp_path / "o2", stages=ScaleStages([]), loss_scale=math.nan)
