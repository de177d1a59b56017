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

import csv
import io
import math
import re
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from ..errors import InputError
from ..fsutil import check_user_file, read_user_json

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
# how the required columns are spelled in kernel_details.csv / op_summary (for messages)
_SPELLED = {"name": "Name (op_summary: Op Name)", "type": "Type (op_summary: OP Type)",
            "duration_us": "Duration(us) (op_summary: Task Duration(us))"}
MAX_DURATION_US = 1e12   # one kernel longer than 11.6 days is not a measurement
MAX_STEP = 2 ** 31 - 1
_INT64_MAX = 2 ** 63 - 1


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


def _header_cells(first_line: str) -> list[str]:
    """The header cells exactly as written (csv quoting rules; duplicates kept, unlike pandas)."""
    try:
        return next(csv.reader(io.StringIO(first_line)))
    except (csv.Error, StopIteration):
        return []


def _data_rows(path: Path):
    """(file line, fields) of each non-blank data row as the csv module reads it (error paths only);
    a quoting error is a ValueError naming its line."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        r = csv.reader(f, strict=True)
        next(r, None)
        try:
            yield from ((r.line_num, row) for row in r if row)
        except csv.Error as e:
            raise ValueError(f"line {r.line_num}: {e}") from None


def _first_bad_row(path: Path, ncols: int) -> str:
    """Where a CSV stops being a table of ``ncols`` fields (only called once parsing failed)."""
    try:
        return next((f"line {line} has {len(row)} fields, the header {ncols}" for line, row in _data_rows(path)
                     if len(row) != ncols), "")
    except (OSError, ValueError) as e:
        return str(e)


def _line_of(path: Path, row: int) -> int:
    """File line number of data row ``row`` (0-based; blank lines skipped as the reader does)."""
    try:
        return next(line for i, (line, _) in enumerate(_data_rows(path)) if i == row)
    except (StopIteration, OSError, ValueError):
        return row + 2


def _read_table(path: Path, what: str, wanted: Iterable[str] | None = None):
    """Read a CSV with every cell as a string (pyarrow, multi-threaded) -> (pa.Table with canonical
    column names where known, {canonical name: header as written}).  Clear one-line errors."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    check_user_file(path, what)
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError as e:
        raise InputError(path, f"cannot read {what}: {e.strerror or e}") from None
    _check_text(path, head, what)
    first_line = head.split(b"\n", 1)[0].decode("utf-8", "replace").lstrip("\ufeff").rstrip("\r")
    if "," not in first_line:
        sep = ";" if ";" in first_line else ("\t" if "\t" in first_line else None)
        hint = f" (found {'semicolons' if sep == ';' else 'tabs'}; expected commas)" if sep else ""
        raise InputError(path, f"header is not comma-separated{hint}; expected {what}")
    cols = _header_cells(first_line)
    if not cols:
        raise InputError(path, f"malformed CSV header (unbalanced quotes?); expected {what}")
    seen: set[str] = set()
    for c in cols:
        if c in seen:
            raise InputError(path, f"column {c!r} appears twice in the header; expected {what}")
        seen.add(c)
    mapping = _map_columns(cols)
    use = [c for c, canon in mapping.items() if canon in wanted] if wanted is not None else cols
    try:
        tbl = pacsv.read_csv(
            str(path),
            read_options=pacsv.ReadOptions(use_threads=True, block_size=1 << 24),
            parse_options=pacsv.ParseOptions(delimiter=",", quote_char='"', double_quote=True,
                                             newlines_in_values=False),
            convert_options=pacsv.ConvertOptions(include_columns=use, column_types={c: pa.string() for c in use},
                                                 strings_can_be_null=False, quoted_strings_can_be_null=False,
                                                 null_values=[]),
        )
    except Exception as e:  # pyarrow.lib.ArrowInvalid and friends: row with too few/many fields, bad quoting
        where = _first_bad_row(path, len(cols))
        msg = where or (" ".join(str(e).split())[:200] if str(e) else type(e).__name__)
        raise InputError(path, f"malformed CSV, truncated or not comma-separated? ({msg}); expected {what}") from None
    if tbl.num_rows == 0:
        raise InputError(path, f"no data rows, only a header; expected {what}")
    names = [mapping.get(c, c) for c in tbl.column_names]
    return tbl.rename_columns(names), {mapping.get(c, c): c for c in cols}


