"""Regenerate the default op-list tables in advisor/data/oplists/ (docs/formats.md "Default tables").

  python tools/gen_oplists.py legacy [precision_reduce_cann8.1RC1.json]
      CANN 8.1.RC1: advisor/data/oplists/<soc>.json from the derived precision_reduce table (white/black/gray only).
  python tools/gen_oplists.py current [--ge DIR] [--commit SHA]
      CANN 9.2.0: advisor/data/oplists/9.2.0/<soc>.json from the real ascend910b ops-info that hicann/ge carries in
      its tests (DIR: a bare mirror of hicann/ge, default /work/.mirror/hicann+ge/repo; SHA default HEAD): lists by
      ``precision_reduce.flag`` and each type's kernel (``KernelTable.to_dict``), source and commit recorded.

Chips without public 2026 ops-info (choices, docs/semantics.md "Default lists"): ascend910_93 uses ascend910b's
table (``same_as``: A3 shares A2's kernels; hicann/ops-nn registers the same ``OpAICoreConfig`` for both), ascend910
and ascend310p keep their CANN 8.1.RC1 flags with the ascend910b kernels minus their bf16 combinations (those chips
have no bf16); a type of theirs without an ascend910b kernel gets one whose ports are undeclared (every float).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Mapping

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from advisor.kernels import Kernel, KernelTable  # noqa: E402

OUT = ROOT / "advisor/data/oplists"
CURRENT = "9.2.0"
GE_MIRROR = Path("/work/.mirror/hicann+ge/repo")
GE_OPS_INFO_DIR = ("tests/engines/nn_engine/depends/CANN_910b_stub/cann/opp/built-in/op_impl/ai_core/tbe/config/"
                   "ascend910b")
GE_OPS_INFO_FILES = [f"aic-ascend910b-ops-info-{p}.json" for p in ("legacy", "nn", "math", "cv", "transformer")]
LEGACY_REF = ROOT / "tests/fixtures/real/reference/precision_reduce_cann8.1RC1.json"
NO_BF16_CHIPS = ("ascend910", "ascend310p")


# ---------------------------------------------------------------------- reading ops-info as GE does
def ge_file_order(names: Iterable[str]) -> list[str]:
    """The order GE reads one ops-info directory's files in (``SubOpInfoStore::LoadOpInfo``,
    ``FE/opskernel/ops_store/sub_op_info_store.cc:113-123``): a name with "legacy" first, then shorter names
    first (ties: as given, the sort is stable here)."""
    return sorted(names, key=lambda n: (0 if "legacy" in n else 1, len(n)))


def merge(files: Iterable[tuple[str, Mapping]]) -> dict:
    """One op store from (name, ops-info JSON) files in GE's order: a type in two files takes the later file's whole
    entry (``op_content_map_[op_type] = op_content``, sub_op_info_store.cc:182)."""
    by_name = dict(files)
    out: dict = {}
    for name in ge_file_order(by_name):
        for op_type, info in by_name[name].items():
            out[op_type.strip()] = info
    return out


def flag_list(info: Mapping) -> str:
    """white / black / gray from ``precision_reduce.flag`` (op_kernel_info_constructor.cc:55-56; "true"/"false",
    trimmed, case-insensitive; absent = gray)."""
    pr = info.get("precision_reduce")
    if not isinstance(pr, Mapping) or "flag" not in pr:
        return "gray"
    word = str(pr["flag"]).strip().lower()
    if word not in ("true", "false"):
        raise ValueError(f"precision_reduce flag {pr['flag']!r} is neither true nor false")
    return "white" if word == "true" else "black"


# ---------------------------------------------------------------------- derived chips
def without_bf16(k: Kernel) -> Kernel:
    """``k`` without its combinations that have a bf16 port (ascend910 / ascend310p have no bf16).  A kernel left
    with no combination is kept with undeclared ports (choice: the chip has the type, its dtypes are unknown)."""
    n = k.n_combos
    keep = [j for j in range(n) if not any(p is not None and j < len(p) and p[j] == "bf16"
                                            for p in k.inputs + k.outputs)]
    if n and not keep:
        return Kernel(k.op_type, (None,), (None,), k.no_kernel)

    def port(p):
        return None if p is None else tuple(p[j] for j in keep if j < len(p))
    return Kernel(k.op_type, tuple(map(port, k.inputs)), tuple(map(port, k.outputs)), k.no_kernel)


UNDECLARED = {"in": [None], "out": [None]}


def current_tables(store: Mapping, legacy: Mapping, source: str, provenance: Mapping) -> dict[str, dict]:
    """{soc: data file} of the current tables from the merged ascend910b op store and the CANN 8.1.RC1 reference
    (``legacy``: {soc: {"white", "black", "gray"}})."""
    kt = KernelTable.from_ops_info(store, source)
    lists: dict[str, list] = {"white": [], "black": [], "gray": []}
    for t, info in store.items():
        lists[flag_list(info)].append(t)
    base = {"cann": CURRENT, **provenance}
    out = {"ascend910b": {"soc": "ascend910b", **base, "source": source,
                          **{k: sorted(v) for k, v in lists.items()}, "kernels": kt.to_dict()},
           "ascend910_93": {"soc": "ascend910_93", **base, "same_as": "ascend910b",
                            "source": f"{source}; ascend910_93 = ascend910b's table (choice: A3 shares A2's kernels)"}}
    for soc in NO_BF16_CHIPS:
        old = legacy[soc]
        types = sorted(set(old["white"]) | set(old["black"]) | set(old["gray"]))
        kernels = {t: without_bf16(kt.get(t)).to_dict() if t in kt else UNDECLARED for t in types}
        out[soc] = {"soc": soc, **base,
                    "source": f"lists: CANN 8.1.RC1 aic-{soc}-ops-info.json precision_reduce.flag (no newer public "
                              f"ops-info for {soc}); kernels: {source}, without bf16 combinations (choice)",
                    "white": sorted(old["white"]), "black": sorted(old["black"]), "gray": sorted(old["gray"]),
                    "kernels": kernels}
    return out


# ---------------------------------------------------------------------- writing
def dumps(data: Mapping) -> str:
    """The data file: one key per line, one kernel per line (small, readable diffs)."""
    lines = ["{"]
    items = list(data.items())
    for i, (k, v) in enumerate(items):
        end = "," if i < len(items) - 1 else ""
        if k == "kernels":
            lines.append(f' "kernels": {{')
            ks = list(v.items())
            for j, (t, kd) in enumerate(ks):
                lines.append(f"  {json.dumps(t)}: {json.dumps(kd, separators=(',', ':'))}"
                             + ("," if j < len(ks) - 1 else ""))
            lines.append(" }" + end)
        else:
            lines.append(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}{end}")
    return "\n".join(lines + ["}"]) + "\n"


def git_show(repo: Path, commit: str, path: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True, capture_output=True,
                          text=True).stdout


def read_ge(repo: Path, commit: str) -> tuple[list[tuple[str, dict]], dict]:
    """The ascend910b ops-info files of hicann/ge at ``commit`` and their provenance."""
    full = subprocess.run(["git", "-C", str(repo), "rev-parse", commit], check=True, capture_output=True,
                          text=True).stdout.strip()
    files = [(n, json.loads(git_show(repo, full, f"{GE_OPS_INFO_DIR}/{n}"))) for n in GE_OPS_INFO_FILES]
    changed = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%H %cs", full, "--", GE_OPS_INFO_DIR],
                             check=True, capture_output=True, text=True).stdout.split()
    version = next((ln.split('"')[1] for ln in git_show(repo, full, "version.cmake").splitlines()
                    if "ge-compiler VERSION" in ln), "")
    prov = {"ops_info": {"repository": "hicann/ge", "commit": full, "directory": GE_OPS_INFO_DIR,
                         "files": GE_OPS_INFO_FILES, "files_last_changed": changed[0] if changed else "",
                         "files_date": changed[1] if len(changed) > 1 else "",
                         "ge_version": version}}
    return files, prov


def main(argv: list[str]) -> None:
    what = argv[0] if argv and argv[0] in ("legacy", "current") else "legacy"
    args = argv[1:] if argv and argv[0] in ("legacy", "current") else argv
    if what == "legacy":
        src = Path(args[0]) if args else LEGACY_REF
        ref = json.loads(src.read_text(encoding="utf-8"))
        OUT.mkdir(parents=True, exist_ok=True)
        for soc, lists in ref.items():
            data = {"soc": soc, "source": f"CANN 8.1.RC1 aic-{soc}-ops-info.json precision_reduce.flag (via {src.name})",
                    "white": sorted(lists["white"]), "black": sorted(lists["black"]), "gray": sorted(lists["gray"])}
            (OUT / f"{soc}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            print(soc, {k: len(v) for k, v in lists.items()})
        return
    repo = Path(args[args.index("--ge") + 1]) if "--ge" in args else GE_MIRROR
    commit = args[args.index("--commit") + 1] if "--commit" in args else "HEAD"
    files, prov = read_ge(repo, commit)
    store = merge(files)
    source = (f"hicann/ge {prov['ops_info']['commit'][:8]} (GE {prov['ops_info']['ge_version']}) "
              f"{GE_OPS_INFO_DIR}/aic-ascend910b-ops-info-{{legacy,nn,math,cv,transformer}}.json "
              "precision_reduce.flag and port dtypes")
    legacy = json.loads(LEGACY_REF.read_text(encoding="utf-8"))
    out = OUT / CURRENT
    out.mkdir(parents=True, exist_ok=True)
    for soc, data in current_tables(store, legacy, source, prov).items():
        (out / f"{soc}.json").write_text(dumps(data), encoding="utf-8")
        print(soc, {k: len(data[k]) for k in ("white", "black", "gray", "kernels") if k in data})


if __name__ == "__main__":
    main(sys.argv[1:])
