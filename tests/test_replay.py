"""Replay re-executes a recorded FP32 run under a candidate plan; its verdict must equal a fresh capture.

The oracle is independent of the replay: a fresh ``advisor capture`` with the candidate mixlist (the emulator
re-runs the workload itself), judged by compare's ``final_metrics``.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from advisor import mixlist as mx
from advisor import semantics
from advisor.compare.judge import judged_steps
from advisor.compare.dumps import as_steps
from advisor.emulator import capture
from advisor.ingest import load_run
from advisor.numerics import resolve as resolve_numerics
from advisor.oplists import load_lists
from advisor.replay import Recording, graph_from_recording, precisions, resolve, tensor_of

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
REAL_PAIR = Path(__file__).resolve().parent / "fixtures" / "real" / "msprobe_dump_pair_cpu"
LISTS = load_lists("ascend910b")


def _plan(run, mixlist):
    return semantics.plan(run.graph, mx.effective(LISTS, mixlist), run.meta.get("mode", "mixed_float16"))


def _close(a: dict, b: dict) -> bool:
    oa, ob = a["output"], b["output"]
    if bool(oa.get("finite", True)) != bool(ob.get("finite", True)):
        return False
    if not oa.get("finite", True):
        return True
    ra, rb = oa["rel_l2"], ob["rel_l2"]
    return abs(ra - rb) <= max(0.05 * abs(rb), 1e-6)


def _random_lists(types: list[str], n: int, seed: int) -> list[mx.Mixlist]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        black = tuple(sorted(rng.sample(types, k=rng.randint(1, min(3, len(types))))))
        white_rm = tuple(t for t in types if t not in black and LISTS.list_of(t) == "white" and rng.random() < 0.3)
        out.append(mx.Mixlist(black_add=black, white_remove=white_rm))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp_exp", "two_hazards", "transformer_hazard", "layernorm_bias",
                                  "cnn_control", "mlp_train_underflow"])
@pytest.mark.slow
def test_replay_of_random_lists_equals_a_fresh_capture(tmp_path, name):
    target = f"{EXAMPLES / name}.py:workload"
    base = capture(target, tmp_path / "base", dump="tensors", local=False)
    run = load_run(base)
    rec = Recording.from_golden(run.golden_dump, run.graph, str(base))
    types = sorted({a["type"] for _, a in run.graph.nodes(data=True)
                    if a.get("role") == "op" and a.get("float", True) and a.get("kernel", True)
                    and LISTS.list_of(a["type"]) != "black"})
    numerics, _ = resolve_numerics(run.meta.get("soc"), meta=run.meta)   # the run's overflow mode and HF32
    for i, m in enumerate([None] + _random_lists(types, 5, seed=len(name))):
        r = rec.replay(precisions(_plan(run, m)), numerics=numerics)
        assert r.complete, r.not_replayed
        fresh = load_run(capture(target, tmp_path / f"c{i}", mixlist=m, dump="stats", local=False))
        measured = judged_steps(fresh.target_dump, fresh.golden_dump, sorted(fresh.target_dump))[0]
        predicted = r.final_metrics()
        assert [x["step"] for x in predicted] == [x["step"] for x in measured]
        for p, q in zip(predicted, measured):
            assert _close(p, q), (name, m and m.to_dict(), p["output"], q["output"])
            assert (p.get("grad_min_cosine") is None) == (q.get("grad_min_cosine") is None)
            if q.get("grad_min_cosine") is not None:
                assert abs(p["grad_min_cosine"] - q["grad_min_cosine"]) <= 1e-6
            if q.get("loss"):
                assert abs(p["loss"]["rel_diff"] - q["loss"]["rel_diff"]) <= max(0.05 * q["loss"]["rel_diff"], 1e-9)


def test_an_all_fp32_plan_reexecutes_nothing_and_reproduces_the_golden(tmp_path):
    run = load_run(capture(f"{EXAMPLES / 'mlp_exp'}.py:workload", tmp_path / "r", dump="tensors", local=False,
                           batches=2))
    rec = Recording.from_golden(run.golden_dump, run.graph)
    r = rec.replay({n: "fp32" for n in run.graph})
    assert r.needed == 0 and r.coverage == 1.0
    for fm in r.final_metrics():
        assert fm["output"]["rel_l2"] == 0.0


def test_only_ops_downstream_of_a_change_run_again(tmp_path):
    run = load_run(capture(f"{EXAMPLES / 'mlp_exp'}.py:workload", tmp_path / "r", dump="tensors", local=False,
                           batches=1))
    rec = Recording.from_golden(run.golden_dump, run.graph)
    prec = {n: "fp32" for n in run.graph}
    last = [n for n, a in run.graph.nodes(data=True) if a.get("type") == "MatMulV2"][-1]
    prec[last] = "fp16"      # only the last matmul in low precision: nothing upstream runs again
    r = rec.replay(prec)
    assert r.needed == 1
    fm = r.final_metrics()[0]["output"]
    assert 0 < fm["rel_l2"] < 1e-2


def test_a_statistics_only_dump_is_reported_not_replayed(tmp_path):
    run = load_run(capture(f"{EXAMPLES / 'mlp_exp'}.py:workload", tmp_path / "r", dump="stats", local=False,
                           batches=1))
    rec = Recording.from_golden(run.golden_dump, run.graph)
    r = rec.replay(precisions(_plan(run, None)))
    assert r.coverage == 0.0 and r.needed > 0
    assert all("not dumped" in why for why in r.not_replayed.values())


def test_entry_names_resolve_to_callables():
    assert resolve("Aten.addmm.default.3.forward")[0] is torch.ops.aten.addmm.default
    assert resolve("Functional.linear.0.forward")[0] is torch.nn.functional.linear
    assert resolve("Tensor.__mul__.0.forward")[0] is torch.Tensor.__mul__
    assert resolve("Torch.softmax.0.forward")[0] is torch.softmax
    assert resolve("Functional.linear.0.backward")[0] is None
    func, why = resolve("NPU.npu_fusion_attention.0.forward")
    assert func is None and "not replayable" in why
    assert resolve("Aten.no_such_op.default.0.forward")[0] is None


def test_real_msprobe_fp32_dump_replays_and_reproduces_the_real_bf16_dump():
    """msprobe 26.2.0 tensor dumps (CPU): replaying the FP32 dump with every op in bf16 gives, op by op,
    exactly what CPU autocast bf16 dumped (linear, layer_norm, mul, softmax)."""
    gold = as_steps(REAL_PAIR / "pair_fp32")
    targ = as_steps(REAL_PAIR / "pair_bf16")
    rec = Recording.from_golden(gold, None, "pair_fp32")
    g = graph_from_recording(rec)
    types = {a["type"] for _, a in g.nodes(data=True) if a["role"] == "op"}
    assert types == {"MatMulV2", "LayerNormV4", "Mul", "SoftmaxV2", "ReduceSum"}
    # linear and layer_norm weights: graph inputs (ge.Data) as torchair builds the graph
    params = [n for n, a in g.nodes(data=True) if str(n).startswith("Param.")]
    assert len(params) == 4 and all(g.nodes[n]["type"] == "Data" for n in params)
    # the default plan: coverage of the forward ops is complete; backward entries are listed, not replayed
    plan = semantics.plan(g, LISTS, "mixed_bfloat16")
    r = rec.replay(precisions(plan))
    assert r.coverage == 1.0 and r.needed == 5             # 4 ops in bf16 + ReduceSum (black) on new inputs
    assert 0 < r.final_metrics()[0]["output"]["rel_l2"] < 1e-3
    backward = [op.entry for op in rec.programs[0].ops if op.func is None]
    assert len(backward) == 5 and all(e.endswith(".backward") for e in backward)
    everything = {n: "bf16" for n, a in g.nodes(data=True) if a["role"] == "op"}
    r = rec.replay(everything)
    tv = targ[0]
    for e in ("Functional.linear.0.forward", "Functional.layer_norm.0.forward", "Tensor.__mul__.0.forward",
              "Torch.softmax.0.forward"):
        replayed = r.targets[0].outputs(e)[0][1]["tensor"]
        real = tensor_of(tv, tv.outputs(e)[0][1])
        assert torch.equal(replayed.to(torch.bfloat16), real), e


def test_cli_replay_exit_codes_json_and_a_dump_only_run(tmp_path, capsys):
    import json

    from advisor.cli import main
    run = capture(f"{EXAMPLES / 'two_hazards'}.py:workload", tmp_path / "r", dump="tensors", local=False, batches=2)
    one, both = tmp_path / "one.json", tmp_path / "both.json"
    one.write_text('{"black-list": {"to-add": ["Exp"]}}')
    both.write_text('{"black-list": {"to-add": ["Exp", "Sigmoid"]}}')
    assert main(["replay", "--run", str(run), "--mixlist", str(one)]) == 1      # Sigmoid's -inf remains
    capsys.readouterr()
    assert main(["replay", "--run", str(run), "--mixlist", str(both), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"]["ok"] and out["how"] == "replayed" and out["coverage"]["coverage"] == 1.0
    assert 0 < out["low_precision_share"]["value"] < 1
    assert main(["replay", "--run", str(run), "--step", "7"]) == 2
    # a directory with msprobe dumps only: the graph is the FP32 dump's dataflow (a PyTorch dump reads as torch_npu:
    # --engine ge replays it under GE's lists)
    assert main(["replay", "--run", str(REAL_PAIR), "--mode", "mixed_bfloat16", "--engine", "ge", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["coverage"]["needed"] == 5 and out["coverage"]["coverage"] == 1.0
