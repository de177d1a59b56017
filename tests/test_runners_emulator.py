"""The emulator runner: target validation before any run, failed captures recorded not raised."""
from __future__ import annotations

from pathlib import Path

import pytest

from advisor.errors import InputError
from advisor.mixlist import Mixlist
from advisor.runners import EmulatorRunner
from advisor.runners.base import FAILED, OK

EX = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("target, msg", [("nofunction", "TARGET must be"), ("/nonexistent/wl.py:workload",
                                         "no such workload file"), ("no_such_pkg_xyz.mod:workload", "cannot find")])
def test_bad_targets_refused_in_prepare(tmp_path, target, msg):
    with pytest.raises(InputError, match=msg):
        EmulatorRunner(target).prepare(tmp_path)


def test_capture_with_mixlist_and_crashing_workload(tmp_path):
    r = EmulatorRunner(f"{EX / 'mlp_exp.py'}:workload")
    r.prepare(tmp_path)
    res = r.run(Mixlist(black_add=("Exp",)), "mixed_float16", tmp_path / "iter_01" / "run")
    assert res.status == OK and res.has_reference and res.executions == 2
    assert (tmp_path / "iter_01" / "mixlist_used.json").exists()
    assert (tmp_path / "iter_01" / "run" / "dump" / "fp32").is_dir()
    bad = tmp_path / "crash.py"
    bad.write_text("import torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n"
                   "        raise RuntimeError('device lost')\n\n\ndef workload():\n    return M(), [(torch.ones(2),)]\n")
    # with the default lists a crash is the workload's problem: one-line InputError (exit 2)
    with pytest.raises(InputError, match="device lost"):
        EmulatorRunner(f"{bad}:workload").run(None, "mixed_float16", tmp_path / "iter_00" / "run")
    # with a list it may be the list's doing: recorded as a failed run, the loop goes on
    res = EmulatorRunner(f"{bad}:workload").run(Mixlist(black_add=("Exp",)), "mixed_float16",
                                                tmp_path / "iter_02" / "run")
    assert res.status == FAILED and "device lost" in res.message
    assert (tmp_path / "iter_02" / "capture_error.txt").exists()
