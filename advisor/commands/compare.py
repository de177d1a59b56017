"""advisor compare: FP16/BF16 run vs FP32 run — worst ops, first op over tolerance, culprit types.
Exit 0 within tolerance, 1 outside, 2 bad input."""
from __future__ import annotations

import io
import json
import math
from typing import List, Optional

import typer
from typer.core import TyperCommand

from ..compare.cli_options import (AllowNonfiniteOption, MaxLossRelOption, MaxRelL2Option, MinCosineOption,
                                   MinGradCosineOption, MsprobeRuleOption)
from ..errors import AdvisorError, InputError

def _fmt(x, spec: str = ".4g") -> str:
    if x is None:
        return "-"
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return "-"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return format(v, spec)


def render(att, top: int = 15, console=None) -> None:
    """Print the worst ops, the first op over tolerance, the culprit ranking, training signals and
    the verdict with rich."""
    from rich.console import Console
    from rich.table import Table
    con = console or Console()
    ops = att.ops
    if ops is not None and not ops.empty:
        d = ops.copy()
        d["_k"] = (~d["out_finite"]).astype(int)
        d = d.sort_values(["_k", "out_rel_l2"], ascending=False, kind="stable").head(top)
        stats = bool((ops["kind"] == "stats").all())
        t = Table(title=f"worst ops (top {len(d)} of {len(ops)} by output error vs FP32)"
                  + (": statistics-only dumps, relative differences |t-g|/|g| of Max/Min/Mean/Norm" if stats else ""))
        figs = ("Max rel diff", "Min rel diff", "Mean rel diff", "Norm rel diff") if stats else \
            ("cosine", "rel L2", "max abs")
        for c in ("op", "type", "prec", *figs, "in rel L2", "growth", "introduced", "blamed on"):
            t.add_column(c, overflow="fold")
        for n, r in d.iterrows():
            if stats:
                vals = [_fmt(r[c]) for c in ("out_max_rel_diff", "out_min_rel_diff", "out_mean_rel_diff", "out_rel_l2")]
            else:
                vals = [_fmt(r["out_cosine"], ".6f"), _fmt(r["out_rel_l2"]),
                        _fmt(r["out_max_abs"]) if r["out_finite"] else "non-finite"]
            t.add_row(str(n), str(r["type"]), str(r["precision"]), *vals, _fmt(r["in_rel_l2"]),
                      _fmt(r["growth"], ".3g") if r["in_rel_l2"] > 0 else "-", _fmt(r["introduced"]),
                      "itself" if r["blamed_on"] == str(n) else str(r["blamed_on"]))
        con.print(t)
    else:
        con.print("no aligned op entries with float outputs")
    con.print(f"first op exceeding tolerance (topological order): {att.first_exceeding or 'none'}")
    if att.types is not None and not att.types.empty:
        t = Table(title="culprit op types (error introduced by their precision decision)")
        for c in ("rank", "type", "worst introduced", "sum", "instances", "worst instance", "seen at"):
            t.add_column(c, overflow="fold")
        for i, (typ, r) in enumerate(att.types.iterrows(), 1):
            t.add_row(str(i), str(typ), _fmt(r["introduced_max"]), _fmt(r["introduced_sum"]), str(r["instances"]),
                      str(r["worst_instance"]), str(r["worst_observed_at"]))
        con.print(t)
    tr = att.training
    if tr:
        uf = tr["underflow_ratio"]
        ufs = f"{100 * uf:.3f} % of elements" if isinstance(uf, float) and math.isfinite(uf) else "n/a (statistics only)"
        con.print(f"gradients: underflow {ufs} (rule: <= {100 * tr['max_underflow']:g} %), "
                  f"overflowing elements {tr['overflow_elems']}")
        if tr.get("all_zero_in_target"):
            con.print(f"gradients entirely zero in the target but not in FP32: {', '.join(tr['all_zero_in_target'])}")
        ls = tr.get("loss_scale")
        if ls:
            if ls.get("dynamic"):
                con.print(f"loss scale: dynamic loss scaling recommended ({ls.get('reason')})")
            else:
                con.print(f"loss scale: static {ls['static']} (2^{ls['log2']}); predicted underflow "
                          f"{100 * ls['predicted_underflow']:.3f} %")
    for f in att.final:
        o = f.get("output") or {}
        extra = ""
        if f.get("loss"):
            extra = f", loss rel diff {_fmt(f['loss'].get('rel_diff'))}"
        if o.get("kind") == "stats":
            figs = f"statistics only: Norm rel diff {_fmt(o.get('norm_rel_diff'))}"
        else:
            figs = f"cosine {_fmt(o.get('cosine'), '.6f')}, rel L2 {_fmt(o.get('rel_l2'))}, max abs {_fmt(o.get('max_abs'))}"
        con.print(f"step {f['step']} final ({f['source']}): {figs}, finite {o.get('finite')}{extra}")
    um = att.unmatched or {}
    for label, key in (("only in the target dump", "target_only"), ("only in the golden dump", "golden_only")):
        lst = um.get(key) or []
        if lst:
            more = f" (+{len(lst) - 5} more)" if len(lst) > 5 else ""
            con.print(f"{len(lst)} entries {label}: {', '.join(lst[:5])}{more}")
    for note in att.notes:
        con.print(f"note: {note}", soft_wrap=True, markup=False)
    v = att.verdict
    if v.ok:
        con.print(f"[green]WITHIN TOLERANCE[/green] ({att.tolerance.describe()})")
    else:
        con.print(f"[red]OUTSIDE TOLERANCE[/red] ({att.tolerance.describe()})")
        for r in v.reasons[:10]:
            con.print(f"  - {r}")


