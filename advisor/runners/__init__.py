"""Runners: everything that produces a run directory for a given mixlist and mode.

``EmulatorRunner`` (default, CPU emulation), ``CommandRunner`` (a user's own command, e.g. an NPU
script that calls ``advisor.npu.apply()``).  All implement ``runners.base.Runner``.
"""
from __future__ import annotations

from .base import FAILED, NO_OUTPUT, OK, TIMEOUT, Runner, RunResult
from .command import CommandRunner
from .emulator import EmulatorRunner

__all__ = ["Runner", "RunResult", "EmulatorRunner", "CommandRunner", "make_runner", "OK", "FAILED", "TIMEOUT",
           "NO_OUTPUT"]


def make_runner(name: str, target=None, cmd: str | None = None, timeout: float | None = None,
                devices: list[str] | None = None, **emulator_kw) -> Runner:
    from ..errors import InputError
    if name == "emulator":
        if target is None:
            raise InputError("TARGET", "the emulator runner needs a workload target (file.py:function)")
        return EmulatorRunner(target, timeout=timeout, **emulator_kw)
    if name == "command":
        if not cmd:
            raise InputError("--cmd", "--runner command needs --cmd \"python train.py\"")
        return CommandRunner(cmd, timeout=timeout, devices=devices)
    raise InputError("--runner", f"unknown runner {name!r}; choose emulator or command")
