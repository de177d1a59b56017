"""Structure measurements of the advisor package, from the standard library's ``ast`` only.

    python tools/code_metrics.py            # table + the limits below; exit 1 when a limit is broken
    python tools/code_metrics.py --json

Measured (docs/architecture.md "Structure"):
* import cycles between advisor modules, and between its sub-packages taken as wholes (module-level and
  function-level imports alike);
* modules over 600 lines;
* functions over 80 lines (each must say why in its docstring: the word "long" in the first paragraph);
* private names (``_x``) imported from another advisor module;
* ``getattr(obj, name, default)`` calls in recommend/, compare/ and the tune modules.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "advisor"
LIMITS = {"cycles": 0, "modules_over_600": 0, "functions_over_80": 5, "private_imports": 0, "getattr_defaults": 5}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def resolve(mod: str, is_pkg: bool, level: int, target: str | None) -> str:
    """Absolute module name of a (relative) import inside ``mod``."""
    if level == 0:
        return target or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def analyse() -> dict:
    modules: dict[str, Path] = {module_name(p): p for p in PKG.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    private: list[str] = []
    long_funcs: list[dict] = []
    big_modules: list[dict] = []
    getattrs: list[str] = []
    for mod, path in sorted(modules.items()):
        src = path.read_text(encoding="utf-8")
        tree = ast.parse(src)
        lines = src.count("\n") + 1
        if lines > 600:
            big_modules.append({"module": mod, "lines": lines})
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = resolve(mod, is_pkg, node.level, node.module)
                if not target.startswith("advisor"):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    dep = sub if sub in modules else target
                    if dep in modules and dep != mod:
                        edges[mod].add(dep)
                    if a.name.startswith("_") and not a.name.startswith("__") and sub not in modules:
                        private.append(f"{mod}: {a.name} from {target}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("advisor") and a.name in modules and a.name != mod:
                        edges[mod].add(a.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > 80:
                    doc = (ast.get_docstring(node) or "").split("\n\n")[0].lower()
                    long_funcs.append({"function": f"{mod}.{node.name}", "lines": n, "reason_given": "long" in doc})
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                  and len(node.args) == 3 and (mod.startswith(("advisor.recommend", "advisor.compare"))
                                               or mod.startswith("advisor.tune"))):
                getattrs.append(f"{mod}:{node.lineno}")
    # package __init__ files are imported by their submodules implicitly; an edge to a parent package
    # from its own child is not a cycle of the child's making, so those edges are left out
    for m in edges:
        edges[m] = {d for d in edges[m] if not (m.startswith(d + ".") and modules[d].name == "__init__.py")}
    # the same at the level of the sub-packages (advisor.tf, advisor.compare, ...; top-level modules as they are)
    def unit(m: str) -> str:
        parts = m.split(".")
        return ".".join(parts[:2]) if len(parts) > 2 or modules[m].name == "__init__.py" else m
    pkg_edges: dict[str, set[str]] = {}
    for m, ds in edges.items():
        pkg_edges.setdefault(unit(m), set()).update(unit(d) for d in ds if unit(d) != unit(m))
    cycles = find_cycles(edges) + [c for c in find_cycles(pkg_edges) if c not in find_cycles(edges)]
    return {"modules": len(modules), "cycles": cycles, "modules_over_600": big_modules,
            "functions_over_80": long_funcs, "private_imports": private, "getattr_defaults": getattrs}


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = analyse()
    counts = {"cycles": len(r["cycles"]), "modules_over_600": len(r["modules_over_600"]),
              "functions_over_80": len(r["functions_over_80"]), "private_imports": len(r["private_imports"]),
              "getattr_defaults": len(r["getattr_defaults"])}
    unexplained = [f for f in r["functions_over_80"] if not f["reason_given"]]
    ok = all(counts[k] <= LIMITS[k] for k in LIMITS) and not unexplained
    if a.json:
        print(json.dumps({**r, "counts": counts, "limits": LIMITS, "ok": ok}, indent=2))
    else:
        print(f"advisor: {r['modules']} modules")
        for k in LIMITS:
            print(f"  {k:18s} {counts[k]:4d}   (limit {LIMITS[k]})")
        for k in ("cycles", "modules_over_600", "functions_over_80", "private_imports", "getattr_defaults"):
            for item in r[k]:
                print(f"    {k}: {item}")
        print("ok" if ok else "limits broken")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
