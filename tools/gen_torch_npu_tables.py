#!/usr/bin/env python
"""Regenerate advisor's torch_npu tables from their sources (read as text; nothing is imported or installed):

* ``advisor/data/torch_npu/autocast.json`` -- torch_npu's autocast table: every ``KERNEL_PRIVATEUSEONE(op[,
  overload], policy)`` and ``KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(..., "op.overload", ..., policy)``
  registration of ``torch_npu/csrc/aten/AutoCastOps.cpp`` (Ascend/pytorch) with its line, the banned kernel
  (``m.impl(... "aten::binary_cross_entropy" ..._banned)``) and the fallthrough for every other op; the category
  names are the policies the macros name (``at::autocast::CastPolicy``).  What each policy does is PyTorch's
  ``aten/src/ATen/autocast_mode.h`` (the ``WrapFunction_`` specialisations; their lines are recorded from the
  header of the installed torch, ``--autocast-header``).
* ``advisor/data/torch_npu/apex_o1.json`` -- Apex O1's function lists: ``apex/amp/lists/{functional,torch,
  tensor}_overrides.py`` of NVIDIA/apex at the commit Ascend's Apex builds on (Ascend/apex ``README.zh.md``:
  ``git checkout <commit>``; its ``patch/npu.patch`` is checked to leave the lists alone), each name with its
  list (FP16_FUNCS, FP32_FUNCS, CASTS, SEQUENCE_CASTS, BANNED_FUNCS) and line.  The batched matmuls added only
  ``if utils.is_cuda_enabled()`` are recorded apart (``cuda_only``): on an NPU build ``torch.version.cuda`` is
  None, so they are in no list.
* ``advisor/data/torch_npu/eager_ops.json`` -- how torch_npu's op-plugin runs an aten op eagerly: the aclnn
  API(s) it calls (``EXEC_NPU_CMD(aclnnX, ...)``, ``DO_COMPATIBILITY(aclnnX, ...)``, a generated op's
  ``gen_opapi: exec: aclnnX``) and whether the call passes a ``cube_math_type`` -- the cube ops
  ``ACL_PRECISION_MODE=allow_fp32_to_fp16`` lowers (torch_npu ``CalcuOpUtil::GetCubeMathType``) -- with the HF32
  switch it reads: ``matmul`` (``get_cube_math_type_with_passthrough``: ``IsAllowMatmulHF32``), ``conv``
  (``get_cube_math_type(IsAllowConvHF32())``) or ``none`` (``get_cube_math_type(false)``).  A function's
  properties include those of the same file's helpers it calls (transitively).

Usage (each SOURCE a checkout or a bare git directory; the commit read is recorded in the JSON)::

    python tools/gen_torch_npu_tables.py --pytorch /work/.mirror/Ascend+pytorch/repo \\
        --apex /work/.mirror/NVIDIA+apex/repo --ascend-apex /work/.mirror/Ascend+apex/repo \\
        --op-plugin /work/.mirror/Ascend+op-plugin/repo [-o advisor/data/torch_npu]
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

AUTOCAST_FILE = "torch_npu/csrc/aten/AutoCastOps.cpp"
APEX_LISTS = ("apex/amp/lists/functional_overrides.py", "apex/amp/lists/torch_overrides.py",
              "apex/amp/lists/tensor_overrides.py")
APEX_LIST_NAMES = ("FP16_FUNCS", "FP32_FUNCS", "CASTS", "SEQUENCE_CASTS", "BANNED_FUNCS")
APEX_MODULES = {"functional_overrides": "torch.nn.functional", "torch_overrides": "torch",
                "tensor_overrides": "torch.Tensor"}
OPAPI_DIR = "op_plugin/ops/opapi/"
OP_PLUGIN_YAML = "op_plugin/config/op_plugin_functions.yaml"
POLICIES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "fp32_append_dtype", "promote")


# ---------------------------------------------------------------------- reading a source tree
class Source:
    """A checkout or a bare git directory, read at one commit."""

    def __init__(self, path: str, commit: str | None = None):
        self.path = Path(path)
        self.git = (self.path / "HEAD").is_file() and (self.path / "objects").is_dir() or (self.path / ".git").exists()
        self.commit = self._rev(commit or "HEAD") if self.git else None

    def _run(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.path), *args], check=True, capture_output=True,
                              text=True).stdout

    def _rev(self, rev: str) -> str:
        return self._run("rev-parse", rev).strip()

    def date(self) -> str | None:
        return self._run("log", "-1", "--format=%cs", self.commit).strip() if self.git else None

    def read(self, rel: str) -> str:
        if self.git:
            return self._run("show", f"{self.commit}:{rel}")
        return (self.path / rel).read_text(encoding="utf-8")

    def files(self, prefix: str) -> list[str]:
        if self.git:
            return [f for f in self._run("ls-tree", "-r", "--name-only", self.commit, "--", prefix).splitlines() if f]
        return sorted(str(p.relative_to(self.path)) for p in (self.path / prefix).rglob("*") if p.is_file())


def _meta(src: Source, repo: str, files) -> dict:
    return {"repo": repo, "commit": src.commit, "date": src.date(), "files" if isinstance(files, list) else "file": files}


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _call_text(text: str, start: int) -> str:
    """The text of a macro call from its opening parenthesis at ``start`` to the matching one."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    raise ValueError("unbalanced parentheses")


