"""Acceptance on emulator captures of planted hazards: the top-ranked culprit type is the one whose
black-listing fixes the output (verified by recapturing with that mixlist); training with a tiny
loss reports gradient underflow and a loss scale that removes it (verified by recapture)."""
import pytest
import torch
from torch import nn

capture_mod = pytest.importorskip("advisor.emulator.capture")

from advisor import mixlist as mx  # noqa: E402
from advisor.compare import attribute  # noqa: E402
from advisor.analysis import analyze  # noqa: E402
from advisor.cli import main  # noqa: E402

pytestmark = pytest.mark.slow


def _capture(tmp_path, name, workload, mixlist=None, cann=None):
    m = mx.parse_obj(mixlist, "test") if mixlist else None
    return capture_mod.capture(workload, tmp_path / name, mixlist=m, cann=cann)


def _attr(run_dir, local=True):
    r = analyze(run_dir)
    if not local:
        r.run.local_errors = None      # as on a real NPU run: no local re-execution
    return r.attribution()


# ---------------------------------------------------------------------- planted hazards
class ExpGate(nn.Module):
    """Pre-activations 10..14 into exp: fp16 overflow (exp(11.1) > 65504)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.head = nn.Linear(32, 4)
        with torch.no_grad():
            self.fc.weight.mul_(0.05)
            self.fc.bias.copy_(torch.linspace(10.0, 14.0, 32))

    def forward(self, x):
        e = torch.exp(self.fc(x))
        return self.head(e / e.sum(dim=-1, keepdim=True))


class BiasLN(nn.Module):
    """Linear with bias 1000 feeding LayerNorm: the damage shows one op downstream of its cause."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.ln = nn.LayerNorm(32)
        self.head = nn.Linear(32, 4)
        with torch.no_grad():
            self.fc.bias.fill_(1000.0)

    def forward(self, x):
        return self.head(self.ln(self.fc(x)))


