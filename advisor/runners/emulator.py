"""The default runner: the embedded CPU emulator (``advisor.emulator.capture``).

Each capture executes the FP32 reference and the mixed run of the workload and writes both
dumps, so every run directory carries its own golden (``has_reference=True``).

A TARGET string is captured in a child process (``runners.worker``): the workload's prints go to
``stdout.txt`` / ``stderr.txt`` beside the run directory (never to advisor's stdout), ``timeout``
seconds kill it (a ``timeout`` run, recorded like any failed run), and a workload that ends the
process is reported, not fatal to the loop.  A Workload object (library use) is captured in
process, without a timeout.
"""
from __future__ import annotations

import copy
import shutil
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import AdvisorError, InputError
from ..fsutil import make_out_dir
from ..mixlist import Mixlist
from ..workload import check_target, framework_of, is_onnx_target
from .base import (FAILED, OK, TIMEOUT, Heartbeat, Runner, RunResult, write_customize_file, write_keep_file,
                   write_mixlist_file, write_policy_file)


class EmulatorRunner(Runner):
    name = "emulator"

    def __init__(self, target, soc: str | None = None, ops_info: Any = None, seed: int = 0,
                 dump: str | None = None, batches: int | None = None, timeout: float | None = None,
                 keep_dtype: str | None = None, customize_dtypes: str | None = None,
                 inputs: list[str] | None = None, input_shapes: list[str] | None = None,
                 overflow_mode: str | None = None, allow_hf32: str | None = None, cann: str | None = None):
        self.target = target
        self.soc, self.ops_info, self.seed, self.dump, self.batches = soc, ops_info, seed, dump, batches
        self.cann = cann
        self.timeout = timeout
        # per-op overrides applied in every run (ATC --keep_dtype / --customize_dtypes), ONNX inputs and the
        # chip's overflow mode / HF32 (advisor.numerics)
        self.fixed = {k: v for k, v in (("keep_dtype", keep_dtype), ("customize_dtypes", customize_dtypes),
                                        ("inputs", list(inputs or ())), ("input_shapes", list(input_shapes or ())),
                                        ("overflow_mode", overflow_mode), ("allow_hf32", allow_hf32))
                      if v}
        self._worker = None   # runners.worker.CaptureWorker, started by the first run

    def describe(self) -> dict:
        return {"runner": self.name, "target": str(self.target) if isinstance(self.target, (str, Path)) else
                repr(type(self.target)), "soc": self.soc, "ops_info": self.ops_info, "cann": self.cann,
                "seed": self.seed, "dump": self.dump, "batches": self.batches, "timeout": self.timeout, **self.fixed}

    def prepare(self, out_dir: Path) -> None:
        """Cheap check of a TARGET string (the file or module exists); the workload itself is built by
        each capture -- building it here too would cost a model load and shift framework auto-names."""
        if self.timeout is not None and not self.timeout >= 0:
            raise InputError("--timeout", f"must be a number of seconds > 0 (0: no limit), not {self.timeout}")
        if not isinstance(self.target, (str, Path)):
            if self.timeout:
                raise InputError("--timeout", "needs a TARGET string (the workload then runs in a child process "
                                              "that can be stopped)")
            return
        check_target(str(self.target))

    @property
    def limit(self) -> float | None:
        """A TARGET string's capture runs in a child that can be stopped: the default limit applies; a Workload
        object is captured in this process, without one."""
        return super().limit if isinstance(self.target, (str, Path)) else None

    def slot(self, index: int) -> "EmulatorRunner":
        """Concurrent slots each get their own capture child (CPU runs: they share the machine's cores) and every
        setting of this runner: a copy of it, not a re-construction that could miss one."""
        if index == 0:
            return self
        twin = copy.copy(self)              # every setting (__getstate__: not the capture child)
        twin.fixed = copy.deepcopy(self.fixed)
        twin.progress = self.progress
        return twin

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_worker"] = None             # the capture child is this process's: a copy starts its own
        return state

    def workload_facts(self) -> Callable[[], dict]:
        """What a command checks before any run: ``{"batches": n, "trains": bool, "framework": pytorch | tensorflow |
        onnx}`` -- an ONNX file's ``--inputs``
        (one batch without them; it never trains), a Workload object's own, else the workload loaded -- not run --
        in the capture child (which then serves the captures).  Returns at once (the child loads the workload
        meanwhile); calling the result gives the facts, or raises InputError for a target that cannot be loaded."""
        if not isinstance(self.target, (str, Path)):
            n = len(self.target.batches) if isinstance(getattr(self.target, "batches", None), list) else None
            trains = bool(getattr(self.target, "trains", False))
            fw = framework_of(self.target.model) if hasattr(self.target, "model") else "pytorch"   # a tuple
            return lambda: {"batches": self._kept(n), "trains": trains, "framework": fw}
        if is_onnx_target(str(self.target)):
            return lambda: {"batches": self._kept(len(self.fixed.get("inputs") or ()) or 1), "trains": False,
                            "framework": "onnx"}
        if self._worker is None:
            from .worker import CaptureWorker  # not at import: ``python -m advisor.runners.worker`` runs it
            self._worker = CaptureWorker()
        pending = self._worker.probe(str(self.target), timeout=self.limit)

        def facts() -> dict:
            reply = pending()
            if not reply.ok:
                raise reply.exception(self.target)
            return {"batches": self._kept(reply.facts.get("batches")), "trains": bool(reply.facts.get("trains")),
                    "framework": reply.facts.get("framework", "pytorch")}
        return facts

    def count_batches(self) -> Callable[[], int | None]:
        """The workload's batch count before any run (``workload_facts``' ``batches``)."""
        facts = self.workload_facts()
        return lambda: facts()["batches"]

    def _kept(self, n: int | None) -> int | None:
        """``n`` batches as the runs keep them (``batches``: the first N only)."""
        return min(n, self.batches) if n is not None and isinstance(self.batches, int) else n

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def scoped_dumps(self) -> bool:
        return True

    def run(self, mixlist: Mixlist | None, mode: str, run_dir: Path, loss_scale: float | None = None,
            keep_dtype: Sequence[str] = (), dump_tensors: Sequence[str] = (),
            customize_dtypes: Sequence[str] = (), engine: dict | None = None, policy: Any = None) -> RunResult:
        """One capture into ``run_dir``; ``policy``: a torch_npu precision policy (``PrecisionPolicy`` or a
        precision_policy.json path), written beside the run as ``precision_policy_used.json`` and applied by the
        capture on the torch_npu engine with the policy's amp, as ``advisor capture --policy`` applies it;
        ``engine``: the capture's ``engine`` / ``amp`` / ``policy`` given directly."""
        run_dir = Path(run_dir)
        if run_dir.exists():  # a run whose iteration was not recorded (interrupted tune): ours to replace
            shutil.rmtree(run_dir)
        ml_path = write_mixlist_file(mixlist, run_dir.parent / "mixlist_used.json")
        kw = {"mode": mode, "mixlist": str(ml_path) if ml_path else None, "soc": self.soc,
              "ops_info": self.ops_info, "cann": self.cann, "seed": self.seed, "dump": self.dump,
              "batches": self.batches, "loss_scale": loss_scale}
        kw = {k: v for k, v in kw.items() if v is not None or k == "mixlist"}
        kw.update(self.fixed)
        kw.update(engine or {})
        used = write_policy_file(policy, run_dir.parent / "precision_policy_used.json")
        if used is not None:          # what the run applies is the file beside it (the command runner's too)
            from ..precision_policy import read_policy
            kw.update(engine="torch_npu", amp=read_policy(used).amp, policy=str(used.resolve()))
        if dump_tensors:              # statistics for every op, tensors for these too (msprobe tensor_list)
            kw["dump_tensors"] = list(dump_tensors)
        keep = write_keep_file(keep_dtype, run_dir.parent / "keep_dtype_used.cfg", self.fixed.get("keep_dtype"))
        if keep is not None:          # the user's own keep lines and the candidate's, in one ATC file
            kw["keep_dtype"] = str(keep)
        custom = write_customize_file(customize_dtypes, run_dir.parent / "customize_dtypes_used.cfg",
                                      self.fixed.get("customize_dtypes"))
        if custom is not None:        # likewise the customize_dtypes entries
            kw["customize_dtypes"] = str(custom)
        if isinstance(self.target, (str, Path)):
            return self._run_isolated(mixlist, run_dir, kw)
        t0 = time.monotonic()
        try:
            capture_run(self.target, run_dir, **kw)
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

    def _run_isolated(self, mixlist: Mixlist | None, run_dir: Path, kw: dict) -> RunResult:
        out_path, err_path = run_dir.parent / "stdout.txt", run_dir.parent / "stderr.txt"
        make_out_dir(run_dir.parent)
        if self._worker is None:
            from .worker import CaptureWorker  # not at import: ``python -m advisor.runners.worker`` runs it
            self._worker = CaptureWorker()
        t0 = time.monotonic()
        beat = Heartbeat(self.progress, run_dir.parent.name, self.limit) if self.progress is not None else None
        reply = self._worker.capture(str(self.target), run_dir, timeout=self.limit, stdout=out_path,
                                     stderr=err_path, heartbeat=beat, **kw)
        dur = time.monotonic() - t0
        if reply.ok:
            return RunResult(str(run_dir), OK, "", 0, dur, True, 2, str(out_path), str(err_path))
        err = reply.exception(self.target)
        if reply.status == TIMEOUT:
            return RunResult(str(run_dir), TIMEOUT, reply.message, None, dur, False, 2, str(out_path), str(err_path))
        if reply.user_error and mixlist is None:  # fails with the default lists: the workload is the problem
            raise err
        (run_dir.parent / "capture_error.txt").write_text(reply.error.get("traceback") or f"{err}\n",
                                                          encoding="utf-8")
        what = "capture failed with this list" if reply.user_error else "capture failed"
        return RunResult(str(run_dir), FAILED, f"{what}: {err}", reply.returncode, dur, False, 2, str(out_path),
                         str(err_path))


def capture_run(target, out: Path, **kw) -> Path:
    """Adapter to the emulator stage (one place to change if its signature moves)."""
    from ..emulator import capture
    return capture(target, out, **kw)
