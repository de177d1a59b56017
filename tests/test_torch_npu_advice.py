"""Advice in PyTorch's own terms for torch_npu runs (issue 22 item 3): the run's trace re-planned under a policy
(replay --policy), the replay-measured search over policy edits (recommend), and the advised policy confirmed by a
fresh capture with it (the independent oracle), never a GE mixlist."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.analysis import analyze
from advisor.cli import main
from advisor.emulator.capture import capture
from advisor.precision_policy import parse_policy, read_policy
from advisor.recommend.policy_search import recommend_policy
from advisor.recommend.result import Recommendation
from advisor.replay_torch_npu import TorchNpuReplay
from advisor.semantics import torch_npu as S
from advisor.semantics.torch_npu_trace import read_trace, trace_from_json, trace_to_json, with_op_frames

from torch_npu_models import optimizer_workload_source, lin_sq_workload, rows_of

pytestmark = pytest.mark.timeout(600)
WL = f"{Path(__file__).with_name('torch_npu_models.py')}:lin_sq_workload"


def _policy(rules: dict, amp: str = "autocast", dtype: str = "float16"):
    return parse_policy({"schema": "advisor.precision_policy/1", "amp": amp, "dtype": dtype, "rules": rules})


def _write(tmp_path, pol, name="p.json") -> str:
    p = tmp_path / name
    p.write_text(json.dumps(pol.to_dict()))
    return str(p)


def _final(run) -> float:
    v = analyze(run).verdict()
    return float((v.worst or {}).get("rel_l2"))


@pytest.fixture(scope="module")
def run910(tmp_path_factory):
    """The acceptance model on ascend910 (no bf16: the advice must name the Mul)."""
    return capture(lin_sq_workload(), tmp_path_factory.mktemp("r910") / "r", engine="torch_npu", soc="ascend910",
                   local=False)


@pytest.fixture(scope="module")
def run910b(tmp_path_factory):
    return capture(lin_sq_workload(), tmp_path_factory.mktemp("r910b") / "r", engine="torch_npu", local=False)


# ---------------------------------------------------------------------------- the trace
def test_trace_file_round_trips_to_the_same_plan(run910b):
    t = read_trace(run910b)
    again = trace_from_json(json.loads(json.dumps(trace_to_json(t))))
    cfg = S.AmpConfig()
    assert S.plan(again, cfg).decisions == S.plan(t, cfg).decisions
    assert S.plan(t, cfg).decision("Aten.mul.Tensor.0").compute == "fp16"


@pytest.mark.parametrize("rules", [{"keep_fp32": [{"op": "mul"}]}, {"keep_fp32": [{"op": "mul", "module": "sq"}]},
                                   {"keep_fp32": [{"op": "addmm"}]}])
def test_op_frames_added_to_a_trace_plan_as_a_capture_with_the_policy(tmp_path, run910b, rules):
    """with_op_frames gives the trace a capture with the policy records (addmm inside linear never reaches the
    autocast key, so keeping it changes nothing: as on the device)."""
    pol = _policy(rules)
    fresh = capture(lin_sq_workload(), tmp_path / "r", engine="torch_npu", policy=pol, local=False, dump="stats")
    cfg = S.AmpConfig()
    got = S.plan(with_op_frames(read_trace(run910b), pol.op_names()), cfg, pol)
    want = S.plan(read_trace(fresh), cfg, pol)
    assert [(d.compute, d.out) for d in got.decisions] == [(d.compute, d.out) for d in want.decisions]


# ---------------------------------------------------------------------------- replay --policy
def test_replay_of_the_runs_own_policy_reproduces_the_measured_run(run910b):
    a = analyze(run910b)
    res = TorchNpuReplay(a).replay()
    assert res.complete
    assert res.verdict(a.tolerance).ok is False
    assert [m["output"]["finite"] for m in res.final_metrics()] == [m["output"]["finite"] for m in a.final_metrics()]


@pytest.mark.slow
@pytest.mark.parametrize("amp,rules", [("autocast", {"keep_fp32": [{"module": "sq"}]}),
                                       ("autocast", {"keep_fp32": [{"op": "mul"}]}),
                                       ("apex-o2", {"keep_fp32": [{"module": "sq"}]}),
                                       ("apex-o1", {"keep_fp32": [{"op": "mul", "module": "sq"}]})])
def test_replay_under_a_policy_equals_a_fresh_capture_with_it(tmp_path, amp, rules):
    """The oracle is a fresh capture with the policy: its measured final error is the replayed one."""
    base = capture(lin_sq_workload(), tmp_path / "base", engine="torch_npu", amp=amp, soc="ascend910", local=False)
    pol = _policy(rules, amp)
    fresh = capture(lin_sq_workload(), tmp_path / "fresh", engine="torch_npu", amp=amp, soc="ascend910",
                    policy=pol, local=False)
    a = analyze(base)
    res = TorchNpuReplay(a).replay(pol)
    replayed = float((res.verdict(a.tolerance).worst or {}).get("rel_l2"))
    assert res.complete
    assert replayed == pytest.approx(_final(fresh), rel=1e-4, abs=1e-9)


def test_replay_cli_takes_a_policy_for_a_torch_npu_run(tmp_path, run910b):
    good = _write(tmp_path, _policy({"keep_fp32": [{"module": "sq"}]}))
    assert main(["replay", "--run", str(run910b), "--policy", good]) == 0
    assert main(["replay", "--run", str(run910b)]) == 1           # the run's own (empty) policy fails


def test_replay_cli_refuses_a_mixlist_for_a_torch_npu_run(tmp_path, run910b, capsys):
    ml = tmp_path / "m.json"
    ml.write_text(json.dumps({"black-list": {"to-add": ["Mul"]}}))
    capsys.readouterr()
    assert main(["replay", "--run", str(run910b), "--mixlist", str(ml)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--policy" in err[0]


def test_replay_cli_refuses_a_policy_for_a_ge_run(tmp_path, capsys):
    run = capture(lin_sq_workload(), tmp_path / "ge", engine="ge", local=False, dump="stats")
    capsys.readouterr()
    assert main(["replay", "--run", str(run), "--policy", _write(tmp_path, _policy({}))]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------- recommend (acceptance)
@pytest.fixture(scope="module")
def advice910(run910, tmp_path_factory):
    out = tmp_path_factory.mktemp("adv910")
    assert main(["recommend", "--profile", str(run910), "--out", str(out)]) == 0
    return out


def test_mul_runs_fp16_exp_free_model_fails_as_captured(run910):
    assert rows_of(run910, "Mul")[0]["in"] == ["fp16", "fp16"]
    assert analyze(run910).verdict().ok is False


def test_advice_keeps_the_mul_or_its_module_in_fp32(advice910):
    pol = read_policy(advice910 / "precision_policy.json")
    rules = [(r.module, r.op) for r in pol.rules.keep_fp32]
    assert len(rules) == 1 and rules[0] in [("sq", None), (None, "mul"), ("sq", "mul")]


@pytest.mark.slow
def test_a_fresh_capture_with_the_advised_policy_passes_compare(advice910, tmp_path):
    run = tmp_path / "confirmed"
    assert main(["capture", WL, "--soc", "ascend910", "--policy", str(advice910 / "precision_policy.json"),
                 "--out", str(run), "--no-local-error"]) == 0
    assert rows_of(run, "Mul")[0]["in"] == ["fp32", "fp32"]
    assert main(["compare", "--run", str(run)]) == 0


def test_torch_npu_advice_writes_a_policy_and_a_snippet_never_a_mixlist(advice910):
    assert not (advice910 / "modify_mixlist.json").exists()
    snippet = (advice910 / "apply_policy.py").read_text()
    assert "apply_policy(model," in snippet and "precision_policy.json" in snippet
    d = json.loads((advice910 / "recommendation.json").read_text())
    assert d["engine"] == "torch_npu" and d["edits"] == []
    assert not any(v for lst in d["modify_mixlist"].values() for v in lst.values())     # the empty GE list


def test_each_policy_edit_carries_its_flips_time_and_replayed_evidence(advice910):
    e = json.loads((advice910 / "recommendation.json").read_text())["precision_policy"]["edits"][0]
    assert [f["node"] for f in e["predicted_flips"]] == ["Aten.mul.Tensor.0"]
    f = e["predicted_flips"][0]
    assert (f["before"], f["after"]) == ("fp16", "fp32")
    assert e["predicted_final_with"]["how"] == "replayed" and e["predicted_final_with"]["meets_tolerance"] is True
    assert "predicted_time_change_us" in e


def test_recommendation_with_policy_advice_reads_back_as_the_same_object(advice910):
    d = json.loads((advice910 / "recommendation.json").read_text())
    rec = Recommendation.from_dict(d)
    assert rec.precision_policy is not None and rec.to_dict() == d


def test_no_dtype_change_is_proposed_on_a_chip_without_bf16(run910):
    rec = recommend_policy(analyze(run910))
    assert rec.precision_policy.candidates and not any("dtype" in c for c in rec.precision_policy.candidates)


@pytest.mark.slow
def test_on_a_chip_with_bf16_the_advice_keeps_the_most_low_precision_time(run910b, tmp_path):
    """Fewest edits, then most low-precision time kept: bf16 keeps the linear and the Mul low; a fresh capture with
    the advised policy (and the autocast dtype it names: --mode mixed_bfloat16) passes."""
    rec = recommend_policy(analyze(run910b), out_dir=tmp_path)
    assert [e.kind for e in rec.precision_policy.edits] == ["dtype"]
    p = tmp_path / "p.json"
    p.write_text(json.dumps(rec.precision_policy.policy))
    fresh = tmp_path / "fresh"
    assert main(["capture", WL, "--policy", str(p), "--mode", "mixed_bfloat16", "--out", str(fresh),
                 "--no-local-error"]) == 0
    assert json.loads((fresh / "run.json").read_text())["low_dtype"] == "bf16"
    assert main(["compare", "--run", str(fresh)]) == 0


def test_excluding_the_dtype_change_on_bf16_chips_keeps_the_mul(run910b):
    rec = recommend_policy(analyze(run910b), exclude=("dtype",))
    assert [(e.kind, e.op or e.module) for e in rec.precision_policy.edits] in (
        [("keep-op", "mul")], [("keep-module", "sq")])


@pytest.mark.slow
def test_advice_is_the_best_single_edit_by_fresh_captures(run910, tmp_path):
    """Oracle: a fresh capture per candidate edit; the advice passes in its own capture and no passing candidate
    keeps more measured low-precision time."""
    from advisor.recommend.policy_edits import with_edits
    a = analyze(run910)
    rec = recommend_policy(a)
    r = TorchNpuReplay(a)
    from advisor.recommend.policy_search import candidates, op_errors
    cands = candidates(r, r.policy, op_errors(a.recording, r.replay()))
    shares = {}
    for i, e in enumerate(cands):
        run = capture(lin_sq_workload(), tmp_path / f"c{i}", engine="torch_npu", soc="ascend910",
                      policy=with_edits(r.policy, [e]), local=False)
        fa = analyze(run)
        if fa.verdict().ok:
            shares[str(e)] = fa.measured_low_share
    advised = str(rec.precision_policy.edits[0].edit)
    assert advised in shares
    assert shares[advised] == pytest.approx(max(shares.values()))


# ---------------------------------------------------------------------------- tune --engine torch_npu
@pytest.mark.slow
def test_tune_confirms_the_advised_policy_on_the_held_out_batch(tmp_path):
    out = tmp_path / "t"
    assert main(["tune", WL, "--engine", "torch_npu", "--soc", "ascend910", "--out", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    last = s["history"][-1]
    assert s["confirmed"] and last["held_out"]["ok"] and last["calibration"]["ok"]
    assert s["history"][0]["ok"] is False
    pol = read_policy(out / "precision_policy.json")
    assert [(r.module, r.op) for r in pol.rules.keep_fp32][0] in [("sq", None), (None, "mul"), ("sq", "mul")]
    used = read_policy(out / last["iteration"] / "precision_policy_used.json")
    assert used == pol                                    # what tune confirmed is the file it writes


@pytest.mark.parametrize("extra", [["--mixlist", "m.json"], ["--ray", "auto"], ["--loss-scale", "8"]])
def test_tune_refuses_what_a_torch_npu_tune_does_not_do_in_one_line(tmp_path, capsys, extra):
    (tmp_path / "m.json").write_text("{}")
    extra = [str(tmp_path / x) if x.endswith(".json") else x for x in extra]
    capsys.readouterr()
    assert main(["tune", WL, "--engine", "torch_npu", "--out", str(tmp_path / "t"), *extra]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "t").exists()


def test_tune_refuses_an_optimizer_workload_under_torch_npu_in_one_line(tmp_path, capsys):
    src = tmp_path / "wl.py"
    src.write_text(optimizer_workload_source(2))
    capsys.readouterr()
    assert main(["tune", f"{src}:workload", "--engine", "torch_npu", "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "optimizer" in err[0]


def test_apex_o1_advice_keeps_the_module_because_a_kept_op_hands_on_fp16(tmp_path):
    """Outside autocast a kept op keeps its output dtype (the fp16 square still overflows on its way out), so the
    advice keeps the module; a fresh capture with it passes."""
    run = capture(lin_sq_workload(), tmp_path / "r", engine="torch_npu", amp="apex-o1", soc="ascend910", local=False)
    rec = recommend_policy(analyze(run))
    assert [(e.kind, e.module) for e in rec.precision_policy.edits] == [("keep-module", "sq")]
    assert any(c.startswith("register_float_function") for c in rec.precision_policy.candidates)
    fresh = capture(lin_sq_workload(), tmp_path / "f", engine="torch_npu", amp="apex-o1", soc="ascend910",
                    policy=parse_policy(rec.precision_policy.policy), local=False, dump="stats")
    assert analyze(fresh).verdict().ok
