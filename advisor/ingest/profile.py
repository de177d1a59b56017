"""Profile readers: kernel_details.csv, op_summary_*.csv, op_statistic.csv, profiler_info*.json
(trace_view.json: ``trace.py``).  Columns are found by (normalized) name, so every CANN/torch_npu
version maps to one canonical *kernel frame* (docs/architecture.md):

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
