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
``decides=False``.

Built for 10^6 rows (docs/formats.md, "How it is fast"): string work once per distinct value,
matching by ``argsort`` + ``searchsorted`` on integer keys in a second thread, networkx's
dicts filled directly (edges through per-row lists of the adjacency dicts, never by key lookups
in the million-entry outer dicts).
"""
from __future__ import annotations

import networkx as nx
import numpy as np
import pandas as pd

from ..graph import is_float_dtype, no_gc, normalize_dtype
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


def graph_from_kernels(kf: pd.DataFrame, step: int | None = None, infer: bool = True) -> nx.DiGraph:
    """The op graph of kernel rows (kernel frame, see profile.py).  ``step`` filters ``Step Id``;
    node key = kernel name (``<name>#<k>`` for the k-th repeat of a name, e.g. in later steps)."""
    with no_gc():
        return _graph_from_kernels(kf, step, infer)


def _graph_from_kernels(kf: pd.DataFrame, step: int | None, infer: bool) -> nx.DiGraph:
    """``graph_from_kernels`` without the gc guard: factorize every column once, build the node dicts
    (from shared templates) while the edge matching runs on the second core, then fill networkx's
    dicts directly.  Long because: one pass over up to millions of kernel rows whose intermediate
    arrays are shared between the steps; split into helpers they would be passed around or rebuilt,
    and the background edge job must overlap exactly the node-building part."""
    if step is not None:
        kf = kf[kf["step"] == step]
    if not _in_order(kf):
        kf = kf.sort_values(["step", "start_ns"], kind="stable")
    kf = kf.reset_index(drop=True)
    n = len(kf)
    # everything string-derived is computed once per distinct value; per-row attributes are
    # shared objects picked by code (no per-row string is created except the repeat keys)
    ncodes, nuniq = pd.factorize(kf["name"], sort=False)
    names = np.asarray(list(nuniq) + [""], dtype=object)[ncodes]
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
    key_job = _Background(_keys_from_codes, kf["name"], names, ncodes)
    edge_job = None
    if infer and n:
        edge_job = _Background(_edge_plan_of, kf, (icodes, ilists, ocodes, olists, iscodes, islists, oscodes, oslists))
    if "precision" in kf.columns:
        pcodes, puniq = pd.factorize(kf["precision"])
        prec = np.asarray(list(puniq) + ["n/a"], dtype=object)[pcodes]
    else:
        pcodes, prec = np.zeros(n, np.int64), np.full(n, "n/a", object)
    scodes, suniq = pd.factorize(kf["stream"])
    streams = np.asarray(list(suniq) + ["N/A"], dtype=object)[scodes]
    stcodes, stuniq = pd.factorize(kf["step"].to_numpy())
    steps = np.asarray([int(x) for x in stuniq] + [-1], dtype=object)[stcodes]  # shared int objects
    dur = kf["duration_us"].to_numpy().tolist()
    # rows that agree on everything but name/step/order/duration (the same kernel in every step,
    # every layer's copy of an op) share a template: copying a dict is far cheaper than building it
    combo = _combine([tcodes, ccodes, scodes, pcodes, icodes, ocodes, iscodes, oscodes])
    n_combo = int(combo.max(initial=-1)) + 1
    use_templates = n_combo <= n * TEMPLATE_MAX_RATIO

    def one(i: int, nm, st, o, du) -> dict:
        a = {"type": types[i], "name": nm, "role": "op", "step": st, "order": o, "stream": streams[i],
             "core": cores[i], "duration_us": du, "precision_observed": prec[i], "in_dtypes": il[icodes[i]],
             "out_dtypes": ol[ocodes[i]], "in_shapes": isl[iscodes[i]], "out_shapes": osl[oscodes[i]]}
        if book[i]:
            a["decides"] = False
        if not_float[i]:
            a["float"] = False
        if types[i] == "Cast" and cast_first[ocodes[i]]:
            a["cast_to"] = cast_first[ocodes[i]]
        return a

    if use_templates:
        firsts = np.unique(combo, return_index=True)[1].tolist()
        tmpl = [one(i, None, None, None, None) for i in firsts]
        attrs = []
        add = attrs.append
        for c, nm, st, o, du in zip(combo.tolist(), names.tolist(), steps.tolist(), range(n), dur):
            a = tmpl[c].copy()
            a["name"] = nm
            a["step"] = st
            a["order"] = o
            a["duration_us"] = du
            add(a)
    else:
        cols = zip(types.tolist(), names.tolist(), steps.tolist(), range(n),
                   streams.tolist(), cores.tolist(), dur, prec.tolist(),
                   il[icodes].tolist(), ol[ocodes].tolist(), isl[iscodes].tolist(), osl[oscodes].tolist())
        attrs = [{"type": t, "name": nm, "role": "op", "step": st, "order": o, "stream": sm, "core": c,
                  "duration_us": du, "precision_observed": pr, "in_dtypes": a, "out_dtypes": b,
                  "in_shapes": sa, "out_shapes": sb}
                 for t, nm, st, o, sm, c, du, pr, a, b, sa, sb in cols]
        for i in np.flatnonzero(book).tolist():
            attrs[i]["decides"] = False
        for i in np.flatnonzero(not_float).tolist():
            attrs[i]["float"] = False
        for i in np.flatnonzero(types == "Cast").tolist():
            ct = cast_first[ocodes[i]]
            if ct:
                attrs[i]["cast_to"] = ct
    if "framework_op" in kf.columns:  # linked through trace_view.json (ingest.run)
        fw = kf["framework_op"].to_numpy(dtype=object)
        has = np.flatnonzero(pd.notna(fw))
        for i, o, ph, cs in zip(has.tolist(), fw[has].tolist(), kf["phase"].to_numpy(dtype=object)[has].tolist(),
                                kf["call_stack"].to_numpy(dtype=object)[has].tolist()):
            attrs[i].update(framework_op=o, phase=ph, call_stack=cs)
    key_list = key_job.result()
    # one insertion per node into each outer dict (networkx's own structures, as add_nodes_from)
    node_d = dict(zip(key_list, attrs))
    if len(node_d) != n:  # a kernel literally named like another's repeat key ("x#1")
        key_list = _dedupe(key_list)
        node_d = dict(zip(key_list, attrs))
    succ = [{} for _ in range(n)]
    pred = [{} for _ in range(n)]
    plan = edge_job.result() if edge_job is not None else None
    # adjacency dicts by row number: edges are filled through these lists, never by key lookups
    # in the million-entry outer dicts (random memory access is what costs there)
    if plan is not None:
        _fill_edges(plan, key_list, attrs, succ, pred, taken=node_d)
        node_d.update(zip(key_list[n:], attrs[n:]))  # data nodes
    g = nx.DiGraph()
    g.graph["edges"] = "inferred"
    g._node.update(node_d)
    g._succ.update(zip(key_list, succ))
    g._pred.update(zip(key_list, pred))
    return g


MAX_PERIOD_TRIES = 64  # candidate iteration lengths tried (where the first kernel's name comes again)


def first_iteration(kf: pd.DataFrame) -> pd.DataFrame:
    """The rows (in execution order) of the first iteration of a kernel table without step ids (msprof
    op_summary has none) when its kernel names repeat exactly, iteration after iteration (a last partial
    iteration allowed): the smallest such period that starts where the first kernel's name comes again.
    Else the table itself.  One iteration is what the op graph of a table with steps is built from."""
    n = len(kf)
    if n < 4 or (kf["step"].to_numpy() >= 0).any():
        return kf
    if not _in_order(kf):
        kf = kf.sort_values(["step", "start_ns"], kind="stable")
    codes = pd.factorize(kf["name"], sort=False)[0]
    for p in np.flatnonzero(codes == codes[0])[1:MAX_PERIOD_TRIES + 1].tolist():
        if 2 * p > n:
            break
        if np.array_equal(codes[p:], codes[:n - p]):
            return kf.iloc[:p]
    return kf


def _dedupe(keys: list) -> list:
    """Keys made unique by appending ``#`` (rare: only when a name looks like a repeat key)."""
    seen: set = set()
    out = []
    for k in keys:
        while k in seen:
            k = f"{k}#"
        seen.add(k)
        out.append(k)
    return out


TEMPLATE_MAX_RATIO = 0.25  # attribute templates when distinct row kinds <= this share of rows


def _combine(codes: list[np.ndarray]) -> np.ndarray:
    """One code per distinct combination of several code arrays (-1 = missing is a value)."""
    n = len(codes[0]) if codes else 0
    k = np.zeros(n, dtype=np.int64)
    top = 1  # bound on k's values
    for c in codes:
        c = c.astype(np.int64) + 1
        m = int(c.max(initial=0)) + 1
        if top * m >= 1 << 62:  # renumber before the product could overflow
            k = pd.factorize(k, sort=False)[0].astype(np.int64)
            top = int(k.max(initial=0)) + 1
        k = k * m + c
        top *= m
    return pd.factorize(k, sort=False)[0].astype(np.int64) if n else k


def _in_order(kf: pd.DataFrame) -> bool:
    """True if rows are already sorted by (step, start_ns) (the common case: no sort needed)."""
    if len(kf) < 2:
        return True
    st = kf["step"].to_numpy()
    ns = kf["start_ns"].to_numpy()
    ds = np.diff(st)
    return bool(np.all((ds > 0) | ((ds == 0) & (np.diff(ns) >= 0))))


def _keys_from_codes(name_col: pd.Series, names: np.ndarray, codes: np.ndarray) -> list:
    """Node keys: the name, ``<name>#<k>`` for its k-th repeat (k >= 1) (strings built by Arrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    rep = _cumcount(codes)
    if not rep.size or not rep.any():
        return names.tolist()
    arr = pa.array(name_col.array)
    if arr.null_count:
        arr = arr.fill_null("")
    if not pa.types.is_string(arr.type) and not pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.string())
    joined = pc.binary_join_element_wise(arr, pa.array(rep).cast(arr.type), pa.scalar("#", arr.type))
    return pc.if_else(pa.array(rep > 0), joined, arr).to_pylist()


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


_BAD_DT = ("n/a", "undefined")
_BAD_SH = ("N/A",)


def _sig_ports(codes_dt, lists_dt, codes_sh, lists_sh, vdt: dict, vsh: dict):
    """One entry per (kernel row, tensor port) having both a dtype and a shape, in (row, port)
    order: arrays row, port, dtype code, shape code (codes into ``vdt``/``vsh``).  Worked out once
    per distinct (dtype list, shape list) pair, then repeated per row."""
    cdt = [[vdt.setdefault(x, len(vdt)) for x in lst] for lst in lists_dt]
    csh = [[vsh.setdefault(x, len(vsh)) for x in lst] for lst in lists_sh]
    n = len(codes_dt)
    nsh = len(lists_sh) + 1
    pcodes, puniq = pd.factorize(codes_dt.astype(np.int64) * nsh + (codes_sh.astype(np.int64) + 1), sort=False)
    port_l, dt_l, sh_l, lens = [], [], [], []
    for u in puniq.tolist():
        a, b = divmod(u, nsh)
        dl = lists_dt[a] if a >= 0 else []
        sl = lists_sh[b - 1] if b >= 1 else []
        k = 0
        for port in range(min(len(dl), len(sl))):
            if dl[port] not in _BAD_DT and sl[port] not in _BAD_SH:
                port_l.append(port)
                dt_l.append(cdt[a][port])
                sh_l.append(csh[b - 1][port])
                k += 1
        lens.append(k)
    lens_a = np.asarray(lens, dtype=np.int64)
    per_row = lens_a[pcodes] if n else np.zeros(0, np.int64)
    rows = np.repeat(np.arange(n, dtype=np.int64), per_row)
    offs = np.cumsum(lens_a) - lens_a
    starts = np.cumsum(per_row) - per_row
    elem = np.repeat(offs[pcodes] - starts, per_row) + np.arange(rows.size, dtype=np.int64)
    port_a = np.asarray(port_l, dtype=np.int64)
    return rows, port_a[elem], np.asarray(dt_l, dtype=np.int64)[elem], np.asarray(sh_l, dtype=np.int64)[elem]


def infer_edges(kf: pd.DataFrame, keys: np.ndarray | None = None) -> pd.DataFrame:
    """Inferred edges of kernel rows (already in execution order): src row (<NA> = no producer),
    dst row, out port, in port, float, confidence, shape, dtype, grp (step/stream group)."""
    kf = kf.reset_index(drop=True)
    icodes, ilists = _split_unique(kf["in_dtypes"], norm=True)
    ocodes, olists = _split_unique(kf["out_dtypes"], norm=True)
    iscodes, islists = _split_unique(kf["in_shapes"])
    oscodes, oslists = _split_unique(kf["out_shapes"])
    e = _edge_arrays(kf, icodes, ilists, ocodes, olists, iscodes, islists, oscodes, oslists)
    src = pd.array(e["src"], dtype="Int64")
    src[e["src"] < 0] = pd.NA
    return pd.DataFrame({"src": src, "dst": e["dst"], "out_port": e["out_port"], "in_port": e["in_port"],
                         "float": e["float"], "confidence": e["confidence"],
                         "shape": e["sh_names"][e["sh"]], "dtype": e["dt_names"][e["dt"]], "grp": e["grp"]})


def _edge_arrays(kf, icodes, ilists, ocodes, olists, iscodes, islists, oscodes, oslists) -> dict[str, np.ndarray]:
    """One entry per (kernel row, float-or-not input port) with a dtype and a shape: numpy arrays
    ``src`` (producer row, -1 = none), ``dst``, ``out_port``, ``in_port``, ``float``,
    ``confidence``, ``sh``/``dt`` (codes into ``sh_names``/``dt_names``) and ``grp``."""
    n = len(kf)
    vdt: dict[str, int] = {}
    vsh: dict[str, int] = {}
    irow, iport, idt, ish = _sig_ports(icodes, ilists, iscodes, islists, vdt, vsh)
    orow, oport, odt, osh = _sig_ports(ocodes, olists, oscodes, oslists, vdt, vsh)
    dt_names = np.empty(max(len(vdt), 1), dtype=object)
    for k, v in vdt.items():
        dt_names[v] = k
    sh_names = np.empty(max(len(vsh), 1), dtype=object)
    for k, v in vsh.items():
        sh_names[v] = k
    st = kf["step"].to_numpy()
    sm_codes, _ = pd.factorize(kf["stream"], sort=False)
    grp = pd.factorize(st.astype(np.int64) * (int(sm_codes.max(initial=0)) + 2) + sm_codes)[0].astype(np.int64)
    # match key = (step/stream group, dtype, shape); input <- latest earlier output with its key
    nsig = len(sh_names) * len(dt_names)
    okey = grp[orow] * nsig + odt * len(sh_names) + osh
    ikey = grp[irow] * nsig + idt * len(sh_names) + ish
    ocomb = okey * (n + 1) + orow
    oorder = np.argsort(ocomb, kind="stable")  # stable: ports of one row stay in port order
    osorted = ocomb[oorder]
    okey_s = okey[oorder]
    pos = np.searchsorted(osorted, ikey * (n + 1) + irow, side="left") - 1  # strictly earlier rows
    hit = pos >= 0
    hit[hit] = okey_s[pos[hit]] == ikey[hit]
    p = np.where(hit, pos, 0)
    srcv = np.where(hit, orow[oorder][p] if oorder.size else 0, -1).astype(np.int64)
    out_port = np.where(hit, oport[oorder][p] if oorder.size else 0, 0).astype(np.int64)
    # nth: 1 + how many earlier outputs share the key (0.9 if the producer is the only one)
    nth = np.where(hit, p - np.searchsorted(okey_s, okey_s[p] if okey_s.size else ikey, side="left") + 1, 0)
    gpos = _cumcount(grp)
    float_dt = np.array([x in ("fp32", "fp16", "bf16", "fp64") for x in dt_names], dtype=bool)
    small_sh = np.array([x in _SMALL_SHAPES for x in sh_names], dtype=bool)
    conf = np.where(nth <= 1, 0.9, 0.7)
    conf = conf - np.where(small_sh[ish], 0.2, 0.0)
    dist = np.where(srcv >= 0, gpos[irow] - gpos[np.maximum(srcv, 0)], 0)
    conf = conf - np.where(dist > 64, 0.1, 0.0)
    return {"src": srcv, "dst": irow, "out_port": out_port, "in_port": iport, "float": float_dt[idt],
            "confidence": np.clip(np.round(conf, 3), 0.1, 0.9), "sh": ish, "dt": idt,
            "grp": grp[irow], "sh_names": sh_names, "dt_names": dt_names}


_SMALL_SHAPES = {"", "1", "1,1", "1,1,1", "1,1,1,1", "0"}


def _edge_plan_of(kf, split) -> dict | None:
    return _edge_plan(_edge_arrays(kf, *split), len(kf))


def _edge_plan(e: dict[str, np.ndarray], n: int) -> dict | None:
    """From ``_edge_arrays``: the data nodes to add (unmatched float inputs -> one ``data`` node per
    (group, signature), rows n, n+1, ...) and the edges as plain lists, unique (producer,
    consumer) pairs apart from pairs with several ports."""
    src_id = e["src"].copy()
    if not src_id.size:
        return None
    fl_all = e["float"]
    out_port = e["out_port"].copy()
    conf = e["confidence"].astype(float)
    un_mask = (src_id < 0) & fl_all
    data: list = []
    many = False
    if un_mask.any():
        sh = e["sh"][un_mask]
        dt = e["dt"][un_mask]
        grp = e["grp"][un_mask]
        ndt = len(e["dt_names"])
        combo = (grp.astype(np.int64) * len(e["sh_names"]) + sh) * ndt + dt
        dcodes, _ = pd.factorize(combo, sort=False)
        first = np.unique(dcodes, return_index=True)[1]
        many = len(np.unique(grp)) > 1
        data = list(zip(e["sh_names"][sh[first]].tolist(), e["dt_names"][dt[first]].tolist(), grp[first].tolist()))
        src_id[un_mask] = n + dcodes
        out_port[un_mask] = 0
        conf[un_mask] = 0.5
    use = np.flatnonzero(src_id >= 0)
    sid = src_id[use]
    did = e["dst"][use]
    op = out_port[use]
    ip = e["in_port"][use]
    fl = fl_all[use]
    ccodes, cuniq = pd.factorize(conf[use])
    cf = np.asarray([float(x) for x in cuniq] + [0.0], dtype=object)[ccodes]  # shared float objects
    pair = sid * (n + len(data) + 1) + did
    dup = pd.Series(pair).duplicated(keep=False).to_numpy()
    u1 = np.flatnonzero(~dup)
    # (out port, in port) tuples are immutable: one shared object per distinct pair
    w = int(ip.max(initial=0)) + 1
    pcodes, puniq = pd.factorize(op * w + ip, sort=False)
    tup = np.empty(len(puniq), dtype=object)
    tup[:] = [divmod(int(u), w) for u in puniq]
    pt = tup[pcodes]
    plan = {"data": data, "many": many,
            "uniq": (sid[u1].tolist(), did[u1].tolist(), pt[u1].tolist(), fl[u1].tolist(), cf[u1].tolist()),
            "multi": None}
    dd = np.flatnonzero(dup)
    if dd.size:
        # a producer feeding several inputs of one consumer: one edge, its ports in input order
        gid, _ = pd.factorize(pair[dd], sort=False)
        srt = np.argsort(gid, kind="stable")
        order = dd[srt]
        starts = np.r_[0, np.flatnonzero(np.diff(gid[srt])) + 1]
        fany = np.maximum.reduceat(fl[order].astype(np.int8), starts).astype(bool)
        cmin = np.minimum.reduceat(cf[order].astype(float), starts)
        plan["multi"] = (sid[order[starts]].tolist(), did[order[starts]].tolist(), starts.tolist(),
                         np.r_[starts[1:], order.size].tolist(), fany.tolist(), cmin.tolist(), pt[order].tolist())
    return plan


def _fill_edges(plan: dict, keys: list, attrs: list, succ: list, pred: list, taken=frozenset()) -> None:
    """The edge plan into the per-row adjacency lists (``succ[row]``/``pred[row]`` are the dicts
    networkx will hold); data nodes are appended to ``keys``/``attrs``/``succ``/``pred``."""
    many = plan["many"]
    for s_, d_, g_ in plan["data"]:
        k = f"input:{s_}:{d_}@{g_}" if many else f"input:{s_}:{d_}"
        while k in taken:  # a kernel with that very name
            k = f"{k}#"
        keys.append(k)
        attrs.append({"type": "Data", "name": k, "role": "data", "dtype": d_, "out_shapes": [s_], "out_dtypes": [d_]})
        succ.append({})
        pred.append({})
    # unique (producer, consumer) pairs: one shared attribute dict in both directions
    for s, d, t, f, c in zip(*plan["uniq"]):
        succ[s][keys[d]] = pred[d][keys[s]] = {"ports": [t], "float": f, "confidence": c}
    if plan["multi"] is not None:
        sids, dids, starts, ends, fany, cmin, ptl = plan["multi"]
        for s, d, a, b, f, c in zip(sids, dids, starts, ends, fany, cmin):
            succ[s][keys[d]] = pred[d][keys[s]] = {"ports": ptl[a:b], "float": f, "confidence": c}
