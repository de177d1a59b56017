"""Policy advice for real torch_npu runs (issue 22 item 4): a real msprobe dump's trace, recommend and replay on it.

The samples are real mindstudio-probe 26.2.0 dumps (tests/fixtures/real/SOURCES.md).  Every expectation about the
trace is read from the dump's own files here (dump.json, construct.json, the tensor files), not from the code under
test; the prediction is checked against the mixed run's measured tensors.
"""
import json
from pathlib import Path

import pytest
import torch

from advisor.analysis import analyze
from advisor.cli import main
from advisor.ingest.msprobe_trace import API_ATEN, aten_of, split_entry, trace_of_dump
from advisor.precision_policy import KeepRule, PolicyRules, PrecisionPolicy, read_policy
from advisor.replay_torch_npu import TorchNpuReplay, policy_run

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
PAIR = REAL / "msprobe_dump_pair_cpu"
TRAIN = REAL / "msprobe_train_pair_cpu"


def _rank(root: Path, which: str, step: int = 0) -> Path:
    return next((root / which / f"step{step}").iterdir())


def _data(folder: Path) -> dict:
    return json.loads((folder / "dump.json").read_text())["data"]


def _tensor(folder: Path, name: str):
    return torch.load(folder / "dump_tensor_data" / name, weights_only=True)


