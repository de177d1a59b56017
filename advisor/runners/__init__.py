"""Runners: everything that produces a run directory for a given mixlist and mode.

``EmulatorRunner`` (default, CPU emulation), ``CommandRunner`` (a user's own command, e.g. an NPU
script that calls ``advisor.npu.apply()``).  All implement ``runners.base.Runner``.
"""
from __future__ import annotations

import importlib

# imported on first use: ``python -m advisor.runners.worker`` (the capture child) must not pay for the runners
# (and the mixlist/lint modules they import) before it loads the user's workload
_LAZY = {"OK": "base", "FAILED": "base", "TIMEOUT": "base", "NO_OUTPUT": "base", "Runner": "base",
         "RunResult": "base", "CommandRunner": "command", "EmulatorRunner": "emulator"}

__all__ = ["Runner", "RunResult", "EmulatorRunner", "CommandRunner", "make_runner", "OK", "FAILED", "TIMEOUT",
           "NO_OUTPUT"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)


def make_runner(name: str, target=None, cmd: str | None = None, timeout: float | None = None,
                devices: list[str] | None = None, **emulator_kw) -> Runner:
    from ..errors import InputError
    if name == "emulator":
        if target is None:
            raise InputError("TARGET", "the emulator runner needs a workload target (file.py:function)")
        from .emulator import EmulatorRunner
        return EmulatorRunner(target, timeout=timeout, **emulator_kw)
    if name == "command":
        if not cmd:
            raise InputError("--cmd", "--runner command needs --cmd \"python train.py\"")
        from .command import CommandRunner
        return CommandRunner(cmd, timeout=timeout, devices=devices)
    raise InputError("--runner", f"unknown runner {name!r}; choose emulator or command")
