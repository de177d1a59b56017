"""Run a user's own command (e.g. an NPU training script) as one tuning run.

The command gets, in its environment:

``ADVISOR_MIXLIST``   absolute path of the modify_mixlist JSON to use ("" = the default lists)
``ADVISOR_MODE``      precision mode (``mixed_float16``, ``mixed_bfloat16``, ``must_keep_origin_dtype``, ...)
``ADVISOR_RUN_DIR``   the run directory it must write (it does not exist yet; profile under
                      ``profile/``, msprobe dumps under ``dump/mixed/`` -- and ``dump/fp32/`` too if it
                      computes its own golden; otherwise tune runs the command once as the reference)
``ADVISOR_DUMP_DIR``  convenience: ``$ADVISOR_RUN_DIR/dump/mixed``
``ADVISOR_PROFILE_DIR`` convenience: ``$ADVISOR_RUN_DIR/profile``
``ADVISOR_REFERENCE`` "1" for the FP32 reference run, else "0"
``ADVISOR_KEEP_DTYPE`` an ATC --keep_dtype file the run adds (per-op advice; "" = none): pass it to atc /
                    the IR build (``tune --granularity op``)
``ADVISOR_CUSTOMIZE_DTYPES`` an ATC --customize_dtypes file the run adds (per-op advice: an op's fp16 inputs
                    and fp32 output; "" = none): pass it to atc (``--customize_dtypes``) / the IR build
                    (``ge.customizeDtypes``)
``ADVISOR_POLICY``    a precision_policy.json the run applies (torch_npu eager; "" = none): the script calls
                    ``cfg.apply_policy(model)`` (``advisor.npu.apply_policy``)

``advisor.npu.apply()`` reads these in the user's script.  stdout/stderr go to files beside the
run directory; a non-zero exit, a timeout or a run directory with nothing ingestible is recorded
as a failed ``RunResult`` -- never an exception.  A timeout or Ctrl-C kills the command's whole
process tree, grandchildren that called ``setsid`` included (``runners.proctree``).
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import InputError
from ..mixlist import Mixlist
from .base import (FAILED, NO_OUTPUT, OK, REFERENCE_MODE, TIMEOUT, Heartbeat, Runner, RunResult,
                   write_customize_file, write_keep_file, write_mixlist_file, write_policy_file)
from .proctree import start_tree, stop_tree

ENV_MIXLIST, ENV_MODE, ENV_RUN_DIR = "ADVISOR_MIXLIST", "ADVISOR_MODE", "ADVISOR_RUN_DIR"
ENV_DUMP_DIR, ENV_PROFILE_DIR, ENV_REFERENCE = "ADVISOR_DUMP_DIR", "ADVISOR_PROFILE_DIR", "ADVISOR_REFERENCE"
ENV_LOSS_SCALE = "ADVISOR_LOSS_SCALE"           # the static loss scale to train with ("" = the script's own)
ENV_KEEP_DTYPE = "ADVISOR_KEEP_DTYPE"           # an ATC --keep_dtype file the run adds ("" = none)
ENV_CUSTOMIZE_DTYPES = "ADVISOR_CUSTOMIZE_DTYPES"   # an ATC --customize_dtypes file the run adds ("" = none)
ENV_POLICY = "ADVISOR_POLICY"                   # a precision_policy.json the run applies ("" = none)
ENV_DEVICES = "ASCEND_RT_VISIBLE_DEVICES"    # the NPUs a run may use (torch_npu / CANN read it)


def run_dir_contents(run_dir: Path) -> dict:
    """What a run directory holds that ingest can read: profile, mixed dump, golden dump."""
    has_profile = any(run_dir.glob("profile/**/kernel_details.csv")) or any(run_dir.glob("**/op_summary*.csv"))
    has_mixed = any(run_dir.glob("dump/mixed/**/dump.json"))
    has_golden = any(run_dir.glob("dump/fp32/**/dump.json"))
    return {"profile": has_profile, "mixed_dump": has_mixed, "golden_dump": has_golden}


class CommandRunner(Runner):
    name = "command"

    def __init__(self, cmd: str | list[str], timeout: float | None = None, cwd: str | os.PathLike | None = None,
                 env: dict[str, str] | None = None, devices: list[str] | None = None):
        try:
            self.argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        except ValueError as e:  # "No closing quotation", "No escaped character"
            raise InputError("--cmd", f"cannot split {cmd!r} like a shell: {e}") from None
        self.cmd = cmd if isinstance(cmd, str) else shlex.join(cmd)
        self.timeout = timeout
        self.cwd = Path(cwd) if cwd else None
        self.env = dict(env or {})
        self.devices = list(devices or [])      # --devices: one per concurrent slot (ASCEND_RT_VISIBLE_DEVICES)
        if self.devices:
            self.env.setdefault(ENV_DEVICES, self.devices[0])

    def describe(self) -> dict:
        return {"runner": self.name, "cmd": self.cmd, "timeout": self.timeout,
                "cwd": str(self.cwd) if self.cwd else None, "devices": self.devices or None}

    def slot(self, index: int) -> "CommandRunner | None":
        """Slot ``index`` runs the command with its own ``ASCEND_RT_VISIBLE_DEVICES`` (``--devices``); without
        devices a second slot would share the NPU, so there is none."""
        if index == 0:
            return self
        if index >= len(self.devices):
            return None
        twin = CommandRunner(self.argv, self.timeout, self.cwd, {**self.env, ENV_DEVICES: self.devices[index]},
                             [self.devices[index]])
        twin.progress = self.progress
        return twin

    def prepare(self, out_dir: Path) -> None:
        if not self.argv:
            raise InputError("--cmd", "the command runner needs a command, e.g. --cmd \"python train.py\"")
        if self.timeout is not None and not self.timeout >= 0:
            raise InputError("--timeout", f"must be a number of seconds > 0 (0: no limit), not {self.timeout}")

    def reference(self, run_dir: Path) -> RunResult:
        return self._execute(None, REFERENCE_MODE, run_dir, reference=True)

    def run(self, mixlist: Mixlist | None, mode: str, run_dir: Path, loss_scale: float | None = None,
            keep_dtype: Sequence[str] = (), customize_dtypes: Sequence[str] = (), policy: Any = None) -> RunResult:
        return self._execute(mixlist, mode, run_dir, reference=False, loss_scale=loss_scale, keep_dtype=keep_dtype,
                             customize_dtypes=customize_dtypes, policy=policy)

    # ------------------------------------------------------------------
    def _execute(self, mixlist: Mixlist | None, mode: str, run_dir: Path, reference: bool,
                 loss_scale: float | None = None, keep_dtype: Sequence[str] = (),
                 customize_dtypes: Sequence[str] = (), policy: Any = None) -> RunResult:
        run_dir = Path(run_dir).resolve()
        logs = run_dir.parent
        logs.mkdir(parents=True, exist_ok=True)
        if run_dir.exists():  # a partial run of an interrupted tune: ours to replace
            shutil.rmtree(run_dir)
        ml_path = write_mixlist_file(mixlist, logs / ("reference_mixlist.json" if reference else "mixlist_used.json"))
        keep_path = write_keep_file(keep_dtype, logs / "keep_dtype_used.cfg")
        custom_path = write_customize_file(customize_dtypes, logs / "customize_dtypes_used.cfg")
        policy_path = write_policy_file(policy, logs / "precision_policy_used.json")
        out_path = logs / ("reference_stdout.txt" if reference else "stdout.txt")
        err_path = logs / ("reference_stderr.txt" if reference else "stderr.txt")
        env = dict(os.environ)
        env.update(self.env)
        env.update({
            ENV_MIXLIST: str(ml_path) if ml_path else "",
            ENV_MODE: mode,
            ENV_RUN_DIR: str(run_dir),
            ENV_DUMP_DIR: str(run_dir / "dump" / "mixed"),
            ENV_PROFILE_DIR: str(run_dir / "profile"),
            ENV_REFERENCE: "1" if reference else "0",
            ENV_LOSS_SCALE: format(loss_scale, ".17g") if loss_scale is not None else "",
            ENV_KEEP_DTYPE: str(keep_path) if keep_path else "",
            ENV_CUSTOMIZE_DTYPES: str(custom_path) if custom_path else "",
            ENV_POLICY: str(policy_path) if policy_path else "",
        })
        t0 = time.monotonic()
        status, rc, msg = OK, None, ""
        with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
            try:
                proc = start_tree(self.argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env,
                                  cwd=str(self.cwd) if self.cwd else None)
            except OSError as e:
                return RunResult(str(run_dir), FAILED, f"cannot start {self.argv[0]!r}: {e.strerror or e}",
                                 None, time.monotonic() - t0, False, 1, str(out_path), str(err_path))
            try:
                rc = self._wait(proc, t0, Heartbeat(self.progress, logs.name, self.limit))
            except subprocess.TimeoutExpired:
                stop_tree(proc)
                status, msg = TIMEOUT, (f"timed out after {self.limit:g} s (--timeout S sets the limit, "
                                        "--timeout 0 removes it); its process tree was killed")
            except BaseException:
                stop_tree(proc)   # interrupted (Ctrl-C): do not leave the user's job running
                raise
        dur = time.monotonic() - t0
        if status == OK and rc != 0:
            status, msg = FAILED, f"exited with code {rc}" + _tail(err_path)
        contents = run_dir_contents(run_dir)
        if status == OK and not (contents["profile"] or contents["mixed_dump"]):
            status = NO_OUTPUT
            msg = (f"exited 0 but wrote no profile (profile/**/kernel_details.csv) and no msprobe dump "
                   f"(dump/mixed/**/dump.json) under {run_dir}")
        return RunResult(str(run_dir), status, msg, rc, dur, contents["golden_dump"], 1, str(out_path),
                         str(err_path), {"contents": contents})


    def _wait(self, proc, t0: float, beat: Heartbeat) -> int:
        """The command's exit code; its heartbeat while it runs; TimeoutExpired past ``timeout``."""
        limit = self.limit
        while True:
            left = None if limit is None else limit - (time.monotonic() - t0)
            try:
                return proc.wait(timeout=1.0 if left is None else max(0.0, min(1.0, left)))
            except subprocess.TimeoutExpired:
                if left is not None and left <= 1.0:
                    raise
            beat(time.monotonic() - t0)


def _tail(path: Path, n: int = 300) -> str:
    try:
        data = Path(path).read_bytes()[-n:].decode("utf-8", "replace").strip()
    except OSError:
        return ""
    last = data.splitlines()[-1] if data else ""
    return f" (stderr: {last})" if last else ""