def _dtype(rec: dict) -> str:
    return {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(rec["dtype"], rec["dtype"])


def _tensor_records(body: dict) -> list[dict]:
    args = [a for a in body.get("input_args", []) if isinstance(a, dict) and "data_name" in a]
    return args + [v for v in body.get("input_kwargs", {}).values() if isinstance(v, dict) and "data_name" in v]


@pytest.fixture(scope="module")
def pair():
    a = analyze(str(PAIR))
    return a, TorchNpuReplay(a)


def test_the_trace_has_the_dumps_calls_dtypes_and_edges(pair):
    a, r = pair
    gold = _rank(PAIR, "pair_fp32")
    data = _data(gold)
    fwd = [e for e in data if e.endswith(".forward")]
    calls = r.trace.calls
    assert [f"{c.name}.forward" for c in calls] == fwd                 # every forward API call, in dump order
    outputs = {}                                                       # tensor bytes -> (entry prefix, index)
    for c, e in zip(calls, fwd):
        body = data[e]
        recs = _tensor_records(body)
        assert c.in_dtypes == tuple(_dtype(x) for x in recs)
        assert c.out_dtypes == tuple(_dtype(x) for x in body["output"])
        assert c.in_dims == tuple(len(x["shape"]) for x in recs)
        for (src, idx), x in zip(c.srcs, recs):
            t = _tensor(gold, x["data_name"])
            hit = [k for k, v in outputs.items() if v.shape == t.shape and torch.equal(v, t)]
            if hit:                                                    # an earlier call's output, bytes and all
                assert (src, idx) == hit[-1]
            else:                                                      # a leaf: a parameter iff it requires grad
                leaf = r.trace.leaves[src]
                assert leaf.kind == ("param" if x["requires_grad"] else leaf.kind) and leaf.dtype == _dtype(x)
                assert (leaf.kind == "param") == bool(x["requires_grad"])
        for i, o in enumerate(body["output"]):
            outputs[(c.name, i)] = _tensor(gold, o["data_name"])
    # the chain the sample is: Linear -> LayerNorm -> x30 -> softmax -> sum, each fed by the one before
    assert [c.srcs[0][0] for c in calls[1:]] == [c.name for c in calls[:-1]]
    assert [(c.op, c.overload) for c in calls] == [("linear", "default"), ("layer_norm", "default"),
                                                   ("mul", "default"), ("softmax", "int"), ("sum", "default")]
    assert any("no module scope" in n for n in r.notes) and all(c.module == "" for c in calls)


def test_autocast_frames_follow_the_table_and_dtypes_the_plan(pair):
    _, r = pair
    tp = r.plan()
    d = {n: x for n, x in zip(tp.names, tp.decisions)}
    assert r.config.amp == "autocast" and r.config.dtype == "bf16"      # the mixed dump holds bf16
    # torch_npu's table (AutoCastOps.cpp): linear lower precision, layer_norm fp32, softmax / sum fp32-set-opt-dtype,
    # mul in none (its fp32 input stays fp32)
    assert d["Functional.linear.0"].compute == "bf16"
    assert [d[n].compute for n in ("Functional.layer_norm.0", "Tensor.__mul__.0", "Torch.softmax.0",
                                   "Tensor.sum.0")] == ["fp32"] * 4
    # the CPU autocast that made the sample cast layer_norm / mul / softmax to bf16: said, not hidden
    note = next(n for n in r.notes if "mixed dump's dtypes" in n)
    assert "3 of 5" in note and "Functional.layer_norm.0: dump bf16, torch_npu fp32" in note


def test_replay_under_the_dumps_own_dtypes_reproduces_the_measured_run(pair):
    """The independent route: the FP32 tensors re-executed at the dtypes the mixed dump shows give the mixed run's
    measured tensors (read from its own files), op by op."""
    a, r = pair
    target = _rank(PAIR, "pair_bf16")
    tdata = _data(target)
    prec = {e[:-8]: _dtype(b["output"][0]) for e, b in tdata.items() if e.endswith(".forward")}
    res = a.recording.replay(prec)
    for e in prec:
        got = res.targets[0].entries[f"{e}.forward"]["_outputs"][0][1]["tensor"]
        want = _tensor(target, tdata[f"{e}.forward"]["output"][0]["data_name"])
        assert got.dtype == torch.float32 and torch.equal(got, want.float()), e
    # under torch_npu's plan the one op both autocasts cast alike (linear, bf16) is the measured tensor too
    res = r.replay()
    got = res.targets[0].entries["Functional.linear.0.forward"]["_outputs"][0][1]["tensor"]
    assert torch.equal(got, _tensor(target, "Functional.linear.0.forward.output.0.pt").float())


def test_a_policy_on_the_real_trace_changes_what_it_names(pair):
    _, r = pair
    keep = PrecisionPolicy(amp="autocast", dtype="bf16", rules=PolicyRules((KeepRule(op="linear"),), ()))
    changed = r.changes(keep)
    assert [(c.node, c.before, c.after) for c in changed] == [("Functional.linear.0", "bf16", "fp32")]
    res = r.replay(keep)              # every op fp32: nothing runs again, each keeps the golden's own record
    gold = _data(_rank(PAIR, "pair_fp32"))
    for e in ("Functional.linear.0.forward", "Torch.softmax.0.forward"):
        rec = res.targets[0].entries[e]["_outputs"][0][1]
        assert "tensor" not in rec and rec["data_name"] == gold[e]["output"][0]["data_name"]
    assert res.final_metrics()[0]["output"]["rel_l2"] == 0.0


def test_amp_none_on_an_fp16_chip_runs_the_linear_kernel_in_fp16(tmp_path):
    a = analyze(str(PAIR), soc="ascend910")
    r = TorchNpuReplay(a, amp="none")
    d = r.plan().decision("Functional.linear.0")
    assert r.config.acl_precision_mode == "allow_fp32_to_fp16" and d.compute == "fp16" and d.out == "fp32"
    assert r.plan().decision("Tensor.__mul__.0").compute == "fp32"


def test_recommend_on_the_real_pair_writes_a_policy(tmp_path, capsys):
    out = tmp_path / "o"
    code = main(["recommend", "--profile", str(PAIR), "--out", str(out), "--max-rel-l2", "1e-6"])
    capsys.readouterr()
    assert code == 0
    pol = read_policy(out / "precision_policy.json")
    assert pol.amp == "autocast" and pol.dtype == "bf16"
    rec = json.loads((out / "recommendation.json").read_text())
    pred = rec["predicted"]
    # the measured run (CPU autocast: softmax in bf16) fails 1e-6; torch_npu's base, replayed, keeps the softmax fp32
    assert pred["measured"]["how"] == "measured" and pred["measured"]["meets_tolerance"] is False
    assert pred["base"]["how"] == "replayed" and rec["status"] == "no-change-needed" and rec["mode"] == "mixed_bfloat16"
    # the measured share counts what the mixed dump ran low (4 of its 5 calls are bf16 there), the base torch_npu's
    # plan (the linear alone)
    assert pred["measured"]["low_precision_share"] > pred["base"]["low_precision_share"] > 0
    assert any("re-planned from the FP32 msprobe dump" in n for n in rec["notes"])
    assert not (out / "modify_mixlist.json").exists()


def test_recommend_on_a_real_pair_with_modules_names_them(tmp_path):
    """msprobe level mix: construct.json scopes each API call; optimizer calls are not re-planned."""
    a = analyze(str(TRAIN))
    r = TorchNpuReplay(a)
    gold = _rank(TRAIN, "train_fp32")
    construct = json.loads((gold / "construct.json").read_text())
    for c in r.trace.calls:
        parent = construct.get(f"{c.name}.forward")
        want = parent.split(".")[1] if parent and parent.startswith("Module.") else ""
        assert c.module == want
    assert {c.module for c in r.trace.calls} == {"", "fc1", "fc2"}
    assert not any(construct.get(f"{c.name}.forward") == "optimizer" for c in r.trace.calls)
    assert any("optimizer call" in n for n in r.notes) and any("backward API entries" in n for n in r.notes)
    keep = PrecisionPolicy(amp="autocast", dtype="bf16", rules=PolicyRules((KeepRule(module="fc2"),), ()))
    assert [c.node for c in r.changes(keep)] == ["Functional.linear.1"]


@pytest.mark.parametrize("sample, what", [("torch_npu_profile_mstt", "profile only"),
                                          ("msprobe_dump_mstt_ut", "statistics only")])
def test_a_real_run_without_tensors_is_one_line_saying_what_to_dump(tmp_path, capsys, sample, what):
    code = main(["recommend", "--profile", str(REAL / sample), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and what in err and 'task "tensor"' in err and "Traceback" not in err


def test_the_api_table_names_aten_ops():
    assert split_entry("Functional.linear.0.forward") == ("Functional", "linear", 0, "forward")
    assert split_entry("Module.fc1.Linear.forward.0") is None
    assert aten_of("Tensor", "__mul__", [], {}) == ("mul", "default")
    assert aten_of("Aten", "addmm.default", [], {}) == ("addmm", "default")
    assert aten_of("Tensor", "sum", [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2]}, 0], {}) == \
        ("sum", "dim_IntList")
    assert aten_of("Tensor", "pow", [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2]},
                                     {"type": "int", "value": 2}], {}) == ("pow", "Tensor_Scalar")
    assert aten_of("Tensor", "float", [], {}) == ("_to_copy", "default")
    assert all(not k.startswith(("Functional.", "Tensor.")) for k in API_ATEN)


