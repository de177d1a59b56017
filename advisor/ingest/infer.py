"""Op graph from kernel rows alone (no graph dump): nodes = kernels, edges inferred from
execution order and tensor signatures.

Rule (documented in docs/formats.md, "Edge inference"): within one (step, stream), input *k* of a
kernel is fed by the most recent earlier kernel that produced an output with the same shape
string and the same dtype.  Confidence per edge:

* 0.9 when that producer is the only earlier output with this signature in the (step, stream);
* 0.7 when several earlier outputs share the signature (the latest is taken);
* -0.2 when the tensor has at most one element (scalars are ambiguous), -0.1 when more than 64
  kernels lie between producer and consumer; clipped to [0.1, 0.9].

Float inputs with no producer become one ``data`` node per (step, stream, signature)
(``input:<shape>:<dtype>``): graph inputs or weights, real fp32 producers for the semantics.
Communication (HCCL), memory (MemSet, memcpy), AI_CPU and DSA kernels are nodes with
``decides=False``.  Everything is vectorised (factorize + merge_asof); the graph is built with
``add_nodes_from`` / ``add_edges_from``.
"""
from __future__ import annotations

import gc
from typing import Any, Iterable

import networkx as nx
import numpy as np
import pandas as pd

from ..graph import is_float_dtype, normalize_dtype
from .common import BOOKKEEPING_CORES, BOOKKEEPING_PREFIXES, BOOKKEEPING_TYPES

_NA = {"", "N/A", "n/a", "NA", "UNDEFINED", "nan", "None"}


def _split_unique(s: pd.Series, norm: bool = False) -> tuple[np.ndarray, list[list[str]]]:
    """Factorize a column of ``;``-separated strings: (codes, list per unique value)."""
    if s.hasnans:
        s = s.fillna("")
    codes, uniq = pd.factorize(s, sort=False)
    lists = []
    for u in uniq:
        u = str(u).strip().strip('"')
        if u in _NA:
            lists.append([])
            continue
        parts = [p.strip() for p in u.split(";")]
        lists.append([normalize_dtype(p) if norm else p for p in parts])
    return codes, lists


