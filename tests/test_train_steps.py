"""Training over steps in the emulator (Workload(optimizer=..., steps=..., scaler=...)): both runs train, the FP32 run
is plain FP32 training (eager PyTorch is the oracle), a skipped step is not applied, overflow follows the chip's mode,
the per-step files are documented and readable, dumps every K steps, and the contract's checks."""
from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from advisor.cli import main
from advisor.emulator import capture
from advisor.errors import InputError
from advisor.ingest.steps import PARAM_COLUMNS, STEP_KEYS, read_steps
from advisor.scalers import make_scaler, scale_sequence
from advisor.workload import Workload


class Net(nn.Module):
    def __init__(self, d_in=12, hidden=24, d_out=3):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_in, hidden), nn.Linear(hidden, d_out)

    def forward(self, x, y):
        return self.fc2(torch.relu(self.fc1(x)))


def _mse(o, b):
    return F.mse_loss(o, b[1])


def _workload(steps=6, lr=0.05, loss_factor=1.0, **kw):
    torch.manual_seed(3)
    model = Net()
    batches = [(torch.randn(8, 12), torch.randn(8, 3)) for _ in range(3)]
    return Workload(model, batches, lambda o, b: loss_factor * _mse(o, b),
                    optimizer=lambda p: torch.optim.SGD(p, lr=lr, momentum=0.9), steps=steps, **kw)


