"""Brute-force oracle of the generated cases: which black-list edits make each case pass, and what they cost.

Per case: capture with the default lists (mixed_float16, ascend910b); the candidate types are the float op
types present that are not already black (search.candidate_types); every black-list subset of them up to
``--max-size`` (3) is judged by a FRESH capture with that mixlist, by the verdict ``advisor compare --run``
gives with the default tolerance (search.judge_run: final outputs of every batch including the held-out
last one; loss and every parameter gradient for training cases).  Strict supersets of a passing set are not
captured (they black-list more: they can neither need fewer edits nor keep more low-precision time).  For
each passing set the low-precision share of measured kernel time is recorded (search.low_precision_share).

Every capture result is cached in a JSON file keyed by (case name @ spec fingerprint # engine model, edits),
written after each capture, so an interrupted run resumes where it stopped.  The engine model's fingerprint
(``engine_fingerprint``) hashes ``ENGINE_MODEL`` (bumped by hand whenever a rule of the engine model changes:
semantics, fusion passes, numerics, emulators) and every file under advisor/data (the default tables, the kernel
dtype tables, the op maps), so a cache never serves a result captured under an older engine model.

    python -m bench.cases.oracle --set dev --out bench/cases/oracle_dev.json
    python -m bench.cases.oracle --set holdout --out bench/cases/oracle_holdout.json
    python -m bench.cases.oracle --set dev --cases hazard-exp_gate-s0 12 --out /tmp/o.json
    python -m bench.cases.oracle --summary bench/cases/oracle_dev.json        # markdown for docs/benchmarks.md

Captures use ``dump="stats"`` (outputs, loss and gradients still carry tensors) and no local-error pass.
"""
from __future__ import annotations

import argparse
import gc
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .generator import Case, make_case
from .search import candidate_types, judge_run, low_precision_share, minimal_by, search_black_subsets
from .suite import SETS

MODE, SOC, MAX_SIZE = "mixed_float16", "ascend910b", 3
CACHE_VERSION = 1
# Bump (by hand) whenever a rule of the engine model changes what a capture computes (semantics, fusion passes,
# numerics, the emulators); the tables under advisor/data are hashed as they are (engine_fingerprint).
ENGINE_MODEL = "2026-12-02 issue 20: GE fusion before the judge, kernel dtype tables, 2026 tables, Cast pairs"
_ENGINE_FP: str | None = None


def engine_fingerprint() -> str:
    """12 hex digits: sha256 of ``ENGINE_MODEL`` and of every file under advisor/data (path and bytes)."""
    global _ENGINE_FP
    if _ENGINE_FP is None:
        import hashlib
        import advisor
        data = Path(advisor.__file__).resolve().parent / "data"
        h = hashlib.sha256(ENGINE_MODEL.encode())
        for f in sorted(p for p in data.rglob("*") if p.is_file()):
            h.update(f.relative_to(data).as_posix().encode() + b"\0" + f.read_bytes())
        _ENGINE_FP = h.hexdigest()[:12]
    return _ENGINE_FP


def _safe(o):
    """Non-finite floats -> None (strict JSON)."""
    from advisor.fsutil import json_safe
    return json_safe(o)


def edits_key(edits) -> str:
    return "+".join(sorted(edits)) or "-"


class CaptureCache:
    """``{"meta": {...}, "results": {"<case>@<fingerprint>|<edits>": record}}`` in one JSON file."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.meta = {"version": CACHE_VERSION, "mode": MODE, "soc": SOC, "tolerance": "default"}
        self.results: dict[str, dict] = {}
        if self.path is not None and self.path.exists():
            self._load()

    def _load(self) -> None:
        from advisor.errors import InputError
        from advisor.fsutil import read_user_json
        d = read_user_json(self.path, "an oracle capture cache")
        if not isinstance(d, dict) or not isinstance(d.get("results"), dict) or not isinstance(d.get("meta"), dict):
            raise InputError(self.path, 'expected {"meta": {...}, "results": {...}} (an oracle capture cache)')
        if d["meta"] != self.meta:
            raise InputError(self.path, f"cache made with other settings {d['meta']} (now {self.meta}); "
                                        "use another --cache file")
        for k, v in d["results"].items():
            if not isinstance(v, dict) or not isinstance(v.get("ok"), bool):
                raise InputError(self.path, f"entry {k!r} is not a capture record")
        self.results = d["results"]

    @staticmethod
    def prefix(case: Case) -> str:
        """``<case>@<spec fingerprint>#<engine fingerprint>|``: what every current key of ``case`` starts with."""
        return f"{case.name}@{case.fingerprint}#{engine_fingerprint()}|"

    @classmethod
    def key(cls, case: Case, edits) -> str:
        return cls.prefix(case) + edits_key(edits)

    def get(self, case: Case, edits) -> dict | None:
        return self.results.get(self.key(case, edits))

    def put(self, case: Case, edits, record: dict) -> None:
        self.results[self.key(case, edits)] = record
        self.save()

    def save(self) -> None:
        if self.path is not None:
            from advisor.fsutil import atomic_write_json
            atomic_write_json(self.path, {"meta": self.meta, "results": self.results}, indent=None)

    def drop_stale(self, cases: list[Case]) -> int:
        """Forget the results of earlier specs of these cases or of an earlier engine model (same name, other
        fingerprint)."""
        current = {c.name: self.prefix(c) for c in cases}
        stale = [k for k in self.results if k.split("@")[0] in current and not k.startswith(current[k.split("@")[0]])]
        for k in stale:
            del self.results[k]
        if stale:
            self.save()
        return len(stale)


