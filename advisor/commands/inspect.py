"""advisor inspect --profile DIR: what a run directory holds, what is missing, profile-only findings."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..errors import AdvisorError, InputError
from ..fsutil import check_out_dir, json_text
from ..ingest.rankdiff import rank_ranges
from .common import RayOption, WorkersOption, human_report
from .options import CHIP_OF_RUN, Chip, uses


def _export(g, path: str) -> Optional[Path]:
    """graph.export atomically; an existing file is kept as <name>.bak (returned)."""
    from ..fsutil import atomic_write_via
    from ..graph import export
    p = Path(path)
    if p.suffix not in (".graphml", ".dot"):
        raise InputError(p, "export format must be .graphml or .dot")
    return atomic_write_via(p, lambda tmp: export(g, tmp), keep_existing=True)


def _pct(x: float) -> str:
    return f"{100.0 * x:5.1f}%"


def _profile_line(p: dict) -> str:
    if p.get("kernels"):
        return f"\n    [{p['kind']}] {p['kernels']}"
    only = " (trace_view.json only)" if p.get("trace_view") else ""
    return f"\n    [{p['kind']}] {p['root']}: no kernel table{only}"


def _engine_line(en: dict) -> str:
    """``engine: torch_npu (why); ACL_PRECISION_MODE m (from file)`` (ingest.engine.EngineInfo.to_dict)."""
    acl, src = en.get("acl_precision_mode"), en.get("acl_precision_mode_source")
    return f"  engine: {en['engine']} ({en.get('why')})" + (
        f"; ACL_PRECISION_MODE {acl}" + (f" (from {Path(src).name})" if src else "") if acl else "")


def _print(s: dict) -> None:
    e = typer.echo
    f = s["found"]
    e(f"advisor inspect: {s['path']}" + (f"\n{_engine_line(s['engine'])}" if s.get("engine") else ""))
    profs = f.get("profiles", [])
    e(f"  profiles: {len(profs)}" + "".join(map(_profile_line, profs)))
    e(f"  GE graph dumps: {len(f.get('ge_dumps', []))}" + "".join(f"\n    {x}" for x in f.get("ge_dumps", [])[:5]))
    e(f"  msprobe dump roots: {len(f.get('dump_roots', []))}" + "".join(f"\n    {x}" for x in f.get("dump_roots", [])))
    if f.get("run_json"):
        e(f"  run.json: {f['run_json']}  (mode {s['mode']}, soc {s['soc']})")
    ranks = rank_ranges(r for r in s["ranks"] if r is not None and r >= 0) or "unknown (no profiler_info)"
    steps = ", ".join(map(str, s["steps"][:20])) + (" ..." if len(s["steps"]) > 20 else "") or "-"
    e(f"  ranks: {ranks}   steps: {steps}   kernels: {s['kernels']:,}   kernel time: {s['kernel_time_us']:,.1f} us")
    if "graph" in s:
        gr = s["graph"]
        extra = f", mean edge confidence {gr['mean_edge_confidence']:.2f}" if "mean_edge_confidence" in gr else ""
        grank = s["graph_rank"] if s.get("graph_rank") is not None and s["graph_rank"] >= 0 else "unknown"
        where = f"rank {grank}" + (f", step {s['graph_step']}" if s.get("graph_step") is not None else "")
        e(f"  op graph ({where}): {gr['ops']:,} ops, {gr['edges']:,} edges "
          f"from {gr['edges_source']}{extra}; {gr['excluded']} excluded from precision decisions (HCCL/MemSet/AI_CPU)")
        mix = ", ".join(f"{k} {v}" for k, v in sorted(s.get("plan_mix", {}).items()))
        e(f"  semantics plan ({s['mode']}): {mix}")
    if s["precision_share"]:
        e("\nTime share per precision:")
        for r in s["precision_share"]:
            e(f"  {r['precision']:>5}  {_pct(r['share'])}  {r['time_us']:14,.1f} us  {r['kernels']:>8,} kernels")
        e("\nTop op types by time:")
        for r in s["type_share"]:
            e(f"  {r['type']:<28} {r['precision']:>5}  {_pct(r['share'])}  {r['time_us']:14,.1f} us  {r['kernels']:>7,}")
        c = s["casts"]
        e(f"\nCasts: {c['cast']:,} Cast kernels, {c['cast_time_us']:,.1f} us ({_pct(c['share']).strip()} of kernel time); "
          f"GE-inserted trans_Cast_*: {c['inserted']:,} ({c['inserted_time_us']:,.1f} us)")
    gi = s.get("gray_fp32_by_inheritance") or []
    if gi:
        e("\nGray op types kept in fp32 by inheritance (first activation input fp32):")
        for r in gi[:15]:
            roots = ", ".join(f"{k} x{v}" for k, v in list(r["roots"].items())[:3])
            e(f"  {r['type']:<28} {r['ops']:>6} ops  {r['time_us']:12,.1f} us  vector core {r['vector_core']}  from: {roots}")
    ba = [r for r in s["behaved_as"] if r["differs"] or r["behaved"] == "mixed"]
    if s["behaved_as"]:
        e("\nHow op types behaved in this run (list on this chip -> behaved as):")
        for r in (ba or s["behaved_as"])[:20]:
            flag = "  <- differs from its list" if r["differs"] else ""
            e(f"  {r['type']:<28} {r['list']:>5} -> {r['behaved_as']:<5} ({r['low_kernels']}/{r['kernels']} low){flag}")
        if ba:
            e(f"  ({len(s['behaved_as']) - len(ba)} other types behaved as their list says)")
    tr = s.get("trace")
    if tr:
        e(f"\ntrace_view.json: {tr['framework_ops']:,} framework ops ({tr['bwd_ops']:,} backward, "
          f"{tr['with_call_stack']:,} with call stacks), {tr['kernels']:,} kernels, {tr['linked']:,} op->kernel links (async_npu)")
        if s["kernels"]:
            e(f"  {tr['kernel_rows_linked']:,} of {s['kernels']:,} kernel rows linked to the op that launched them")
        if tr.get("by_framework_op"):
            e("  kernel time by launching framework op:")
            for r in tr["by_framework_op"]:
                e(f"    {r['framework_op'][:40]:<40} {r['phase']:<3} {r['kernels']:>7,} kernels "
                  f"{r['time_us']:>12,.1f} us ({r['fp32_us']:,.1f} us fp32)")
    d = s["dumps"]
    if d["target"] or d["golden"]:
        e(f"\nDumps: target steps {', '.join(d['target']) or '-'}; golden steps {', '.join(d['golden']) or '-'}")
        al = d.get("alignment")
        if al:
            e(f"  step {al['step']}: {al['common']} entries in both; only in target: {len(al['only_target'])}; "
              f"only in golden: {len(al['only_golden'])}")
            for n in al["only_target"][:5]:
                e(f"    only in target: {n}")
            for n in al["only_golden"][:5]:
                e(f"    only in golden: {n}")
    if s["saturation"]:
        e(f"\nSaturation: {len(s['saturation'])} tensors reach +-65504 (fp16 overflow in saturation mode):")
        for r in s["saturation"][:10]:
            e(f"  step {r['step']} {r['entry']} {r['tensor']} max {r['max']} min {r['min']}")
    if s.get("overflow"):
        e(f"\nOverflow: {len(s['overflow'])} target tensors have inf/nan statistics:")
        for r in s["overflow"][:10]:
            e(f"  step {r['step']} {r['entry']} {r['tensor']} ({r['dtype']}) max {r['max']} min {r['min']}")
    if s["missing"]:
        e("\nMissing:")
        for m in s["missing"]:
            e(f"  - {m}")


def register(app: typer.Typer) -> None:
    @app.command("inspect")
    @uses(CHIP_OF_RUN)
    def inspect_cmd(profile: str = typer.Option(..., "--profile", help="Run directory, profiler output or a single file."),
                    rank: Optional[List[str]] = typer.Option(None, "--rank", help="Only these ranks (repeatable; 3, 0,4,8 or 0-63; "
                                                             "default: all ranks; the op graph is the lowest one's)."),
                    step: Optional[int] = typer.Option(None, "--step", help="Only this step (default: all; graph from the first)."),
                    export: Optional[str] = typer.Option(None, "--export", help="Write the op graph to FILE.graphml or FILE.dot."),
                    as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
                    workers: Optional[int] = WorkersOption, ray: Optional[str] = RayOption,
                    chip: Chip = None,
                    mode: Optional[str] = typer.Option(None, "--mode", help="Precision mode for the semantics (default: run.json's, else mixed_float16).")) -> None:
        """Show what a run directory holds (ranks, steps, op counts, precision mix), what is missing for
        which analysis, and profile-only findings; on a multi-rank job every rank, and what differs between ranks."""
        from ..progress import StageLog
        from ..report.ranks import profile_rank_lines
        try:
            from ..ingest.ranks import inspect, parse_ranks
            from ..tasks import check_workers
            p = Path(profile)
            if not p.exists():
                raise InputError(p, "no such file or directory")
            check_workers(workers, ray)
            if export:
                check_out_dir(Path(export).parent, "--export folder")
            log = StageLog()
            run, s = inspect(p, parse_ranks(rank), workers=workers, ray=ray, progress=log, step=step, soc=chip.soc,
                             ops_info=chip.ops_info, cann=chip.cann, mode=mode)
            log.done()
            kept = None
            if export:
                if run.graph is None:
                    raise InputError(p, "no op graph to export (no GE dump and no kernels)")
                kept = _export(run.graph, export)
                s["exported"] = export
            if as_json:
                typer.echo(json_text(s))
            with human_report(as_json):
                _print(s)
                for line in profile_rank_lines(s, f" on Ray ({ray})" if ray else ""):
                    typer.echo(line)
                if export:
                    typer.echo(f"\nop graph written to {export}" + (f" (previous file kept as {kept})" if kept else ""))
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
