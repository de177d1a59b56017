"""The vectorised graph build (advisor.ingest.infer) against a naive, independent implementation of
the documented edge-inference rule (docs/formats.md, "Edge inference"), on random kernel frames
with several steps/streams, repeated names, multi-port pairs, scalars and long gaps."""
from __future__ import annotations

import gc

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.graph import no_gc, normalize_dtype
from advisor.ingest import infer
from advisor.ingest.infer import graph_from_kernels

SHAPES = ["8,16", "16,32", "8,32", "1", "4"]
DTYPES = ["FLOAT16", "FLOAT", "DT_BF16", "INT64", "N/A"]
SMALL = {"", "1", "1,1", "1,1,1", "1,1,1,1", "0"}
FLOATS = {"fp16", "fp32", "bf16", "fp64"}


def _frame(rows):
    n = len(rows)
    return pd.DataFrame({
        "step": [r["step"] for r in rows], "rank": [0] * n, "name": [r["name"] for r in rows],
        "type": [r["type"] for r in rows], "core": ["AI_VECTOR_CORE"] * n, "start_us": [str(i) for i in range(n)],
        "duration_us": [1.0] * n, "wait_us": [0.0] * n, "block_dim": [1.0] * n,
        "in_shapes": [";".join(s for s, _ in r["ins"]) for r in rows],
        "in_dtypes": [";".join(d for _, d in r["ins"]) for r in rows], "in_formats": [""] * n,
        "out_shapes": [";".join(s for s, _ in r["outs"]) for r in rows],
        "out_dtypes": [";".join(d for _, d in r["outs"]) for r in rows], "out_formats": [""] * n,
        "stream": [r["stream"] for r in rows], "task_id": [""] * n,
        "start_ns": [r["step"] * 10_000 + i for i, r in enumerate(rows)], "precision": ["fp16"] * n,
        "source": [""] * n})


def _oracle(rows):
    """Edges {(src key, dst key): (ports, float, confidence)} and data feeds {(dst key, in port): (shape, dtype)}
    by the rule, written the slow obvious way (rows are given in execution order)."""
    seen: dict[str, int] = {}
    keys = []
    for r in rows:
        k = seen.get(r["name"], 0)
        keys.append(r["name"] if k == 0 else f"{r['name']}#{k}")
        seen[r["name"]] = k + 1
    edges: dict = {}
    data: dict = {}
    for j, r in enumerate(rows):
        grp = [i for i, q in enumerate(rows) if (q["step"], q["stream"]) == (r["step"], r["stream"])]
        for ip, (sh, dt) in enumerate(r["ins"]):
            dt = normalize_dtype(dt)
            if dt in ("n/a", "undefined") or sh == "N/A":
                continue
            outs = [(i, op) for i in grp if i < j for op, (s2, d2) in enumerate(rows[i]["outs"])
                    if s2 == sh and normalize_dtype(d2) == dt]
            if not outs:
                if dt in FLOATS:
                    data[(keys[j], ip)] = (sh, dt)
                continue
            i, op = outs[-1]  # latest row, highest port of that row
            conf = 0.9 if len(outs) == 1 else 0.7
            conf -= 0.2 if sh in SMALL else 0.0
            conf -= 0.1 if grp.index(j) - grp.index(i) > 64 else 0.0
            conf = min(max(round(conf, 3), 0.1), 0.9)
            e = edges.setdefault((keys[i], keys[j]), [[], False, 1.0])
            e[0].append((op, ip))
            e[1] = e[1] or dt in FLOATS
            e[2] = min(e[2], conf)
    return keys, {k: (v[0], v[1], v[2]) for k, v in edges.items()}, data


# few signatures, so that producers share them often (ambiguity, several ports, long gaps)
tensor = st.one_of(st.tuples(st.sampled_from(SHAPES[:2]), st.sampled_from(DTYPES[:2])),
                   st.tuples(st.sampled_from(SHAPES), st.sampled_from(DTYPES)))