def _explode(codes: np.ndarray, lists: list[list[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row index, port, value-code) for every element; value-code indexes ``vocab``."""
    lens = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    per_row = lens[codes] if len(codes) else np.zeros(0, dtype=np.int64)
    rows = np.repeat(np.arange(len(codes), dtype=np.int64), per_row)
    if rows.size == 0:
        return rows, rows.copy(), rows.copy()
    starts = np.cumsum(per_row) - per_row
    port = np.arange(rows.size, dtype=np.int64) - np.repeat(starts, per_row)
    # flat element index within the unique list
    offs = np.cumsum(lens) - lens
    elem = np.repeat(offs[codes], per_row) + port
    return rows, port, elem


def bulk_graph(nodes: Iterable[tuple[Any, dict]], edges: Iterable[tuple[Any, Any, dict]] = ()) -> nx.DiGraph:
    """A DiGraph from (key, attr dict) pairs with unique keys and (u, v, attr dict) edges between
    existing nodes, filled directly into networkx's adjacency dicts (same structures as
    ``add_nodes_from``/``add_edges_from``, several times faster for 10^6 nodes).  Attribute
    dicts are used as given (not copied)."""
    g = nx.DiGraph()
    node, succ, pred = g._node, g._succ, g._pred
    node.update(nodes)
    succ.update({k: {} for k in node})
    pred.update({k: {} for k in node})
    for u, v, d in edges:
        succ[u][v] = d
        pred[v][u] = d
    return g


def _obj(s: pd.Series) -> np.ndarray:
    return s.to_numpy(dtype=object)


def _cumcount(codes: np.ndarray) -> np.ndarray:
    """Per element, how many earlier elements have the same code (numpy groupby-cumcount)."""
    if codes.size == 0:
        return codes.astype(np.int64)
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    start = np.r_[0, np.flatnonzero(np.diff(sc)) + 1]
    cnt = np.arange(sc.size) - np.repeat(start, np.diff(np.r_[start, sc.size]))
    out = np.empty(sc.size, dtype=np.int64)
    out[order] = cnt
    return out


def _keys(names: pd.Series) -> np.ndarray:
    """Node keys: the name, ``<name>#<k>`` for its k-th repeat (k >= 1)."""
    codes, _ = pd.factorize(names, sort=False)
    rep = _cumcount(codes)
    out = _obj(names)
    idx = np.flatnonzero(rep > 0)
    if idx.size:
        out = out.copy()
        out[idx] = [f"{a}#{b}" for a, b in zip(out[idx].tolist(), rep[idx].tolist())]
    return out


class no_gc:
    """Pause the cyclic garbage collector while building millions of small containers (they
    hold no cycles; without this CPython rescans the growing heap again and again)."""

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()


def graph_from_kernels(kf: pd.DataFrame, step: int | None = None, infer: bool = True) -> nx.DiGraph:
    """The op graph of kernel rows (kernel frame, see profile.py).  ``step`` filters ``Step Id``;
    node key = kernel name (``<name>#<k>`` for the k-th repeat of a name, e.g. in later steps)."""
    with no_gc():
        return _graph_from_kernels(kf, step, infer)


def _graph_from_kernels(kf: pd.DataFrame, step: int | None, infer: bool) -> nx.DiGraph:
    if step is not None:
        kf = kf[kf["step"] == step]
    kf = kf.sort_values(["step", "start_ns"], kind="stable").reset_index(drop=True)
    n = len(kf)
    keys = _keys(kf["name"])
    names = _obj(kf["name"])
    # everything string-derived is computed once per distinct value
    tcodes, tuniq = pd.factorize(kf["type"])
    ccodes, cuniq = pd.factorize(kf["core"])
    tbook = np.array([t in BOOKKEEPING_TYPES or str(t).startswith(BOOKKEEPING_PREFIXES) for t in tuniq] + [False], bool)
    cbook = np.array([str(c).upper() in BOOKKEEPING_CORES for c in cuniq] + [False], bool)
    book = tbook[tcodes] | cbook[ccodes]
    types = np.asarray(list(tuniq) + [""], dtype=object)[tcodes]
    cores = np.asarray(list(cuniq) + ["N/A"], dtype=object)[ccodes]
    icodes, ilists = _split_unique(kf["in_dtypes"], norm=True)
    ocodes, olists = _split_unique(kf["out_dtypes"], norm=True)
    iscodes, islists = _split_unique(kf["in_shapes"])
    oscodes, oslists = _split_unique(kf["out_shapes"])
    ifloat = np.array([any(is_float_dtype(d) for d in x) for x in ilists], dtype=bool)
    ofloat = np.array([any(is_float_dtype(d) for d in x) for x in olists], dtype=bool)
    iknown = np.array([any(d not in ("n/a", "undefined") for d in x) for x in ilists], dtype=bool)
    oknown = np.array([any(d not in ("n/a", "undefined") for d in x) for x in olists], dtype=bool)
    fl = (ifloat[icodes] | ofloat[ocodes]) if n else np.zeros(0, bool)
    known = (iknown[icodes] | oknown[ocodes]) if n else np.zeros(0, bool)
    not_float = ~(fl | ~known)
    cast_first = [next((d for d in x if is_float_dtype(d)), None) for x in olists]
    # per-row lists are shared per distinct value: treat node list attributes as read-only
    il = np.empty(len(ilists), dtype=object); il[:] = ilists
    ol = np.empty(len(olists), dtype=object); ol[:] = olists
    isl = np.empty(len(islists), dtype=object); isl[:] = islists
    osl = np.empty(len(oslists), dtype=object); osl[:] = oslists
    # the edge matching is numpy/pandas work that largely releases the GIL: overlap it with the
    # node dicts built below (pure Python) on the second core
    edge_job = None
    if infer and n:
        edge_job = _Background(_edge_frame, kf, icodes, ilists, ocodes, olists, iscodes, islists, oscodes, oslists)
    prec = _obj(kf["precision"]) if "precision" in kf.columns else np.full(n, "n/a", object)
    cols = zip(keys.tolist(), types.tolist(), names.tolist(), kf["step"].to_numpy().tolist(), range(n),
               _obj(kf["stream"]).tolist(), cores.tolist(), kf["duration_us"].to_numpy().tolist(), prec.tolist(),
               il[icodes].tolist(), ol[ocodes].tolist(), isl[iscodes].tolist(), osl[oscodes].tolist())
    nodes = [(k, {"type": t, "name": nm, "role": "op", "step": st, "order": o, "stream": sm, "core": c,
                  "duration_us": du, "precision_observed": pr, "in_dtypes": a, "out_dtypes": b,
                  "in_shapes": sa, "out_shapes": sb})
             for k, t, nm, st, o, sm, c, du, pr, a, b, sa, sb in cols]
    for i in np.flatnonzero(book).tolist():
        nodes[i][1]["decides"] = False
    for i in np.flatnonzero(not_float).tolist():
        nodes[i][1]["float"] = False
    for i in np.flatnonzero(types == "Cast").tolist():
        ct = cast_first[ocodes[i]]
        if ct:
            nodes[i][1]["cast_to"] = ct
    g = bulk_graph(nodes)
    g.graph["edges"] = "inferred"
    if edge_job is not None:
        _add_inferred_edges(g, keys, edge_job.result())
    return g


class _Background:
    """Run ``fn(*args)`` in a thread; ``result()`` joins and re-raises its exception."""

    def __init__(self, fn, *args):
        import threading
        self._out: list = []
        self._t = threading.Thread(target=self._run, args=(fn, args), daemon=True)
        self._t.start()

    def _run(self, fn, args):
        try:
            self._out.append((True, fn(*args)))
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            self._out.append((False, e))

    def result(self):
        self._t.join()
        ok, v = self._out[0]
        if not ok:
            raise v
        return v


def _canon_codes(lists: list[list[str]], vocab: dict[str, int]) -> np.ndarray:
    """Flattened unique-list elements -> canonical integer codes (shared vocabulary)."""
    flat = [vocab.setdefault(x, len(vocab)) for lst in lists for x in lst]
    return np.asarray(flat or [0], dtype=np.int64)


def _sig_frame(codes_dt, lists_dt, codes_sh, lists_sh, n, vdt: dict, vsh: dict) -> pd.DataFrame:
    """One row per (kernel row, tensor port) having both a dtype and a shape: row, port, dtype code,
    shape code (codes into ``vdt``/``vsh``)."""
    r1, p1, e1 = _explode(codes_dt, lists_dt)
    r2, p2, e2 = _explode(codes_sh, lists_sh)
    cdt = _canon_codes(lists_dt, vdt)
    csh = _canon_codes(lists_sh, vsh)
    k1 = r1 * (1 << 24) + p1  # (row, port) as one sortable int; ports < 2**24
    k2 = r2 * (1 << 24) + p2
    _, i1, i2 = np.intersect1d(k1, k2, assume_unique=True, return_indices=True)
    m = pd.DataFrame({"row": r1[i1], "port": p1[i1],
                      "dt": cdt[e1[i1]] if i1.size else np.zeros(0, np.int64),
                      "sh": csh[e2[i2]] if i2.size else np.zeros(0, np.int64)})
    bad_dt = [vdt[x] for x in ("n/a", "undefined") if x in vdt]
    bad_sh = [vsh[x] for x in ("N/A",) if x in vsh]
    keep = ~(np.isin(m["dt"].to_numpy(), bad_dt) | np.isin(m["sh"].to_numpy(), bad_sh))
    return m[keep]


def infer_edges(kf: pd.DataFrame, keys: np.ndarray | None = None) -> pd.DataFrame:
    """Inferred edges of kernel rows (already in execution order): src row, dst row, out port,
    in port, float, confidence."""
    kf = kf.reset_index(drop=True)
    icodes, ilists = _split_unique(kf["in_dtypes"], norm=True)
    ocodes, olists = _split_unique(kf["out_dtypes"], norm=True)
    iscodes, islists = _split_unique(kf["in_shapes"])
    oscodes, oslists = _split_unique(kf["out_shapes"])
    return _edge_frame(kf, icodes, ilists, ocodes, olists, iscodes, islists, oscodes, oslists)


def _edge_frame(kf, icodes, ilists, ocodes, olists, iscodes, islists, oscodes, oslists) -> pd.DataFrame:
    n = len(kf)
    vdt: dict[str, int] = {}
    vsh: dict[str, int] = {}
    ins = _sig_frame(icodes, ilists, iscodes, islists, n, vdt, vsh)
    outs = _sig_frame(ocodes, olists, oscodes, oslists, n, vdt, vsh)
    cols = ["src", "dst", "out_port", "in_port", "float", "confidence", "shape", "dtype", "grp"]
    if ins.empty:
        return pd.DataFrame(columns=cols)
    st = kf["step"].to_numpy()
    sm_codes, _ = pd.factorize(kf["stream"], sort=False)
    grp = pd.factorize(st.astype(np.int64) * (int(sm_codes.max(initial=0)) + 2) + sm_codes)[0]
    nsh = max(len(vsh), 1)
    ins = ins.assign(sig=ins["dt"].to_numpy() * nsh + ins["sh"].to_numpy(), grp=grp[ins["row"].to_numpy()])
    outs = outs.assign(sig=outs["dt"].to_numpy() * nsh + outs["sh"].to_numpy(), grp=grp[outs["row"].to_numpy()])
    outs = outs.sort_values("row", kind="stable")
    outs["nth"] = outs.groupby(["grp", "sig"], sort=False).cumcount() + 1
    gpos = pd.Series(np.arange(n)).groupby(grp).cumcount().to_numpy()
    left = ins.sort_values("row", kind="stable").rename(columns={"row": "dst", "port": "in_port"})
    left["key"] = left["dst"]
    right = outs.rename(columns={"row": "src", "port": "out_port"})[["src", "out_port", "sig", "grp", "nth"]]
    right = right.assign(key=right["src"])
    m = pd.merge_asof(left, right, on="key", by=["grp", "sig"], allow_exact_matches=False, direction="backward")
    dt_names = np.empty(max(len(vdt), 1), dtype=object)
    for k, v in vdt.items():
        dt_names[v] = k
    sh_names = np.empty(max(len(vsh), 1), dtype=object)
    for k, v in vsh.items():
        sh_names[v] = k
    dtn = dt_names[m["dt"].to_numpy()]
    shn = sh_names[m["sh"].to_numpy()]
    float_dt = np.array([x in ("fp32", "fp16", "bf16", "fp64") for x in dt_names], dtype=bool)
    small_sh = np.array([x in _SMALL_SHAPES for x in sh_names], dtype=bool)
    srcv = m["src"].fillna(-1).astype("int64").to_numpy()
    conf = np.where(m["nth"].fillna(0).to_numpy() <= 1, 0.9, 0.7)
    conf = conf - np.where(small_sh[m["sh"].to_numpy()], 0.2, 0.0)
    dist = np.where(srcv >= 0, gpos[m["dst"].to_numpy()] - gpos[np.maximum(srcv, 0)], 0)
    conf = conf - np.where(dist > 64, 0.1, 0.0)
    return pd.DataFrame({"src": m["src"].astype("Int64"), "dst": m["dst"].to_numpy(),
                         "out_port": m["out_port"].to_numpy(), "in_port": m["in_port"].to_numpy(),
                         "float": float_dt[m["dt"].to_numpy()], "confidence": np.clip(np.round(conf, 3), 0.1, 0.9),
                         "shape": shn, "dtype": dtn, "grp": m["grp"].to_numpy()})


_SMALL_SHAPES = {"", "1", "1,1", "1,1,1", "1,1,1,1", "0"}


def _small(s: str) -> bool:
    return s in _SMALL_SHAPES


def _add_inferred_edges(g, keys, e: pd.DataFrame) -> None:
    if e.empty:
        return
    n = len(keys)
    has = e["src"].notna().to_numpy()
    un_mask = ~has & e["float"].to_numpy().astype(bool)
    all_keys = keys
    src_id = e["src"].fillna(-1).astype("int64").to_numpy().copy()
    out_port = pd.to_numeric(e["out_port"], errors="coerce").fillna(0).astype("int64").to_numpy().copy()
    conf = e["confidence"].to_numpy().astype(float).copy()
    if un_mask.any():
        # unmatched float inputs -> one data node per (group, signature); ids n, n+1, ...
        un = e[un_mask]
        sig = "input:" + un["shape"].astype(str) + ":" + un["dtype"].astype(str)
        grp = un["grp"].to_numpy()
        if len(np.unique(grp)) > 1:
            sig = sig + "@" + pd.Series(grp, index=un.index).astype(str)
        dcodes, duniq = pd.factorize(sig, sort=False)
        first = np.unique(dcodes, return_index=True)[1]
        dnames = np.asarray(duniq, dtype=object)
        # straight into networkx's dicts, as bulk_graph does (add_nodes_from costs ~10 us a node)
        g._node.update((k, {"type": "Data", "name": k, "role": "data", "dtype": dt, "out_shapes": [sh],
                            "out_dtypes": [dt]})
                       for k, dt, sh in zip(dnames.tolist(), un["dtype"].to_numpy()[first].tolist(),
                                            un["shape"].to_numpy()[first].tolist()))
        g._succ.update({k: {} for k in dnames.tolist()})
        g._pred.update({k: {} for k in dnames.tolist()})
        src_id[un_mask] = n + dcodes
        out_port[un_mask] = 0
        conf[un_mask] = 0.5
        all_keys = np.concatenate([keys, dnames])
    use = src_id >= 0
    sid = src_id[use]
    did = e["dst"].to_numpy()[use]
    src = all_keys[sid]
    dst = keys[did]
    op = out_port[use]
    ip = e["in_port"].to_numpy()[use]
    fl = e["float"].to_numpy().astype(bool)[use]
    cf = conf[use]
    dup = pd.DataFrame({"s": sid, "d": did}).duplicated(keep=False).to_numpy()
    u1 = ~dup
    succ, pred = g._succ, g._pred
    # unique (producer, consumer) pairs straight into networkx's adjacency (one shared dict per edge)
    for u, v, o, i, f, c in zip(src[u1].tolist(), dst[u1].tolist(), op[u1].tolist(), ip[u1].tolist(),
                                fl[u1].tolist(), cf[u1].tolist()):
        succ[u][v] = pred[v][u] = {"ports": [(o, i)], "float": f, "confidence": c}
    edges: dict[tuple, dict] = {}
    for u, v, o, i, f, c in zip(src[dup].tolist(), dst[dup].tolist(), op[dup].tolist(), ip[dup].tolist(),
                                fl[dup].tolist(), cf[dup].tolist()):
        d = edges.get((u, v))
        if d is None:
            edges[(u, v)] = {"ports": [(o, i)], "float": f, "confidence": c}
        else:
            d["ports"].append((o, i))
            d["float"] = d["float"] or f
            d["confidence"] = min(d["confidence"], c)
    for (u, v), d in edges.items():
        succ[u][v] = d
        pred[v][u] = d
