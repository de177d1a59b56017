"""Terminal lines for multi-rank results: ``advisor inspect``'s per-rank table and cross-rank findings
(``ingest.ranks`` / ``ingest.rankdiff``) and ``advisor compare``'s per-rank verdicts (``compare.ranks``).
Up to ``ROWS`` ranks get a row each; beyond that the ranks a finding names, the first and the last (every
rank is in ``--json``)."""
from __future__ import annotations

ROWS = 64


def _shown(ranks: list[int], flagged: set[int]) -> list[int]:
    if len(ranks) <= ROWS:
        return ranks
    keep = set(ranks[:3]) | set(ranks[-3:]) | flagged
    return [r for r in ranks if r in keep]


def _flags(findings: list[dict]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for f in findings:
        for r in f.get("ranks", [])[:64]:
            if f["kind"] not in ("slow-step", "op-types") and f["kind"] not in out.get(r, []):
                out.setdefault(r, []).append(f["kind"])
    return out


def _num(v, fmt: str = ",.0f", none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def profile_rank_lines(report: dict, how: str = "") -> list[str]:
    """The "Ranks" section of advisor inspect (nothing for a single rank)."""
    per = report.get("per_rank") or []
    if len(per) < 2:
        return []
    cross = report.get("cross_rank") or []
    flags = _flags(cross)
    lines = [f"\nRanks: {len(per)} analysed{how}",
             f"  {'rank':>5} {'kernels':>9} {'steps':>5} {'kernel ms':>11} {'compute/step ms':>15} {'low share':>9} "
             f"{'fp32-inherit us':>15} {'casts us':>10} {'overflow':>8} {'saturated':>9}"]
    by_rank = {d["rank"]: d for d in per}
    shown = _shown(sorted(by_rank), set(flags))
    for r in shown:
        d = by_rank[r]
        share = "-" if d["low_share"] is None else f"{100 * d['low_share']:.1f}%"
        comp = None if d["step_compute_us"] is None else d["step_compute_us"] / 1000
        lines.append(f"  {r:>5} {d['kernels']:>9,} {len(d['steps']):>5} {d['kernel_time_us'] / 1000:>11,.1f} "
                     f"{_num(comp, ',.1f'):>15} {share:>9} {_num(d['fp32_by_inheritance'].get('time_us'), ',.1f'):>15} "
                     f"{_num(d['casts'].get('cast_time_us'), ',.1f'):>10} {d['overflow'].get('count', 0):>8} "
                     f"{d['saturation'].get('count', 0):>9}" + (f"  <- {', '.join(flags[r])}" if r in flags else ""))
    if len(shown) < len(by_rank):
        lines.append(f"  ({len(by_rank) - len(shown)} more ranks like these: every rank is in --json)")
    return lines + finding_lines(cross, "every rank runs the same precision mix; no slow rank, no odd step; "
                                        "no overflow or saturation on some ranks only")


def finding_lines(cross: list[dict], none: str, limit: int = 30) -> list[str]:
    lines = ["\nCross-rank findings:" if cross else f"\nCross-rank findings: none ({none})"]
    lines += [f"  - {f['message']}" for f in cross[:limit]]
    if len(cross) > limit:
        lines.append(f"  ({len(cross) - limit} more in --json)")
    return lines


def compare_rank_lines(per: list[dict], cross: list[dict], how: str = "") -> list[str]:
    """The per-rank verdicts of advisor compare (nothing for a single rank)."""
    if len(per) < 2:
        return []
    flags = _flags(cross)
    bad = [d["rank"] for d in per if not d["ok"]]
    lines = [f"\nRanks: {len(per)} compared{how} (the tables above are rank {per[0]['rank']}'s); "
             + (f"outside the tolerance: rank(s) {', '.join(map(str, bad))}" if bad else "every rank within the tolerance"),
             f"  {'rank':>5} {'steps':>5} {'verdict':>7} {'worst cosine':>12} {'worst rel-L2':>12} {'finite':>6} "
             f"{'overflow':>8}  first op over tolerance / top culprit type"]
    by_rank = {d["rank"]: d for d in per}
    shown = _shown(sorted(by_rank), set(flags))
    for r in shown:
        d = by_rank[r]
        w = d["worst"]
        what = d.get("first_exceeding") or "-"
        if d.get("culprits"):
            what += f" / {d['culprits'][0]}"
        lines.append(f"  {r:>5} {len(d['steps']):>5} {'ok' if d['ok'] else 'FAIL':>7} {_num(w.get('cosine'), '.6f'):>12} "
                     f"{_num(w.get('rel_l2'), '.3g'):>12} {'yes' if w.get('finite', True) else 'NO':>6} "
                     f"{d['overflow'].get('count', 0):>8}  {what}" + (f"  <- {', '.join(flags[r])}" if r in flags else ""))
    if len(shown) < len(by_rank):
        lines.append(f"  ({len(by_rank) - len(shown)} more ranks like these: every rank is in --json)")
    return lines + finding_lines(cross, "every rank is judged the same; no rank overflows or errs alone")
