"""recommend on a run trained over optimizer steps (advisor.recommend.training): the generated cases whose problem
appears only after some steps are each fixed by a change chosen by re-running the steps, and the fix is confirmed
by a fresh capture over all N steps (the oracle: the emulator's own capture of the changed workload, judged by
compare.steps, not the search's re-runs); a healthy run gets no advice; a run whose FP32 reference diverges gets
no precision advice.  Also: the FP32 run reused across re-runs gives the same steps, gradient clipping and an lr
scheduler train as eager PyTorch does, recommendation.json v4 reads back, tune confirms over N held-out steps."""
from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.train_cases import make_train_case  # noqa: E402

from advisor.cli import main  # noqa: E402
from advisor.compare.steps import judge_steps  # noqa: E402
from advisor.emulator import capture  # noqa: E402
from advisor.emulator.train import FP32Steps  # noqa: E402
from advisor.errors import InputError  # noqa: E402
from advisor.ingest.steps import read_steps  # noqa: E402
from advisor.recommend import write_outputs  # noqa: E402
from advisor.recommend.result import Recommendation  # noqa: E402
from advisor.recommend import recommend_steps  # noqa: E402
from advisor.workload import Workload, normalize  # noqa: E402


def _advice(case, tmp_path, **capture_kw):
    kw = {**case.capture_kw, **capture_kw}
    run = capture(case.workload(), tmp_path / case.name, local=False, **kw)
    return run, recommend_steps(run, workload=case.workload, soc=kw.get("soc"))


def _confirmed(case, rec, tmp_path, **capture_kw) -> bool:
    """A fresh capture of the case's workload with the chosen settings over all its steps: no departure."""
    s = rec.training.settings
    wl = case.workload()
    wl.scaler, wl.scaler_options, wl.clip_grad_norm = s["scaler"], dict(s["scaler_options"]), s["clip_grad_norm"]
    kw = {**case.capture_kw, **capture_kw, "mode": s["mode"]}
    ml = rec.modify_mixlist
    run = capture(wl, tmp_path / "confirm", local=False, mixlist=None if ml.is_empty() else ml, **kw)
    v = judge_steps(read_steps(run))
    return v.departure is None and v.steps == case.steps


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 3])
def test_weights_growing_to_an_overflow_are_fixed_by_a_confirmed_change(tmp_path, seed):
    case = make_train_case("weight_growth", seed)
    _, rec = _advice(case, tmp_path)
    assert rec.status == "recommended" and rec.training.departure["step"] == case.expected_step
    assert _confirmed(case, rec, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_a_scale_spiral_from_one_ops_gradient_keeps_that_op_in_fp32_not_a_bigger_scale(tmp_path, seed):
    case = make_train_case("grad_spiral", seed)
    run, rec = _advice(case, tmp_path, soc="ascend910")       # no bf16 on this chip
    lead = rec.training.departure["op_type"]
    assert rec.status == "recommended" and rec.training.kinds == ["fp32-type"]
    assert rec.training.settings["black_add"] == [lead] and [str(e.edit) for e in rec.edits] == \
        [f"black-list to-add {lead}"]
    init = dict(case.workload().scaler_options)["init_scale"]
    for c in rec.training.candidates:      # no candidate raised the scale
        assert not any("static scale" in t and float(t.split()[-1]) > init for t in c.changes)
    assert _confirmed(case, rec, tmp_path, soc="ascend910")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_a_late_bf16_drift_is_fixed_by_a_confirmed_change(tmp_path, seed):
    case = make_train_case("bf16_drift", seed)
    _, rec = _advice(case, tmp_path)
    assert rec.training.departure["step"] == case.expected_step and rec.training.departure["reason"] == "loss"
    assert rec.status == "recommended"
    assert _confirmed(case, rec, tmp_path)


@pytest.mark.slow
def test_a_healthy_training_run_gets_no_advice(tmp_path):
    case = make_train_case("healthy", 1)
    run, rec = _advice(case, tmp_path)
    assert rec.status == "no-change-needed" and rec.edits == [] and rec.training.reruns == 0
    assert rec.training.chosen == [] and rec.modify_mixlist.is_empty()


@pytest.mark.slow
def test_a_run_whose_fp32_reference_diverges_gets_no_precision_advice(tmp_path):
    case = make_train_case("diverging", 1)
    run, rec = _advice(case, tmp_path)
    assert rec.status == "no-change-needed" and not rec.training.precision and rec.training.reruns == 0
    assert any("not a precision problem" in n for n in rec.notes)


@pytest.mark.slow
def test_recommend_writes_training_advice_and_its_snippet_and_json_reads_back(tmp_path):
    case = make_train_case("grad_spiral", 1)
    run, rec = _advice(case, tmp_path, soc="ascend910")
    paths = write_outputs(rec, tmp_path / "advice")
    doc = json.loads(Path(paths["recommendation"]).read_text())
    assert doc["version"] == 4 and doc["training"]["chosen"] and "training" in doc["snippets"]
    assert "MatMul" in json.loads(Path(paths["mixlist"]).read_text())["black-list"]["to-add"]
    back = Recommendation.from_dict(doc)
    assert back.training.chosen == rec.training.chosen and back.training.candidates[0].how.startswith("measured")


# ---------------------------------------------------------------------- the FP32 run reused; clipping; scheduler
class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 12), nn.Linear(12, 2)

    def forward(self, x, y):
        return self.fc2(torch.relu(self.fc1(x)))


def _mse(o, b):
    return F.mse_loss(o, b[1])


def _wl(**kw) -> Workload:
    torch.manual_seed(1)
    batches = [(torch.randn(8, 6), 3 * torch.randn(8, 2)) for _ in range(3)]
    return Workload(_Net(), batches, _mse, optimizer=lambda p: torch.optim.SGD(p, lr=0.1), steps=7, **kw)


