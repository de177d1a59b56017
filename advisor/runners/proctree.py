"""Run a command as a process tree that can be killed as a whole, grandchildren included.

A timeout must stop everything a run started, also a grandchild that left the process group with
``setsid`` (a daemonised data loader, a ``nohup`` helper).  ``start_tree`` runs the command under a
small *shepherd* process (this file, executed by path with only the standard library) that makes
itself the **child subreaper** (``prctl(PR_SET_CHILD_SUBREAPER)``): every process of the tree whose
parent exits is re-parented to the shepherd instead of init, so the tree stays whole and is found in
``/proc`` by parent links.  ``stop_tree`` sends the shepherd SIGTERM; it SIGKILLs every descendant
(again and again until none is left: a process forking meanwhile is caught on the next pass), reaps
them and exits.  The shepherd also dies with its parent (``PR_SET_PDEATHSIG``), taking the tree with
it, so a killed ``advisor`` leaves no job running.

Limits (Linux only; elsewhere, or without ``/proc``, the process group is killed, as before):
processes started through a service manager (``systemd-run``, ``at``, a container runtime) are not
descendants and are not reached; a SIGKILL of the shepherd itself (e.g. by the OOM killer) orphans
the tree.  A run that ends normally leaves its background processes alone.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


# ---------------------------------------------------------------------- both sides
def descendants(root: int) -> list[int]:
    """Pids whose chain of parents reaches ``root`` (read from /proc; [] without /proc)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()   # the command name may hold spaces and ')'
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), ()):
            out.append(c)
            todo.append(c)
    return out


def _kill_all(root: int, deadline_s: float = 10.0) -> None:
    """SIGKILL every descendant of ``root`` until none is left (reaping our own children)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        pids = descendants(root)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap()
        if not pids:
            return
        time.sleep(0.01)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# ---------------------------------------------------------------------- parent side
def start_tree(argv: list[str], *, pass_fds: tuple[int, ...] = (), **popen_kw) -> subprocess.Popen:
    """Start ``argv`` under a shepherd; returns the shepherd's Popen, whose exit status is the
    command's (``-N`` when a signal N ended it) and whose ``command_pid`` is the command's pid.  Raises OSError when the command cannot start,
    exactly like ``subprocess.Popen``.  ``popen_kw``: stdin, stdout, stderr, env, cwd."""
    r, w = os.pipe()
    try:
        shepherd = [sys.executable, "-I", os.path.abspath(__file__), str(w), str(os.getpid()),
                    ",".join(map(str, pass_fds)) or "-", "--", *argv]
        proc = subprocess.Popen(shepherd, pass_fds=(w, *pass_fds), start_new_session=True, **popen_kw)
    except BaseException:
        os.close(r)
        os.close(w)
        raise
    os.close(w)
    with os.fdopen(r, "rb") as f:
        status = f.readline().decode("utf-8", "replace").strip()
    if status.startswith("error "):
        proc.wait()
        code, _, msg = status[6:].partition(" ")
        raise OSError(int(code), msg, argv[0])
    if not status.startswith("started"):  # the shepherd itself failed to run
        proc.wait()
        raise OSError(0, f"could not start the process supervisor (exit {proc.returncode})", sys.executable)
    proc.command_pid = int(status.split()[1])  # type: ignore[attr-defined]
    return proc


def stop_tree(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """Kill the whole tree of a ``start_tree`` process and wait for the shepherd."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            pass
    for pid in descendants(proc.pid):  # the shepherd did not answer: do it from here
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process stuck in the kernel
        pass


# ---------------------------------------------------------------------- the shepherd
class _Stop(Exception):
    pass


def _prctl(option: int, arg: int) -> bool:
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _shepherd(args: list[str]) -> int:
    status_fd, parent = int(args[0]), int(args[1])
    pass_fds = tuple(int(x) for x in args[2].split(",")) if args[2] != "-" else ()
    argv = args[4:]
    subreaper = _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    def stop(signum, frame):
        raise _Stop(signum)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, stop)
    status = os.fdopen(status_fd, "w")
    child = None
    try:
        if os.getppid() != parent:  # the parent died before PDEATHSIG was armed
            raise _Stop(signal.SIGTERM)
        try:
            child = subprocess.Popen(argv, pass_fds=pass_fds, close_fds=True)
        except OSError as e:
            status.write(f"error {e.errno or 0} {e.strerror or e}\n")
            status.close()
            return 127
        status.write(f"started {child.pid}\n")
        status.close()
        for fd in pass_fds:
            os.close(fd)
        rc = child.wait()
    except _Stop as e:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        _kill_all(os.getpid())
        if not subreaper:  # no subreaper (not Linux): the process group, this shepherd included
            os.killpg(0, signal.SIGKILL)
        return 128 + int(e.args[0])
    if rc < 0:  # mirror a death by signal (without a core file of this shepherd)
        try:
            import resource
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        except (ImportError, ValueError, OSError):
            pass
        if -rc not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
        return 128 - rc  # a signal whose default is not to end the process
    return rc


if __name__ == "__main__":
    sys.exit(_shepherd(sys.argv[1:]))
