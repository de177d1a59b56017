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


@pytest.mark.slow
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


# ---------------------------------------------------------------------- slots (tune --parallel)
class _RecordingWorker:
    """Stands in for the capture child: records what each capture request carried."""

    requests: list[dict] = []

    def __init__(self):
        pass

    def capture(self, target, out, **kw):
        from advisor.runners.worker import CaptureReply
        kw = {k: v for k, v in kw.items() if k not in ("stdout", "stderr", "heartbeat", "mixlist")}
        _RecordingWorker.requests.append({"target": target, **kw})
        return CaptureReply("ok", str(out))

    def close(self):
        pass


def _setting_value(name: str, annotation: str, tmp_path: Path):
    """A value other than the default for each constructor setting, by its annotation."""
    if "list" in annotation:
        return [f"{name}-value"]
    if "int" in annotation and "float" not in annotation:
        return 7
    if "float" in annotation:
        return 123.0
    return f"{tmp_path / name}.cfg"


def test_every_setting_reaches_every_slots_capture(tmp_path, monkeypatch):
    """tune --parallel: each slot's capture carries every setting of the runner -- derived from the constructor's
    own parameters, so a setting added later is checked too (slot 1+ used to drop --keep-dtype, --customize-dtypes,
    --inputs and --input-shape)."""
    import inspect
    import advisor.runners.worker as worker
    monkeypatch.setattr(worker, "CaptureWorker", _RecordingWorker)
    _RecordingWorker.requests = []
    params = [p for p in inspect.signature(EmulatorRunner.__init__).parameters.values()
              if p.name not in ("self", "target")]
    settings = {p.name: _setting_value(p.name, str(p.annotation), tmp_path) for p in params}
    r = EmulatorRunner("wl.py:workload", **settings)
    for i in range(3):
        slot = r.slot(i)
        slot.run(None, "mixed_float16", tmp_path / f"iter_{i:02d}" / "run")
    first, *others = _RecordingWorker.requests
    assert len(others) == 2 and all(o == first for o in others), _RecordingWorker.requests
    carried = {**first, "input_shapes": first.get("input_shapes"), "timeout": first.get("timeout")}
    for name, value in settings.items():
        assert value in carried.values(), f"setting {name}={value!r} did not reach the capture: {first}"


def test_capture_child_starts_without_importing_the_runners():
    """The capture child (``python -m advisor.runners.worker``) loads the user's workload before anything else:
    importing it must not pull in the runners, the mixlist or the lint modules (they cost ~0.2 s of a refusal that
    has to wait for the workload's own import)."""
    import subprocess
    import sys
    code = ("import sys, advisor.runners.worker, advisor.workload; "
            "print(sorted(m for m in ('advisor.mixlist', 'advisor.lint', 'advisor.runners.base', "
            "'advisor.runners.emulator', 'advisor.runners.command', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
