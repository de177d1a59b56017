"""msprobe's own compare result table, from the tensor pairs advisor compares, so that people used to
msprobe can put both side by side (``advisor compare --xlsx FILE`` / ``--msprobe-csv FILE``).

Column names, their order and the verdict columns are msprobe's (mstt
``debug/accuracy_tools/msprobe/core/common/const.py`` ``CompareConst.COMPARE_RESULT_HEADER`` and
``SUMMARY_COMPARE_RESULT_HEADER``; ``core/compare/multiprocessing_compute.py`` ``check_accuracy``;
``core/compare/utils.py`` ``get_rela_diff_summary_mode``):

* tensor dumps (every compared pair has its tensor files): Cosine, EucDist, MaxAbsErr, MaxRelativeErr,
  One/Five Thousandth(s) Err Ratio and "Accuracy Reached or Not" = msprobe's rule (``metrics.msprobe_pass``:
  No if (Cosine < 0.99 and MaxAbsErr > 0.001) or Cosine < 0.9 or MaxAbsErr > 1; "Unmatched" when the shapes
  differ; "None" for a 0-d tensor, whose cosine msprobe does not compute);
* statistics dumps: Max/Min/Mean/L2norm diff (target - golden), their relative errors as msprobe writes them
  ("12.5%", "N/A" for a zero golden) and Result "Warning" when a statistic differs by more than half its
  magnitude (msprobe's "Need double check api accuracy.").

The figures are advisor's metrics (docs/compare.md); one column is advisor's own, ``Step``, last.
"""
from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from ..errors import InputError
from ..fsutil import atomic_write_bytes, atomic_write_text
from .judge import Mismatch, is_float_record, pair_metrics, tensor_pairs
from .dumps import DumpView, as_steps
from .metrics import msprobe_pass

BASIC_INFO = ["NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
              "NPU Requires_grad", "Bench Requires_grad"]