def test_trace_of_dump_refuses_a_dump_without_api_entries(tmp_path):
    import networkx as nx
    from advisor.errors import InputError
    from advisor.ingest.msprobe import load_dump
    d = tmp_path / "dump.json"
    d.write_text(json.dumps({"task": "tensor", "level": "L0", "framework": "pytorch", "data": {}}))
    with pytest.raises(InputError, match="no forward API entry"):
        trace_of_dump(nx.DiGraph(), load_dump(d))


def test_a_real_run_with_a_profile_beside_its_dumps_is_planned_on_the_dumps_calls(tmp_path, capsys):
    """A real run folder holds both: the profile's kernels are not the dump's API calls, the dump's dataflow is used;
    the profile's ACL_PRECISION_MODE (profiler_info) is the run's."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(PAIR, run)
    prof = run / "x_ascend_pt"
    (prof / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    shutil.copy(REAL / "torch_npu_kernel_details_bf16_mstt" / "kernel_details.csv", prof / "ASCEND_PROFILER_OUTPUT")
    (prof / "profiler_info.json").write_text(json.dumps({"config": {"ACL_PRECISION_MODE": "allow_fp32_to_fp16"}}))
    code = main(["recommend", "--profile", str(run), "--out", str(tmp_path / "o")])
    capsys.readouterr()
    rec = json.loads((tmp_path / "o" / "recommendation.json").read_text())
    assert code == 0 and (tmp_path / "o" / "precision_policy.json").is_file()
    assert any("not the profile's kernels" in n for n in rec["notes"])
    code = main(["replay", "--run", str(run), "--amp", "none", "--json"])
    out = json.loads(capsys.readouterr().out)
    # --amp none on ascend910b with the profile's allow_fp32_to_fp16: the fp32 linear's kernel reads fp16
    assert code == 0 and out["amp"] == "none" and out["how"] == "replayed"
    r = TorchNpuReplay(analyze(policy_run(run)), amp="none")
    assert r.config.acl_precision_mode == "allow_fp32_to_fp16"
    assert r.plan().decision("Functional.linear.0").compute == "fp16"


def test_fp16_weights_in_the_mixed_dump_are_said_to_look_like_apex_o2(tmp_path):
    """The real pair with the mixed run's linear weight record retyped float16 (what model.half() dumps)."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(PAIR, run)
    dj = _rank(run, "pair_bf16") / "dump.json"
    doc = json.loads(dj.read_text())
    doc["data"]["Functional.linear.0.forward"]["input_args"][1]["dtype"] = "torch.float16"
    dj.write_text(json.dumps(doc))
    r = TorchNpuReplay(analyze(policy_run(run)))
    assert any("1 fp16 parameter input" in n and "--amp apex-o2" in n for n in r.notes)
    assert not any("fp16 parameter" in n for n in TorchNpuReplay(analyze(str(PAIR))).notes)