class _CompareCommand(TyperCommand):
    """``--json`` is a flag (JSON on stdout) like on every command; ``--json FILE`` -- its meaning before
    ``--json-out`` -- still writes FILE, with a deprecation note.  compare takes no positional argument,
    so ``--json`` followed by a word not starting with ``-`` is that old form."""

    def parse_args(self, ctx, args):
        out, rest = [], list(args)
        while rest:
            a = rest.pop(0)
            if a.startswith("--json="):
                rest.insert(0, a[len("--json="):])
                a = "--json"
            if a == "--json" and rest and not rest[0].startswith("-"):
                ctx.meta["legacy_json"] = rest[0]
                out += ["--json-out", rest.pop(0)]
            else:
                out.append(a)
        return super().parse_args(ctx, out)


def register(app: typer.Typer) -> None:
    @app.command("compare", cls=_CompareCommand)
    def compare(
        ctx: typer.Context,
        target: Optional[str] = typer.Option(None, "--target", help="msprobe dump of the FP16/BF16 run (dump.json, rank folder or dump root)"),
        golden: Optional[str] = typer.Option(None, "--golden", help="msprobe dump of the FP32 run"),
        run: Optional[str] = typer.Option(None, "--run", help="a capture/tune run directory (instead of --target/--golden)"),
        csv_out: Optional[str] = typer.Option(None, "--csv", help="write advisor's per-op table (metrics and attribution) as CSV"),
        as_json: bool = typer.Option(False, "--json", help="print the full result as JSON on stdout (the table goes to stderr)"),
        json_out: Optional[str] = typer.Option(None, "--json-out", help="write the full result as JSON to this file"),
        xlsx_out: Optional[str] = typer.Option(None, "--xlsx", help="write msprobe's compare result table (its columns and "
                                               "'Accuracy Reached or Not' rule) as an Excel workbook"),
        msprobe_csv: Optional[str] = typer.Option(None, "--msprobe-csv", help="write msprobe's compare result table as CSV"),
        top: int = typer.Option(15, "--top", help="rows of the worst-ops table"),
        step: Optional[List[int]] = typer.Option(None, "--step", help="only these steps (repeatable)"),
        mode: Optional[str] = typer.Option(None, "--mode", help="precision mode for the plan (default: run.json's)"),
        soc: Optional[str] = typer.Option(None, "--soc", help="chip whose default lists apply (default: run.json's, else ascend910b)"),
        ops_info: Optional[str] = typer.Option(None, "--ops-info", help="a real CANN aic-<soc>-ops-info.json to read the lists from"),
        min_cosine: float = MinCosineOption,
        max_rel_l2: float = MaxRelL2Option,
        allow_nonfinite: bool = AllowNonfiniteOption,
        max_loss_rel: float = MaxLossRelOption,
        min_grad_cosine: float = MinGradCosineOption,
        msprobe_rule: bool = MsprobeRuleOption,
    ) -> None:
        """Compare a low-precision run against FP32: per-op metrics, first op over tolerance, culprit op types.
        Exit 0 within tolerance, 1 outside, 2 bad input."""
        from rich.console import Console

        from ..compare.attribution import attribute
        from ..compare.msprobe_table import msprobe_table, write_csv, write_xlsx
        from ..compare.run import from_dumps, from_run_dir
        from ..compare.tolerance import tolerance_from_options
        from ..fsutil import atomic_write_json, atomic_write_text
        if "legacy_json" in ctx.meta:
            typer.echo(f"advisor: note: --json FILE is deprecated, use --json-out {ctx.meta['legacy_json']} "
                       "(--json alone prints the result on stdout)", err=True)
        try:
            try:
                tol = tolerance_from_options(min_cosine, max_rel_l2, allow_nonfinite, max_loss_rel, min_grad_cosine,
                                             msprobe_rule)
            except ValueError as e:
                raise InputError("", str(e)) from None
            if run and (target or golden):
                raise InputError(run, "give either --run or --target/--golden, not both")
            if run:
                r = from_run_dir(run)
            elif target and golden:
                r = from_dumps(target, golden)
            else:
                raise InputError("", "give --run RUNDIR, or both --target DUMP and --golden DUMP")
            try:
                att = attribute(r, tol, steps=step or None, mode=mode, soc=soc, ops_info=ops_info)
            except ValueError as e:
                raise InputError(run or target, str(e)) from None
            render(att, top, Console(stderr=True) if as_json else None)
            kept = []
            if csv_out:
                buf = io.StringIO()
                att.ops.to_csv(buf, index=True, index_label="node")
                kept.append((csv_out, atomic_write_text(csv_out, buf.getvalue(), keep_existing=True)))
            if json_out:
                kept.append((json_out, atomic_write_json(json_out, att.to_dict(), keep_existing=True)))
            if xlsx_out or msprobe_csv:
                table = msprobe_table(r.target_dump, r.golden_dump, sorted(set(step)) if step else None)
                if msprobe_csv:
                    kept.append((msprobe_csv, write_csv(table, msprobe_csv)))
                if xlsx_out:
                    kept.append((xlsx_out, write_xlsx(table, xlsx_out)))
            for path, bak in kept:
                if bak:
                    typer.echo(f"kept the previous {path} as {bak}", err=True)
        except AdvisorError as e:
            typer.echo(f"advisor: error: {e}", err=True)
            raise typer.Exit(e.exit_code)
        if as_json:
            typer.echo(json.dumps(att.to_dict(), indent=2, ensure_ascii=False))
        raise typer.Exit(0 if att.verdict.ok else 1)
