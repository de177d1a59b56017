"""Captures in a child process, isolated from the advisor process that asked for them.

A workload is user code: it may print (advisor's stdout carries only its report or JSON), call
``sys.exit`` or ``os._exit``, never return, or start processes of its own.  ``CaptureWorker`` runs
``advisor.emulator.capture`` in a child Python process, started under ``proctree``'s shepherd, that
serves one capture request at a time over a pair of pipes:

* the workload's stdout and stderr go where the request says (files beside a tune run, or the
  parent's stderr for ``advisor capture``), never to the parent's stdout;
* ``timeout`` seconds without an answer kill the child's whole process tree (its partial run folder
  is removed; ``--out`` is untouched, see ``rundir.StagedRunDir``);
* a child that ends without answering (``os._exit``, a crash in native code, a signal) is reported
  as such, with its exit status.

The child lives across requests (``advisor tune`` pays the framework import once per tune, not per
run) and is replaced after a timeout or a death.  ``python -m advisor.runners.worker REQ_FD RESP_FD``
is the child's side.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import AdvisorError, InputError, OutputError
from .proctree import start_tree, stop_tree

OK, ERROR, DIED, TIMEOUT = "ok", "error", "died", "timeout"
_POLL_S = 0.2
_GONE, _LATE = object(), object()   # _read_line: the child died first / the deadline passed


@dataclass
class CaptureReply:
    """What one capture request came to.  ``status``: ok | error (the capture raised) | died (the
    child ended without answering) | timeout.  ``error``: the raised error, as data."""

    status: str
    path: str | None = None
    notes: list[str] = field(default_factory=list)
    error: dict = field(default_factory=dict)
    message: str = ""
    returncode: int | None = None
    facts: dict = field(default_factory=dict)      # a probe's answer: {"batches": n, "training": bool}

    @property
    def ok(self) -> bool:
        return self.status == OK

    def exception(self, target: object) -> AdvisorError:
        """The error to raise for a failed request: the capture's own (InputError, OutputError, ...),
        or an InputError naming ``target`` for a death or a timeout (exit 2)."""
        e = self.error
        if self.status == ERROR and e.get("kind") in ("input", "output"):
            cls = OutputError if e["kind"] == "output" else InputError
            return cls(e.get("path") or None, e.get("problem", ""))
        if self.status == ERROR and e.get("kind") == "advisor":
            err = AdvisorError(e.get("message", ""))
            err.exit_code = int(e.get("exit_code", 1))
            return err
        if self.status == ERROR:  # not an advisor error: a bug, or a user exception nothing turned into one
            return AdvisorError(f"{target}: capture failed: {self.message}")
        return InputError(target, self.message)

    @property
    def user_error(self) -> bool:
        """The workload or its input is at fault (exit 2), not advisor: a bad target, a model that
        fails, sys.exit/os._exit, a hang."""
        return self.status in (DIED, TIMEOUT) or (self.status == ERROR and self.error.get("kind") in ("input", "output"))


class CaptureWorker:
    """A child process that runs captures; ``capture()`` per run, ``close()`` at the end (also on
    garbage collection and at interpreter exit)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._req = None
        self._resp_fd: int | None = None
        self._buf = b""
        self._finalizer = None

    # ------------------------------------------------------------------ requests
    def capture(self, target: str, out: str | os.PathLike, *, timeout: float | None = None,
                stdout: str | os.PathLike | None = None, stderr: str | os.PathLike | None = None,
                heartbeat: Callable[[float], None] | None = None, **capture_kw: Any) -> CaptureReply:
        """Run ``advisor.emulator.capture(target, out, **capture_kw)`` in the child.  ``stdout`` /
        ``stderr``: files for the workload's output (default: this process's stderr, both);
        ``heartbeat(elapsed_s)`` is called about every 0.2 s while the answer is awaited."""
        req = {"target": str(target), "out": os.path.abspath(out), "kw": capture_kw, "sys_path": list(sys.path),
               "stdout": os.path.abspath(stdout) if stdout else None,
               "stderr": os.path.abspath(stderr) if stderr else None}
        return self._request(req, out, timeout, heartbeat)

    def probe(self, target: str, *, timeout: float | None = None) -> Callable[[], CaptureReply]:
        """Load the workload ``target`` in the child without running it (what a command checks before its first
        run; the child, its framework imported, serves the captures after).  Returns at once; calling the result
        waits for the reply, whose ``facts`` are {"batches", "training", "trains", "framework"}."""
        req = {"target": str(target), "probe": True, "sys_path": list(sys.path), "stdout": None, "stderr": None}
        t0 = time.monotonic()
        sent = self._send(req, None)
        return lambda: self._receive(sent, None, timeout, None, t0)

    def _request(self, req: dict, out: str | os.PathLike | None, timeout: float | None,
                 heartbeat: Callable[[float], None] | None) -> CaptureReply:
        t0 = time.monotonic()
        return self._receive(self._send(req, out), out, timeout, heartbeat, t0)

    def _send(self, req: dict, out: str | os.PathLike | None) -> bool:
        """Write the request (starting the child first if needed); False when the child is gone."""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        try:
            self._req.write(json.dumps(req).encode("utf-8") + b"\n")
            self._req.flush()
        except BrokenPipeError:
            return False
        except BaseException:  # Ctrl-C: the workload must not go on running
            self._kill(out)
            raise
        return True

    def _receive(self, sent: bool, out: str | os.PathLike | None, timeout: float | None,
                 heartbeat: Callable[[float], None] | None, t0: float) -> CaptureReply:
        deadline = None if timeout is None else t0 + timeout
        try:
            line = self._read_line(deadline, heartbeat, t0) if sent else _GONE
        except BaseException:  # Ctrl-C: the workload must not go on running
            self._kill(out)
            raise
        if line is _LATE:
            self._kill(out)
            return CaptureReply(TIMEOUT, message=f"the workload did not finish within {timeout:g} s (--timeout S "
                                                 "sets the limit, --timeout 0 removes it); its capture process "
                                                 "tree was killed")
        if line is _GONE:
            return self._died(out)
        try:
            d = json.loads(line)
        except ValueError:
            self._kill(out)
            return CaptureReply(DIED, message="the capture process answered garbage; it was stopped")
        return CaptureReply(d["status"], d.get("path"), d.get("notes") or [], d.get("error") or {},
                            d.get("message", ""), facts=d.get("facts") or {})

    def close(self) -> None:
        """End the child: EOF on its request pipe, then its tree is killed if it does not leave."""
        proc, self._proc = self._proc, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        _shutdown(proc, self._req, self._resp_fd)
        self._req, self._resp_fd, self._buf = None, None, b""

    def __enter__(self) -> "CaptureWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _start(self) -> None:
        self.close()
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])   # the folder holding the advisor package
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            # the workload's prints go to our stderr (fd 2), never to our stdout
            self._proc = start_tree([sys.executable, "-m", "advisor.runners.worker", str(req_r), str(resp_w)],
                                    pass_fds=(req_r, resp_w), stdin=subprocess.DEVNULL, stdout=2, env=env)
        except OSError as e:
            for fd in (req_r, req_w, resp_r, resp_w):
                os.close(fd)
            raise AdvisorError(f"cannot start the capture process: {e.strerror or e}") from None
        os.close(req_r)
        os.close(resp_w)
        self._req = os.fdopen(req_w, "wb")
        self._resp_fd = resp_r
        self._buf = b""
        self._finalizer = weakref.finalize(self, _shutdown, self._proc, self._req, resp_r)

    def _read_line(self, deadline: float | None, heartbeat: Callable[[float], None] | None = None,
                   t0: float = 0.0) -> Any:
        """The child's next answer line; ``_GONE`` when it died first, ``_LATE`` past the deadline."""
        while b"\n" not in self._buf:
            if heartbeat is not None:
                heartbeat(time.monotonic() - t0)
            wait = _POLL_S if deadline is None else max(0.0, min(_POLL_S, deadline - time.monotonic()))
            ready, _, _ = select.select([self._resp_fd], [], [], wait)
            if ready:
                chunk = os.read(self._resp_fd, 1 << 16)
                if not chunk:
                    return _GONE
                self._buf += chunk
                continue
            if self._proc.poll() is not None:   # ended; its descendants may still hold the pipe
                return _GONE
            if deadline is not None and time.monotonic() >= deadline:
                return _LATE
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _kill(self, out) -> None:
        """Kill the child's tree, forget it, remove the partial run folder it left beside ``out``."""
        proc = self._proc
        pid = getattr(proc, "command_pid", None)
        if proc is not None:
            stop_tree(proc)
        self.close()
        if pid is not None and out is not None:
            from ..rundir import remove_partial_runs
            remove_partial_runs(out, pid)

    def _died(self, out) -> CaptureReply:
        rc = None
        if self._proc is not None:
            try:
                rc = self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._kill(out)
        if rc is not None and rc < 0:
            try:
                how = f"was killed by {signal.Signals(-rc).name}"
            except ValueError:
                how = f"was killed by signal {-rc}"
        else:
            how = f"exited with status {rc}" + (" (os._exit?)" if rc == 0 else "")
        return CaptureReply(DIED, returncode=rc, message=f"the capture process {how} before the capture finished; "
                                                         "a workload must return, not end the process")