def _softmax_pair(tmp_path) -> Path:
    """The real pair judged on its softmax: both dumps without their last call (Tensor.sum, whose output is 16
    whatever the softmax's error), every other entry and tensor as msprobe wrote it."""
    import shutil
    run = tmp_path / "softmax_pair"
    shutil.copytree(PAIR, run)
    for which in ("pair_fp32", "pair_bf16"):
        dj = _rank(run, which) / "dump.json"
        doc = json.loads(dj.read_text())
        doc["data"] = {k: v for k, v in doc["data"].items() if not k.startswith("Tensor.sum.0.")}
        dj.write_text(json.dumps(doc))
    return run


def _oracle(linear_dtype) -> float:
    """rel-L2 of the softmax computed here from the FP32 dump's own tensors with only the linear in ``linear_dtype``
    (operands rounded to it, fp32 accumulation, output rounded to it), everything after it fp32: torch_npu autocast's
    plan for this chain (layer_norm fp32, mul follows, softmax fp32), written out by hand."""
    import torch.nn.functional as F
    g = _rank(PAIR, "pair_fp32")
    x, w, b = (_tensor(g, f"Functional.linear.0.forward.input.{i}.pt") for i in range(3))
    if linear_dtype is not None:
        x, w, b = (t.to(linear_dtype).float() for t in (x, w, b))
    h = F.linear(x, w, b)
    h = h.to(linear_dtype).float() if linear_dtype is not None else h
    gamma, beta = (_tensor(g, f"Functional.layer_norm.0.forward.input.{i}.pt") for i in (2, 3))
    y = torch.softmax(F.layer_norm(h, (h.shape[-1],), gamma, beta, 1e-5) * 30.0, dim=-1).double()
    want = _tensor(g, "Torch.softmax.0.forward.output.0.pt").double()
    return float((y - want).norm() / want.norm())


def test_the_search_on_real_tensors_picks_what_a_hand_computed_oracle_picks(tmp_path, capsys):
    """On the real pair judged on its softmax with rel-L2 <= 0.005: torch_npu's bf16 linear fails, and the advice
    is the change an oracle computed by hand from the dump's tensors says meets the tolerance with the most compute
    low (fp16 keeps the linear low; keeping it fp32 keeps nothing low)."""
    run = _softmax_pair(tmp_path)
    bf16, fp16, fp32 = _oracle(torch.bfloat16), _oracle(torch.float16), _oracle(None)
    assert fp32 < 1e-6 and fp16 < 0.005 < bf16                         # the oracle's own verdicts
    code = main(["recommend", "--profile", str(run), "--out", str(tmp_path / "o"), "--max-rel-l2", "0.005"])
    capsys.readouterr()
    rec = json.loads((tmp_path / "o" / "recommendation.json").read_text())
    assert code == 0 and rec["status"] == "recommended"
    assert [e["kind"] for e in rec["precision_policy"]["edits"]] == ["dtype"]
    assert read_policy(tmp_path / "o" / "precision_policy.json").dtype == "fp16"
    pred = rec["predicted"]
    assert pred["base"]["final_rel_l2"] == pytest.approx(bf16, rel=0.02)
    assert pred["recommended"]["final_rel_l2"] == pytest.approx(fp16, rel=0.02)
    # without the dtype option: keep the linear fp32 (everywhere, or the whole model: module '' at level L1)
    code = main(["recommend", "--profile", str(run), "--out", str(tmp_path / "o2"), "--max-rel-l2", "0.005",
                 "--exclude", "dtype"])
    capsys.readouterr()
    rec = json.loads((tmp_path / "o2" / "recommendation.json").read_text())
    assert code == 0 and rec["precision_policy"]["edits"][0]["predicted_flips"][0]["node"] == "Functional.linear.0"
    assert rec["predicted"]["recommended"]["final_rel_l2"] == pytest.approx(fp32, abs=1e-6)


