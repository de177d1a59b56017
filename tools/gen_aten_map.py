#!/usr/bin/env python
"""Regenerate ``advisor/data/aten_to_ge.json`` (aten op -> GE op type) from a torch_npu wheel.

The torch_npu wheel ships the torchair converters
(``torch_npu/dynamo/torchair/_ge_concrete_graph/ge_converter/aten/*.py``, BSD licence) that lower
every aten op to GE ops when torch_npu runs in graph mode.  This script reads them *as text*
(``ast``; torch_npu is never imported or installed):

* every function decorated ``@register_fx_node_ge_converter(torch.ops.aten.<op>.<overload>)``
  gives one entry ``"<op>.<overload>"``;
* the GE ops it builds are the ``ge.<Type>(...)`` calls in its body (and in the module-level
  helpers it calls);
* the *primary* type (the kernel the emulator reports for the aten op) is: a cube type
  (MatMul*, BatchMatMul*, Conv*, FlashAttention*) if the converter builds one, else the first
  non-utility type in the converter's ``return`` statements, else the first non-utility type built.
  Utility types (Const, Fill, Shape, Cast, Reshape, Unsqueeze, Gather of shapes, ...) are skipped.

Then ``OVERRIDES`` (documented below, each with its reason) fix converters that raise or that do
not express the main kernel, and ``VIEWS`` mark aten ops that are views/reshapes (no kernel:
``kernel: false``).

Usage::

    pip download torch-npu --no-deps -d /tmp/tnpu
    python tools/gen_aten_map.py /tmp/tnpu/torch_npu-*.whl  [-o advisor/data/aten_to_ge.json]
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from pathlib import Path

CONV_DIR = "torch_npu/dynamo/torchair/_ge_concrete_graph/ge_converter/aten/"

UTILITY = {
    "Const", "Fill", "Shape", "Gather", "GatherV2D", "Pack", "Unpack", "Cast", "Reshape", "Unsqueeze",
    "Squeeze", "ConcatV2D", "Identity", "Size", "Range", "BroadcastTo", "ExpandDims", "Rank", "ShapeN",
    "StridedSlice", "Slice", "TensorMove",
}
CUBE = re.compile(r"^(MatMul|BatchMatMul|Conv|DepthwiseConv|Deconvolution|FlashAttention|FusedInferAttention|GEMM)")

# aten ops whose output is a view/alias of an input (no kernel in GE: Reshape/Transpose of a
# contiguous tensor are folded; the emulator reports no kernel and the op follows its producer).
VIEWS = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "t", "transpose", "permute", "squeeze",
    "unsqueeze", "flatten", "unflatten", "slice", "select", "as_strided", "alias", "detach", "lift_fresh",
    "view_as", "expand_as", "unbind", "split", "split_with_sizes", "chunk", "narrow", "diagonal",
    "numpy_T", "mT", "contiguous", "clone", "_to_copy_same_dtype", "lift_fresh_copy", "view_as_real",
    "view_as_complex", "movedim", "swapaxes", "unfold",
}

# Manual entries: converter missing, raising NotImplementedError, or not the kernel GE runs.
OVERRIDES = {
    # batch norm: torchair lowers the functional forms to BatchNorm (eval) / BNTrainingReduce+Update (train)
    "native_batch_norm.default": ("BNTrainingUpdate", "train mode: BNTrainingReduce + BNTrainingUpdate"),
    "_native_batch_norm_legit.default": ("BNTrainingUpdate", "train mode batch norm"),
    "_native_batch_norm_legit_functional.default": ("BNTrainingUpdate", "train mode batch norm"),
    "_native_batch_norm_legit_no_training.default": ("BNInfer", "eval mode batch norm"),
    "native_batch_norm_backward.default": ("BNTrainingUpdateGrad", "BNTrainingUpdateGrad + BNTrainingReduceGrad"),
    # fused attention (CPU flash/efficient/math kernels) -> one GE FlashAttentionScore
    "_scaled_dot_product_flash_attention_for_cpu.default": ("FlashAttentionScore", "fused SDPA on CPU"),
    "_scaled_dot_product_flash_attention_for_cpu_backward.default": ("FlashAttentionScoreGrad", "fused SDPA grad"),
    # matmul family: the CPU dispatcher decomposes these; keep a mapping for completeness
    "matmul.default": ("BatchMatMulV2", "composite; dispatch usually shows mm/bmm"),
    "linear.default": ("MatMulV2", "composite; dispatch usually shows addmm"),
    # dropout on CPU
    "native_dropout.default": ("DropOutDoMask", "StatelessDropOutGenMask + DropOutDoMask"),
    "native_dropout_backward.default": ("DropOutDoMask", "grad = DropOutDoMask(grad, mask)"),
    "bernoulli_.float": ("StatelessBernoulli", "mask generation"),
    # copies
    "copy_.default": ("TensorMove", "in-place copy"),
    "_to_copy.default": ("Cast", "dtype conversion (same dtype: TensorMove)"),
    "_log_softmax.default": ("LogSoftmaxV2", ""),
    "_log_softmax_backward_data.default": ("LogSoftmaxGrad", ""),
    "_softmax_backward_data.default": ("SoftmaxGrad", ""),
    "nll_loss_forward.default": ("NLLLoss", ""),
    "nll_loss_backward.default": ("NLLLossGrad", ""),
    "embedding_dense_backward.default": ("EmbeddingDenseGrad", ""),
    "native_layer_norm_backward.default": ("LayerNormGradV3", "LayerNormBetaGammaBackpropV2 + LayerNormXBackpropV3"),
    "convolution_backward.default": ("Conv2DBackpropInput", "+ Conv2DBackpropFilter / BiasAddGrad"),
    "max_pool2d_with_indices.default": ("MaxPoolWithArgmaxV1", ""),
    "max_pool2d_with_indices_backward.default": ("MaxPoolGradWithArgmaxV1", ""),
    "avg_pool2d.default": ("AvgPoolV2", ""),
    "avg_pool2d_backward.default": ("AvgPoolV2Grad", ""),
    "_adaptive_avg_pool2d.default": ("AdaptiveAvgPool2d", ""),
    "_adaptive_avg_pool2d_backward.default": ("AdaptiveAvgPool2dGrad", ""),
    "sigmoid_backward.default": ("SigmoidGrad", ""),
    "tanh_backward.default": ("TanhGrad", ""),
    "silu_backward.default": ("SiluGrad", ""),
    "threshold_backward.default": ("ReluGrad", "threshold 0"),
    "gelu_backward.default": ("GeluGrad", ""),
    "mse_loss.default": ("MseLoss", ""),
    "mse_loss_backward.default": ("MseLossGrad", ""),
    "_safe_softmax.default": ("SoftmaxV2", ""),
    "_softmax.default": ("SoftmaxV2", ""),
    "native_layer_norm.default": ("LayerNormV4", ""),
    "masked_fill.Scalar": ("MaskedFill", ""),
    "masked_fill_.Scalar": ("MaskedFill", ""),
    "zero_.default": ("ZerosLike", ""),
    "fill_.Scalar": ("Fill", ""),
    "new_zeros.default": ("ZerosLike", ""),
    "zeros_like.default": ("ZerosLike", ""),
    "ones_like.default": ("OnesLike", ""),
    "empty_like.default": ("Empty", ""),
    "convolution.default": ("Conv2D", "Conv2D/Conv3D/Conv2DTranspose built in helpers; 2-D case"),
    "amax.default": ("ReduceMax", ""),
    "amin.default": ("ReduceMin", ""),
    "mul.Tensor": ("Mul", "Muls is the scalar-operand variant"),
    "sub.Tensor": ("Sub", "the Const/Mul are for alpha"),
    "rsub.Scalar": ("Sub", ""),
    "rsub.Tensor": ("Sub", ""),
    "arange.default": ("Range", ""),
    "arange.start": ("Range", ""),
    "arange.start_step": ("Range", ""),
    "scaled_dot_product_attention.default": ("FlashAttentionScore", "composite"),
}


def _decorated_ops(fn: ast.FunctionDef) -> list[str]:
    out = []
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == "register_fx_node_ge_converter" and dec.args:
            s = ast.unparse(dec.args[0])
            m = re.match(r"torch\.ops\.aten\.([\w]+)\.([\w]+)$", s)
            if m:
                out.append(f"{m.group(1)}.{m.group(2)}")
    return out


def _ge_calls(node: ast.AST) -> list[str]:
    calls = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                and isinstance(sub.func.value, ast.Name) and sub.func.value.id == "ge":
            calls.append((getattr(sub, "lineno", 0), getattr(sub, "col_offset", 0), sub.func.attr))
    return [c for _, _, c in sorted(calls)]


def _primary(fn: ast.FunctionDef, helpers: dict[str, ast.FunctionDef]) -> tuple[str | None, list[str]]:
    calls = _ge_calls(fn)
    called: list[str] = []   # helper functions called, in source order (deterministic output)
    for s in sorted((c for c in ast.walk(fn) if isinstance(c, ast.Call)), key=lambda c: (c.lineno, c.col_offset)):
        h = getattr(s.func, "id", None)
        if h and h not in called:
            called.append(h)
    for h in called:
        if h in helpers and helpers[h] is not fn:
            calls += _ge_calls(helpers[h])
    seen: list[str] = []
    for c in calls:
        if c not in seen:
            seen.append(c)
    for c in seen:
        if CUBE.match(c):
            return c, seen
    for ret in (s for s in ast.walk(fn) if isinstance(s, ast.Return) and s.value is not None):
        for c in _ge_calls(ret):
            if c not in UTILITY:
                return c, seen
    for c in seen:
        if c not in UTILITY:
            return c, seen
    return (seen[0] if seen else None), seen


def read_wheel(whl: Path) -> tuple[dict[str, dict], str]:
    entries: dict[str, dict] = {}
    with zipfile.ZipFile(whl) as z:
        names = [n for n in z.namelist() if n.startswith(CONV_DIR) and n.endswith(".py")]
        if not names:
            raise SystemExit(f"{whl}: no torchair aten converters under {CONV_DIR}")
        version = "?"
        for n in z.namelist():
            if n.endswith("torch_npu/version.py"):
                m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", z.read(n).decode("utf-8", "replace"))
                version = m.group(1) if m else version
        for n in sorted(names):
            try:
                tree = ast.parse(z.read(n).decode("utf-8"))
            except SyntaxError:
                continue
            funcs = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
            helpers = {f.name: f for f in funcs}
            for f in funcs:
                for op in _decorated_ops(f):
                    prim, calls = _primary(f, helpers)
                    if prim is None:
                        continue  # converter raises / not implemented
                    entries.setdefault(op, {"type": prim, "kernel": True, "ge_calls": calls,
                                            "source": n[len(CONV_DIR):]})
    return entries, version


def build(whl: Path) -> dict:
    entries, version = read_wheel(whl)
    for op, (t, why) in OVERRIDES.items():
        e = entries.get(op, {"ge_calls": [], "source": "override"})
        e.update({"type": t, "kernel": True})
        if why or e.get("source") == "override":
            e["note"] = ("override: " + why) if why else "override"
        entries[op] = e
    # views: every overload of a view op has no kernel
    for op in list(entries):
        if op.split(".")[0] in VIEWS:
            entries[op]["kernel"] = False
    for v in VIEWS:
        for ov in ("default", "int", "Tensor", "using_ints", "dim", "dims", "Dimname"):
            key = f"{v}.{ov}"
            if key in entries:
                entries[key]["kernel"] = False
        if f"{v}.default" not in entries:
            entries[f"{v}.default"] = {"type": "Reshape" if v not in ("t", "transpose", "permute") else "Transpose",
                                       "kernel": False, "ge_calls": [], "source": "view"}
    return {
        "source": f"torchair converters in torch_npu {version} wheel ({whl.name}), read as text; "
                  "primary GE type per aten overload; kernel=false: view/alias (no kernel)",
        "generator": "tools/gen_aten_map.py",
        "ops": {k: entries[k] for k in sorted(entries)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel", type=Path)
    ap.add_argument("-o", "--out", type=Path,
                    default=Path(__file__).resolve().parents[1] / "advisor" / "data" / "aten_to_ge.json")
    a = ap.parse_args(argv)
    d = build(a.wheel)
    a.out.write_text(json.dumps(d, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {a.out}: {len(d['ops'])} aten overloads", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
