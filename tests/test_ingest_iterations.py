"""A kernel table without step ids (msprof op_summary) whose kernels repeat iteration after iteration: the op
graph is the first iteration's, as for a table with steps (a 10^6-row profile is not a 10^6-node graph)."""
from __future__ import annotations

import csv
import io
from pathlib import Path

import networkx as nx

from advisor import graph as G
from advisor.ingest.run import load_run

SAMPLE = Path(__file__).resolve().parent / "fixtures" / "real" / "torch_npu_profile_mstt" / "kernel_details.csv"


def _table(tmp_path: Path, reps: float, *, keep_step: bool = False, rename: int | None = None) -> Path:
    """The real 591-kernel step repeated ``reps`` times (a fraction: a last partial iteration), start times
    shifted per iteration, written as msprof's step-less op_summary (or with Step Id 1, 2, ...)."""
    rows = list(csv.reader(io.StringIO(SAMPLE.read_text(encoding="utf-8"))))
    head, body = rows[0], rows[1:]
    i_start, i_name = head.index("Start Time(us)"), head.index("Name")
    out = []
    for k in range(int(reps * len(body))):
        r = list(body[k % len(body)])
        it = k // len(body)
        whole, _, frac = r[i_start].partition(".")
        r[i_start] = f"{int(whole) + it * 1_000_000}.{frac}" if frac else str(int(whole) + it * 1_000_000)
        r[0] = str(it + 1)
        if rename is not None and k == rename:
            r[i_name] = "SomethingElse"
        out.append(r if keep_step else r[1:])
    d = tmp_path / ("steps" if keep_step else "nosteps") / "PROF_1" / "device_0" / "summary"
    d.mkdir(parents=True)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([head if keep_step else head[1:], *out])
    (d / ("op_summary_0_1.csv")).write_text(buf.getvalue(), encoding="utf-8")
    return d.parents[2]


def _ops(g):
    return [n for n in G.op_nodes(g)]


def test_step_less_repeated_iterations_give_the_first_iterations_graph(tmp_path):
    run = load_run(_table(tmp_path, 3.5))
    assert len(run.kernels) == int(3.5 * 591) and run.step is None
    assert len(_ops(run.graph)) == 591
    assert "identical iterations" in run.sources["graph"]
    # the same graph as the table with step ids builds from its first step
    ref = load_run(_table(tmp_path, 3.5, keep_step=True))
    assert ref.step == 1
    assert set(run.graph.nodes) == set(ref.graph.nodes)
    assert nx.utils.edges_equal(sorted(run.graph.edges(data="ports")), sorted(ref.graph.edges(data="ports")))


def test_iterations_that_differ_keep_every_kernel(tmp_path):
    run = load_run(_table(tmp_path, 3, rename=591 + 10))  # the second iteration is not the first
    assert len(_ops(run.graph)) == 3 * 591 and "identical iterations" not in run.sources["graph"]
    run = load_run(_table(tmp_path / "one", 1.6))         # less than two iterations: nothing repeats fully
    assert len(_ops(run.graph)) == int(1.6 * 591)
