"""Profile readers: kernel_details.csv, op_summary_*.csv, op_statistic.csv, profiler_info*.json,
trace_view.json.  Columns are found by (normalized) name, so every CANN/torch_npu version maps to
one canonical *kernel frame* (docs/architecture.md):

``step`` (int, -1 when absent), ``rank``, ``name``, ``type``, ``core``, ``start_us`` (string, exact
as written, trailing tab kept), ``duration_us`` (float), ``wait_us``, ``block_dim``, ``in_shapes``,
``in_dtypes``, ``in_formats``, ``out_shapes``, ``out_dtypes``, ``out_formats`` (strings as written,
surrounding quotes removed), ``stream``, ``task_id``; plus ``start_ns`` (int64 parsed from
``start_us`` without float rounding, for ordering), ``precision`` (fp16/bf16/fp32/fp64/n/a, see
``kernel_precision``) and ``source`` (file).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..errors import InputError

# canonical column -> accepted spellings (normalized: lower case, no spaces/underscores/units)
_ALIASES: dict[str, tuple[str, ...]] = {
    "step": ("stepid", "step"),
    "model_id": ("modelid",),
    "task_id": ("taskid",),
    "stream": ("streamid",),
    "name": ("name", "opname", "kernelname"),
    "type": ("type", "optype", "kerneltype"),
    "state": ("opstate",),
    "core": ("acceleratorcore", "tasktype", "coretype"),
    "start_us": ("starttime", "taskstarttime"),
    "duration_us": ("duration", "taskduration"),
    "wait_us": ("waittime", "taskwaittime"),
    "block_dim": ("blockdim", "blocknum"),
    "mix_block_dim": ("mixblockdim", "mixblocknum"),
    "in_shapes": ("inputshapes",),
    "in_dtypes": ("inputdatatypes",),
    "in_formats": ("inputformats",),
    "out_shapes": ("outputshapes",),
    "out_dtypes": ("outputdatatypes",),
    "out_formats": ("outputformats",),
    "context_id": ("contextid",),
}
KERNEL_COLUMNS = ["step", "rank", "name", "type", "core", "start_us", "duration_us", "wait_us",
                  "block_dim", "in_shapes", "in_dtypes", "in_formats", "out_shapes", "out_dtypes",
                  "out_formats", "stream", "task_id", "start_ns", "precision", "source"]
_STR_COLS = ("in_shapes", "in_dtypes", "in_formats", "out_shapes", "out_dtypes", "out_formats")
_REQUIRED = ("name", "type", "duration_us")


def _norm(col: str) -> str:
    c = re.sub(r"\(.*?\)", "", str(col)).strip().lower()
    return re.sub(r"[\s_\-]+", "", c)


def _map_columns(cols: Iterable[str]) -> dict[str, str]:
    """raw column -> canonical name (first spelling wins)."""
    lookup = {a: canon for canon, al in _ALIASES.items() for a in al}
    out: dict[str, str] = {}
    taken: set[str] = set()
    for c in cols:
        canon = lookup.get(_norm(c))
        if canon and canon not in taken:
            out[c] = canon
            taken.add(canon)
    return out


def _check_text(path: Path, head: bytes, what: str) -> None:
    if not head.strip():
        raise InputError(path, f"empty file, expected {what}")
    if b"\x00" in head:
        raise InputError(path, f"binary data, expected {what}")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # not just a cut multi-byte char at the end of the sample
            raise InputError(path, f"not UTF-8 text, expected {what}") from None


def _read_csv_str(path: Path, what: str, wanted: Iterable[str] | None = None) -> pd.DataFrame:
    """Read a CSV with every cell as a string, fast (pyarrow), with clear errors."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError as e:
        raise InputError(path, f"cannot read {what}: {e.strerror or e}") from None
    _check_text(path, head, what)
    first_line = head.split(b"\n", 1)[0].decode("utf-8", "replace")
    if "," not in first_line:
        sep = ";" if ";" in first_line else ("\t" if "\t" in first_line else None)
        hint = f" (found {'semicolons' if sep == ';' else 'tabs'}; expected commas)" if sep else ""
        raise InputError(path, f"header is not comma-separated{hint}; expected {what}")
    try:
        cols = list(pd.read_csv(path, nrows=0, dtype=str, encoding_errors="replace").columns)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError) as e:
        raise InputError(path, f"malformed CSV header ({str(e).splitlines()[0][:120]}); expected {what}") from None
    mapping = _map_columns(cols)
    use = [c for c, canon in mapping.items() if wanted is None or canon in wanted]
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv
        tbl = pacsv.read_csv(
            str(path),
            read_options=pacsv.ReadOptions(use_threads=True, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(delimiter=",", quote_char='"', double_quote=True,
                                             newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(include_columns=use, column_types={c: pa.string() for c in use},
                                                 strings_can_be_null=False, quoted_strings_can_be_null=False,
                                                 null_values=[]),
        )
        df = tbl.to_pandas(types_mapper=pd.ArrowDtype)
        df = df.astype({c: "string[pyarrow]" for c in df.columns})
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        df = _read_csv_pandas(path, use, what)
    except Exception as e:  # pyarrow.lib.ArrowInvalid and friends: row with too few/many fields, bad quoting
        msg = " ".join(str(e).split())[:200] if str(e) else type(e).__name__
        raise InputError(path, f"malformed CSV, truncated or not comma-separated? ({msg}); expected {what}") from None
    return df.rename(columns=mapping)


def _read_csv_pandas(path: Path, use: list[str], what: str) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, usecols=use, encoding_errors="replace",
                           engine="c", on_bad_lines="error")
    except (pd.errors.ParserError, ValueError, UnicodeDecodeError) as e:
        raise InputError(path, f"malformed CSV ({str(e).splitlines()[0][:160]}); expected {what}") from None


def _strip_quotes(s: pd.Series) -> pd.Series:
    return s.str.strip().str.strip('"').str.strip()


def _num(s: pd.Series, path: Path, col: str, required: bool = False) -> pd.Series:
    t = s.str.strip().str.strip('"').str.strip()
    v = pd.to_numeric(t.mask(t.isin(["N/A", "", "n/a", "NA", "-"])), errors="coerce").astype("float64")
    if required:
        bad = v.isna() & t.notna() & ~t.isin(["N/A", "", "n/a", "NA", "-"])
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(path, f"column {col!r} row {i + 2}: {str(t.iloc[i])[:40]!r} is not a number")
    return v


def _start_ns(s: pd.Series) -> pd.Series:
    """Exact integer nanoseconds from a microsecond string like ``"1699529622790614.8\\t"``."""
    t = s.str.strip().str.strip('"').str.strip()
    parts = t.str.split(".", n=1, expand=True)
    whole = pd.to_numeric(parts[0], errors="coerce")
    if parts.shape[1] > 1:
        frac = parts[1].fillna("").str.slice(0, 3).str.pad(3, side="right", fillchar="0")
        frac = pd.to_numeric(frac.mask(frac == "000", "0"), errors="coerce").fillna(0)
    else:
        frac = 0
    ns = whole.astype("float64")  # NaN-able
    ok = ns.notna()
    out = pd.Series(np.full(len(t), -1, dtype=np.int64), index=t.index)
    if ok.any():
        w = whole[ok].astype("int64").to_numpy()
        f = frac[ok].astype("int64").to_numpy() if not isinstance(frac, int) else 0
        out[ok] = w * 1000 + f
    return out


_PREC_RANK = {"fp16": 0, "bf16": 1, "fp32": 2, "fp64": 3}
_DT = {"FLOAT16": "fp16", "DT_FLOAT16": "fp16", "HALF": "fp16", "BF16": "bf16", "DT_BF16": "bf16",
       "BFLOAT16": "bf16", "FLOAT": "fp32", "FLOAT32": "fp32", "DT_FLOAT": "fp32", "DOUBLE": "fp64",
       "FLOAT64": "fp64", "DT_DOUBLE": "fp64"}


def _lowest_float(dtypes: pd.Series) -> pd.Series:
    """Per row, the lowest-precision float dtype in a ``;``-separated dtype list, or "" if none."""
    out = pd.Series("", index=dtypes.index, dtype=object)
    up = dtypes.fillna("").astype(str).str.upper()
    # check from the highest precision down so the lowest one wins
    for name, prec in (("fp64", ("DOUBLE", "FLOAT64", "DT_DOUBLE")), ("fp32", ("FLOAT", "FLOAT32", "DT_FLOAT")),
                       ("bf16", ("BF16", "DT_BF16", "BFLOAT16")), ("fp16", ("FLOAT16", "DT_FLOAT16", "HALF"))):
        pat = r"(?:^|;)\s*(?:" + "|".join(re.escape(p) for p in prec) + r")\s*(?:;|$)"
        out = out.mask(up.str.contains(pat, regex=True), name)
    return out


def kernel_precision(in_dtypes: pd.Series, out_dtypes: pd.Series) -> pd.Series:
    """The precision a kernel computed in: the lowest-precision float dtype among its inputs
    (fp16/bf16 < fp32 < fp64); kernels without a float input use their outputs; none -> "n/a"."""
    a = _lowest_float(in_dtypes)
    b = _lowest_float(out_dtypes)
    r = a.where(a != "", b)
    return r.mask(r == "", "n/a").astype(str)


def _canonical(df: pd.DataFrame, path: Path, what: str, rank: Any = None) -> pd.DataFrame:
    missing = [c for c in _REQUIRED if c not in df.columns]
    if missing:
        raise InputError(path, f"missing required column(s) {', '.join(missing)} (looked up by name); expected {what}")
    n = len(df)
    out = pd.DataFrame(index=pd.RangeIndex(n))
    df = df.reset_index(drop=True)
    if "step" in df.columns:
        st = _num(df["step"], path, "Step Id")
        out["step"] = st.fillna(-1).astype("int64")
    else:
        out["step"] = np.full(n, -1, dtype=np.int64)
    out["rank"] = -1 if rank is None else int(rank)
    out["name"] = df["name"].astype(str).str.strip()
    out["type"] = df["type"].astype(str).str.strip()
    out["core"] = df["core"].astype(str).str.strip() if "core" in df.columns else "N/A"
    out["start_us"] = df["start_us"].astype(str) if "start_us" in df.columns else ""
    out["duration_us"] = _num(df["duration_us"], path, "Duration(us)", required=True).to_numpy()
    out["wait_us"] = _num(df["wait_us"], path, "Wait Time(us)").to_numpy() if "wait_us" in df.columns else np.nan
    out["block_dim"] = _num(df["block_dim"], path, "Block Dim").to_numpy() if "block_dim" in df.columns else np.nan
    for c in _STR_COLS:
        out[c] = _strip_quotes(df[c]).astype(str).to_numpy() if c in df.columns else ""
    out["stream"] = df["stream"].astype(str).str.strip() if "stream" in df.columns else "N/A"
    out["task_id"] = df["task_id"].astype(str).str.strip() if "task_id" in df.columns else "N/A"
    out["start_ns"] = _start_ns(df["start_us"]).to_numpy() if "start_us" in df.columns else np.arange(n, dtype=np.int64)
    out["precision"] = kernel_precision(out["in_dtypes"], out["out_dtypes"]).to_numpy()
    out["source"] = str(path)
    for c in ("name", "type", "core", "start_us", "in_shapes", "in_dtypes", "in_formats", "out_shapes",
              "out_dtypes", "out_formats", "stream", "task_id", "precision", "source"):
        out[c] = out[c].astype(object) if n < 50_000 else out[c].astype("string[pyarrow]")
    return out


_KD_WANTED = set(_ALIASES)


def read_kernel_details(path: str | Path, rank: Any = None) -> pd.DataFrame:
    """Read a torch_npu ``kernel_details.csv`` (any level/version) into the kernel frame."""
    p = Path(path)
    df = _read_csv_str(p, "a kernel_details.csv", _KD_WANTED)
    return _canonical(df, p, "a kernel_details.csv", rank)


def read_op_summary(path: str | Path, rank: Any = None) -> pd.DataFrame:
    """Read an msprof ``op_summary_*.csv`` (old ``Task Start Time`` / new ``Task Start Time(us)``,
    ``Block Dim`` or ``Block Num``, ``Task Type`` as core) into the kernel frame."""
    p = Path(path)
    df = _read_csv_str(p, "an op_summary CSV", _KD_WANTED)
    return _canonical(df, p, "an op_summary CSV", rank)


def read_kernels(path: str | Path, rank: Any = None) -> pd.DataFrame:
    """kernel_details.csv or op_summary_*.csv, chosen by file name (else by columns)."""
    p = Path(path)
    if p.name.startswith("op_summary"):
        return read_op_summary(p, rank)
    return read_kernel_details(p, rank)


_STAT_ALIASES = {"type": ("optype",), "core": ("coretype", "tasktype", "acceleratorcore"), "count": ("count",),
                 "total_us": ("totaltime",), "min_us": ("mintime",), "avg_us": ("avgtime",),
                 "max_us": ("maxtime",), "ratio": ("ratio",)}


def read_op_statistic(path: str | Path) -> pd.DataFrame:
    """``op_statistic.csv`` -> columns type, core, count, total_us, min_us, avg_us, max_us, ratio."""
    p = Path(path)
    df = _read_csv_str(p, "an op_statistic.csv")
    lookup = {a: canon for canon, al in _STAT_ALIASES.items() for a in al}
    ren = {}
    for c in df.columns:
        k = lookup.get(_norm(c))
        if k and k not in ren.values():
            ren[c] = k
    df = df.rename(columns=ren)
    missing = [c for c in ("type", "count", "total_us") if c not in df.columns]
    if missing:
        raise InputError(p, f"missing required column(s) {', '.join(missing)}; expected an op_statistic.csv "
                            "(OP Type, Core Type, Count, Total Time(us), ...)")
    out = pd.DataFrame({"type": df["type"].astype(str).str.strip(),
                        "core": df["core"].astype(str).str.strip() if "core" in df.columns else "N/A"})
    for c in ("count", "total_us", "min_us", "avg_us", "max_us", "ratio"):
        out[c] = _num(df[c], p, c, required=True).to_numpy() if c in df.columns else np.nan
    return out


def _load_json(path: Path, what: str) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(path, f"cannot read {what}: {e.strerror or e}") from None
    _check_text(path, raw[:65536], what)
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(path, f"not UTF-8 text, expected {what}") from None
    except json.JSONDecodeError as e:
        raise InputError(path, f"invalid JSON at line {e.lineno} column {e.colno} ({e.msg}); "
                               f"expected {what}") from None
    except RecursionError:
        raise InputError(path, f"JSON nested too deeply; expected {what}") from None


def read_profiler_info(path: str | Path) -> dict:
    """``profiler_info.json`` / ``profiler_info_<rank>.json`` -> its dict plus ``rank`` (from the
    ``rank_id`` key, else the file name, else -1)."""
    p = Path(path)
    d = _load_json(p, "a profiler_info.json")
    if not isinstance(d, dict):
        raise InputError(p, "expected a JSON object in profiler_info.json")
    rank = d.get("rank_id", d.get("rank"))
    if rank is None:
        m = re.search(r"profiler_info_(\d+)\.json$", p.name)
        rank = int(m.group(1)) if m else -1
    try:
        rank = int(rank)
    except (TypeError, ValueError):
        rank = -1
    out = dict(d)
    out["rank"] = rank
    return out


# ---------------------------------------------------------------------------------------------
# trace_view.json

def _ts_ns(v: Any) -> int:
    s = str(v).strip().strip('"').strip()
    if not s:
        return -1
    w, _, f = s.partition(".")
    try:
        return int(w) * 1000 + int((f + "000")[:3] or 0)
    except ValueError:
        try:
            return int(round(float(s) * 1000))
        except ValueError:
            return -1


def read_trace_view(path: str | Path) -> dict[str, pd.DataFrame]:
    """``trace_view.json`` -> ``{"ops": framework ops, "kernels": device kernels, "links": op<->kernel}``.

    ops: ``op_id, name, pid, tid, ts_ns, dur_us, seq, call_stack, input_dims, phase`` (phase = "fwd" or
    "bwd": "bwd" when the op is the end of a ``fwdbwd`` flow or runs on the backward thread of
    the autograd engine (name contains "Backward"); else "fwd").
    kernels: ``kernel_id, name, pid, tid, ts_ns, dur_us, task_type``.
    links: ``op_id, kernel_id`` from ``async_npu`` flows (start bound to the enclosing cpu_op on
    the same pid/tid, end bound to the kernel starting at the flow end's ts on that pid/tid).
    """
    p = Path(path)
    d = _load_json(p, "a trace_view.json")
    events = d.get("traceEvents") if isinstance(d, dict) else d
    if not isinstance(events, list):
        raise InputError(p, "expected a JSON list of trace events (or {\"traceEvents\": [...]})")
    proc_names: dict[Any, str] = {}
    ops, kernels, flows = [], [], []
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "process_name":
            proc_names[e.get("pid")] = str((e.get("args") or {}).get("name", ""))
        elif ph == "X":
            (ops if e.get("cat") == "cpu_op" else kernels).append(e)
        elif ph in ("s", "f", "t") and e.get("cat") in ("async_npu", "fwdbwd"):
            flows.append(e)
    hw = {pid for pid, nm in proc_names.items() if "ascend hardware" in nm.lower() or "npu" in nm.lower()}
    kernels = [k for k in kernels if not hw or k.get("pid") in hw]

    def args(e: dict) -> dict:
        a = e.get("args")
        return a if isinstance(a, dict) else {}

    opf = pd.DataFrame({
        "op_id": np.arange(len(ops), dtype=np.int64),
        "name": [str(o.get("name", "")) for o in ops],
        "pid": [str(o.get("pid", "")) for o in ops],
        "tid": [str(o.get("tid", "")) for o in ops],
        "ts_ns": np.array([_ts_ns(o.get("ts", "")) for o in ops], dtype=np.int64),
        "dur_us": pd.to_numeric(pd.Series([o.get("dur") for o in ops], dtype=object), errors="coerce"),
        "seq": [args(o).get("Sequence number") for o in ops],
        "call_stack": [str(args(o).get("Call stack", "")) for o in ops],
        "input_dims": [str(args(o).get("Input Dims", "")) for o in ops],
    })
    kf = pd.DataFrame({
        "kernel_id": np.arange(len(kernels), dtype=np.int64),
        "name": [str(k.get("name", "")) for k in kernels],
        "pid": [str(k.get("pid", "")) for k in kernels],
        "tid": [str(k.get("tid", "")) for k in kernels],
        "ts_ns": np.array([_ts_ns(k.get("ts", "")) for k in kernels], dtype=np.int64),
        "dur_us": pd.to_numeric(pd.Series([k.get("dur") for k in kernels], dtype=object), errors="coerce"),
        "task_type": [str(args(k).get("Task Type", "")) for k in kernels],
    })
    fl = pd.DataFrame({
        "cat": [str(f.get("cat")) for f in flows], "ph": [str(f.get("ph")) for f in flows],
        "id": [str(f.get("id")) for f in flows], "pid": [str(f.get("pid", "")) for f in flows],
        "tid": [str(f.get("tid", "")) for f in flows],
        "ts_ns": np.array([_ts_ns(f.get("ts", "")) for f in flows], dtype=np.int64),
    })

    def bind_op(points: pd.DataFrame) -> pd.Series:
        """Enclosing cpu_op (latest start <= ts with ts <= end) on the same pid/tid."""
        if points.empty or opf.empty:
            return pd.Series(-1, index=points.index, dtype=np.int64)
        left = points[["pid", "tid", "ts_ns"]].reset_index().sort_values("ts_ns")
        right = opf[["pid", "tid", "ts_ns", "dur_us", "op_id"]].sort_values("ts_ns")
        m = pd.merge_asof(left, right, on="ts_ns", by=["pid", "tid"], direction="backward",
                          suffixes=("", "_op"))
        # merge_asof keeps the right ts only through op_id; check containment
        end = opf.set_index("op_id").reindex(m["op_id"].fillna(-1).astype(int))
        inside = (m["op_id"].notna().to_numpy()
                  & (m["ts_ns"].to_numpy() <= end["ts_ns"].to_numpy() + (end["dur_us"].fillna(0).to_numpy() * 1000)))
        res = pd.Series(np.where(inside, m["op_id"].fillna(-1).astype(int), -1), index=m["index"].to_numpy())
        return res.reindex(points.index).astype(np.int64)

    links = pd.DataFrame({"op_id": pd.Series(dtype=np.int64), "kernel_id": pd.Series(dtype=np.int64)})
    phase = pd.Series("fwd", index=opf.index, dtype=object)
    phase[opf["name"].str.contains("Backward|backward", regex=True)] = "bwd"
    if not fl.empty:
        a = fl[fl["cat"] == "async_npu"]
        s, f = a[a["ph"] == "s"], a[a["ph"].isin(["f", "t"])]
        s = s.assign(op_id=bind_op(s))
        if not kf.empty and not f.empty:
            kk = kf[["pid", "tid", "ts_ns", "kernel_id"]]
            fk = f.merge(kk, on=["pid", "tid", "ts_ns"], how="left")
            if fk["kernel_id"].isna().any():  # fall back to ts only (some versions put flows on another tid)
                byts = kk.drop_duplicates("ts_ns").set_index("ts_ns")["kernel_id"]
                fk["kernel_id"] = fk["kernel_id"].fillna(fk["ts_ns"].map(byts))
            links = s[["id", "op_id"]].merge(fk[["id", "kernel_id"]], on="id")
            links = links[(links["op_id"] >= 0) & links["kernel_id"].notna()]
            links = links.astype({"op_id": np.int64, "kernel_id": np.int64})[["op_id", "kernel_id"]]
            links = links.drop_duplicates().reset_index(drop=True)
        fb = fl[fl["cat"] == "fwdbwd"]
        fe = fb[fb["ph"].isin(["f", "t"])]
        if not fe.empty:
            bw = bind_op(fe)
            phase[bw[bw >= 0].to_numpy()] = "bwd"
    opf["phase"] = phase.to_numpy()
    return {"ops": opf, "kernels": kf, "links": links}