TENSOR_INDEX = ["Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                "Five Thousandths Err Ratio"]
STATS_INDEX = ["Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
               "MeanRelativeErr", "NormRelativeErr"]
SUMMARY_INFO = ["NPU max", "NPU min", "NPU mean", "NPU l2norm", "Bench max", "Bench min", "Bench mean",
                "Bench l2norm"]
TENSOR_HEADER = BASIC_INFO + TENSOR_INDEX + SUMMARY_INFO + ["Requires_grad Consistent", "Accuracy Reached or Not",
                                                           "Err_message", "Data_name"]
STATS_HEADER = BASIC_INFO + STATS_INDEX + SUMMARY_INFO + ["Requires_grad Consistent", "Result", "Err_message"]
STEP = "Step"
XLSX_MAX_ROWS = 1048575          # one header row + data rows within Excel's 1,048,576

_STATS = ("Max", "Min", "Mean", "Norm")
_ZERO_D = ("This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', 'One Thousandth Err Ratio' and "
           "'Five Thousandths Err Ratio'. ")


def _requires_grad(r: Mapping) -> Any:
    return r.get("requires_grad", getattr(r.get("_rec"), "requires_grad", None))


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _cell(v: Any) -> Any:
    """msprobe writes NaN statistics as the string "Nan"."""
    return "Nan" if isinstance(v, float) and math.isnan(v) else v


def _basic(name: str, rt: Mapping | None, rg: Mapping | None) -> list:
    t, g = rt or {}, rg or {}
    return [name if rt else "N/A", name if rg else "N/A", t.get("dtype", "N/A"), g.get("dtype", "N/A"),
            str(list(t.get("shape") or [])) if rt else "N/A", str(list(g.get("shape") or [])) if rg else "N/A",
            _requires_grad(t), _requires_grad(g)]


def _summary(rt: Mapping | None, rg: Mapping | None) -> list:
    return [_cell(_num((r or {}).get(k))) for r in (rt, rg) for k in _STATS]


def _tensor_row(target: DumpView, golden: DumpView, rt: Mapping | None, rg: Mapping | None) -> tuple[list, str, str]:
    """(the six metric cells, Accuracy Reached or Not, Err_message) of one pair."""
    if rt is None or rg is None:
        return ["N/A"] * 6, "N/A", "No bench data matched." if rg is None else "No NPU data matched."
    if not (is_float_record(rt) and is_float_record(rg)):
        return ["N/A"] * 6, "N/A", "Dtype of NPU and bench Tensor do not match."
    try:
        m = pair_metrics(target, golden, rt, rg)
    except Mismatch:
        return ["shape unmatched"] * 6, "Unmatched", "Shape of NPU and bench tensor do not match. Skipped."
    if m is None:
        return ["N/A"] * 6, "N/A", "Dump file not found."
    if not m["finite"]:
        return ["N/A"] * 6, "No", "The position of inf or nan in NPU and bench Tensor do not match."
    if not (rt.get("shape") or []):
        return (["unsupported", "unsupported", m["max_abs"], m["max_rel"], "unsupported", "unsupported"], "None",
                _ZERO_D)
    cells = [m["cosine"], m["euc_dist"], m["max_abs"], m["max_rel"], m["one_thousandth"], m["five_thousandth"]]
    return cells, "Yes" if msprobe_pass(m["cosine"], m["max_abs"]) else "No", ""


def _stats_row(rt: Mapping | None, rg: Mapping | None) -> tuple[list, str, str]:
    """(the eight statistics cells, Result, Err_message) of one pair, as msprobe's summary mode."""
    if rt is None or rg is None:
        return ["N/A"] * 8, "", "No bench data matched." if rg is None else "No NPU data matched."
    diffs, rels, warn = [], [], False
    for k in _STATS:
        a, b = _num(rt.get(k)), _num(rg.get(k))
        if a is None or b is None:
            diffs.append("N/A")
            rels.append("N/A")
            continue
        d = a - b
        if math.isnan(d):
            diffs.append("Nan")
            rels.append("Nan")
            continue
        diffs.append(d)
        rels.append(f"{abs(d / b) * 100}%" if b != 0 else "N/A")
        if abs(d) / (max(abs(a), abs(b)) + 1e-10) > 0.5:
            warn = True
    msg = "Need double check api accuracy." if warn else ""
    if list(rt.get("shape") or []) != list(rg.get("shape") or []):
        msg += "Tensor shapes do not match."
    return diffs + rels, "Warning" if warn else "", msg


def msprobe_table(target: Any, golden: Any, steps: list[int] | None = None) -> pd.DataFrame:
    """msprobe's compare result table of two dumps (anything ``as_steps`` takes) on ``steps`` (default:
    every common step): one row per float tensor (inputs, then outputs) of every entry in both dumps, in
    the target's order.  Tensor mode when every pair has its tensor files, else statistics mode."""
    ts, gs = as_steps(target), as_steps(golden)
    steps = sorted(set(ts) & set(gs)) if steps is None else list(steps)
    pairs = []
    for s in steps:
        t, g = ts[s], gs[s]
        for entry in t.entries:
            if entry in g.entries:
                for io_kind in ("input", "output"):
                    for pos, rt, rg in tensor_pairs(t, g, entry, io_kind):
                        pairs.append((s, t, g, f"{entry}.{io_kind}.{pos}", rt, rg))
    tensors = bool(pairs) and all(rt is not None and rg is not None and t.has_tensors(rt) and g.has_tensors(rg)
                                  for _s, t, g, _n, rt, rg in pairs)
    rows = []
    for s, t, g, name, rt, rg in pairs:
        req = _requires_grad(rt or {}) == _requires_grad(rg or {})
        if tensors:
            cells, verdict, msg = _tensor_row(t, g, rt, rg)
            data = str([(rt or {}).get("data_name") or "-1", (rg or {}).get("data_name") or "-1"])
            rows.append(_basic(name, rt, rg) + cells + _summary(rt, rg) + [req, verdict, msg, data, s])
        else:
            cells, verdict, msg = _stats_row(rt, rg)
            rows.append(_basic(name, rt, rg) + cells + _summary(rt, rg) + [req, verdict, msg, s])
    return pd.DataFrame(rows, columns=(TENSOR_HEADER if tensors else STATS_HEADER) + [STEP], dtype="object")


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> Path | None:
    """The table as CSV; an existing file is kept as ``.bak`` (returned)."""
    return atomic_write_text(path, df.to_csv(index=False), keep_existing=True)


def write_xlsx(df: pd.DataFrame, path: str | os.PathLike) -> Path | None:
    """The table as an Excel workbook like msprobe's ``compare_result_*.xlsx`` (openpyxl), written
    atomically; an existing file is kept as ``.bak`` (returned)."""
    p = Path(path)
    if len(df) > XLSX_MAX_ROWS:
        raise InputError(p, f"{len(df)} rows do not fit in one Excel sheet ({XLSX_MAX_ROWS}); use --msprobe-csv")
    buf = io.BytesIO()
    try:
        df.to_excel(buf, index=False)
    except ImportError:
        raise InputError(p, "writing .xlsx needs openpyxl (pip install openpyxl); --msprobe-csv needs nothing") from None
    return atomic_write_bytes(p, buf.getvalue(), keep_existing=True)