def test_apex_o2_on_the_real_trace_is_the_half_model(pair):
    """--amp apex-o2: the model's input enters through its own forward (O2's input caster) and its weights are half,
    so every call computes fp16; keeping the whole model fp32 undoes it."""
    a, _ = pair
    r = TorchNpuReplay(a, amp="apex-o2")
    assert r.config.dtype == "fp16" and any("Apex casts to float16 only" in n for n in r.notes)
    assert {d.compute for d in r.plan().decisions} == {"fp16"}
    keep = PrecisionPolicy(amp="apex-o2", dtype="fp16", rules=PolicyRules((KeepRule(module=""),), ()))
    assert {d.compute for d in r.plan(keep).decisions} == {"fp32"}


def test_a_capture_read_as_a_real_run_plans_and_advises_as_its_recorded_trace(tmp_path, capsys):
    """The oracle is the dispatcher: profiles/two_hazards_npu (a torch_npu capture) stripped of what only advisor
    writes (run.json, torch_npu_trace.json, the GE graph, local_error.csv) is a real-looking run of msprobe-format
    Aten dumps and a profile.  Its trace rebuilt from the FP32 dump gives every kernel the dtype the recorded trace
    gives it under each policy, and recommend gives the capture's advice."""
    import shutil
    from advisor.semantics.torch_npu_trace import FILE
    src = Path(__file__).resolve().parents[1] / "profiles" / "two_hazards_npu"
    run = tmp_path / "run"
    shutil.copytree(src, run, ignore=shutil.ignore_patterns("advice"))
    for name in ("run.json", FILE, "local_error.csv", "precision_policy.json"):
        (run / name).unlink(missing_ok=True)
    shutil.rmtree(run / "graph")
    real = TorchNpuReplay(analyze(policy_run(run)))
    cap = TorchNpuReplay(analyze(str(src)))
    assert [c.name for c in real.trace.calls] == [c.name for c in cap.trace.calls]
    kernels = [c.name for c in cap.trace.calls if c.kernel]
    assert len(kernels) == 10
    for rules, dtype in (((), "fp16"), ((), "bf16"), ((KeepRule(op="sigmoid"),), "fp16"),
                         ((KeepRule(op="exp"), KeepRule(op="log")), "fp16")):
        pol = PrecisionPolicy(amp="autocast", dtype=dtype, rules=PolicyRules(rules, ()))
        a, b = real.plan(pol), cap.plan(pol)
        assert [a.exec_dtypes(n) for n in kernels] == [b.exec_dtypes(n) for n in kernels], rules
    # what an aten-level dump cannot tell, said: addmm ran inside linear (the capture knows), the dump reads it as
    # called itself, so a rule naming it reaches it there only
    assert any("msprobe level L2" in n for n in real.notes)
    pol = PrecisionPolicy(amp="autocast", dtype="fp16", rules=PolicyRules((KeepRule(op="addmm"),), ()))
    assert real.plan(pol).exec_dtypes("Aten.addmm.default.0") == ("fp32", "fp32")
    assert cap.plan(pol).exec_dtypes("Aten.addmm.default.0") == ("fp16", "fp16")
    code = main(["recommend", "--profile", str(run), "--out", str(tmp_path / "o")])
    capsys.readouterr()
    got = json.loads((tmp_path / "o" / "recommendation.json").read_text())
    code2 = main(["recommend", "--profile", str(src), "--out", str(tmp_path / "c")])
    capsys.readouterr()
    want = json.loads((tmp_path / "c" / "recommendation.json").read_text())
    assert code == code2 == 0
    assert got["precision_policy"]["policy"] == want["precision_policy"]["policy"]
    assert got["predicted"]["recommended"]["final_rel_l2"] == want["predicted"]["recommended"]["final_rel_l2"]
