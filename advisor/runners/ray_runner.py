"""Tune runs as Ray tasks (``advisor tune --ray ADDRESS [--npus-per-run N]``).

``RayRunner`` wraps a runner (emulator or command): every ``run`` / ``reference`` is one Ray task
(``ray.remote(...).options(resources={"NPU": N})``; ``NPU`` is Ray's resource name for Huawei Ascend NPUs)
that Ray places on whichever node has N free NPUs.  Inside the task the wrapped runner does what it does
locally -- the emulator's capture child, or the user's command with its process tree and timeout -- with
``ASCEND_RT_VISIBLE_DEVICES`` set to the NPU ids Ray assigned to the task
(``ray.get_runtime_context().get_accelerator_ids()["NPU"]``), in the folder tune was started in, writing its
run directory under ``--out``: both must be on storage every node sees at the same path.  Only the
``RunResult`` travels back; the loop, its journal and ``--resume`` are those of local slots
(``Runner.slot``: every slot is the same runner on the cluster; ``--parallel K`` = K tasks in flight).

Ray is connected to as ``advisor.tasks`` does (``local``, ``auto`` or an address; an already-initialised
Ray is used as is) once per tune, and shut down by the runner that connected when it is closed.  A run
needing more NPUs than the largest node has is refused before anything runs (Ray would wait forever).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from ..errors import InputError
from ..mixlist import Mixlist
from ..tasks import import_ray, ray_connect, ray_result
from .base import Runner, RunResult
from .command import ENV_DEVICES

NPU = "NPU"   # Ray's resource for Huawei Ascend NPUs (docs.ray.io: ray-core/scheduling/accelerators)


class RaySession:
    """One connection to Ray shared by a tune's slots: opened by the first ``prepare``, closed once."""

    def __init__(self, address: str):
        self.address = address
        self.started: bool | None = None      # None: not connected by us yet; True: we initialised Ray

    def open(self) -> None:
        if self.started is None:
            self.started = ray_connect(self.address)

    def close(self) -> None:
        if self.started:
            import ray
            ray.shutdown()
        self.started = None


class RayRunner(Runner):
    """``inner``'s runs as Ray tasks asking for ``npus`` NPUs each (see the module docstring)."""

    def __init__(self, inner: Runner, address: str, npus: int = 1, session: RaySession | None = None,
                 cwd: str | None = None):
        import_ray("--ray")        # the [cluster] extra missing: one line before anything is written
        if not npus >= 1:
            raise InputError("--npus-per-run", f"must be a whole number of NPUs >= 1, not {npus}")
        self.inner, self.npus = inner, npus
        self.name = inner.name
        self.owner = session is None          # the runner that connected closes the connection
        self.session = session or RaySession(address)
        self.cwd = cwd or os.getcwd()

    def describe(self) -> dict:
        """The wrapped runner's identity: where a run executes does not change it, so a tune begun on this
        machine may be resumed on Ray and the other way round."""
        return self.inner.describe()

    def slot(self, index: int) -> "RayRunner":
        """Every slot submits to the same cluster; Ray decides where each run goes."""
        return self if index == 0 else RayRunner(self.inner, self.session.address, self.npus, self.session, self.cwd)

    def prepare(self, out_dir: Path) -> None:
        self.inner.prepare(out_dir)
        self.session.open()
        import ray
        nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
        most = max((float(r.get(NPU, 0)) for r in nodes), default=0.0)
        if most < self.npus:
            raise InputError("--npus-per-run", f"each run asks Ray for {self.npus} NPU{'s' if self.npus != 1 else ''}"
                                               f", but no node of the Ray cluster at {self.session.address!r} has "
                                               f"that many (the most on one node: {most:g}; "
                                               f"the cluster: {float(ray.cluster_resources().get(NPU, 0)):g}); "
                                               "a task asking for more would wait forever")

    def close(self) -> None:
        if self.owner:
            self.session.close()

    def run(self, mixlist: Mixlist | None, mode: str, run_dir: Path, loss_scale: float | None = None,
            keep_dtype: Sequence[str] = (), customize_dtypes: Sequence[str] = ()) -> RunResult:
        return self._submit("run", mixlist, mode, run_dir, loss_scale, tuple(keep_dtype), tuple(customize_dtypes))

    def reference(self, run_dir: Path) -> RunResult:
        return self._submit("reference", None, None, run_dir, None)

    def _submit(self, kind: str, mixlist, mode, run_dir: Path, loss_scale, keep_dtype: tuple = (),
                customize_dtypes: tuple = ()) -> RunResult:
        self.session.open()
        import ray
        task = ray.remote(run_on_node).options(resources={NPU: self.npus}, num_cpus=1, max_retries=0)
        ref = task.remote(self.inner, self.cwd, kind, mixlist, mode, str(Path(run_dir).absolute()), loss_scale,
                          keep_dtype, customize_dtypes)
        try:
            return ray_result(ref)
        except KeyboardInterrupt:
            ray.cancel(ref)        # the task's runner stops its command's process tree / capture child
            raise


def run_on_node(inner: Runner, cwd: str, kind: str, mixlist, mode, run_dir: str, loss_scale,
                keep_dtype: tuple = (), customize_dtypes: tuple = ()) -> RunResult:
    """The Ray task: one run of ``inner`` on the node Ray chose, with the NPUs Ray assigned."""
    import ray
    node = ray.util.get_node_ip_address()
    out = Path(run_dir).parent
    if not Path(cwd).is_dir():
        raise InputError(cwd, f"does not exist on the Ray node {node}: tune --ray runs every run in the folder "
                              "it was started in, which must be on storage every node shares")
    if not out.is_dir():
        raise InputError(out, f"is not visible on the Ray node {node}: --out must be on storage every node "
                              "shares (the run directory is written there)")
    ids = [str(i) for i in (ray.get_runtime_context().get_accelerator_ids().get(NPU) or [])]
    before_cwd, before_devices = os.getcwd(), os.environ.get(ENV_DEVICES)
    os.chdir(cwd)
    if ids:
        os.environ[ENV_DEVICES] = ",".join(ids)
    try:
        if kind == "reference":
            res = inner.reference(Path(run_dir))
        else:
            kw = {**({"loss_scale": loss_scale} if loss_scale is not None else {}),
                  **({"keep_dtype": keep_dtype} if keep_dtype else {}),
                  **({"customize_dtypes": customize_dtypes} if customize_dtypes else {})}
            res = inner.run(mixlist, mode, Path(run_dir), **kw)
    finally:
        inner.close()
        os.chdir(before_cwd)
        if before_devices is None:
            os.environ.pop(ENV_DEVICES, None)
        else:
            os.environ[ENV_DEVICES] = before_devices
    res.extra = {**res.extra, "ray_node": node, "npus": ids}
    return res