_NA_CELLS = ["N/A", "n/a", "NA", "", "-", "nan", "NaN"]
_NA_REQUIRED = ["N/A", "n/a", "NA", "", "-"]   # "nan"/"inf" in a required column is an error, not "unknown"
_NUM_RE = r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$"


def _a_trim(col):
    import pyarrow.compute as pc
    return pc.utf8_trim(col, characters=' \t"')


def _a_num(col, path: Path, header: str, required: bool = False,
           bounds: tuple[float, float, bool] | None = None) -> np.ndarray:
    """String column -> float64 numpy (N/A -> NaN).  ``required``: other non-numbers are an error
    naming the line and ``header`` (the column as written in the file); ``bounds`` = (low, high,
    whole): numbers outside [low, high], non-finite or (whole) fractional are an error too."""
    import pyarrow as pa
    import pyarrow.compute as pc
    t = _a_trim(col)
    na = pa.array(_NA_REQUIRED if required else _NA_CELLS)
    is_na = pc.is_in(t, value_set=na)
    nulled = pc.if_else(is_na, pa.scalar(None, pa.string()), t)
    try:  # fast path: every cell is a number or N/A
        v = pc.cast(nulled, pa.float64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        ok = pc.match_substring_regex(t, _NUM_RE)
        if required:
            bad = pc.and_(pc.invert(ok), pc.invert(is_na))
            if pc.any(bad).as_py():
                i = int(pc.index(bad, True).as_py())
                raise InputError(path, f"line {_line_of(path, i)}, column {header!r}: "
                                       f"{str(t[i].as_py())[:40]!r} is not a number")
        v = pc.cast(pc.if_else(ok, t, pa.scalar(None, pa.string())), pa.float64()).to_numpy(zero_copy_only=False)
    if bounds is not None:
        lo, hi, whole = bounds
        known = ~pc.is_null(nulled).to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            bad = known & ~((v >= lo) & (v <= hi))      # NaN and +-inf fail the comparison
            if whole:
                bad |= known & np.isfinite(v) & (v != np.floor(v))
        if bad.any():
            i = int(np.argmax(bad))
            span = f"a whole number from {int(lo)} to {int(hi)}" if whole else f"a number from {lo:g} to {hi:g}"
            raise InputError(path, f"line {_line_of(path, i)}, column {header!r}: {str(t[i].as_py())[:40]!r} "
                                   f"is not {span}")
    return v


def _a_start_ns(col) -> np.ndarray:
    """Exact integer nanoseconds from microsecond strings like ``"1699529622790614.8\\t"`` (-1 if not a number)."""
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.compute as pc
    t = _a_trim(col)
    scale = pa.scalar(Decimal("1000"), pa.decimal128(5, 0))
    try:  # fast path: plain decimals with at most 3 fractional digits
        d = pc.cast(t, pa.decimal128(25, 3))
        return pc.cast(pc.multiply(d, scale), pa.int64(), safe=False).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    t = pc.replace_substring_regex(t, r"^(-?\d+\.\d{0,3})\d*$", r"\1")
    ok = pc.match_substring_regex(t, r"^-?\d{1,18}(\.\d{0,3})?$")
    t = pc.replace_substring_regex(t, r"\.$", "")
    d = pc.cast(pc.if_else(ok, t, pa.scalar(None, pa.string())), pa.decimal128(25, 3))
    i = pc.cast(pc.multiply(d, pa.scalar(Decimal("1000"), pa.decimal128(5, 0))), pa.int64(), safe=False)
    return pc.fill_null(i, -1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _a_str(col, strip_quotes: bool = False) -> pd.Series:
    """Arrow string column -> pandas pyarrow-backed string Series (no Python objects)."""
    import pyarrow as pa
    if strip_quotes:
        col = _a_trim(col)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return pd.Series(pd.arrays.ArrowStringArray(col))


def _str_const(value: str, n: int) -> pd.Series:
    import pyarrow as pa
    return pd.Series(pd.arrays.ArrowStringArray(pa.array([value] * n, type=pa.string())))


_PREC_RANK = {"fp16": 0, "bf16": 1, "fp32": 2, "fp64": 3}
_DT = {"FLOAT16": "fp16", "DT_FLOAT16": "fp16", "HALF": "fp16", "BF16": "bf16", "DT_BF16": "bf16",
       "BFLOAT16": "bf16", "FLOAT": "fp32", "FLOAT32": "fp32", "DT_FLOAT": "fp32", "DOUBLE": "fp64",
       "FLOAT64": "fp64", "DT_DOUBLE": "fp64"}


def _lowest_float_one(cell: str) -> str:
    best = ""
    for part in str(cell).upper().split(";"):
        d = _DT.get(part.strip().strip('"'))
        if d and (not best or _PREC_RANK[d] < _PREC_RANK[best]):
            best = d
    return best


def kernel_precision(in_dtypes: pd.Series, out_dtypes: pd.Series) -> pd.Series:
    """The precision a kernel computed in: the lowest-precision float dtype among its inputs
    (fp16/bf16 < fp32 < fp64); kernels without a float input use their outputs; none -> "n/a".
    Computed once per distinct (inputs, outputs) pair."""
    import pyarrow as pa
    names = ["n/a", "fp16", "bf16", "fp32", "fp64"]
    code = {d: i for i, d in enumerate(names)}
    ci, ui = pd.factorize(in_dtypes)
    co, uo = pd.factorize(out_dtypes)
    li = np.array([code.get(_lowest_float_one(u), 0) for u in ui] + [0], dtype=np.int8)
    lo = np.array([code.get(_lowest_float_one(u), 0) for u in uo] + [0], dtype=np.int8)
    a = li[ci]  # code -1 (missing) picks the trailing 0 ("n/a")
    res = np.where(a > 0, a, lo[co])
    arr = pa.DictionaryArray.from_arrays(pa.array(res, type=pa.int8()), pa.array(names)).cast(pa.string())
    return pd.Series(pd.arrays.ArrowStringArray(arr), index=in_dtypes.index)


def _canonical(tbl, headers: dict[str, str], path: Path, what: str, rank: Any = None) -> pd.DataFrame:
    """Kernel frame from an Arrow table with canonical column names (``headers``: canonical name ->
    the header as written in the file, for messages)."""
    import pyarrow.compute as pc
    have = set(tbl.column_names)
    missing = [_SPELLED[c] for c in _REQUIRED if c not in have]
    if missing:
        raise InputError(path, f"missing required column(s) {', '.join(missing)} (looked up by name); expected {what}")
    n = tbl.num_rows
    col = tbl.column
    out: dict[str, Any] = {}
    if "step" in have:
        st = _a_num(col("step"), path, headers["step"], bounds=(0, MAX_STEP, True))
        out["step"] = np.where(np.isnan(st), -1, st).astype(np.int64)
    else:
        out["step"] = np.full(n, -1, dtype=np.int64)
    out["rank"] = np.full(n, -1 if rank is None else int(rank), dtype=np.int64)
    out["name"] = _a_str(pc.utf8_trim_whitespace(col("name")))
    out["type"] = _a_str(pc.utf8_trim_whitespace(col("type")))
    out["core"] = _a_str(pc.utf8_trim_whitespace(col("core"))) if "core" in have else _str_const("N/A", n)
    out["start_us"] = _a_str(col("start_us")) if "start_us" in have else _str_const("", n)
    out["duration_us"] = _a_num(col("duration_us"), path, headers["duration_us"], required=True,
                                bounds=(0.0, MAX_DURATION_US, False))
    out["wait_us"] = _a_num(col("wait_us"), path, headers["wait_us"]) if "wait_us" in have else np.full(n, np.nan)
    out["block_dim"] = _a_num(col("block_dim"), path, headers["block_dim"]) if "block_dim" in have else np.full(n, np.nan)
    for c in _STR_COLS:
        out[c] = _a_str(col(c), strip_quotes=True) if c in have else _str_const("", n)
    out["stream"] = _a_str(pc.utf8_trim_whitespace(col("stream"))) if "stream" in have else _str_const("N/A", n)
    out["task_id"] = _a_str(pc.utf8_trim_whitespace(col("task_id"))) if "task_id" in have else _str_const("N/A", n)
    out["start_ns"] = _a_start_ns(col("start_us")) if "start_us" in have else np.arange(n, dtype=np.int64)
    out["precision"] = kernel_precision(out["in_dtypes"], out["out_dtypes"])
    out["source"] = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[str(path)])
    return pd.DataFrame(out)


_KD_WANTED = set(KERNEL_COLUMNS) & set(_ALIASES)   # the kernel frame's columns: no other column is converted


def read_kernel_details(path: str | Path, rank: Any = None) -> pd.DataFrame:
    """Read a torch_npu ``kernel_details.csv`` (any level/version) into the kernel frame."""
    p = Path(path)
    tbl, headers = _read_table(p, "a kernel_details.csv", _KD_WANTED)
    return _canonical(tbl, headers, p, "a kernel_details.csv", rank)


def read_op_summary(path: str | Path, rank: Any = None) -> pd.DataFrame:
    """Read an msprof ``op_summary_*.csv`` (old ``Task Start Time`` / new ``Task Start Time(us)``,
    ``Block Dim`` or ``Block Num``, ``Task Type`` as core) into the kernel frame."""
    p = Path(path)
    tbl, headers = _read_table(p, "an op_summary CSV", _KD_WANTED)
    return _canonical(tbl, headers, p, "an op_summary CSV", rank)


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
    import pyarrow.compute as pc
    p = Path(path)
    what = "an op_statistic.csv"
    tbl, headers = _read_table(p, what)
    lookup = {a: canon for canon, al in _STAT_ALIASES.items() for a in al}
    cols: dict[str, str] = {}   # op_statistic name -> table column
    written: dict[str, str] = {}  # op_statistic name -> header as written
    for tcol, raw in headers.items():
        k = lookup.get(_norm(raw))
        if k and k not in cols:
            cols[k], written[k] = tcol, raw
    missing = [h for c, h in (("type", "OP Type"), ("count", "Count"), ("total_us", "Total Time(us)")) if c not in cols]
    if missing:
        raise InputError(p, f"missing required column(s) {', '.join(missing)} (looked up by name); expected {what}")
    col = tbl.column
    out = pd.DataFrame({"type": _a_str(pc.utf8_trim_whitespace(col(cols["type"]))),
                        "core": _a_str(pc.utf8_trim_whitespace(col(cols["core"]))) if "core" in cols else "N/A"})
    for c in ("count", "total_us", "min_us", "avg_us", "max_us", "ratio"):
        if c not in cols:
            out[c] = np.nan
            continue
        hi = 100.0 if c == "ratio" else MAX_DURATION_US * (1 if c != "total_us" else 1e6)
        out[c] = _a_num(col(cols[c]), p, written[c], required=c != "ratio", bounds=(0.0, hi, c == "count"))
    return out


def read_profiler_info(path: str | Path) -> dict:
    """``profiler_info.json`` / ``profiler_info_<rank>.json`` -> its dict plus ``rank`` (from the
    ``rank_id`` key, else the file name, else -1)."""
    p = Path(path)
    d = read_user_json(p, "a profiler_info.json")
    if not isinstance(d, dict):
        raise InputError(p, "expected a JSON object in profiler_info.json")
    rank = d.get("rank_id", d.get("rank"))
    if rank is None:
        m = re.search(r"profiler_info_(\d+)\.json$", p.name)
        rank = int(m.group(1)) if m else -1
    elif isinstance(rank, str) and re.fullmatch(r"\s*-?\d{1,10}\s*", rank):
        rank = int(rank)
    if isinstance(rank, bool) or not isinstance(rank, int) or not -1 <= rank <= MAX_STEP:
        raise InputError(p, f"rank_id {str(rank)[:40]} is not a rank number (a whole number from -1); "
                            "expected a profiler_info.json")
    out = dict(d)
    out["rank"] = rank
    return out


# ---------------------------------------------------------------------------------------------
# trace_view.json

def _ts_ns(v: Any) -> int:
    """Exact nanoseconds of a trace ``ts`` in microseconds; -1 for anything else (type, range)."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        return -1
    s = str(v).strip().strip('"').strip()
    if not s or len(s) > 40:
        return -1
    w, _, f = s.partition(".")
    try:
        ns = int(w) * 1000 + int((f + "000")[:3] or 0)
    except ValueError:
        try:
            x = float(s) * 1000
        except ValueError:
            return -1
        ns = int(round(x)) if math.isfinite(x) else -1
    return ns if 0 <= ns <= _INT64_MAX else -1


def _dur_us(v: Any) -> float:
    """A trace ``dur`` (microseconds) as a float; NaN when it is not a plausible duration."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        return math.nan
    try:
        x = float(v)
    except (ValueError, OverflowError):
        return math.nan
    return x if 0.0 <= x <= MAX_DURATION_US else math.nan


def _key(v: Any) -> str:  # a pid/tid/id of any JSON type as a hashable string
    return v if isinstance(v, str) else str(v)[:200]


def read_trace_view(path: str | Path) -> dict[str, pd.DataFrame]:
    """``trace_view.json`` -> ``{"ops": framework ops, "kernels": device kernels, "links": op<->kernel}``.

    ops: ``op_id, name, pid, tid, ts_ns, dur_us, seq, call_stack, input_dims, parent_id, phase, stack``
    (phase = "bwd" when the op is the end of a ``fwdbwd`` flow, its name contains "Backward"
    (autograd nodes), or it runs inside such an op; else "fwd".  parent_id = enclosing op on the
    same pid/tid or -1; stack = nearest non-empty call stack of the op or its ancestors).
    kernels: ``kernel_id, name, pid, tid, ts_ns, dur_us, task_type``.
    links: ``op_id, kernel_id`` from ``async_npu`` flows (start bound to the enclosing cpu_op on
    the same pid/tid, end bound to the kernel starting at the flow end's ts on that pid/tid).
    """
    p = Path(path)
    d = read_user_json(p, "a trace_view.json")
    events = d.get("traceEvents") if isinstance(d, dict) else d
    if not isinstance(events, list):
        raise InputError(p, "expected a JSON list of trace events (or {\"traceEvents\": [...]})")
    proc_names: dict[str, str] = {}
    ops, kernels, flows = [], [], []

    def args(e: dict) -> dict:
        a = e.get("args")
        return a if isinstance(a, dict) else {}

    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "M" and e.get("name") == "process_name":
            proc_names[_key(e.get("pid"))] = str(args(e).get("name", ""))
        elif ph == "X":
            (ops if e.get("cat") == "cpu_op" else kernels).append(e)
        elif ph in ("s", "f", "t") and e.get("cat") in ("async_npu", "fwdbwd"):
            flows.append(e)
    hw = {pid for pid, nm in proc_names.items() if "ascend hardware" in nm.lower() or "npu" in nm.lower()}
    kernels = [k for k in kernels if not hw or _key(k.get("pid")) in hw]

    def strings(values: list) -> pd.Series:  # object dtype even when empty (no float column of nothing)
        return pd.Series(values, dtype=object)
    def frame(evs: list, id_col: str, **extra) -> pd.DataFrame:
        """The columns every X event has (id, name, pid, tid, exact ts, dur) plus ``extra``; any
        JSON type is tolerated (a time that is not a number is -1 / NaN)."""
        return pd.DataFrame({
            id_col: np.arange(len(evs), dtype=np.int64),
            "name": strings([str(e.get("name", "")) for e in evs]),
            "pid": strings([_key(e.get("pid", "")) for e in evs]),
            "tid": strings([_key(e.get("tid", "")) for e in evs]),
            "ts_ns": np.array([_ts_ns(e.get("ts", "")) for e in evs], dtype=np.int64),
            "dur_us": np.array([_dur_us(e.get("dur")) for e in evs], dtype=float),
            **{k: strings(v) for k, v in extra.items()}})

    opf = frame(ops, "op_id",
                seq=[args(o).get("Sequence number") for o in ops],
                call_stack=[str(args(o).get("Call stack", "")) for o in ops],
                input_dims=[str(args(o).get("Input Dims", "")) for o in ops])
    kf = frame(kernels, "kernel_id", task_type=[str(args(k).get("Task Type", "")) for k in kernels])
    fl = pd.DataFrame({
        "cat": strings([str(f.get("cat")) for f in flows]), "ph": strings([str(f.get("ph")) for f in flows]),
        "id": strings([_key(f.get("id")) for f in flows]), "pid": strings([_key(f.get("pid", "")) for f in flows]),
        "tid": strings([_key(f.get("tid", "")) for f in flows]),
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
    own_bwd = (phase == "bwd").to_numpy()
    parent, bwd, stack = _nest(opf, own_bwd)
    opf["parent_id"] = parent
    opf["phase"] = np.where(bwd, "bwd", "fwd").astype(object)
    opf["stack"] = stack
    return {"ops": opf, "kernels": kf, "links": links}


def _nest(opf: pd.DataFrame, own_bwd: np.ndarray) -> tuple[np.ndarray, np.ndarray, list]:
    """The call tree of cpu ops on each pid/tid (an op's parent is the innermost op whose
    [ts, ts + dur] contains its start): parent op_id (-1 = top level), backward flag inherited
    from ancestors (``aten::mm`` under ``MmBackward0`` is backward), and the nearest non-empty
    call stack among the op and its ancestors (torch_npu records stacks on the Python-level op)."""
    n = len(opf)
    parent = np.full(n, -1, dtype=np.int64)
    bwd = own_bwd.astype(bool).copy()
    stack: list = [""] * n
    if not n:
        return parent, bwd, stack
    end = opf["ts_ns"].to_numpy() + np.nan_to_num(opf["dur_us"].to_numpy(dtype=float) * 1000).astype(np.int64)
    order = opf.assign(_end=end).sort_values(["pid", "tid", "ts_ns", "_end"], ascending=[True, True, True, False],
                                             kind="stable")
    own_stack = opf["call_stack"].tolist()
    open_: list = []
    cur = None
    for oid, key_p, key_t, ts, e in zip(order["op_id"].tolist(), order["pid"].tolist(), order["tid"].tolist(),
                                        order["ts_ns"].tolist(), order["_end"].tolist()):
        if (key_p, key_t) != cur:
            cur, open_ = (key_p, key_t), []
        while open_ and open_[-1][0] < ts:
            open_.pop()
        if open_:
            par = open_[-1][1]
            parent[oid] = par
            bwd[oid] = bwd[oid] or bwd[par]
            stack[oid] = own_stack[oid] or stack[par]
        else:
            stack[oid] = own_stack[oid]
        open_.append((e, oid))
    return parent, bwd, stack


def kernel_links(trace: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per device kernel of a ``read_trace_view`` result that an ``async_npu`` flow ties to the
    framework op that launched it: ``name``, ``start_ns`` (the kernel's start, exact, to join
    kernel_details.csv rows), ``framework_op`` (the launching op, e.g. ``aten::mm``), ``phase``
    (fwd/bwd, inherited from enclosing ops), ``call_stack`` (nearest recorded stack), ``seq``."""
    ops, kern, links = trace["ops"], trace["kernels"], trace["links"]
    cols = ["name", "start_ns", "framework_op", "phase", "call_stack", "seq"]
    if links.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    m = links.drop_duplicates("kernel_id").merge(kern[["kernel_id", "name", "ts_ns"]], on="kernel_id")
    m = m.merge(ops[["op_id", "name", "phase", "stack", "seq"]].rename(columns={"name": "framework_op"}), on="op_id")
    out = m.rename(columns={"ts_ns": "start_ns", "stack": "call_stack"})[cols]
    return out.drop_duplicates(["name", "start_ns"]).reset_index(drop=True)