row = st.fixed_dictionaries({
    "name": st.sampled_from(["mm", "add", "cast", "exp", "x#1"]),
    "type": st.sampled_from(["MatMulV2", "Add", "Cast", "Exp"]),
    "ins": st.lists(tensor, min_size=0, max_size=3),
    "outs": st.lists(tensor, min_size=0, max_size=2),
    "stream": st.sampled_from(["1", "2"]),
})


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(row, min_size=1, max_size=90), st.integers(1, 3))
def test_build_matches_naive_rule(rows, nsteps):
    # rows spread over steps in order; within a step, rows keep their (execution) order
    rows = [dict(r, step=i * nsteps // len(rows)) for i, r in enumerate(rows)]
    # both ways of building node attributes (per-row dicts; copies of per-kind templates) agree
    saved = infer.TEMPLATE_MAX_RATIO
    try:
        infer.TEMPLATE_MAX_RATIO = 0.0
        g0 = graph_from_kernels(_frame(rows))
        infer.TEMPLATE_MAX_RATIO = 1.0
        g = graph_from_kernels(_frame(rows))
    finally:
        infer.TEMPLATE_MAX_RATIO = saved
    assert list(g.nodes(data=True)) == list(g0.nodes(data=True))
    assert all(list(a) == list(b) for (_, a), (_, b) in zip(g.nodes(data=True), g0.nodes(data=True)))  # key order
    assert list(g.edges(data=True)) == list(g0.edges(data=True))
    keys, edges, data = _oracle(rows)
    if len(set(keys)) == len(keys):  # (a literal "x#1" next to a repeated "x" is deduplicated)
        assert [n for n, a in g.nodes(data=True) if a["role"] == "op"] == keys
    else:
        assert sum(1 for _, a in g.nodes(data=True) if a["role"] == "op") == len(rows)
        return
    got = {(u, v): (d["ports"], d["float"], d["confidence"]) for u, v, d in g.edges(data=True)
           if g.nodes[u]["role"] == "op"}
    assert got == edges
    fed = {}
    for u, v, d in g.edges(data=True):
        if g.nodes[u]["role"] == "data":
            assert d["confidence"] == 0.5
            for _, ip in d["ports"]:
                fed[(v, ip)] = (g.nodes[u]["out_shapes"][0], g.nodes[u]["dtype"])
    assert fed == data
    # one data node per (step/stream group, signature)
    groups = {(r["step"], r["stream"]) for r in rows}
    n_data = sum(1 for _, a in g.nodes(data=True) if a["role"] == "data")
    want = (len({(rows[keys.index(k)]["step"], rows[keys.index(k)]["stream"], s) for (k, _), s in data.items()})
            if len(groups) > 1 else len(set(data.values())))
    assert n_data == want
    # the networkx structures are consistent (pred mirrors succ, one shared dict per edge)
    for u, v, d in g.edges(data=True):
        assert g.pred[v][u] is d


def test_repeat_key_collision_is_deduplicated():
    rows = [{"name": n, "type": "Add", "ins": [], "outs": [("8,16", "FLOAT16")], "stream": "1", "step": 0}
            for n in ("x", "x#1", "x")]
    g = graph_from_kernels(_frame(rows))
    assert g.number_of_nodes() == 3
    assert sorted(a["name"] for _, a in g.nodes(data=True)) == ["x", "x", "x#1"]


def test_no_gc_promotes_and_respects_frozen_objects():
    assert gc.isenabled()
    with no_gc():
        assert not gc.isenabled()
        junk = [[i] for i in range(10_000)]
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert gc.get_count()[0] < 1_000  # the new containers left the young generation
    # an application's own frozen objects stay frozen
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with no_gc():
            more = [[i] for i in range(100)]
        assert gc.get_freeze_count() == before
    finally:
        gc.unfreeze()
    assert junk and more


@pytest.mark.parametrize("infer", [True, False])
def test_empty_and_single_row_frames(infer):
    assert graph_from_kernels(_frame([]), infer=infer).number_of_nodes() == 0
    one = [{"name": "a", "type": "Exp", "ins": [("8,16", "FLOAT")], "outs": [("8,16", "FLOAT")], "stream": "1",
            "step": 0}]
    g = graph_from_kernels(_frame(one), infer=infer)
    assert set(g.nodes) == ({"a", "input:8,16:fp32"} if infer else {"a"})


@pytest.mark.parametrize("gap, conf", [(64, 0.9), (65, 0.8)])
def test_long_gap_boundary(gap, conf):
    """-0.1 only when more than 64 kernels of the same step/stream lie between producer and consumer
    (kernels of another stream do not count)."""
    mk = lambda n, ins, outs, stream="1": {"name": n, "type": "Add", "ins": ins, "outs": outs, "stream": stream,
                                           "step": 0}
    rows = [mk("p", [], [("8,16", "FLOAT16")])]
    rows += [mk(f"f{i}", [], [("4", "INT64")]) for i in range(gap - 1)]
    rows += [mk(f"o{i}", [], [("4", "INT64")], stream="2") for i in range(10)]
    rows += [mk("c", [("8,16", "FLOAT16")], [])]
    g = graph_from_kernels(_frame(rows))
    assert g.edges["p", "c"]["confidence"] == conf == _oracle(rows)[1][("p", "c")][2]


def test_template_path_keeps_flags():
    """Repeated steps take the template path; bookkeeping, non-float and Cast flags survive it."""
    base = [("mm", "MatMulV2", "AI_CORE", [("8,16", "FLOAT16")], [("8,32", "FLOAT16")]),
            ("cast", "Cast", "AI_VECTOR_CORE", [("8,32", "FLOAT16")], [("8,32", "FLOAT")]),
            ("memset", "MemSet", "AI_VECTOR_CORE", [], []),
            ("ar", "hcom_allReduce_", "HCCL", [], []),
            ("idx", "ArgMax", "AI_VECTOR_CORE", [("8,32", "FLOAT")], [("8", "INT64")]),
            ("g", "GatherV2", "AI_VECTOR_CORE", [("8", "INT64")], [("8", "INT64")])]
    rows = [{"name": n, "type": t, "ins": i, "outs": o, "stream": "1", "step": s}
            for s in range(10) for n, t, _, i, o in base]
    f = _frame(rows)
    f["core"] = [c for _ in range(10) for _, _, c, _, _ in base]
    g = graph_from_kernels(f)
    for k in ("memset", "ar#9"):
        assert g.nodes[k]["decides"] is False
    assert g.nodes["g#3"]["float"] is False and "float" not in g.nodes["idx#3"]
    assert g.nodes["cast#5"]["cast_to"] == "fp32" and g.nodes["cast#5"]["step"] == 5
    assert g.nodes["mm#7"]["order"] == 7 * len(base) and "decides" not in g.nodes["mm#7"]