def capture_and_judge(case: Case, edits, work: Path) -> dict:
    """One fresh capture of ``case`` with ``edits`` black-listed, judged; the run directory is removed."""
    from advisor.emulator import capture
    from advisor.mixlist import Mixlist
    t0 = time.perf_counter()
    m = Mixlist(black_add=tuple(sorted(edits))) if edits else None
    d = capture(case.workload(), work / "run", mode=MODE, mixlist=m, soc=SOC, dump="stats", local=False)
    try:
        v = judge_run(d)
        rec = {"ok": bool(v["ok"]), "share": low_precision_share(d), "worst": _safe(v["worst"]),
               "reasons": v["reasons"][:3]}
        if not edits:
            rec["types"] = candidate_types(d, SOC)
    finally:
        shutil.rmtree(d, ignore_errors=True)
        # the workload's model (a 90 MB MiniLM copy) sits in reference cycles after a capture; the cyclic
        # collector counts objects, not bytes, and would let hundreds of them pile up
        gc.collect()
    rec["seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def oracle_case(case: Case, cache: CaptureCache, work: Path, max_size: int = MAX_SIZE, log=None) -> dict:
    """The oracle record of one case (module docstring)."""
    t0 = time.perf_counter()
    new = 0

    def evaluate(edits) -> dict:
        nonlocal new
        rec = cache.get(case, edits)
        if rec is None:
            rec = capture_and_judge(case, edits, work)
            cache.put(case, edits, rec)
            new += 1
        return rec

    base = evaluate(frozenset())
    types = list(base["types"])
    judged, passing = search_black_subsets(types, lambda s: evaluate(s)["ok"], max_size)
    share = {s: evaluate(s)["share"] for s in passing}

    def fmt(s) -> dict:
        return {"edits": sorted(s), "share": None if share[s] is None else round(share[s], 6)}

    sets = sorted(passing, key=lambda s: (len(s), sorted(s)))
    best = minimal_by(sets, lambda s: -round(share[s] or 0.0, 9))
    fewest = minimal_by(sets, len)
    out = {"case": case.name, "seed": case.seed, "kind": case.kind, "family": case.family,
           "fingerprint": case.fingerprint, "description": case.description,
           "candidate_types": sorted(types), "base_passes": bool(base["ok"]),
           "base": {"share": base["share"], "worst": base["worst"], "reasons": base["reasons"]},
           "passing": [fmt(s) for s in sets], "best_share": [fmt(s) for s in best],
           "fewest_edits": [fmt(s) for s in fewest], "captures": len(judged), "new_captures": new,
           "capture_seconds": round(sum(evaluate(s)["seconds"] for s in judged), 1),
           "seconds": round(time.perf_counter() - t0, 1)}
    if log:
        b = ", ".join("+".join(x["edits"]) or "(none)" for x in out["best_share"]) or "none found"
        log(f"{case.name}: base {'passes' if out['base_passes'] else 'fails'}, {len(types)} types, "
            f"{out['captures']} captures ({new} new), {len(sets)} passing, best {b}, {out['seconds']} s")
    return out


def summarize(records: list[dict]) -> dict:
    """Counts over the oracle records (docs/benchmarks.md's summary)."""
    by_kind: dict[str, int] = {}
    base_pass: dict[str, int] = {}
    best_size: dict[str, int] = {}
    for r in records:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + 1
        base_pass[r["kind"]] = base_pass.get(r["kind"], 0) + int(r["base_passes"])
        k = str(len(r["best_share"][0]["edits"])) if r["best_share"] else "none"
        best_size[k] = best_size.get(k, 0) + 1
    return {"cases": len(records), "by_kind": by_kind, "base_passes_by_kind": base_pass,
            "best_set_size": dict(sorted(best_size.items())),
            "captures": sum(r["captures"] for r in records),
            "new_captures": sum(r["new_captures"] for r in records),
            "capture_seconds": round(sum(r["capture_seconds"] for r in records), 1),
            "seconds": round(sum(r["seconds"] for r in records), 1)}


def _sets_text(sets: list[dict]) -> str:
    return "; ".join(f"{'+'.join(x['edits']) or '(none)'} {100 * (x['share'] or 0):.1f}%" for x in sets) or "none"


def markdown_summary(data: dict) -> str:
    """docs/benchmarks.md's summary of an oracle JSON: counts by kind, base-passing cases, distribution of
    best-share set sizes, and one row per case (with an empty column for advisor's results)."""
    recs, kinds = data["cases"], ("hazard", "control", "training")

    def col(f) -> list[int]:
        return [sum(1 for r in recs if r["kind"] == k and f(r)) for k in kinds] + [sum(1 for r in recs if f(r))]

    def size(r, key: str = "best_share") -> int | None:
        return len(r[key][0]["edits"]) if r[key] else None

    rows = [("cases", col(lambda r: True)), ("base passes (no edit needed)", col(lambda r: r["base_passes"]))]
    for k in (1, 2, 3):
        rows.append((f"best-share set of {k} edit{'s' if k > 1 else ''}", col(lambda r, k=k: size(r) == k)))
    rows.append(("no passing set within 3 edits", col(lambda r: size(r) is None)))
    rows.append(("best-share set has more edits than the fewest-edit set",
                 col(lambda r: size(r) is not None and size(r) > size(r, "fewest_edits"))))
    out = [f"| {data['set']} set ({len(recs)} cases) | hazard | control | training | all |", "|---|---|---|---|---|"]
    out += [f"| {label} | {' | '.join(str(x) for x in v)} |" for label, v in rows]
    sm = data["summary"]
    out += ["", f"Captures: {sm['captures']} (subsets up to size {data['max_size']}), "
            f"{sm['capture_seconds'] / 60:.0f} min of capture + judge time on this shared 2-core machine.", "",
            "| case | base | best-share set (low-prec share) | fewest-edit set(s) | passing sets | captures "
            "| advisor |",
            "|---|---|---|---|---|---|---|"]
    for r in recs:
        out.append(f"| {r['case']} | {'passes' if r['base_passes'] else 'fails'} | {_sets_text(r['best_share'])} | "
                   f"{_sets_text(r['fewest_edits'])} | {len(r['passing'])} | {r['captures']} | — |")
    return "\n".join(out)


def read_oracle(path: Path) -> dict:
    from advisor.errors import InputError
    from advisor.fsutil import read_user_json
    d = read_user_json(path, "an oracle JSON")
    if not isinstance(d, dict) or not isinstance(d.get("cases"), list) or not isinstance(d.get("summary"), dict) \
            or not all(isinstance(r, dict) for r in d["cases"]):
        raise InputError(path, 'expected {"set": ..., "summary": {...}, "cases": [...]} (an oracle JSON)')
    return d


def select(set_name: str, wanted: list[str] | None) -> list[Case]:
    cases = [make_case(s) for s in SETS[set_name]]
    if not wanted:
        return cases
    keep = [c for c in cases if c.name in wanted or str(c.seed) in wanted]
    missing = set(wanted) - {c.name for c in keep} - {str(c.seed) for c in keep}
    if missing:
        raise SystemExit(f"not in the {set_name} set: {', '.join(sorted(missing))}")
    return keep


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cases.oracle", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=sorted(SETS))
    ap.add_argument("--cases", nargs="*", help="only these cases (names or seeds)")
    ap.add_argument("--out", type=Path, help="the oracle JSON to write")
    ap.add_argument("--summary", type=Path, help="print the markdown summary of this oracle JSON and exit")
    ap.add_argument("--cache", type=Path, help="capture cache (default: <out>.cache.json)")
    ap.add_argument("--max-size", type=int, default=MAX_SIZE, help="largest black-list subset judged")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    a = ap.parse_args(argv)
    from advisor.errors import InputError
    if a.summary is not None:
        try:
            print(markdown_summary(read_oracle(a.summary)))
        except InputError as e:
            print(f"oracle: error: {e}", file=sys.stderr)
            return 2
        return 0
    if a.set is None or a.out is None:
        ap.error("--set and --out are required (or --summary FILE)")
    try:
        cache = CaptureCache(a.cache or a.out.with_name(a.out.stem + ".cache.json"))
    except InputError as e:
        print(f"oracle: error: {e}", file=sys.stderr)
        return 2
    import torch
    torch.set_num_threads(a.threads)
    cases = select(a.set, a.cases)
    t0 = time.perf_counter()
    records = []

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:7.1f} s] {msg}", flush=True)

    with tempfile.TemporaryDirectory(prefix="oracle_") as tmp:
        for i, c in enumerate(cases):
            log(f"({i + 1}/{len(cases)}) {c.name}")
            records.append(oracle_case(c, cache, Path(tmp), a.max_size, log))
    dropped = cache.drop_stale(cases)
    if dropped:
        log(f"dropped {dropped} cached results of earlier versions of these cases")
    summary = summarize(records)
    summary["wall_seconds"] = round(time.perf_counter() - t0, 1)
    from advisor.fsutil import atomic_write_json
    atomic_write_json(a.out, _safe({"set": a.set, "mode": MODE, "soc": SOC, "max_size": a.max_size,
                                    "tolerance": "advisor compare default (docs/compare.md)",
                                    "share_definition": " ".join(low_precision_share.__doc__.split()),
                                    "summary": summary, "cases": records}))
    log(f"wrote {a.out}: {json.dumps(summary)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
