"""The command runner hands a torch_npu precision policy to the user's command (``ADVISOR_POLICY``) and the workload
side applies it with ``cfg.apply_policy(model)`` -- here in a real subprocess, with a fake of torch_npu's small
surface (``torch_npu.npu.set_option``; torch_npu is never installed)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from advisor.precision_policy import parse_policy, read_policy
from advisor.runners import CommandRunner
from advisor.runners.base import OK

ROOT = Path(__file__).parent.parent

POLICY = {"schema": "advisor.precision_policy/1", "version": 1, "engine": "torch_npu", "amp": "autocast",
          "dtype": "float16", "rules": {"keep_fp32": [{"op": "mul"}]}}

# the user's script: a fake torch_npu, advisor.npu.apply(), cfg.apply_policy(model), a profile and what it saw
SCRIPT = r"""
import json, os, pathlib, sys, types
import torch
fake = types.ModuleType("torch_npu")
fake.npu = types.SimpleNamespace(set_option=lambda d: None)
sys.modules["torch_npu"] = fake
import advisor.npu
cfg = advisor.npu.apply(framework="torch")

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
    def forward(self, x):
        h = self.fc(x)
        return h, h * h

m = Net()
applied = cfg.apply_policy(m, device_type="cpu")        # the CPU's autocast key stands in for the NPU's
with torch.autocast("cpu", dtype=torch.float16):
    h, h2 = m(torch.randn(2, 4))
rd = pathlib.Path(os.environ["ADVISOR_RUN_DIR"])
k = rd / "profile" / "w_ascend_pt" / "ASCEND_PROFILER_OUTPUT"; k.mkdir(parents=True)
(k / "kernel_details.csv").write_text("Name,Type\n")
(rd / "seen.json").write_text(json.dumps({"policy": os.environ["ADVISOR_POLICY"], "applied": applied is not None,
                                          "h": str(h.dtype), "h2": str(h2.dtype)}))
"""


def _runner() -> CommandRunner:
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    return CommandRunner([sys.executable, "-c", SCRIPT], timeout=120, env=env)


def test_policy_reaches_the_command_and_cfg_apply_policy_keeps_the_op_fp32(tmp_path):
    res = _runner().run(None, "mixed_float16", tmp_path / "i" / "run", policy=parse_policy(POLICY, "p.json"))
    assert res.status == OK, res.message
    seen = json.loads((tmp_path / "i" / "run" / "seen.json").read_text())
    assert read_policy(seen["policy"]).to_dict()["rules"] == POLICY["rules"]
    assert seen["applied"] and seen["h"] == "torch.float16" and seen["h2"] == "torch.float32"


def test_policy_given_as_a_file_is_passed_on(tmp_path):
    f = tmp_path / "precision_policy.json"
    f.write_text(json.dumps(POLICY))
    _runner().run(None, "mixed_float16", tmp_path / "i" / "run", policy=str(f))
    seen = json.loads((tmp_path / "i" / "run" / "seen.json").read_text())
    assert Path(seen["policy"]).name == "precision_policy_used.json" and seen["h2"] == "torch.float32"


def test_no_policy_is_an_empty_variable_and_cfg_apply_policy_does_nothing(tmp_path):
    res = _runner().run(None, "mixed_float16", tmp_path / "i" / "run")
    seen = json.loads((tmp_path / "i" / "run" / "seen.json").read_text())
    assert res.ok and seen["policy"] == "" and not seen["applied"] and seen["h2"] == "torch.float16"
