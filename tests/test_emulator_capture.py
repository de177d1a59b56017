"""The CPU emulator: executed plan == semantics.plan, black-list edits, planted hazards, training dumps."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from advisor import fusion, semantics
from advisor.emulator import capture, trace_workload
from advisor.errors import InputError
from advisor.graph import normalize_dtype
from advisor.mixlist import Mixlist, effective
from advisor.oplists import load_lists
from advisor.workload import Workload, load_target, normalize


# ---------------------------------------------------------------------- small models
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(12, 24), nn.Linear(24, 6)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.l1(x))
        h = h * 2.0 + 1.0
        return self.l2(h).softmax(-1)


def mlp_wl():
    torch.manual_seed(0)
    return Workload(Block(), [(torch.randn(5, 12),), (torch.randn(5, 12),)], name="mlp")


def encoder_wl():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    m = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    return Workload(m, [(torch.randn(2, 6, 16),)], name="enc")


def cnn_wl():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    return Workload(m, [(torch.randn(2, 3, 8, 8),)], name="cnn")  # train mode: running stats updated


def train_wl():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    x, y = torch.randn(6, 8), torch.randint(0, 3, (6,))
    return Workload(m, [(x,)], loss_fn=lambda out, b: nn.functional.cross_entropy(out, y), name="train")


def _kernel_rows(run: Path) -> list[dict]:
    (kd,) = run.glob("profile/*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
    with open(kd, newline="") as f:
        return list(csv.DictReader(f))


def _executed_precision(row: dict) -> str:
    """Executed precision of a kernel: its first float output dtype, else first float input dtype."""
    for col in ("Output Data Types", "Input Data Types"):
        for d in row[col].split(";"):
            n = normalize_dtype(d)
            if n in ("fp16", "bf16", "fp32"):
                return n
    return "n/a"


def _check_plan(wl_factory, tmp_path: Path, mixlist: Mixlist | None, mode="mixed_float16"):
    out = capture(wl_factory(), tmp_path / "run", mode=mode, mixlist=mixlist, dump="stats", local=False)
    g0, rec = trace_workload(wl_factory())
    lists = effective(load_lists("ascend910b"), mixlist)
    g = fusion.fuse(g0, "ascend910b", lists).graph      # GE judges the post-fusion graph
    p = semantics.plan(g, lists, mode)
    rows = [r for r in _kernel_rows(out) if r["Step Id"] == "0"]
    executed = {r["Name"]: _executed_precision(r) for r in rows}
    expected = {n: p[n] for n in executed if g.nodes[n].get("float", True)}
    executed = {n: v for n, v in executed.items() if n in expected}
    assert executed and executed == expected
    return out, g, p, rows


@pytest.mark.parametrize("factory", [mlp_wl, encoder_wl, cnn_wl, train_wl])
def test_executed_plan_equals_semantics(tmp_path, factory):
    _check_plan(factory, tmp_path, None)


@pytest.mark.parametrize("factory", [mlp_wl, encoder_wl])
def test_executed_plan_equals_semantics_bf16(tmp_path, factory):
    _, _, p, rows = _check_plan(factory, tmp_path, None, mode="mixed_bfloat16")
    assert any("DT_BF16" in r["Output Data Types"] for r in rows)


@pytest.mark.parametrize("factory,black", [(mlp_wl, "Gelu"), (encoder_wl, "BatchMatMul"), (cnn_wl, "Conv2D"),
                                           (train_wl, "MatMulV2")])
def test_black_list_makes_type_and_inheritors_float(tmp_path, factory, black):
    ml = Mixlist(black_add=(black,))
    out, g, p, rows = _check_plan(factory, tmp_path, ml)
    by_name = {r["Name"]: r for r in rows}
    typed = [n for n in by_name if g.nodes[n]["type"] == black]
    assert typed, f"model has no {black} op"
    for n in typed:
        assert by_name[n]["Output Data Types"].split(";")[0] == "FLOAT"
    inheritors = [n for n in by_name if n not in typed and p.why(n).root in typed]
    for n in inheritors:
        assert _executed_precision(by_name[n]) == "fp32"
    # without the edit those ops ran in fp16
    base = semantics.plan(g, load_lists("ascend910b"), "mixed_float16")
    assert any(base[n] == "fp16" for n in typed + inheritors)


def test_must_keep_origin_dtype_is_all_float(tmp_path):
    out = capture(mlp_wl(), tmp_path / "r", mode="must_keep_origin_dtype", dump="stats", local=False)
    assert all(_executed_precision(r) == "fp32" for r in _kernel_rows(out))


# ---------------------------------------------------------------------- planted hazards
def _identity_linear(n: int) -> nn.Linear:
    lin = nn.Linear(n, n)
    with torch.no_grad():
        lin.weight.copy_(torch.eye(n))
        lin.bias.zero_()
    return lin


class ExpHazard(nn.Module):
    """A white matmul (fp16 output) feeding exp of values > 11: fp16 overflow."""

    def __init__(self):
        super().__init__()
        self.lin = _identity_linear(8)

    def forward(self, x):
        return torch.exp(self.lin(x)).sum(-1)


class SigmoidLog(nn.Module):
    """sigmoid(-25) underflows to 0 in fp16, log(0) = -inf."""

    def __init__(self):
        super().__init__()
        self.lin = _identity_linear(8)

    def forward(self, x):
        return torch.log(torch.sigmoid(self.lin(x)))


class LnBias(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 32)
        with torch.no_grad():
            self.lin.bias.fill_(1000.0)
        self.ln = nn.LayerNorm(32)

    def forward(self, x):
        return self.ln(self.lin(x))


class ScoresSoftmax(nn.Module):
    def forward(self, q, k):
        return torch.softmax(q @ k.transpose(-1, -2), -1)


def _final(run: Path, which: str) -> torch.Tensor:
    d = json.loads((run / "dump" / which / "step0" / "rank0" / "dump.json").read_text())
    name = d["data"]["Model.output.0.forward"]["output"][0]["data_name"]
    return torch.load(run / "dump" / which / "step0" / "rank0" / "dump_tensor_data" / name, weights_only=True).float()


def _rel(a, b):
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm())


def _hazards():
    torch.manual_seed(0)
    q, k = torch.randn(2, 8, 16), torch.randn(2, 8, 16)
    q[..., 0] = 100.0  # a constant channel: scores ~1e4 with a row spread O(10) (fp16 ulp there is 8)
    k[..., 0] = 100.0
    return [
        ("exp", ExpHazard(), (torch.rand(4, 8) * 2 + 11.5,), ("Exp",)),
        ("sigmoid-log", SigmoidLog(), (-(torch.rand(4, 8) * 5 + 20.0),), ("Sigmoid",)),
        ("ln-bias", LnBias(), (torch.randn(8, 16),), ("MatMulV2", "LayerNormV4")),
        ("scores", ScoresSoftmax(), (q, k), ("BatchMatMul",)),
    ]


@pytest.mark.parametrize("case", range(4))
def test_planted_hazards(tmp_path, case):
    name, model, batch, fix = _hazards()[case]
    bad = capture(Workload(model, [batch], name=name), tmp_path / "bad", dump="tensors", local=False)
    ref = _final(bad, "fp32")
    assert torch.isfinite(ref).all()
    err_bad = _rel(_final(bad, "mixed"), ref)
    assert err_bad > 0.05, f"{name}: mixed run unexpectedly close ({err_bad})"
    good = capture(Workload(model, [batch], name=name), tmp_path / "good", dump="tensors", local=False,
                   mixlist=Mixlist(black_add=fix))
    err_good = _rel(_final(good, "mixed"), _final(good, "fp32"))
    assert err_good < 5e-3, f"{name}: still off after black-listing {fix} ({err_good})"


# ---------------------------------------------------------------------- training, local error, layout
def test_training_dumps_gradients_both_runs(tmp_path):
    out = capture(train_wl(), tmp_path / "t", dump="tensors")
    m = train_wl().model
    names = {n for n, _ in m.named_parameters()}
    for which in ("fp32", "mixed"):
        d = json.loads((out / "dump" / which / "step0" / "rank0" / "dump.json").read_text())["data"]
        assert {f"Grad.{n}" for n in names} <= set(d)
        assert "Model.loss.0.forward" in d
        for n in names:
            rec = d[f"Grad.{n}"]["output"][0]
            f = out / "dump" / which / "step0" / "rank0" / "dump_tensor_data" / rec["data_name"]
            t = torch.load(f, weights_only=True)
            assert list(t.shape) == rec["shape"] and float(t.float().norm()) > 0
    run = json.loads((out / "run.json").read_text())
    assert run["training"] is True and run["emulated"] is True
    # trace_view.json links every kernel to the aten op that launched it, backward ones as "bwd",
    # read back by the same reader as a real torch_npu profile
    from advisor.ingest.run import load_run
    r = load_run(out)
    k = r.kernels
    assert len(k) and k["framework_op"].notna().all()
    phases = k.groupby("framework_op")["phase"].agg(set).to_dict()
    assert phases["aten::addmm"] == {"fwd"} and phases["aten::mm"] == {"bwd"}  # Linear fwd / its grads
    assert phases["aten::tanh"] == {"fwd"} and phases["aten::tanh_backward"] == {"bwd"}
    assert phases["aten::_log_softmax"] == {"fwd"} and phases["aten::_log_softmax_backward_data"] == {"bwd"}
    ops = [a for _, a in r.graph.nodes(data=True) if a.get("role", "op") == "op" and "duration_us" in a]
    assert ops and all(a["framework_op"].startswith("aten::") for a in ops)


def test_batchnorm_running_stats_untouched(tmp_path):
    wl = cnn_wl()
    bn = wl.model[1]
    before = bn.running_mean.clone()
    capture(wl, tmp_path / "bn", dump="stats", local=False)
    assert torch.equal(bn.running_mean, before)


def test_local_error_rows(tmp_path):
    name, model, batch, fix = _hazards()[0]
    out = capture(Workload(model, [batch], name=name), tmp_path / "le", dump="stats")
    with open(out / "local_error.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    exp = [r for r in rows if r["type"] == "Exp"]
    assert exp and int(exp[0]["local_nonfinite"]) > 0
    summ = [r for r in rows if r["type"] == "ReduceSum"]
    # the sum of finite fp32 inputs in fp16: overflow too (values ~1e5) -> local error of its own
    assert summ


def test_run_directory_layout(tmp_path):
    out = capture(mlp_wl(), tmp_path / "lay")
    run = json.loads((out / "run.json").read_text())
    for k in ("target", "mode", "soc", "mixlist", "seed", "versions", "emulated", "unmapped_ops"):
        assert k in run
    assert (out / "dump" / "mixed" / "step1" / "rank0" / "dump.json").exists()
    rows = _kernel_rows(out)
    sample = Path(__file__).resolve().parent / "fixtures" / "real" / "torch_npu_profile_mstt" / "kernel_details.csv"
    if sample.exists():
        real_cols = sample.read_text().splitlines()[0].split(",")
        assert list(rows[0].keys()) == real_cols[:len(rows[0])]
    assert {r["Step Id"] for r in rows} == {"0", "1"}
    names0 = [r["Name"] for r in rows if r["Step Id"] == "0"]
    names1 = [r["Name"] for r in rows if r["Step Id"] == "1"]
    assert names0 == names1
    d = json.loads((out / "dump" / "mixed" / "step0" / "rank0" / "dump.json").read_text())
    assert all(f"{n}.forward" in d["data"] for n in names0)
    assert (out / "local_error.csv").exists()


def test_unmapped_ops_listed(tmp_path):
    class Odd(nn.Module):
        def forward(self, x):
            return torch.special.i0(x) + 1

    out = capture(Workload(Odd(), [(torch.randn(3),)]), tmp_path / "u", local=False)
    run = json.loads((out / "run.json").read_text())
    assert any("i0" in u for u in run["unmapped_ops"])
    assert any(r["Type"].startswith("aten.i0") for r in _kernel_rows(out))


def test_torch_compile_runs_eager(tmp_path):
    m = torch.compile(Block())
    out = capture(Workload(m, [(torch.randn(2, 12),)]), tmp_path / "c", local=False, dump="stats")
    run = json.loads((out / "run.json").read_text())
    assert any("torch.compile" in n for n in run["notes"])


def test_load_target_errors(tmp_path):
    with pytest.raises(InputError):
        load_target("no_colon")
    with pytest.raises(InputError):
        load_target(str(tmp_path / "missing.py") + ":f")
    f = tmp_path / "w.py"
    f.write_text("import torch\ndef good():\n    return torch.nn.Linear(2, 2), (torch.randn(1, 2),)\n"
                 "def bad():\n    return 3\n")
    wl = load_target(f"{f}:good")
    assert len(wl.batches) == 1 and wl.loss_fn is None
    with pytest.raises(InputError):
        load_target(f"{f}:bad")
    with pytest.raises(InputError):
        normalize((nn.Linear(2, 2), []), "x")


def test_cli_capture_bad_target_exit_2(tmp_path):
    from advisor.cli import main
    assert main(["capture", "nope.py:f", "--out", str(tmp_path / "o")]) == 2


def test_out_folder_is_never_clobbered(tmp_path):
    """A non-empty --out (a previous run or any folder of the user's) is kept as <out>.bak, said in
    run.json's notes and through progress.note; never deleted, never mixed with the new run."""
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    heard = []

    class Log:
        def __call__(self, msg):
            pass

        def note(self, msg):
            heard.append(msg)
    run = capture(mlp_wl(), other, dump="stats", local=False, progress=Log())
    assert (tmp_path / "mine.bak" / "notes.txt").read_text() == "keep me"
    assert not (run / "notes.txt").exists() and (run / "run.json").exists()
    assert heard == [f"kept the previous contents of {other} as {tmp_path / 'mine.bak'}"]
    assert any("mine.bak" in n for n in json.loads((run / "run.json").read_text())["notes"])
    run = capture(mlp_wl(), tmp_path / "run", dump="stats", local=False)
    capture(mlp_wl(), tmp_path / "run", dump="stats", local=False)
    assert (tmp_path / "run.bak" / "run.json").exists() and (run / "run.json").exists()
    assert not [q for q in tmp_path.iterdir() if q.name.endswith(".partial")]


def test_dump_json_matches_real_msprobe_layout(tmp_path):
    sample = (Path(__file__).resolve().parent / "fixtures" / "real" / "msprobe_dump_pair_cpu" /
              "pair_bf16" / "step0" / "proc9125" / "dump.json")
    if not sample.exists():
        pytest.skip("shared samples not available")
    real = json.loads(sample.read_text())
    out = capture(mlp_wl(), tmp_path / "fmt", dump="tensors", local=False)
    ours = json.loads((out / "dump" / "mixed" / "step0" / "rank0" / "dump.json").read_text())
    assert set(ours) == set(real)
    real_t = real["data"]["Functional.linear.0.forward"]["input_args"][0]
    entry = ours["data"]["Aten.addmm.default.0.forward"]
    assert set(entry) >= {"input_args", "input_kwargs", "output"}
    for rec in entry["input_args"] + entry["output"]:
        assert set(rec) == set(real_t)
        f = out / "dump" / "mixed" / "step0" / "rank0" / "dump_tensor_data" / rec["data_name"]
        t = torch.load(f, weights_only=True)
        assert str(t.dtype) == rec["dtype"] == "torch.float16" and list(t.shape) == rec["shape"]
        assert float(t.float().max()) == pytest.approx(rec["Max"], rel=1e-6, abs=1e-6)