class SigmoidLog(nn.Module):
    """log(sigmoid(z)) with z ~ -30: sigmoid underflows to 0 in fp16, log(0) = -inf."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.head = nn.Linear(32, 4)
        with torch.no_grad():
            self.fc.weight.mul_(0.1)
            self.fc.bias.fill_(-30.0)

    def forward(self, x):
        return self.head(torch.log(torch.sigmoid(self.fc(x))) / 30.0)


def _wl(cls):
    def make():
        torch.manual_seed(0)
        return cls().eval(), [(torch.randn(8, 16),) for _ in range(2)]
    return make


# LayerNormV4 is white on ascend910b; make it gray so that it inherits from its producer
GRAY_LN = {"white-list": {"to-remove": ["LayerNormV4"]}}


def _with_black(base, types):
    m = {k: {kk: list(vv) for kk, vv in v.items()} for k, v in (base or {}).items()}
    m.setdefault("black-list", {}).setdefault("to-add", []).extend(types)
    return m


@pytest.mark.parametrize("name,cls,base", [("exp", ExpGate, None), ("ln_gray", BiasLN, GRAY_LN),
                                            ("sigmoid_log", SigmoidLog, None)])
@pytest.mark.parametrize("local", [True, False])
def test_top_culprit_blacklisting_fixes_output(tmp_path, name, cls, base, local):
    run = _capture(tmp_path, name, _wl(cls)(), base)
    a = _attr(run, local)
    assert not a.verdict.ok, "the planted hazard must break the mixed run"
    top = a.types.index[0]
    fixed = _attr(_capture(tmp_path, name + "_fixed", _wl(cls)(), _with_black(base, [top])))
    assert fixed.verdict.ok, (top, fixed.verdict.reasons)
    # the culprit is a cause, not merely where the error shows
    assert a.first_exceeding is not None


def test_layernorm_error_blamed_one_op_upstream(tmp_path):
    run = _capture(tmp_path, "ln", _wl(BiasLN)(), GRAY_LN)
    for local in (True, False):
        a = _attr(run, local)
        ln = a.ops[a.ops["type"] == "LayerNormV4"].iloc[0]
        first = a.ops.loc[a.first_exceeding]
        assert first["type"] == "LayerNormV4"          # the error shows at the LayerNorm ...
        assert ln["blamed_type"] == "MatMulV2"          # ... but its producer's fp16 output is the cause
        assert a.types.index[0] == "MatMulV2"
        if local:
            assert ln["inrnd_rel_l2"] > 10 * a.ops[a.ops["type"] == "MatMulV2"]["out_rel_l2"].min()
    # black-listing the type where the error shows does not fix it
    still = _attr(_capture(tmp_path, "ln_wrong", _wl(BiasLN)(), _with_black(GRAY_LN, ["LayerNormV4"])))
    assert not still.verdict.ok


def test_white_layernorm_needs_both_types(tmp_path):
    """With CANN 8.1.RC1's lists LayerNormV4 is white (9.2.0: gray): it rounds its ~1000 inputs itself and its
    producer rounds them too, so both types are named and only both edits fix it."""
    run = _capture(tmp_path, "lnw", _wl(BiasLN)(), cann="8.1")
    a = _attr(run)
    assert set(a.types.index[:2]) == {"MatMulV2", "LayerNormV4"}
    for one in ("MatMulV2", "LayerNormV4"):
        assert not _attr(_capture(tmp_path, "lnw_" + one, _wl(BiasLN)(), _with_black(None, [one]), "8.1")).verdict.ok
    assert _attr(_capture(tmp_path, "lnw_both", _wl(BiasLN)(), _with_black(None, ["MatMulV2", "LayerNormV4"]),
                          "8.1")).verdict.ok


def test_cli_on_run_dir_exit_codes(tmp_path, capsys):
    bad = _capture(tmp_path, "exp", _wl(ExpGate)())
    good = _capture(tmp_path, "exp_ok", _wl(ExpGate)(), _with_black(None, ["Exp"]))
    assert main(["compare", "--run", str(bad), "--json", str(tmp_path / "r.json")]) == 1
    assert main(["compare", "--run", str(good)]) == 0
    assert main(["compare", "--run", str(bad), "--step", "1", "--json", str(tmp_path / "s1.json")]) == 1
    import json
    assert [f["step"] for f in json.loads((tmp_path / "s1.json").read_text())["final"]] == [1]
    # the same through --target/--golden on the run's dumps
    assert main(["compare", "--target", str(bad / "dump" / "mixed"), "--golden", str(bad / "dump" / "fp32")]) == 1
    out = capsys.readouterr().out
    assert "Exp" in out and "OUTSIDE TOLERANCE" in out
    # the run directory and its two dump folders give the same final metrics
    from advisor.ingest.run import run_from_dumps
    a, b = analyze(bad).attribution(), attribute(run_from_dumps(bad / "dump" / "mixed", bad / "dump" / "fp32"))
    assert [f["output"]["rel_l2"] for f in a.final] == [f["output"]["rel_l2"] for f in b.final]


# ---------------------------------------------------------------------- training
class TinyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x, y):
        return self.fc2(torch.relu(self.fc1(x)))


def _train_wl(factor):
    def make():
        torch.manual_seed(0)
        batches = [(torch.randn(16, 16), 0.1 * torch.randn(16, 4)) for _ in range(2)]
        return TinyMLP().train(), batches, lambda out, b: nn.functional.mse_loss(out, b[1]) * factor
    return make


def test_tiny_loss_underflow_and_loss_scale_fix(tmp_path):
    a = _attr(_capture(tmp_path, "train", _train_wl(1e-5)()))
    tr = a.training
    assert tr is not None and tr["underflow_ratio"] > 0.01 and tr["underflow_exceeds"]
    assert any(p["underflow_exceeds"] for p in tr["params"])
    ls = tr["loss_scale"]
    assert not ls["dynamic"] and ls["static"] > 1 and ls["static"] == 2 ** ls["log2"]
    assert ls["predicted_underflow"] < 0.01
    b = _attr(_capture(tmp_path, "train_scaled", _train_wl(1e-5 * ls["static"])()))
    assert b.training["underflow_ratio"] < 0.01, b.training["underflow_ratio"]
    assert not b.training["overflow"]
    # the unscaled control has no underflow problem either
    c = _attr(_capture(tmp_path, "train_plain", _train_wl(1.0)()))
    assert c.training["underflow_ratio"] <= 0.01


def test_statistics_only_capture_still_names_the_culprit(tmp_path):
    run = capture_mod.capture(_wl(SigmoidLog)(), tmp_path / "stats", dump="stats")
    for local in (True, False):
        a = _attr(run, local)
        assert set(a.ops["kind"]) == {"stats"}
        assert not a.verdict.ok
        assert a.types.index[0] == "Sigmoid"


EXAMPLES = __import__("pathlib").Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.skipif(not (EXAMPLES / "transformer_hazard.py").is_file(), reason="example workload missing")
def test_transformer_scores_blame_the_batchmatmul_not_the_softmax(tmp_path):
    """Scores ~1e4 rounded to fp16 by the BatchMatMul ruin the softmax one op later."""
    target = f"{EXAMPLES / 'transformer_hazard.py'}:workload"
    run = capture_mod.capture(target, tmp_path / "tf", batches=2)
    a = _attr(run)
    assert a.ops.loc[a.first_exceeding, "type"] == "SoftmaxV2"
    assert a.types.index[0] == "BatchMatMul"
    assert "Transpose" not in list(a.types.index)
    fixed = capture_mod.capture(target, tmp_path / "tf_fixed", batches=2,
                                mixlist=mx.parse_obj(_with_black(None, ["BatchMatMul"]), "t"))
    assert _attr(fixed).verdict.ok
