#!/usr/bin/env python
"""Regenerate ``advisor/data/aten_to_ge.json`` (aten op -> GE op type) from torchair's aten converters.

torchair (``Ascend/torchair``, BSD licence; also shipped inside the torch_npu wheel as
``torch_npu/dynamo/torchair/``) lowers every aten op to GE ops in graph mode with one converter per aten
overload under ``_ge_concrete_graph/ge_converter/aten/*.py``.  This script reads them *as text* (``ast``;
torchair/torch_npu is never imported or installed):

* every function decorated ``@register_fx_node_ge_converter(torch.ops.aten.<op>.<overload>)`` gives one
  entry ``"<op>.<overload>"`` (``line``: the decorator's line in ``source``); a converter whose body only
  raises (``NotImplementedError`` / ``RuntimeError``: "not supported") gives none;
* the GE ops it builds are the ``ge.<Type>(...)`` calls in its body and in the module-level helpers it
  calls (``ge_calls``);
* the *primary* type (the kernel the emulator reports for the aten op): a cube type (MatMul*,
  BatchMatMul*, Conv*, ...) if the converter builds one; else a random-number generator
  (StatelessRandom*, ...) if it builds one (the rest of such a converter scales or casts the numbers it
  draws); else the type of the op that produces the converter's returned tensor, followed through local
  variables and into the helpers whose result it returns (utility types -- Cast, Reshape, ConcatV2 of
  shapes, ... -- are looked through); else the first non-utility type built.

``CALL_RULES`` mark converters whose GE type depends on the call (tensor ranks, ``transposed``,
``output_mask``): the table records the rule's name (``by_call``) and the types it chooses among, each
checked to be built by the converter source; ``advisor.emulator.opmap.resolve`` applies the rule to each
call's arguments at capture time.  ``OVERRIDES`` (each with its reason) cover aten overloads torchair has
no converter for and converters that do not express the kernel GE runs; an override never contradicts a
converter silently (the script fails if one does, unless the reason says why).  ``VIEWS`` mark aten ops
that are views/aliases (no kernel, ``kernel: false``).

Usage (SOURCE: a checkout or a bare git directory of Ascend/torchair -- the commit is recorded -- or a
torch_npu wheel)::

    python tools/gen_aten_map.py /path/to/Ascend+torchair/repo  [-o advisor/data/aten_to_ge.json]
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

TORCHAIR_DIR = "python/torchair/_ge_concrete_graph/ge_converter/aten/"
WHEEL_DIR = "torch_npu/dynamo/torchair/_ge_concrete_graph/ge_converter/aten/"

UTILITY = {
    "Const", "Fill", "Shape", "Gather", "GatherV2D", "Pack", "Unpack", "Cast", "Reshape", "Unsqueeze",
    "Squeeze", "ConcatV2D", "Identity", "Size", "Range", "BroadcastTo", "ExpandDims", "Rank", "ShapeN",
    "StridedSlice", "Slice", "TensorMove",
}
CUBE = re.compile(r"^(MatMul|BatchMatMul|Conv|DepthwiseConv|Deconvolution|FlashAttention|FusedInferAttention|GEMM)")
RANDOM = re.compile(r"^(StatelessRandom|StatelessBernoulli|StatelessRandperm|StatelessMultinomial|StatelessTruncated"
                    r"|StatelessParameterized|RandomUniform|RandomStandardNormal|Multinomial|TruncatedNormal)")

# converters whose GE type depends on the call: rule name (advisor.emulator.opmap.CALL_RULES) -> types it picks
# (the first type is the table's ``type``: what a call whose arguments are unknown is taken to be)
CALL_RULES = {
    "matmul.default": ("matmul_rank", ("MatMul", "BatchMatMul")),
    "convolution.default": ("convolution", ("Conv2D", "Conv3D", "Conv2DTranspose", "Conv3DTranspose")),
    "convolution_backward.default": ("convolution_backward",
                                     ("Conv2DBackpropInput", "Conv3DBackpropInput", "Conv2DBackpropFilter",
                                      "Conv3DBackpropFilter", "Conv2D", "Conv3D", "ReduceSum")),
    "div.Tensor_mode": ("div_rounding_mode", ("RealDiv", "FloorDiv")),
    "bitwise_and.Tensor": ("bool_logical", ("LogicalAnd", "BitwiseAnd")),
    "bitwise_or.Tensor": ("bool_logical", ("LogicalOr", "BitwiseOr")),
    "bitwise_not.default": ("bool_logical", ("LogicalNot", "Invert")),
    # overrides (no converter): the emulator's own call rule
    "native_batch_norm.default": ("batch_norm_training", ("BNTrainingUpdate", "BNInfer")),
    "_native_batch_norm_legit.default": ("batch_norm_training", ("BNTrainingUpdate", "BNInfer")),
}

# aten ops whose output is a view/alias of an input (no kernel in GE: Reshape/Transpose of a
# contiguous tensor are folded; the emulator reports no kernel and the op follows its producer).
# split / split_with_sizes are not views here: torchair lowers them to a SplitV kernel.
VIEWS = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "t", "transpose", "permute", "squeeze",
    "unsqueeze", "flatten", "unflatten", "slice", "select", "as_strided", "alias", "detach", "lift_fresh",
    "view_as", "expand_as", "unbind", "chunk", "narrow", "diagonal",
    "numpy_T", "mT", "contiguous", "clone", "_to_copy_same_dtype", "lift_fresh_copy", "view_as_real",
    "view_as_complex", "movedim", "swapaxes", "unfold",
}

# Manual entries: no torchair converter (or one that raises), or a converter that does not express the
# kernel GE runs.  (type, reason); a reason starting "converter:" explains a deliberate difference from the
# converter's own primary type.
OVERRIDES = {
    # batch norm: torchair lowers the functional forms to BatchNorm (eval) / BNTrainingReduce+Update (train)
    "native_batch_norm.default": ("BNTrainingUpdate", "converter: train mode: BNTrainingReduce + BNTrainingUpdate"),
    "_native_batch_norm_legit.default": ("BNTrainingUpdate", "converter: train mode batch norm"),
    "_native_batch_norm_legit_functional.default": ("BNTrainingUpdate", "converter: train mode batch norm"),
    "_native_batch_norm_legit_no_training.default": ("BNInfer", "converter: eval mode batch norm"),
    "native_batch_norm_backward.default": ("BNTrainingUpdateGrad",
                                           "converter: BNTrainingUpdateGrad + BNTrainingReduceGrad"),
    # a composite of addmm/mm in eager dispatch; no kernel of its own
    "linear.default": ("MatMulV2", "composite; dispatch usually shows addmm"),
    # dropout on CPU
    "native_dropout.default": ("DropOutDoMask", "converter: StatelessDropOutGenMask + DropOutDoMask"),
    "native_dropout_backward.default": ("DropOutDoMask", "grad = DropOutDoMask(grad, mask)"),
    "bernoulli_.float": ("StatelessBernoulli", "mask generation"),
    "_to_copy.default": ("Cast", "converter: dtype conversion (same dtype: TensorMove)"),
    "_log_softmax.default": ("LogSoftmaxV2", ""),
    "_log_softmax_backward_data.default": ("LogSoftmaxGrad", ""),
    "_softmax_backward_data.default": ("SoftmaxGrad", ""),
    "nll_loss_forward.default": ("NLLLoss", ""),
    "nll_loss_backward.default": ("NLLLossGrad", ""),
    "embedding_dense_backward.default": ("EmbeddingDenseGrad", ""),
    "native_layer_norm_backward.default": ("LayerNormGradV3",
                                           "converter: LayerNormBetaGammaBackpropV2 + LayerNormXBackpropV3"),
    "max_pool2d_with_indices.default": ("MaxPoolWithArgmaxV1", ""),
    "max_pool2d_with_indices_backward.default": ("MaxPoolGradWithArgmaxV1", ""),
    "avg_pool2d.default": ("AvgPoolV2", ""),
    "avg_pool2d_backward.default": ("AvgPoolV2Grad", ""),
    "_adaptive_avg_pool2d.default": ("AdaptiveAvgPool2d", ""),
    "_adaptive_avg_pool2d_backward.default": ("AdaptiveAvgPool2dGrad", ""),
    "sigmoid_backward.default": ("SigmoidGrad", ""),
    "tanh_backward.default": ("TanhGrad", ""),
    "silu_backward.default": ("SiluGrad", "converter: the grad kernel"),
    "threshold_backward.default": ("ReluGrad", "converter: threshold 0"),
    "gelu_backward.default": ("GeluGrad", ""),
    "mse_loss.default": ("MseLoss", ""),
    "mse_loss_backward.default": ("MseLossGrad", ""),
    "_safe_softmax.default": ("SoftmaxV2", ""),
    "_softmax.default": ("SoftmaxV2", ""),
    "native_layer_norm.default": ("LayerNormV4", ""),
    "masked_fill.Scalar": ("MaskedFill", ""),
    "masked_fill_.Scalar": ("MaskedFill", ""),
    "zero_.default": ("ZerosLike", "converter: zero_ writes zeros like its input"),
    "fill_.Scalar": ("Fill", "converter: in-place fill"),
    "amax.default": ("ReduceMax", "converter: the reduction"),
    "new_empty_strided.default": ("Empty", "converter: an allocation (Empty; AsStrided only lays it out)"),
    "_fft_c2c.default": ("FFT", "converter: the transform (FFT, FFT2D for two dims; Permute/Complex are plumbing)"),
    "logsumexp.default": ("ReduceLogSumExp", "converter: the reduction (ReduceMax/Sub/Add stabilise it)"),
    "amin.default": ("ReduceMin", "converter: the reduction"),
    "mul.Tensor": ("Mul", "converter: Muls is the scalar-operand variant"),
    "sub.Tensor": ("Sub", "converter: the Const/Mul are for alpha"),
    "arange.default": ("Range", "converter: its kernel is Range (the Consts are its operands)"),
    "arange.start": ("Range", "converter: its kernel is Range (the Consts are its operands)"),
    "arange.start_step": ("Range", "converter: its kernel is Range (the Consts are its operands)"),
}
# No entry on purpose: scaled_dot_product_attention (CompositeImplicitAutograd) has no torchair converter and
# torchair's _scaled_dot_product_flash/efficient_attention converters raise NotImplementedError, so in graph mode
# SDPA is decomposed into its math ops (BatchMatMul, SoftmaxV2, ...) -- what the emulator executes
# (``engine.eager_math_attention``).  ``_scaled_dot_product_flash_attention_for_cpu`` is a CPU kernel GE never sees.


# ---------------------------------------------------------------------- reading the converters
def _decorated_ops(fn: ast.FunctionDef) -> list[tuple[str, int]]:
    out = []
    for dec in fn.decorator_list:
        if isinstance(dec, ast.Call) and getattr(dec.func, "id", "") == "register_fx_node_ge_converter" and dec.args:
            s = ast.unparse(dec.args[0])
            m = re.match(r"torch\.ops\.aten\.([\w]+)\.([\w]+)$", s)
            if m:
                out.append((f"{m.group(1)}.{m.group(2)}", dec.lineno))
    return out


def _ge_calls(node: ast.AST) -> list[str]:
    calls = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                and isinstance(sub.func.value, ast.Name) and sub.func.value.id == "ge":
            calls.append((getattr(sub, "lineno", 0), getattr(sub, "col_offset", 0), sub.func.attr))
    return [c for _, _, c in sorted(calls)]


def _only_raises(fn: ast.FunctionDef) -> bool:
    """A converter whose body (docstring aside) is a single ``raise``: torchair does not support the overload."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Raise)


