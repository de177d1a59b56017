"""Stage progress for long runs (10^6-row profiles take tens of seconds): one line per stage on
stderr with the time the previous stage took.  Shown when stderr is a terminal, or always with
``ADVISOR_PROGRESS=1`` (``0`` silences it); library functions take a ``progress`` callable and
stay silent without one.

The CLI's global ``--quiet`` / ``--verbose`` set the verbosity here (``set_verbosity``) and take
precedence over ``ADVISOR_PROGRESS``: quiet = no progress and no notes (only errors), verbose =
progress even when stderr is not a terminal, every stage's duration, and details."""
from __future__ import annotations

import os
import sys
import time
from typing import Callable, Optional

Progress = Optional[Callable[[str], None]]

QUIET, NORMAL, VERBOSE = -1, 0, 1
_verbosity = NORMAL


def set_verbosity(level: int) -> None:
    """QUIET, NORMAL or VERBOSE for this process (the CLI sets it from --quiet / --verbose)."""
    global _verbosity
    _verbosity = level


def verbosity() -> int:
    return _verbosity


def note(msg: str, stream=None) -> None:
    """A one-off notice on stderr (e.g. a previous output kept as .bak): shown unless --quiet."""
    if _verbosity > QUIET:
        s = stream or sys.stderr
        s.write(f"advisor: {msg}\n")
        s.flush()


class StageLog:
    """``log("building op graph")`` prints ``advisor: building op graph ...``; ``log.done()`` closes
    the last stage with its duration."""

    def __init__(self, stream=None, enabled: bool | None = None):
        self.stream = stream or sys.stderr
        if enabled is None and _verbosity != NORMAL:
            enabled = _verbosity == VERBOSE
        if enabled is None:
            env = os.environ.get("ADVISOR_PROGRESS", "")
            enabled = env == "1" or (env != "0" and _isatty(self.stream))
        self.enabled = enabled
        self._t0: float | None = None
        self._msg = ""

    def __call__(self, msg: str) -> None:
        if not self.enabled:
            return
        self.done()
        self._msg, self._t0 = msg, time.perf_counter()
        self.stream.write(f"advisor: {msg} ...\n")
        self.stream.flush()

    def note(self, msg: str) -> None:
        """A one-off line (a result, not a stage): closes the running stage first."""
        if not self.enabled:
            return
        self.done()
        self.stream.write(f"advisor: {msg}\n")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled and self._t0 is not None:
            dt = time.perf_counter() - self._t0
            if dt >= 0.5 or _verbosity == VERBOSE:
                self.stream.write(f"advisor:   {self._msg}: {dt:.1f} s\n")
                self.stream.flush()
            self._t0 = None


def _isatty(s) -> bool:
    try:
        return bool(s.isatty())
    except (AttributeError, ValueError):
        return False
