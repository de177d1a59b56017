#!/usr/bin/env python
"""Regenerate ``advisor/data/onnx_to_ge.json`` (ONNX op -> the GE op type ATC gives it) from CANN's
ONNX parser plugins.

ATC converts an ONNX model with one parser plugin per ONNX op (``framework/*onnx_plugin.cpp`` in CANN's
operator repositories, CANN Open Software License 2.0): each registers
``REGISTER_CUSTOM_OP("<GE type>").FrameworkType(ONNX).OriginOpType({"ai.onnx::<opset>::<Op>", ...})``
(or the macro ``REGISTER_CUSTOM_ONNX_OP(ai.onnx::<opset>::<Op>, <GE type>, ...)``).  A plugin that
registers ``PartitionedCall`` builds a small GE subgraph (``ParseOpToGraphFn``, ``ge::op::<Type>(...)``
calls); its *primary* type (the kernel advisor reports for the ONNX node) is ``PRIMARY`` below where
set, else the cube type it builds (Conv*, MatMul*), else the first non-utility type it builds.
The files are read as text; nothing is compiled.

Usage (each argument: a checkout or a bare git directory of hicann/ops-nn, ops-math, ops-cv,
ops-transformer)::

    python tools/gen_onnx_map.py /path/ops-nn /path/ops-math /path/ops-cv /path/ops-transformer \\
        [-o advisor/data/onnx_to_ge.json]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

# ge::op::<Type> built inside a PartitionedCall plugin that are plumbing, not the op's kernel
UTILITY = {"Data", "Const", "Constant", "Identity", "Cast", "Shape", "Unsqueeze", "Squeeze", "ExpandDims",
           "BroadcastTo", "Reshape", "Empty", "Concat", "Split", "Muls", "Adds", "TransposeD", "Transpose",
           "PadV2", "Flatten", "TensorMove"}
CUBE = re.compile(r"^(MatMul|BatchMatMul|Conv|DepthwiseConv|Deconvolution|FullyConnection)")

# PartitionedCall plugins whose primary kernel is not the rule's pick (reason in the comment)
PRIMARY = {
    "LayerNormalization": "LayerNorm",      # LayerNorm + Rsqrt/Adds for the optional InvStdDev output
    "Gemm": "MatMulV2",                     # MatMulV2, then Muls (alpha, beta) and Add (C)
    "Conv": "Conv2D",                       # Conv2D (Conv3D for 5-D inputs)
    "ConvTranspose": "Conv2DTranspose",
    "MaxPool": "MaxPoolV3",                 # MaxPoolV3 (MaxPool3D for 5-D inputs)
    "AveragePool": "AvgPoolV2",
    "Clip": "ClipByValue",
    "Concat": "ConcatD",
    "Max": "Maximum", "Min": "Minimum", "Mean": "AccumulateNV2",
    "Split": "SplitV",
    "Resize": "Resize",
    "Upsample": "Resize",
    "Pad": "PadV3",
    "Transpose": "Transpose",
    "ScatterND": "ScatterNdUpdate",
    "Trilu": "Trilu",
    "NonZero": "NonZero",
    "Xor": "BitwiseXor",
}
# ONNX ops ATC handles without a plugin (its ONNX parser itself)
NATIVE = {"Constant": {"type": "Const", "kernel": False, "role": "const",
                       "source": "ATC ONNX parser (Constant nodes become Const)"}}
# GE types with no kernel of their own in an inference graph (views, folded host ops)
NO_KERNEL = {"Reshape", "Squeeze", "SqueezeV3", "Unsqueeze", "UnsqueezeV3", "Flatten", "Identity", "Dropout",
             "Shape", "Size", "Const"}


def sources(root: str) -> dict[str, str]:
    """path -> text of every ONNX plugin source under ``root`` (a checkout or a bare git dir)."""
    p = Path(root)
    out: dict[str, str] = {}
    if (p / "HEAD").is_file() and not (p / ".git").exists():        # a bare git directory
        names = subprocess.run(["git", "-C", root, "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True,
                               text=True, check=True).stdout.split()
        for n in names:
            if "onnx" in n.lower() and "plugin" in n.lower() and n.endswith((".cc", ".cpp")):
                out[n] = subprocess.run(["git", "-C", root, "show", f"HEAD:{n}"], capture_output=True, text=True,
                                        errors="replace", check=True).stdout
        return out
    for f in p.rglob("*"):
        if f.is_file() and "onnx" in f.name.lower() and "plugin" in f.name.lower() and f.suffix in (".cc", ".cpp"):
            out[str(f.relative_to(p))] = f.read_text(encoding="utf-8", errors="replace")
    return out


def repo_name(root: str) -> str:
    """``hicann/ops-nn`` for a mirror ``.../hicann+ops-nn/repo``, else the folder's name."""
    p = Path(root).resolve()
    if p.name == "repo" and "+" in p.parent.name:
        return p.parent.name.replace("+", "/", 1)
    return p.name


