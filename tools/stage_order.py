"""The documented order of advisor's stages (docs/architecture.md "Stages in order"), checked on the imports.

    python tools/stage_order.py          # the stages, bottom first, and every import that goes up; exit 1 if any
    python tools/stage_order.py --json

A stage may import from its own stage and from stages below it, never from a stage above (module-level and
function-level imports alike, read with ``ast``).  A new module or sub-package has to be given a stage here:
an unplaced one is reported too.  ``tests/test_structure.py`` runs this check.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from code_metrics import PKG, module_name, resolve  # noqa: E402

# bottom first; a unit is a top-level module or a sub-package taken as a whole (advisor.<name>)
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("foundations", ("advisor", "errors", "fsutil", "results", "progress", "tasks", "workload", "graph")),
    ("tables and rules", ("kernels", "oplists", "overrides", "mixlist", "precision_policy", "semantics", "numerics",
                          "costmodel", "lint", "scalers", "fusion")),   # fusion: GE's graph rewrite before the judge
    ("ingest", ("ingest",)),
    ("compare", ("compare",)),
    ("report", ("report",)),                 # renders the JSON documents of every stage (no stage objects)
    ("capture backends", ("rundir", "tf", "onnx", "emulator", "inputs")),   # inputs: checks before a run
    ("replay", ("replay_args", "replay", "replay_scope")),
    ("analysis", ("analysis", "replay_torch_npu")),   # replay_torch_npu: a torch_npu run under policies
    ("compare on every rank", ("cluster", "comparison")),
    ("recommend", ("recommend",)),
    ("runners", ("runners",)),
    ("tune", ("tune",)),
    ("commands", ("npu", "npu_policy", "commands", "cli", "__main__")),
]


def unit(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def check() -> dict:
    """Every import (module -> imported module) whose stage is above the importer's, and unplaced units."""
    level = {u: i for i, (_, units) in enumerate(STAGES) for u in units}
    modules = {module_name(p): p for p in PKG.rglob("*.py")}
    upward, unplaced = [], sorted({unit(m) for m in modules} - set(level))
    for mod, path in sorted(modules.items()):
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                t = resolve(mod, is_pkg, node.level, node.module)
                targets = [f"{t}.{a.name}" if f"{t}.{a.name}" in modules else t for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for dep in targets:
                if not dep.startswith("advisor") or dep not in modules:
                    continue
                a, b = unit(mod), unit(dep)
                if a in level and b in level and level[b] > level[a]:
                    upward.append({"module": mod, "imports": dep, "line": node.lineno,
                                   "stage": STAGES[level[a]][0], "imported_stage": STAGES[level[b]][0]})
    return {"stages": [{"stage": n, "units": list(u)} for n, u in STAGES], "upward": upward, "unplaced": unplaced}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = check()
    ok = not r["upward"] and not r["unplaced"]
    if a.json:
        print(json.dumps({**r, "ok": ok}, indent=2))
    else:
        for i, (name, units) in enumerate(STAGES):
            print(f"{i:2d} {name:22s} {', '.join(units)}")
        for u in r["upward"]:
            print(f"  up: {u['module']}:{u['line']} ({u['stage']}) imports {u['imports']} ({u['imported_stage']})")
        for u in r["unplaced"]:
            print(f"  unplaced: advisor.{u}")
        print("ok" if ok else "imports against the stage order")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
