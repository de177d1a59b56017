"""One interface for everything that produces a run directory: ``prepare`` once, then
``run(mixlist, mode, run_dir) -> RunResult`` per configuration.

A runner never raises for a failed run: a crash, a non-zero exit or a timeout becomes a
``RunResult`` with ``ok=False`` and a message, so the tuning loop records it and goes on.
Bad configuration (a missing command, an unknown target) is an ``InputError`` from ``prepare``.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..mixlist import Mixlist

OK, FAILED, TIMEOUT, NO_OUTPUT = "ok", "failed", "timeout", "no-output"
REFERENCE_MODE = "must_keep_origin_dtype"

# default --timeout of one run: an emulator capture (advisor capture, tune's emulator runs) and a user's command
# (tune --runner command: a training job on an NPU may take hours); --timeout S changes it, --timeout 0 removes it
DEFAULT_TIMEOUT_S = {"emulator": 3600.0, "command": 86400.0}


def duration_text(s: float) -> str:
    """``45 s``, ``12 min``, ``2 h 5 min`` (whole units: progress and limits, not measurements)."""
    s = max(0, int(round(s)))
    if s < 120:
        return f"{s} s"
    m = s // 60
    return f"{m} min" if m < 120 else f"{m // 60} h" + (f" {m % 60} min" if m % 60 else "")


class Heartbeat:
    """Progress while a run is awaited: ``say("<what>: still running after 1 min (limit 60 min)")`` once ``first``
    seconds have passed, then every ``every`` seconds (called with the elapsed seconds, as often as it likes)."""

    def __init__(self, say, what: str, limit: float | None, first: float = 30.0, every: float = 60.0):
        self.say, self.what, self.limit, self.every = say, what, limit, every
        self.next = first

    def __call__(self, elapsed: float) -> None:
        if self.say is None or elapsed < self.next:
            return
        self.next = elapsed + self.every
        lim = f" (limit {duration_text(self.limit)}: --timeout)" if self.limit else " (no time limit)"
        self.say(f"{self.what}: still running after {duration_text(elapsed)}{lim}")


@dataclass
class RunResult:
    """What one execution produced.

    ``has_reference``: the run directory carries its own FP32 golden (``dump/fp32``); the
    emulator always does; a user's command may not (then the loop runs a reference once).
    ``executions``: how many real model executions this call cost (the emulator's capture
    executes the FP32 reference and the mixed run: 2; a user command: 1).
    """

    run_dir: str
    status: str = OK
    message: str = ""
    returncode: int | None = None
    duration_s: float = 0.0
    has_reference: bool = False
    executions: int = 1
    stdout: str | None = None
    stderr: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == OK

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "RunResult":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known.setdefault("run_dir", None)      # optional in a journal (tune.journal reads it as string or null)
        return cls(**known)


class Runner(ABC):
    """Base class of the runners (emulator, command).  ``progress``: where a run's heartbeat goes while it is
    awaited (``Heartbeat``; None: nowhere)."""

    name = "runner"
    progress = None
    timeout: float | None = None   # as given: None = the default limit (DEFAULT_TIMEOUT_S), 0 = no limit

    def __getstate__(self) -> dict:
        """What a copy or a pickle (a Ray task) carries: the settings, not the local terminal's progress."""
        state = dict(self.__dict__)
        state.pop("progress", None)
        return state

    @property
    def limit(self) -> float | None:
        """Seconds one run may take before its process tree is killed (None: no limit)."""
        if self.timeout is None:
            return DEFAULT_TIMEOUT_S.get(self.name)
        return None if self.timeout == 0 else float(self.timeout)

    def prepare(self, out_dir: Path) -> None:  # noqa: B027 - optional hook
        """Validate the configuration once before the first run (raise InputError if unusable)."""

    @abstractmethod
    def run(self, mixlist: Mixlist | None, mode: str, run_dir: Path, loss_scale: float | None = None,
            keep_dtype: Sequence[str] = (), customize_dtypes: Sequence[str] = (), policy: Any = None) -> RunResult:
        """Execute the workload with ``mixlist`` (None = the default lists) under ``mode`` and
        leave a run directory at ``run_dir``; ``loss_scale``: the static loss scale of a training
        workload's backward (None: the workload's own); ``keep_dtype`` / ``customize_dtypes``: ATC --keep_dtype /
        --customize_dtypes lines the run adds (per-op advice); ``policy``: a torch_npu precision policy
        (``precision_policy.PrecisionPolicy`` or a precision_policy.json path) the run applies.  The loop passes
        ``loss_scale`` / ``keep_dtype`` / ``customize_dtypes`` / ``policy`` only when it sets them, so a runner
        written without the parameters keeps working until then."""

    def reference(self, run_dir: Path) -> RunResult:
        """Execute the FP32 reference into ``run_dir`` (only needed when ``run`` results have no
        golden of their own).  Default: ``run`` with no mixlist in must_keep_origin_dtype."""
        return self.run(None, REFERENCE_MODE, run_dir)

    def describe(self) -> dict:
        """JSON-able identity of the configuration (stored in the journal; resume checks it)."""
        return {"runner": self.name}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the runs kept alive (a capture child process); the runner can run again after."""

    def scoped_dumps(self) -> bool:
        """Whether ``run`` takes ``dump_tensors``: op names whose tensors the run dumps beside its statistics
        (msprobe's ``statistics.tensor_list``), so the next recommendation can replay around them."""
        return False

    def slot(self, index: int) -> "Runner":
        """A runner for concurrent slot ``index`` (``advisor tune --parallel``): slot 0 is this runner; a runner
        that cannot run twice at once returns None for the others (the loop then runs one at a time)."""
        return self if index == 0 else None


def timed(fn, *a, **kw) -> tuple[Any, float]:
    t0 = time.monotonic()
    out = fn(*a, **kw)
    return out, time.monotonic() - t0


def write_keep_file(lines: Sequence[str], path: Path, base: str | None = None) -> Path | None:
    """Write the keep_dtype file a run uses: the lines of ``base`` (the user's own file, if any) and ``lines``
    (atomically); None when there is nothing to keep."""
    if not lines:
        return None
    from ..fsutil import atomic_write_text
    from ..overrides import load
    own = load(base).keep_dtype_text().splitlines() if base else []
    atomic_write_text(path, "".join(f"{ln}\n" for ln in dict.fromkeys([*own, *lines])))
    return path


def write_customize_file(lines: Sequence[str], path: Path, base: str | None = None) -> Path | None:
    """Write the customize_dtypes file a run uses: the entries of ``base`` (the user's own file, if any) and
    ``lines`` (atomically); None when there is nothing to customize.  One entry per op: the user's entry for an op
    stands (GE keeps the first entry of a name, ``op_cust_dtypes_config_parser.cc``; recommend never proposes a
    line for an op the run's file customizes)."""
    if not lines:
        return None
    from ..fsutil import atomic_write_text
    from ..overrides import load, read_customize_text
    own = load(None, base).customize_text().splitlines() if base else []
    keys = {(e.kind, e.key) for e in read_customize_text("".join(f"{ln}\n" for ln in own)).entries} if own else set()
    new = [ln for ln in lines if not any((e.kind, e.key) in keys for e in read_customize_text(f"{ln}\n").entries)]
    atomic_write_text(path, "".join(f"{ln}\n" for ln in dict.fromkeys([*own, *new])))
    return path


def write_policy_file(policy: Any, path: Path) -> Path | None:
    """Write the precision_policy.json a run applies (atomically; read back through ``read_policy`` first, so a
    malformed one is an InputError before the run); None when there is none."""
    if policy is None:
        return None
    from ..fsutil import atomic_write_json
    from ..precision_policy import PrecisionPolicy, read_policy
    pol = policy if isinstance(policy, PrecisionPolicy) else read_policy(policy)
    atomic_write_json(path, pol.to_dict())
    return path


def write_mixlist_file(mixlist: Mixlist | None, path: Path) -> Path | None:
    """Write the mixlist a run uses (atomically); None when the default lists are used."""
    if mixlist is None:
        return None
    from ..fsutil import atomic_write_text
    atomic_write_text(path, mixlist.to_json())
    return path
