"""Regenerate advisor/data/oplists/<soc>.json from the CANN 8.1.RC1 precision_reduce reference table.

Usage: python tools/gen_oplists.py [../shared/reference/precision_reduce_cann8.1RC1.json]
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared/reference/precision_reduce_cann8.1RC1.json"

ref = json.loads(SRC.read_text(encoding="utf-8"))
out = ROOT / "advisor/data/oplists"
out.mkdir(parents=True, exist_ok=True)
for soc, lists in ref.items():
    data = {"soc": soc, "source": f"CANN 8.1.RC1 aic-{soc}-ops-info.json precision_reduce.flag (via {SRC.name})",
            "white": sorted(lists["white"]), "black": sorted(lists["black"]), "gray": sorted(lists["gray"])}
    (out / f"{soc}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(soc, {k: len(v) for k, v in lists.items()})
