"""ONNX exports of the examples, for offline inference (ATC) workflows: made when a workload is loaded
(torch.onnx's TorchScript exporter, opset 17, in memory), so no .onnx binary is committed.

Workloads (``advisor capture examples/onnx_models.py:<name> --out DIR``, ``advisor tune`` likewise): each
returns an ``advisor.Workload`` whose model is an ``onnx.ModelProto`` and whose batches are dicts of named
input arrays.  ONNX node names (``/fc/Gemm``, ``/ln/LayerNormalization``, ...) are what ``--keep-dtype`` /
``--customize-dtypes`` files name.

    minilm          all-MiniLM-L6-v2 with its real weights (examples/minilm.py), dynamic batch/sequence axes
    cnn             examples/cnn_control.py's small CNN (Conv/BatchNorm/Relu/MaxPool/GlobalAveragePool/Gemm)
    layernorm_bias  examples/layernorm_bias.py's biased Linear -> LayerNorm with a deeper fp16-friendly tail
                    (``LinearLN(depth=8)``: with its 4 kernels of ~3 us no keep set of the two hazard ops
                    could leave 80 % of the kernel time in low precision)
    two_hazards     examples/two_hazards.py: planted Exp overflow and Sigmoid underflow into Log

``python examples/onnx_models.py OUT_DIR [--minilm]`` writes ``<name>.onnx`` and ``<name>.npz`` (its first
batch) for ``advisor capture OUT_DIR/<name>.onnx --inputs OUT_DIR/<name>.npz`` and for ``atc``.
"""
from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
OPSET = 17


def export(model: torch.nn.Module, args: tuple, input_names: list[str], output_names: list[str],
           dynamic_axes: dict | None = None):
    """``model`` exported to an ``onnx.ModelProto`` (in memory, eval mode, constants folded)."""
    import onnx
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # the TorchScript exporter's deprecation notices
        torch.onnx.export(model.eval(), args, f, dynamo=False, opset_version=OPSET, input_names=input_names,
                          output_names=output_names, dynamic_axes=dynamic_axes)
    return onnx.load_from_string(f.getvalue())


def _example(name: str):
    sys.path.insert(0, str(HERE))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(HERE))


def _workload(model, batches, input_names, output_names, name, dynamic_axes=None):
    from advisor import Workload
    proto = export(model, batches[0], input_names, output_names, dynamic_axes)
    data = [{n: t.numpy() for n, t in zip(input_names, b)} for b in batches]
    return Workload(model=proto, batches=data, name=name)


def minilm():
    """all-MiniLM-L6-v2 (real weights), 4 batches of 4 sentences: inputs input_ids, attention_mask."""
    m = _example("minilm")
    model, batches = m.workload()
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "embeddings": {0: "batch"}}
    return _workload(model, batches, ["input_ids", "attention_mask"], ["embeddings"], "minilm_onnx", axes)


def cnn():
    """The clean control CNN: input x [4,3,16,16]."""
    model, batches = _example("cnn_control").workload()
    return _workload(model, batches, ["x"], ["logits"], "cnn_onnx")


def layernorm_bias():
    """Biased Linear (bias 1000) -> LayerNorm -> Relu -> 8 x (Linear, Relu) -> head: input x [16,32]."""
    m = _example("layernorm_bias")
    torch.manual_seed(0)
    model = m.LinearLN(depth=8).eval()
    batches = [(torch.randn(16, 32),) for _ in range(4)]
    return _workload(model, batches, ["x"], ["y"], "layernorm_bias_onnx")


def two_hazards():
    """Planted hazards: Exp overflow and Sigmoid underflow into Log: input x [16,32]."""
    model, batches = _example("two_hazards").workload()
    return _workload(model, batches, ["x"], ["y"], "two_hazards_onnx")


WORKLOADS = {"cnn": cnn, "layernorm_bias": layernorm_bias, "two_hazards": two_hazards, "minilm": minilm}


def main(argv: list[str] | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description="write the ONNX exports of the examples and their first batch")
    ap.add_argument("out", type=Path)
    ap.add_argument("--minilm", action="store_true", help="also MiniLM (90 MB)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, fn in WORKLOADS.items():
        if name == "minilm" and not args.minilm:
            continue
        wl = fn()
        (args.out / f"{name}.onnx").write_bytes(wl.model.SerializeToString())
        np.savez(args.out / f"{name}.npz", **wl.batches[0])
        print(f"{args.out / name}.onnx  inputs: {', '.join(wl.batches[0])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
