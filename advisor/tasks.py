"""Independent tasks (one per rank of a multi-rank job) run in this process, in a local process pool, or on Ray.

``run_tasks(fn, jobs, workers=..., ray=...)`` returns ``[fn(job) for job in jobs]``, in job order:

* ``ray`` given (``"local"``, ``"auto"`` or a cluster address): every job is one Ray task (``ray.remote``);
  the jobs and results travel, nothing else (each task reads its own files, so on a cluster the run folder
  must be on a file system every node sees).  Needs the optional extra ``pip install 'advisor[cluster]'``.
* else ``workers`` processes (default: the cores this process may use) of a ``ProcessPoolExecutor``
  started by ``forkserver`` (workers fork from a clean server that imported the task's module once; never a
  fork of this process, whose Arrow threads may be running); one worker, or one job, runs in this process
  with no pool.

``alongside``: a callable run in this process while the pool or Ray works on the jobs (the command's own
detailed analysis of one rank); its result is returned first.  ``fn`` and the jobs must be picklable (a
module-level function and plain data); an ``AdvisorError`` raised by a task reaches the caller as itself.
No scheduler, socket or protocol of advisor's own: the executor or Ray does all of it.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from .errors import AdvisorError, InputError


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def check_workers(workers: int | None, ray: str | None) -> None:
    """``--workers`` / ``--ray`` as given on a command line: a bad value is one line (exit 2)."""
    if workers is not None and workers < 1:
        raise InputError("--workers", f"{workers} is not a number of worker processes (1 or more)")
    if workers is not None and ray:
        raise InputError("--ray", "give --workers or --ray, not both (Ray sizes its own workers)")
    if ray is not None and not ray.strip():
        raise InputError("--ray", "empty address (use local, auto or the cluster's address)")


def run_tasks(fn: Callable[[Any], Any], jobs: Sequence[Any], *, workers: int | None = None, ray: str | None = None,
              alongside: Callable[[], Any] | None = None) -> tuple[Any, list]:
    """(``alongside()``, ``[fn(job) for job in jobs]``) computed as the module docstring says."""
    jobs = list(jobs)
    if ray:
        return _on_ray(fn, jobs, ray, alongside)
    n = min(workers or default_workers(), len(jobs))
    if n <= 1:
        first = alongside() if alongside is not None else None
        return first, [fn(j) for j in jobs]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    try:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([fn.__module__])  # imported once by the server, not once per worker
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as ex:
            futures = [ex.submit(fn, j) for j in jobs]
            first = alongside() if alongside is not None else None
            return first, [f.result() for f in futures]
    except BrokenProcessPool as e:
        raise AdvisorError(f"a worker process died ({e}); out of memory? try fewer --workers") from None


def import_ray(option: str = "--ray"):
    """The ``ray`` module, or one line (exit 2) naming ``option`` when the [cluster] extra is missing."""
    try:
        import ray
    except ImportError:
        raise InputError(option, "Ray is not installed: pip install 'advisor[cluster]'") from None
    return ray


def ray_connect(address: str, option: str = "--ray") -> bool:
    """Connect this process to Ray at ``address`` (``local``: a Ray instance on this machine for this command
    only; ``auto``: the running cluster; else the cluster's address).  An already-initialised Ray is used as
    is.  Returns True when this call initialised Ray (the caller then calls ``ray.shutdown()`` when done)."""
    ray = import_ray(option)
    if ray.is_initialized():
        return False
    try:
        ray.init(address=None if address == "local" else address, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    except Exception as e:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError, ValueError, ...
        raise InputError(option, f"cannot connect to Ray at {address!r} ({type(e).__name__}: "
                                 f"{' '.join(str(e).split())[:200]})") from None
    return True


def ray_result(refs):
    """``ray.get(refs)``; a task's ``AdvisorError`` is raised as itself, any other failure as one line."""
    import ray
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None)
        if isinstance(cause, AdvisorError):
            raise cause from None
        raise AdvisorError(f"a Ray task failed: {' '.join(str(e).split())[:300]}") from None


def _on_ray(fn, jobs: list, address: str, alongside) -> tuple[Any, list]:
    started = ray_connect(address)
    import ray
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = [remote.remote(j) for j in jobs]
        first = alongside() if alongside is not None else None
        return first, ray_result(refs)
    finally:
        if started:
            ray.shutdown()