def registrations(path: str, text: str):
    """(ONNX op, opset, GE type, path) of every ONNX registration in one plugin source."""
    for m in re.finditer(r'REGISTER_CUSTOM_OP\(\s*"([^"]+)"\s*\)(.*?);', text, re.S):
        ge, body = m.group(1), m.group(2)
        if "ONNX" not in body:
            continue
        for v, op in re.findall(r"ai\.onnx::(\d+)::(\w+)", body):
            yield op, int(v), ge, path
    for m in re.finditer(r"REGISTER_CUSTOM_ONNX_OP\(\s*ai\.onnx::(\d+)::(\w+)\s*,\s*(\w+)\s*,", text):
        yield m.group(2), int(m.group(1)), m.group(3), path


def built_types(text: str) -> list[str]:
    return re.findall(r"\bop::(\w+)\s*[(\w]", text)


def build(roots: list[str]) -> dict:
    table: dict[str, dict] = {}
    texts: dict[str, str] = {}
    for r in roots:
        for path, text in sources(r).items():
            key = f"{repo_name(r)}:{path}"
            texts[key] = text
            for op, opset, ge, _ in registrations(path, text):
                e = table.setdefault(op, {"opsets": {}, "sources": set()})
                e["opsets"][opset] = (ge, key)
                e["sources"].add(key)
    out = {}
    for op, e in sorted(table.items()):
        per = {}
        for opset, (ge, key) in sorted(e["opsets"].items()):
            if ge == "PartitionedCall":
                inner = built_types(texts[key])
                cube = [t for t in inner if CUBE.match(t)]
                rest = [t for t in inner if t not in UTILITY]
                ge = PRIMARY.get(op) or (cube[0] if cube else (rest[0] if rest else "PartitionedCall"))
                per[opset] = {"type": ge, "subgraph": sorted(set(inner) - {"Data", "Const"})}
            else:
                per[opset] = {"type": ge}
        types = {v["type"] for v in per.values()}
        top = per[max(per)]
        entry = {"type": top["type"], "kernel": top["type"] not in NO_KERNEL, "opsets": sorted(per),
                 "sources": sorted(e["sources"])}
        if "subgraph" in top:
            entry["subgraph"] = top["subgraph"]
        if len(types) > 1:
            entry["by_opset"] = {str(k): v["type"] for k, v in per.items()}
        out[op] = entry
    out.update(NATIVE)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="+", help="checkouts or bare git dirs of hicann/ops-nn, ops-math, ops-cv, "
                                             "ops-transformer")
    ap.add_argument("-o", "--out", default=str(Path(__file__).resolve().parents[1] / "advisor/data/onnx_to_ge.json"))
    ap.add_argument("--describe", default="", help="the repositories' commits, recorded in the file")
    args = ap.parse_args(argv)
    ops = build(args.roots)
    doc = {"source": "ONNX parser plugins (framework/*onnx_plugin.cpp) of CANN's open-source operator "
                     "repositories hicann/ops-nn, ops-math, ops-cv, ops-transformer (CANN 9.1.0 packages), read as "
                     "text; primary GE type per ONNX op (latest registered opset; by_opset where it changes)" +
                     (f"; {args.describe}" if args.describe else ""),
           "generator": "tools/gen_onnx_map.py", "ops": ops}
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"{len(ops)} ONNX ops -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