def _split_args(s: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in s:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


# ---------------------------------------------------------------------- torch_npu autocast
def autocast_table(src: Source, header: Path | None) -> dict:
    text = src.read(AUTOCAST_FILE)
    code = re.sub(r"//[^\n]*", lambda m: " " * len(m.group(0)), text)   # comments out, positions kept
    ops: dict[str, dict] = {}

    def add(name: str, overload: str, category: str, pos: int) -> None:
        key = f"{name}.{overload}" if overload else name
        if key in ops:
            raise SystemExit(f"{AUTOCAST_FILE}: {key} registered twice")
        ops[key] = {"op": name, "overload": overload or "default", "category": category, "line": _line_of(text, pos)}

    for m in re.finditer(r"\bKERNEL_PRIVATEUSEONE\s*\(", code):
        args = _split_args(_call_text(code, m.end() - 1))
        if len(args) not in (2, 3) or args[-1] not in POLICIES:
            raise SystemExit(f"{AUTOCAST_FILE}:{_line_of(text, m.start())}: unexpected KERNEL_PRIVATEUSEONE{args}")
        add(args[0], args[1] if len(args) == 3 else "", args[-1], m.start())
    for m in re.finditer(r"\bKERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE\s*\(", code):
        args = _split_args(_call_text(code, m.end() - 1))
        reg = args[1].strip().strip('"')
        if args[-1] not in POLICIES:
            raise SystemExit(f"{AUTOCAST_FILE}:{_line_of(text, m.start())}: unexpected policy {args[-1]}")
        name, _, overload = reg.partition(".")
        add(name, overload, args[-1], m.start())
    for m in re.finditer(r'm\.impl\s*\(\s*TORCH_SELECTIVE_NAME\s*\(\s*"aten::([\w.]+)"\s*\)\s*,\s*TORCH_FN\s*\(\s*\(?'
                         r'&(\w+)', code):
        fn = m.group(2)
        body = re.search(r"\b" + fn + r"\s*\([^)]*\)\s*\{(.*?)\n\}", code, re.S)
        if not fn.endswith("_banned") or body is None or "AT_ERROR" not in body.group(1):
            raise SystemExit(f"{AUTOCAST_FILE}: m.impl of {m.group(1)} is not a banned kernel")
        name, _, overload = m.group(1).partition(".")
        add(name, overload, "banned", m.start())
        msg = re.findall(r'"((?:[^"\\]|\\.)*)"', body.group(1))
        ops[m.group(1)]["message"] = "".join(msg).replace("\\n", "\n")
        ops[m.group(1)]["message_lines"] = [_line_of(text, body.start(1)), _line_of(text, body.end(1))]
    fall = re.search(r"TORCH_LIBRARY_IMPL\s*\(\s*_\s*,\s*AutocastPrivateUse1[^{]*\{\s*m\.fallback\s*\(\s*torch::"
                     r"CppFunction::makeFallthrough", code)
    if fall is None:
        raise SystemExit(f"{AUTOCAST_FILE}: no fallthrough fallback for AutocastPrivateUse1")
    out = {"source": _meta(src, "Ascend/pytorch", AUTOCAST_FILE), "generator": "tools/gen_torch_npu_tables.py",
           "categories": list(POLICIES) + ["banned"],
           "fallthrough_line": _line_of(text, fall.start()),
           "policies": _policy_lines(header), "ops": ops}
    return out


def _policy_lines(header: Path | None) -> dict:
    """Lines of PyTorch's autocast_mode.h that define each policy (the header torch_npu compiles against)."""
    if header is None or not header.is_file():
        return {}
    text = header.read_text(encoding="utf-8")
    out: dict = {"file": "aten/src/ATen/autocast_mode.h"}
    try:
        import torch  # noqa: PLC0415 - only for the version of the header read
        out["torch"] = torch.__version__.split("+")[0]
    except ImportError:
        pass
    for pol in POLICIES:
        m = re.search(r"// CastPolicy::" + pol + r" General_DeviceType\n", text)
        if m:
            end = text.find("\n};", m.end())
            out[pol] = [_line_of(text, m.start()), _line_of(text, end + 1) + 1]
    for fn in ("prioritize", "is_eligible", "set_opt_dtype", "firstarg_is_eligible", "type_from_firstarg"):
        m = re.search(r"\ninline [^\n]*\b" + fn + r"\(", text) or re.search(r"\n[^\n]*\binline " + fn + r"\(", text)
        if m:
            out[fn] = _line_of(text, m.start() + 1)
    return out


# ---------------------------------------------------------------------- Apex O1 lists
def _apex_commit(ascend: Source) -> tuple[str, dict]:
    readme = ascend.read("README.zh.md")
    m = re.search(r"git checkout ([0-9a-f]{40})", readme)
    if m is None:
        raise SystemExit("Ascend/apex README.zh.md names no NVIDIA apex commit")
    patch = ascend.read("patch/npu.patch")
    touched = re.findall(r"^diff .* apex-npu/(\S+)$", patch, re.M)
    if any(t.startswith("apex/amp/lists/") for t in touched):
        raise SystemExit("Ascend/apex's patch changes the amp lists: read them from the patched tree")
    return m.group(1), {"repo": "Ascend/apex", "commit": ascend.commit, "date": ascend.date(),
                        "readme_line": _line_of(readme, m.start()), "patch": "patch/npu.patch",
                        "patched_amp_files": sorted(t for t in touched if t.startswith("apex/amp/"))}


def _list_items(node: ast.AST) -> list[ast.Constant] | None:
    if isinstance(node, ast.Call) and node.args:      # compat.filter_attrs(MODULE, [...])
        node = node.args[-1]
    if isinstance(node, ast.List):
        out = []
        for e in node.elts:
            if isinstance(e, ast.Tuple):                # BANNED_FUNCS: (name, message)
                e = e.elts[0]
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.append(e)
        return out
    return None


def apex_table(src: Source, ascend: Source | None) -> dict:
    via = None
    if ascend is not None:
        commit, via = _apex_commit(ascend)
        src = Source(str(src.path), commit)
    funcs = []
    cuda_only = []
    for rel in APEX_LISTS:
        stem = rel.rsplit("/", 1)[1][:-3]
        tree = ast.parse(src.read(rel))
        for st in tree.body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                name = st.targets[0].id
                items = _list_items(st.value)
                if name in APEX_LIST_NAMES and items is not None:
                    funcs += [{"module": APEX_MODULES[stem], "name": c.value, "list": name, "file": rel,
                               "line": c.lineno} for c in items]
                elif name == "_bmms" and items is not None:
                    cuda_only += [{"module": APEX_MODULES[stem], "name": c.value, "file": rel, "line": c.lineno}
                                  for c in items]
    return {"source": _meta(src, "NVIDIA/apex", list(APEX_LISTS)), "via": via,
            "generator": "tools/gen_torch_npu_tables.py", "lists": list(APEX_LIST_NAMES),
            "functions": funcs, "cuda_only": cuda_only}


# ---------------------------------------------------------------------- op-plugin eager ops
_DEF = re.compile(r"^(?!\s)(?!return\b)(?:static\s+|inline\s+)*[\w:<>,\s&*]*?[\s&*](~?\w+)\s*\(", re.M)
_API = re.compile(r"\b(?:EXEC_NPU_CMD\w*|DO_COMPATIBILITY)\s*\(\s*(aclnn\w+)")


def _functions(code: str) -> list[tuple[str, str, int]]:
    """(name, body, offset) of each function defined at column 0 (a brace-balanced body)."""
    out = []
    for m in _DEF.finditer(code):
        i = m.end() - 1
        depth = 0
        j = i
        while j < len(code):              # skip the parameter list
            if code[j] == "(":
                depth += 1
            elif code[j] == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        k = j + 1
        while k < len(code) and code[k] not in "{;":
            k += 1
        if k >= len(code) or code[k] == ";":
            continue
        depth = 0
        e = k
        while e < len(code):
            if code[e] == "{":
                depth += 1
            elif code[e] == "}":
                depth -= 1
                if depth == 0:
                    break
            e += 1
        out.append((m.group(1), code[k:e + 1], m.start()))
    return out


def _cube_of(body: str) -> str | None:
    if "get_cube_math_type_with_passthrough" in body or "IsAllowMatmulHF32" in body:
        return "matmul"
    if "IsAllowConvHF32" in body:
        return "conv"
    if re.search(r"get_cube_math_type\s*\(\s*false\s*\)", body):
        return "none"
    return None


def eager_ops(src: Source) -> dict:
    ops: dict[str, dict] = {}
    for rel in src.files(OPAPI_DIR):
        if not rel.endswith(".cpp"):
            continue
        text = src.read(rel)
        code = re.sub(r"//[^\n]*", lambda m: " " * len(m.group(0)), text)
        funcs = _functions(code)
        names = {n for n, _, _ in funcs}
        props: dict[str, tuple[list[str], str | None, set[str]]] = {}
        for n, body, _ in funcs:
            apis = list(dict.fromkeys(_API.findall(body)))
            called = {c for c in re.findall(r"\b(\w+)\s*\(", body) if c in names and c != n}
            old = props.get(n, ([], None, set()))
            props[n] = (old[0] + [a for a in apis if a not in old[0]], old[1] or _cube_of(body), old[2] | called)
        # a function's properties include its same-file helpers' (transitively)
        for _ in range(4):
            for n, (apis, cube, called) in list(props.items()):
                for c in called:
                    capis, ccube, _ = props[c]
                    apis = apis + [a for a in capis if a not in apis]
                    cube = cube or ccube
                props[n] = (apis, cube, called)
        where: dict[str, int] = {}
        for n, _, off in funcs:
            where.setdefault(n, _line_of(text, off))
        for n, (apis, cube, _) in props.items():
            if not apis or n in ops:
                continue
            ops[n] = {"aclnn": apis, "file": rel, "line": where[n]}
            if cube:
                ops[n]["cube"] = cube
    ytext = src.read(OP_PLUGIN_YAML)
    for m in re.finditer(r"^  - func: ([\w.]+)\(.*?(?=^  - func: |\Z)", ytext, re.M | re.S):
        block = m.group(0)
        ex = re.search(r"^\s+exec: (aclnn\w+)", block, re.M)
        if ex is None:
            continue
        key = m.group(1)
        entry = {"aclnn": [ex.group(1)], "file": OP_PLUGIN_YAML, "line": _line_of(ytext, m.start())}
        cube = _cube_of(block) if "cube_math_type" in block else None
        if cube:
            entry["cube"] = cube
        ops.setdefault(key, entry)
    return {"source": _meta(src, "Ascend/op-plugin", [OPAPI_DIR, OP_PLUGIN_YAML]),
            "generator": "tools/gen_torch_npu_tables.py",
            "note": "key: an op_api function name (every overload of that aten op) or a generated op's "
                    "name.overload; cube: the HF32 switch its cube_math_type reads (matmul | conv | none)",
            "ops": dict(sorted(ops.items()))}


# ---------------------------------------------------------------------- main
def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pytorch", required=True, help="Ascend/pytorch (torch_npu) checkout or bare git dir")
    ap.add_argument("--apex", required=True, help="NVIDIA/apex checkout or bare git dir")
    ap.add_argument("--ascend-apex", help="Ascend/apex (names the NVIDIA apex commit it patches)")
    ap.add_argument("--op-plugin", required=True, help="Ascend/op-plugin checkout or bare git dir")
    ap.add_argument("--autocast-header", type=Path, default=None,
                    help="PyTorch's ATen/autocast_mode.h (default: the installed torch's)")
    ap.add_argument("-o", "--out", type=Path, default=Path(__file__).resolve().parents[1] / "advisor" / "data"
                    / "torch_npu")
    a = ap.parse_args(argv)
    header = a.autocast_header
    if header is None:
        try:
            import torch
            header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
        except ImportError:
            header = None
    _write(a.out / "autocast.json", autocast_table(Source(a.pytorch), header))
    _write(a.out / "apex_o1.json", apex_table(Source(a.apex), Source(a.ascend_apex) if a.ascend_apex else None))
    _write(a.out / "eager_ops.json", eager_ops(Source(a.op_plugin)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