def _shutdown(proc: subprocess.Popen | None, req, resp_fd: int | None) -> None:
    if req is not None:
        try:
            req.close()          # EOF: the child's loop ends
        except OSError:
            pass
    if resp_fd is not None:
        try:
            os.close(resp_fd)
        except OSError:
            pass
    if proc is not None and proc.poll() is None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            stop_tree(proc)


# ====================================================================== the child
class _Notes:
    """The ``progress`` a child capture gets: keeps its notes for the answer, drops stage lines."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def __call__(self, msg: str) -> None:
        pass

    def note(self, msg: str) -> None:
        self.notes.append(msg)


def _probe(target: str) -> dict:
    """What a command checks before its first run: the workload's batch count, whether it has a loss (``training``),
    whether it trains over optimizer steps (``trains``) and its model's framework (``framework``: pytorch |
    tensorflow | onnx, as capture tells them apart: ``workload.framework_of``)."""
    from ..workload import framework_of, load_target
    wl = load_target(target)
    return {"batches": len(wl.batches) if isinstance(wl.batches, list) else None, "training": wl.training,
            "trains": wl.trains, "framework": framework_of(wl.model)}


def _answer(req: dict) -> dict:
    notes = _Notes()
    try:
        if req.get("probe"):
            return {"status": OK, "facts": _probe(req["target"])}
        from ..emulator import capture
        path = capture(req["target"], req["out"], progress=notes, **req["kw"])
        return {"status": OK, "path": str(path), "notes": notes.notes}
    except OutputError as e:
        return {"status": ERROR, "error": {"kind": "output", "path": e.path, "problem": e.problem}}
    except InputError as e:
        return {"status": ERROR, "error": {"kind": "input", "path": e.path, "problem": e.problem}}
    except AdvisorError as e:
        return {"status": ERROR, "error": {"kind": "advisor", "message": str(e), "exit_code": e.exit_code}}
    except BaseException as e:  # noqa: BLE001 - anything else (a bug, a workload's odd exception) is reported
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        return {"status": ERROR, "error": {"kind": "crash", "traceback": traceback.format_exc()},
                "message": f"{e.__class__.__name__}: {lines[0].strip() if lines else ''}"[:400]}


def _redirected(req: dict, fd: int, key: str):
    """Point ``fd`` (1 or 2) at the request's file; the saved original, or None."""
    if not req.get(key):
        return None
    saved = os.dup(fd)
    with open(req[key], "wb") as f:
        os.dup2(f.fileno(), fd)
    return saved


def _serve(req_fd: int, resp_fd: int) -> None:
    requests = os.fdopen(req_fd, "rb")
    answers = os.fdopen(resp_fd, "wb")
    for line in requests:
        req = json.loads(line)
        sys.path[:0] = [p for p in req.get("sys_path", ()) if p not in sys.path]
        sys.stdout.flush()
        sys.stderr.flush()
        saved: dict[int, int | None] = {}
        try:
            saved[1] = _redirected(req, 1, "stdout")
            saved[2] = _redirected(req, 2, "stderr")
            reply = _answer(req)
        except OSError as e:   # the output files cannot be opened
            reply = {"status": ERROR, "error": {"kind": "output", "path": e.filename or "",
                                                "problem": f"cannot write: {e.strerror or e}"}}
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, old in saved.items():
                if old is not None:
                    os.dup2(old, fd)
                    os.close(old)
        answers.write(json.dumps(reply, default=str).encode("utf-8") + b"\n")
        answers.flush()


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