def test_reusing_the_fp32_run_gives_the_same_steps(tmp_path):
    ref = FP32Steps()
    logs = []
    for i in range(2):
        wl = _wl(scaler="torch_npu")
        wl.dump_every = wl.steps
        logs.append(read_steps(capture(wl, tmp_path / f"r{i}", local=False, train_reference=ref)))
    assert ref.reused == 7
    a, b = logs
    assert a.steps.drop(columns=["anomalies"]).equals(b.steps.drop(columns=["anomalies"]))
    assert a.params.equals(b.params)


def _eager(wl: Workload) -> list[float]:
    model = copy.deepcopy(wl.model)
    opt = wl.optimizer(model.parameters())
    sched = wl.lr_scheduler(opt) if wl.lr_scheduler else None
    out = []
    for s in range(wl.steps):
        b = wl.batches[s % len(wl.batches)]
        opt.zero_grad(set_to_none=True)
        loss = wl.loss_fn(model(*b), b)
        loss.backward()
        if wl.clip_grad_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), wl.clip_grad_norm)
        opt.step()
        if sched:
            sched.step()
        out.append(float(loss.detach()))
    return out


def test_gradient_clipping_trains_the_fp32_run_as_torch_clip_grad_norm_does(tmp_path):
    wl = _wl(clip_grad_norm=0.5)
    want = _eager(wl)
    got = read_steps(capture(wl, tmp_path / "r", local=False)).steps["loss_fp32"].tolist()
    assert got == pytest.approx(want, rel=1e-5) and want != pytest.approx(_eager(_wl()), rel=1e-3)


def test_an_lr_scheduler_steps_both_runs_after_every_step(tmp_path):
    wl = _wl(lr_scheduler=lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1))
    want = _eager(wl)
    run = capture(wl, tmp_path / "r", local=False)
    got = read_steps(run).steps["loss_fp32"].tolist()
    assert got == pytest.approx(want, rel=1e-5)
    assert json.loads((run / "run.json").read_text())["train"]["lr_scheduler"] == "StepLR"


@pytest.mark.parametrize("bad", [{"clip_grad_norm": -1.0}, {"clip_grad_norm": True}, {"lr_scheduler": 3}])
def test_clipping_and_scheduler_values_are_checked(bad):
    with pytest.raises(InputError):
        normalize(_wl(**bad), "w")


def test_clipping_needs_an_optimizer():
    torch.manual_seed(0)
    with pytest.raises(InputError, match="need an optimizer"):
        normalize(Workload(_Net(), [(torch.randn(2, 6), torch.randn(2, 2))], _mse, clip_grad_norm=1.0), "w")


# ---------------------------------------------------------------------- tune over N steps
SPIRAL = '''
import torch, torch.nn.functional as F
from torch import nn
from advisor.workload import Workload

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 2)
    def forward(self, x, y):
        return self.fc2(torch.relu(self.fc1(x)))

BIG = 3e8

def workload():
    torch.manual_seed(5)
    batches = [(torch.randn(8, 8), torch.randn(8, 2)) for _ in range(3)]
    return Workload(MLP(), batches, lambda o, b: BIG * F.mse_loss(o, b[1]),
                    optimizer=lambda p: torch.optim.SGD(p, lr=1e-4 / BIG), steps=16, scaler="torch_npu",
                    scaler_options={"init_scale": 2.0 ** 10}, dump_every=8)
'''


@pytest.mark.slow
def test_recommend_command_on_a_training_run_reruns_the_workload_of_its_target(tmp_path, capsys):
    f = tmp_path / "spiral.py"
    f.write_text(SPIRAL)
    run = capture(f"{f}:workload", tmp_path / "run", local=False, soc="ascend910")
    rc = main(["recommend", "--profile", str(run), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["status"] == "recommended" and doc["training"]["kinds"] == ["fp32-type"]
    assert doc["training"]["candidates"] and all(c["how"].startswith("measured") for c in doc["training"]["candidates"])


@pytest.mark.slow
def test_tune_confirms_training_advice_over_all_steps_on_the_held_out_batch(tmp_path, capsys):
    f = tmp_path / "spiral.py"
    f.write_text(SPIRAL)
    out = tmp_path / "tune"
    rc = main(["tune", "--engine", "ge", f"{f}:workload", "--out", str(out), "--soc", "ascend910", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["confirmed"] and doc["holdout_batches"] == 1 and doc["calibration_batches"] == 2
    c = doc["confirmation"]
    assert c["on"] == "held-out batches" and c["verdict"]["steps"] == 16 and all(c["checks"].values())
    assert doc["first_run"]["departure"]["reason"] == "scale-collapse"
    page = (out / "report.html").read_text()
    assert 'id="loss-plot"' in page and (out / "modify_mixlist.json").is_file()


def test_the_training_example_overflows_fp16_late_while_fp32_trains():
    """examples/train_steps.py: eager FP32 training (the oracle) stays finite while fc1's output passes fp16's max
    only after some steps, near the step the example aims at."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("train_steps_example", REPO / "examples" / "train_steps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    wl = normalize(mod.workload(), "example")
    assert wl.trains and wl.steps >= 200 and len(wl.batches) >= 2
    peak: list[float] = []
    wl.model.fc1.register_forward_hook(lambda m, i, o: peak.append(float(o.detach().abs().max())))
    wl.steps = mod.OVERFLOW_STEP + 10
    losses = _eager(wl)
    first = next(s for s, v in enumerate(peak) if v > 65504.0)
    assert all(map(lambda v: v == v and abs(v) < 1e3, losses)) and abs(first - mod.OVERFLOW_STEP) <= 3
