"""A recorded ONNX node as a callable for ``advisor.replay`` (the replay search and ``advisor replay``).

An ONNX capture stores each node's serialized ``NodeProto`` (base64, nodes without subgraphs, up to 64 KiB)
as the graph-dump attribute ``_advisor.onnx_node`` with the model's opset (``_advisor.onnx_opset``).  The
callable runs that node with the ONNX reference runtime on torch tensors (converted to numpy and back), so
``emulator.engine.execute_op`` applies the same rounding rule as the capture did.  A node that cannot be
rebuilt (no ``onnx`` installed, a corrupt blob) is reported as not replayable, with the reason.
"""
from __future__ import annotations

import base64
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from .opmap import AUX_FP32_OUTPUTS


@lru_cache(maxsize=4096)
def _evaluator(blob: str, opset: int | None):
    import onnx
    from onnx.reference import ReferenceEvaluator
    node = onnx.NodeProto()
    node.ParseFromString(base64.b64decode(blob))
    ev = ReferenceEvaluator(node, opsets={"": int(opset)} if opset else None)
    return node, ev


def node_callable(blob: str, opset: Any = None) -> tuple[Callable | None, str | None, tuple]:
    """(callable on torch tensors returning a tuple of torch tensors, None, statistics outputs) for a
    serialized ONNX node, or (None, why not, ())."""
    try:
        node, ev = _evaluator(str(blob), int(opset) if opset not in (None, "") else None)
    except ImportError:
        return None, "ONNX node: the onnx package is not installed (pip install 'advisor[onnx]')", ()
    except Exception as e:  # noqa: BLE001 - a corrupt or unsupported recorded node
        return None, f"ONNX node cannot be rebuilt ({type(e).__name__})", ()
    names = list(node.input)

    def run(*args):
        import torch
        feed = {}
        for name, a in zip(names, args):
            if not name or a is None:
                continue
            feed[name] = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        with np.errstate(all="ignore"):
            outs = ev.run(None, feed)
        return tuple(torch.from_numpy(np.array(o)) for o in outs)
    return run, None, AUX_FP32_OUTPUTS.get(node.op_type, ()) if not node.domain else ()


__all__ = ["node_callable"]
