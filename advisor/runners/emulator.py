"""The default runner: the embedded CPU emulator (``advisor.emulator.capture``).

Each capture executes the FP32 reference and the mixed run of the workload and writes both
dumps, so every run directory carries its own golden (``has_reference=True``).
"""
from __future__ import annotations

import shutil
import time
import traceback
from pathlib import Path

from ..errors import AdvisorError, InputError
from ..mixlist import Mixlist
from .base import FAILED, OK, Runner, RunResult, write_mixlist_file


class EmulatorRunner(Runner):
    name = "emulator"

    def __init__(self, target, soc: str | None = None, ops_info: str | None = None, seed: int = 0,
                 dump: str | None = None, batches: int | None = None):
        self.target = target
        self.soc, self.ops_info, self.seed, self.dump, self.batches = soc, ops_info, seed, dump, batches

    def describe(self) -> dict:
        return {"runner": self.name, "target": str(self.target) if isinstance(self.target, (str, Path)) else
                repr(type(self.target)), "soc": self.soc, "ops_info": self.ops_info, "seed": self.seed,
                "dump": self.dump, "batches": self.batches}

    def prepare(self, out_dir: Path) -> None:
        """Cheap check of a TARGET string (the file or module exists); the workload itself is built by
        each capture -- building it here too would cost a model load and shift framework auto-names."""
        if not isinstance(self.target, (str, Path)):
            return
        t = str(self.target)
        mod, sep, fn = t.rpartition(":")
        if not sep or not mod or not fn:
            raise InputError(t, "TARGET must be path/to/file.py:function or package.module:function")
        if mod.endswith(".py"):
            if not Path(mod).is_file():
                raise InputError(mod, "no such workload file")
            return
        import importlib.util
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise InputError(t, f"cannot find module {mod!r}")

    def run(self, mixlist: Mixlist | None, mode: str, run_dir: Path) -> RunResult:
        run_dir = Path(run_dir)
        if run_dir.exists():  # a partial capture from an interrupted run: ours to replace
            shutil.rmtree(run_dir)
        ml_path = write_mixlist_file(mixlist, run_dir.parent / "mixlist_used.json")
        t0 = time.monotonic()
        try:
            capture_run(self.target, run_dir, mode=mode, mixlist=ml_path, soc=self.soc, ops_info=self.ops_info,
                        seed=self.seed, dump=self.dump, batches=self.batches)
        except InputError:
            if mixlist is None:   # fails with the default lists too: the workload/target is the problem
                raise
            tb = traceback.format_exc(limit=3)
            (run_dir.parent / "capture_error.txt").write_text(tb, encoding="utf-8")
            return RunResult(str(run_dir), FAILED, f"capture failed with this list: {traceback.format_exc(0).strip()}",
                             None, time.monotonic() - t0, False, 2)
        except (AdvisorError, Exception) as e:  # noqa: BLE001 - a failed run is recorded, not fatal
            tb = traceback.format_exc(limit=3)
            (run_dir.parent / "capture_error.txt").write_text(tb, encoding="utf-8")
            return RunResult(str(run_dir), FAILED, f"capture failed: {type(e).__name__}: {e}", None,
                             time.monotonic() - t0, False, 2)
        return RunResult(str(run_dir), OK, "", 0, time.monotonic() - t0, True, 2)


def capture_run(target, out: Path, **kw) -> Path:
    """Adapter to the emulator stage (one place to change if its signature moves)."""
    from ..emulator import capture
    kw = {k: v for k, v in kw.items() if v is not None or k == "mixlist"}
    if kw.get("mixlist") is not None:
        kw["mixlist"] = str(kw["mixlist"])
    return capture(target, out, **kw)
