"""Check the current default table against hicann/ops-nn's op definitions (docs/semantics.md "Default lists").

  python tools/check_tables_ops_nn.py [--ops-nn DIR] [--soc ascend910b]

For every ``*_def.cpp`` outside ``experimental/`` (a bare mirror of hicann/ops-nn, default
/work/.mirror/hicann+ops-nn/repo), the list its ascend910b AI Core config gives the op type: ``AddConfig(soc)``
without a config, or a config built as ``OpAICoreConfig cfg("soc")``, has ``precision_reduce.flag`` true (GE's
metadef test ``tests/graph_metadef/ut/register/testcase/op_def_aicore_unittest.cc:59-83``); a config object gets
the last ``PrecisionReduceFlag(...)`` called on it *before* it is added; none = gray.  A heuristic reading of
C++ (statements split at ``;``), good enough to find where the table and the definitions disagree: it prints the
agreement and every disagreement with the definition file's last commit.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def definition_lists(src: str, soc: str) -> dict[str, set[str]]:
    """{op type: lists its ``soc`` configs give} for one op definition file."""
    src = re.sub(r"//[^\n]*", "", src)
    out: dict[str, set[str]] = {}
    types = re.findall(r"OP_ADD\((\w+)", src)
    for cm in re.finditer(r'AddConfig\(\s*"' + re.escape(soc) + r'"\s*(?:,\s*(\w+))?\s*\)', src):
        var = cm.group(1)
        if var is None:
            flag = "true"
        else:
            before = src[:cm.start()]
            calls = []
            for st in before.split(";"):
                body = st.strip().lstrip("{}").strip()
                if re.match(r"(OpAICoreConfig\s+)?" + var + r"\b", body):
                    calls += re.findall(r"PrecisionReduceFlag\((true|false)\)", body)
                    fn = re.search(var + r"\s*=\s*(\w+)\(", body)
                    if fn:      # cfg = GetConfig(): the flags that function sets
                        m = re.search(r"\b" + fn.group(1) + r"\([^)]*\)\s*(const)?\s*\{", src)
                        if m:
                            calls += re.findall(r"PrecisionReduceFlag\((true|false)\)",
                                                src[m.end():src.find("return", m.end())])
            built_with_soc = re.search(r"OpAICoreConfig\s+" + var + r'\s*\(\s*"', before)
            flag = calls[-1] if calls else ("true" if built_with_soc else None)
        for t in types:
            out.setdefault(t, set()).add({"true": "white", "false": "black", None: "gray"}[flag])
    return out


def main(argv: list[str]) -> None:
    from advisor.oplists import load_default
    repo = Path(argv[argv.index("--ops-nn") + 1]) if "--ops-nn" in argv else Path("/work/.mirror/hicann+ops-nn/repo")
    soc = argv[argv.index("--soc") + 1] if "--soc" in argv else "ascend910b"
    table = load_default(soc)
    files = [f for f in git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()
             if f.endswith("_def.cpp") and not f.startswith("experimental/")]
    agree, differ, missing = 0, [], 0
    for f in files:
        for t, lists in definition_lists(git(repo, "show", f"HEAD:{f}"), soc).items():
            if not table.is_known(t):
                missing += 1
            elif lists == {table.list_of(t)}:
                agree += 1
            else:
                last = git(repo, "log", "-1", "--format=%h %cs %s", "--", f).strip()
                differ.append(f"{t}: definition {'/'.join(sorted(lists))}, table {table.list_of(t)} ({f}; {last})")
    print(f"{soc}: {agree} op types agree, {len(differ)} differ, {missing} defined but not in the table "
          f"(table: {table.source})")
    for line in differ:
        print("  " + line)


if __name__ == "__main__":
    main(sys.argv[1:])