def _eager_losses(wl: Workload, steps: int) -> tuple[list[float], dict]:
    model = copy.deepcopy(wl.model)
    opt = wl.optimizer(model.parameters())
    out = []
    for s in range(steps):
        b = wl.batches[s % len(wl.batches)]
        opt.zero_grad(set_to_none=True)
        loss = wl.loss_fn(model(*b), b)
        loss.backward()
        out.append(float(loss.detach()))
        opt.step()
    return out, {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_fp32_run_is_plain_fp32_training_and_the_user_model_is_left_unchanged(tmp_path):
    wl = _workload(steps=7, scaler="torch_npu")
    before = {k: v.clone() for k, v in wl.model.state_dict().items()}
    losses, _ = _eager_losses(wl, 7)
    run = capture(wl, tmp_path / "r", local=False)
    log = read_steps(run)
    assert list(log.steps["step"]) == list(range(7)) and list(log.steps["batch"]) == [0, 1, 2, 0, 1, 2, 0]
    assert log.steps["loss_fp32"].tolist() == pytest.approx(losses, rel=1e-5)
    # the mixed run trains too (its own losses, close to FP32 on a benign model)
    assert log.steps["loss_mixed"].tolist() == pytest.approx(losses, rel=2e-2)
    assert all(torch.equal(before[k], v) for k, v in wl.model.state_dict().items())


def test_files_carry_every_documented_key_and_column(tmp_path):
    run = capture(_workload(steps=3, scaler="apex"), tmp_path / "r", local=False)
    rows = [json.loads(ln) for ln in (run / "train" / "steps.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(set(r) == set(STEP_KEYS) for r in rows)
    header = (run / "train" / "params.csv").read_text().splitlines()[0].split(",")
    assert tuple(header) == PARAM_COLUMNS
    params = read_steps(run).params
    assert len(params) == 3 * 4 and set(params["param"]) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    meta = json.loads((run / "run.json").read_text())["train"]
    assert meta["steps"] == 3 and meta["scaler"]["name"] == "apex" and meta["master_weights"] == "fp32"


def test_dumps_only_every_k_steps_and_the_last(tmp_path):
    run = capture(_workload(steps=7, scaler=None, dump_every=3), tmp_path / "r", local=False)
    dumped = sorted(int(p.name[4:]) for p in (run / "dump" / "mixed").iterdir())
    assert dumped == [0, 3, 6] and sorted(int(p.name[4:]) for p in (run / "dump" / "fp32").iterdir()) == dumped
    assert json.loads((run / "run.json").read_text())["train"]["dumped_steps"] == dumped
    assert read_steps(run).steps["dumped"].tolist() == [s in dumped for s in range(7)]


def test_default_dump_every_keeps_at_most_ten_dumped_steps(tmp_path):
    run = capture(_workload(steps=25, lr=0.01, scaler=None), tmp_path / "r", local=False)
    meta = json.loads((run / "run.json").read_text())["train"]
    assert meta["dump_every"] == 3 and len(meta["dumped_steps"]) <= 10 + 1


def test_a_skipped_step_is_not_applied(tmp_path):
    # a scale of 2^40 overflows fp16 gradients at once: torch_npu skips the step, the mixed weights stay the initial
    # ones, so their drift from the FP32 run is exactly FP32's own first update (eager training is the oracle)
    wl = _workload(steps=1, scaler="torch_npu", scaler_options={"init_scale": 2.0 ** 40})
    init = {k: v.detach().clone() for k, v in wl.model.named_parameters()}
    _, after = _eager_losses(wl, 1)
    run = capture(wl, tmp_path / "r", local=False)
    log = read_steps(run)
    row = log.steps.iloc[0]
    assert bool(row["overflow"]) and bool(row["skipped"]) and row["next_scale"] == 2.0 ** 39
    for _, p in log.params.iterrows():
        w1, w0 = after[p["param"]].double(), init[p["param"]].double()
        assert p["drift_rel_l2"] == pytest.approx(float((w1 - w0).norm() / w1.norm()), rel=1e-4)


def test_the_scale_trajectory_is_the_scalers_rule_over_the_overflows_seen(tmp_path):
    wl = _workload(steps=8, scaler="torch_npu", scaler_options={"init_scale": 2.0 ** 22, "growth_interval": 2})
    log = read_steps(capture(wl, tmp_path / "r", local=False)).steps
    flags = log["overflow"].astype(bool).tolist()
    assert any(flags) and not all(flags)         # calibration skips, then growth probes
    expected = scale_sequence(make_scaler("torch_npu", {"init_scale": 2.0 ** 22, "growth_interval": 2}), flags)
    assert log["scale"].tolist() == [s.scale for s in expected]
    assert log["skipped"].tolist() == [s.skipped for s in expected]


def test_saturation_mode_detects_overflow_by_the_flag_not_by_inf_gradients(tmp_path):
    # ascend910 saturates: gradients stay finite (+-65504) and torch_npu reads the float-status flag of the backward
    wl = _workload(steps=1, scaler="torch_npu", scaler_options={"init_scale": 2.0 ** 40})
    log = read_steps(capture(wl, tmp_path / "r", soc="ascend910", local=False))
    row, params = log.steps.iloc[0], log.params
    assert bool(row["skipped"]) and row["n_anomalies"] > 0
    assert all(a["phase"] == "bwd" for a in row["anomalies"])
    assert (params["overflow"] > 0).any()            # saturated elements at +-65504 count as overflow
    assert math.isfinite(row["grad_norm_mixed"])


def test_underflow_share_is_of_the_nonzero_fp32_gradient_elements(tmp_path):
    # a loss times 1e-6: fp16 gradients of fc1 flush to zero without scaling, a static 2^16 scale keeps them
    plain = read_steps(capture(_workload(steps=1, loss_factor=1e-6, scaler=None), tmp_path / "a", local=False))
    scaled = read_steps(capture(_workload(steps=1, loss_factor=1e-6, scaler="static"), tmp_path / "b", local=False))
    u0 = plain.params.set_index("param")["underflow"]
    u1 = scaled.params.set_index("param")["underflow"]
    assert u0["fc1.weight"] > 0.01 and u1["fc1.weight"] < u0["fc1.weight"]


@pytest.mark.parametrize("fields, needle", [
    ({"steps": 3}, "need an optimizer"), ({"scaler": "torch_npu"}, "need an optimizer"),
    ({"optimizer": lambda p: torch.optim.SGD(p, lr=0.1), "steps": 0}, "steps must be"),
    ({"optimizer": lambda p: torch.optim.SGD(p, lr=0.1), "dump_every": 1.5}, "dump_every must be"),
])
def test_contract_fields_are_checked(tmp_path, fields, needle):
    torch.manual_seed(0)
    wl = Workload(Net(), [(torch.randn(4, 12), torch.randn(4, 3))], _mse, **fields)
    with pytest.raises(InputError, match=needle):
        capture(wl, tmp_path / "r")


def test_an_optimizer_needs_a_loss(tmp_path):
    wl = Workload(Net(), [(torch.randn(4, 12), torch.randn(4, 3))], optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
    with pytest.raises(InputError, match="needs a loss_fn"):
        capture(wl, tmp_path / "r")


@pytest.mark.parametrize("scaler, options, needle", [("keras", {}, "TensorFlow one"), ("deepspeed", {}, "unknown"),
                                                     ("torch_npu", {"init_scal": 2.0}, "takes the options")])
def test_bad_scalers_are_refused(tmp_path, scaler, options, needle):
    with pytest.raises(InputError, match=needle):
        capture(_workload(steps=1, scaler=scaler, scaler_options=options), tmp_path / "r")


def test_static_loss_scale_option_is_refused_with_a_scaler_hint(tmp_path):
    with pytest.raises(InputError, match="scaler_options"):
        capture(_workload(steps=1), tmp_path / "r", loss_scale=1024.0)


def test_malformed_steps_file_is_one_line_exit_2(tmp_path, capsys):
    run = capture(_workload(steps=2, scaler=None), tmp_path / "r", local=False)
    (run / "train" / "steps.jsonl").write_text('{"step": 0}\nnot json\n')
    rc = main(["compare", "--run", str(run)])
    err = capsys.readouterr().err
    assert rc == 2 and "steps.jsonl: line 2" in err and len(err.strip().splitlines()) == 1


class Branchy(Net):
    def forward(self, x, y):
        if x.shape[0] == 6:          # another op sequence for the smaller batches
            x = x * 2.0
        return super().forward(x, y)


def test_a_step_whose_op_sequence_differs_is_traced_and_planned_alone(tmp_path):
    torch.manual_seed(5)
    batches = [(torch.randn(8, 12), torch.randn(8, 3)), (torch.randn(6, 12), torch.randn(6, 3))]
    wl = Workload(Branchy(), batches, _mse, optimizer=lambda p: torch.optim.SGD(p, lr=0.05), steps=5,
                  scaler="torch_npu", dump_every=4)
    losses, _ = _eager_losses(wl, 5)
    run = capture(wl, tmp_path / "r", local=False)
    assert read_steps(run).steps["loss_fp32"].tolist() == pytest.approx(losses, rel=1e-5)
    notes = json.loads((run / "run.json").read_text())["notes"]
    assert any("different op sequence" in n for n in notes)


def test_advisor_capture_cli_trains_a_workload_file(tmp_path, capsys):
    src = tmp_path / "wl.py"
    src.write_text(
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn\nfrom advisor.workload import Workload\n"
        "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.fc = nn.Linear(6, 2)\n"
        "    def forward(self, x, y):\n        return self.fc(x)\n"
        "def workload():\n    torch.manual_seed(0)\n"
        "    return Workload(M(), [(torch.randn(4, 6), torch.randn(4, 2))], lambda o, b: F.mse_loss(o, b[1]),\n"
        "                    optimizer=lambda p: torch.optim.SGD(p, lr=0.1), steps=4, scaler='apex',\n"
        "                    scaler_options={'init_scale': 1024.0})\n")
    out = tmp_path / "run"
    assert main(["capture", f"{src}:workload", "--out", str(out)]) == 0
    log = read_steps(out)
    assert len(log.steps) == 4 and log.steps["scale"].iloc[0] == 1024.0
    assert json.loads((out / "run.json").read_text())["train"]["scaler"]["name"] == "apex"
