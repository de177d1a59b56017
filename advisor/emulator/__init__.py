"""CPU emulator of Ascend GE mixed precision for PyTorch workloads (``advisor capture``).

Public API::

    capture(target_or_workload, out, mode="mixed_float16", mixlist=None, soc="ascend910b",
            ops_info=None, seed=0, dump=None, batches=None, local=True, progress=None) -> Path
    trace_workload(workload, step=0) -> (op graph, StepRecord)     # the graph capture plans on
    local.local_error(op_record, fp32_inputs, low_dtype) -> dict   # one op's local error
"""
from __future__ import annotations

from .capture import capture, run_step, trace_workload
from .local import local_error

__all__ = ["capture", "run_step", "trace_workload", "local_error"]