def _called_helpers(fn: ast.AST, helpers: dict[str, ast.FunctionDef]) -> list[ast.FunctionDef]:
    """The module-level helpers ``fn`` calls, transitively, in source order."""
    seen: list[str] = []
    stack = [fn]
    while stack:
        f = stack.pop(0)
        for c in sorted((c for c in ast.walk(f) if isinstance(c, ast.Call)), key=lambda c: (c.lineno, c.col_offset)):
            h = getattr(c.func, "id", None)
            if h in helpers and h not in seen and helpers[h] is not fn:
                seen.append(h)
                stack.append(helpers[h])
    return [helpers[h] for h in seen]


def _is_arch35(test: ast.expr) -> bool | None:
    """True for ``if is_arch35():``, False for ``if not is_arch35():``, None for any other test."""
    if isinstance(test, ast.Call) and getattr(test.func, "id", None) == "is_arch35":
        return True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_arch35(test.operand):
        return False
    return None


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Every statement of a function body in source order, nested blocks included, leaving out the branches taken
    only on arch35 chips (Ascend950: ``if is_arch35():``) -- the chips advisor emulates are not arch35."""
    out: list[ast.stmt] = []
    for st in body:
        out.append(st)
        if isinstance(st, ast.If):
            a = _is_arch35(st.test)
            if a is None or a is False:
                out += _statements(st.body)
            if a is None or a is True:
                out += _statements(st.orelse)
        elif isinstance(st, (ast.For, ast.While, ast.With, ast.Try)):
            for part in ("body", "orelse", "finalbody"):
                out += _statements(getattr(st, part, []) or [])
            for h in getattr(st, "handlers", []) or []:
                out += _statements(h.body)
    return out


def _returned_type(fn: ast.FunctionDef, helpers: dict[str, ast.FunctionDef], depth: int = 0,
                   index: int | None = None) -> str | None:
    """The GE type of the op producing ``fn``'s returned tensor: a ``ge.<T>`` call in a return statement (utility
    types looked through), a local variable's (last) assignment, or a helper's own returned tensor.  A returned
    tuple gives its first element (the op's main output), or its last when the first is itself a tuple (torchair's
    ``(rng state), tensor`` helpers); ``index``: the element a caller unpacks."""
    if depth > 4:
        return None
    stmts = _statements(fn.body)
    assigns: dict[str, list[tuple[ast.expr, int | None]]] = {}
    for st in stmts:
        if isinstance(st, ast.Assign):
            for tgt in st.targets:
                if isinstance(tgt, ast.Name):
                    assigns.setdefault(tgt.id, []).append((st.value, None))
                elif isinstance(tgt, ast.Tuple):
                    for i, el in enumerate(tgt.elts):
                        if isinstance(el, ast.Name):
                            assigns.setdefault(el.id, []).append((st.value, i))

    def of(expr: ast.expr, idx: int | None, d: int) -> str | None:
        if d > 6:
            return None
        if isinstance(expr, ast.Tuple) and expr.elts:
            if idx is None:
                idx = -1 if isinstance(expr.elts[0], ast.Tuple) else 0
            return of(expr.elts[idx], None, d + 1) if -len(expr.elts) <= idx < len(expr.elts) else None
        if isinstance(expr, ast.Call) and getattr(expr.func, "id", None) in helpers:
            return _returned_type(helpers[expr.func.id], helpers, depth + 1, idx)
        for c in _ge_calls(expr):
            if c not in UTILITY:
                return c
        if isinstance(expr, ast.Name):
            for value, i in reversed(assigns.get(expr.id, [])):
                t = of(value, i, d + 1)
                if t is not None:
                    return t
        return None
    rets = [st for st in stmts if isinstance(st, ast.Return) and st.value is not None]
    # the function's own last statement first (the general path; earlier returns are special cases: a bool
    # dtype, a given dtype, ...), then the others in source order
    if fn.body and isinstance(fn.body[-1], ast.Return) and fn.body[-1] in rets:
        rets = [fn.body[-1]] + [r for r in rets if r is not fn.body[-1]]
    for ret in rets:
        t = of(ret.value, index, 0)
        if t is not None:
            return t
    return None


def _primary(fn: ast.FunctionDef, helpers: dict[str, ast.FunctionDef]) -> tuple[str | None, list[str]]:
    calls = _ge_calls(fn)
    for h in _called_helpers(fn, helpers):
        calls += _ge_calls(h)
    seen: list[str] = []
    for c in calls:
        if c not in seen:
            seen.append(c)
    for pattern in (CUBE, RANDOM):
        for c in seen:
            if pattern.match(c):
                return c, seen
    t = _returned_type(fn, helpers)
    if t is not None:
        return t, seen
    for c in seen:
        if c not in UTILITY:
            return c, seen
    return (seen[0] if seen else None), seen


def read_sources(src: Path) -> tuple[dict[str, str], str]:
    """{converter file name: text} and a provenance line, from a torchair checkout / bare git dir or a wheel."""
    if src.is_file() and src.suffix == ".whl":
        with zipfile.ZipFile(src) as z:
            names = [n for n in z.namelist() if n.startswith(WHEEL_DIR) and n.endswith(".py")]
            version = "?"
            for n in z.namelist():
                if n.endswith("torch_npu/version.py"):
                    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", z.read(n).decode("utf-8", "replace"))
                    version = m.group(1) if m else version
            files = {n[len(WHEEL_DIR):]: z.read(n).decode("utf-8") for n in sorted(names)}
        return files, f"torchair converters in the torch_npu {version} wheel ({src.name})"
    if (src / TORCHAIR_DIR).is_dir():
        files = {p.name: p.read_text(encoding="utf-8") for p in sorted((src / TORCHAIR_DIR).glob("*.py"))}
        return files, f"Ascend/torchair checkout {src}, {TORCHAIR_DIR}"

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(src), *args], check=True, capture_output=True, text=True).stdout
    commit = git("rev-parse", "HEAD").strip()
    date = git("log", "-1", "--format=%cs", "HEAD").strip()
    names = [n for n in git("ls-tree", "--name-only", "HEAD", TORCHAIR_DIR).split() if n.endswith(".py")]
    files = {Path(n).name: git("show", f"HEAD:{n}") for n in sorted(names)}
    return files, f"Ascend/torchair commit {commit} ({date}), {TORCHAIR_DIR}"


def read_converters(files: dict[str, str]) -> dict[str, dict]:
    entries: dict[str, dict] = {}
    for name, text in files.items():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        funcs = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
        helpers = {f.name: f for f in funcs}
        for f in funcs:
            for op, line in _decorated_ops(f):
                if _only_raises(f):
                    continue      # torchair does not support this overload
                prim, calls = _primary(f, helpers)
                if prim is None:
                    continue
                entries.setdefault(op, {"type": prim, "kernel": True, "ge_calls": calls, "source": name,
                                        "line": line})
    return entries


def build(src: Path) -> dict:
    files, provenance = read_sources(src)
    entries = read_converters(files)
    for op, (t, why) in OVERRIDES.items():
        e = entries.get(op, {"ge_calls": [], "source": "override"})
        if e.get("source") != "override" and e["type"] != t and not why.startswith("converter:"):
            raise SystemExit(f"{op}: override {t} contradicts the converter's {e['type']} ({e['source']}); "
                             "give the reason as 'converter: ...'")
        e.update({"type": t, "kernel": True})
        if why or e.get("source") == "override":
            e["note"] = ("override: " + why) if why else "override"
        entries[op] = e
    for op, (rule, types) in CALL_RULES.items():
        e = entries.get(op)
        if e is None:
            raise SystemExit(f"{op}: no converter in the sources for call rule {rule}")
        overridden = op in OVERRIDES        # the override's types are the emulator's, not the converter's
        missing = [t for t in types if t not in e["ge_calls"]]
        if missing and not overridden:
            raise SystemExit(f"{op}: the converter builds none of {missing} (rule {rule})")
        e.update({"type": e["type"] if overridden else types[0], "by_call": rule, "types": list(types)})
    # views: every overload of a view op has no kernel
    for op in list(entries):
        if op.split(".")[0] in VIEWS:
            entries[op]["kernel"] = False
    for v in VIEWS:
        if f"{v}.default" not in entries:
            entries[f"{v}.default"] = {"type": "Reshape" if v not in ("t", "transpose", "permute") else "Transpose",
                                       "kernel": False, "ge_calls": [], "source": "view"}
    return {
        "source": f"{provenance}, read as text; primary GE type per aten overload (by_call: chosen per call by "
                  "advisor.emulator.opmap.resolve); kernel=false: view/alias (no kernel)",
        "generator": "tools/gen_aten_map.py",
        "ops": {k: entries[k] for k in sorted(entries)},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="Ascend/torchair checkout or bare git dir, or a torch_npu wheel")
    ap.add_argument("-o", "--out", type=Path,
                    default=Path(__file__).resolve().parents[1] / "advisor" / "data" / "aten_to_ge.json")
    a = ap.parse_args(argv)
    d = build(a.source)
    a.out.write_text(json.dumps(d, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {a.out}: {len(d['ops'])} aten overloads", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
