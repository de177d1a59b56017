"""Scoped dumps of a fused graph (advisor.replay_scope + advisor.fusion): the scope names every member of a fused
kernel it reaches (each member is its own dump entry), and the measured run's own plan replays to the measured run
from those dumps; a complete replay of a candidate equals a fresh capture with that list (the independent oracle)."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from advisor.analysis import analyze
from advisor.emulator import capture
from advisor.mixlist import Mixlist
from advisor.recommend.replay_search import dump_scope

SATURATES = math.log(2.0 ** 12)          # sigmoid(z) rounds to 1.0 in fp16 above it


class FusedHead(nn.Module):
    """Two torch.mm + bias (each one MatMul kernel with a bias input for GE: MatMulBiasAddFusionPass), a GELU
    between them, a sigmoid head and its per-label binary log-likelihood."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.w1, self.b1 = nn.Parameter(torch.randn(16, 32, generator=g) / 4), nn.Parameter(torch.zeros(32))
        self.w2, self.b2 = nn.Parameter(torch.randn(32, 8, generator=g) / 6), nn.Parameter(torch.zeros(8))

    def forward(self, x, y):
        p = torch.sigmoid(torch.mm(nn.functional.gelu(torch.mm(x, self.w1) + self.b1), self.w2) + self.b2)
        return -(y * torch.log(p) + (1.0 - y) * torch.log(1.0 - p))


def workload():
    m = FusedHead().eval()
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(8, 16, generator=g), (torch.rand(8, 8, generator=g) < 0.5).float()) for _ in range(2)]
    with torch.no_grad():
        z = torch.cat([torch.mm(nn.functional.gelu(torch.mm(x, m.w1) + m.b1), m.w2) for x, _ in batches]).flatten()
        m.b2 += SATURATES + 0.5 - torch.quantile(z, 0.8)
    return m, batches


@pytest.fixture(scope="module")
def scoped(tmp_path_factory):
    root = tmp_path_factory.mktemp("fscope")
    stats = capture(workload(), root / "stats", dump="stats", local=False)
    a = analyze(stats)
    assert not a.verdict().ok                     # the fp16 sigmoid saturates: log(1 - p) is -inf
    scope = dump_scope(a, a.attribution().first_exceeding)
    run = capture(workload(), root / "scoped", dump="stats", dump_tensors=scope, local=False)
    return a, scope, run


def test_a_scope_names_every_member_of_a_fused_kernel_it_reaches(scoped):
    a, scope, _ = scoped
    fused = {n: d["members"] for n, d in a.graph.nodes(data=True) if d.get("members")}
    assert fused
    reached = [ms for ms in fused.values() if set(ms) & set(scope)]
    assert reached and all(set(ms) <= set(scope) for ms in reached)


def test_the_measured_plan_of_a_fused_run_replays_to_the_measured_run_from_scoped_dumps(scoped):
    _, _, run = scoped
    a = analyze(run)
    assert a.recording.partial()
    res = a.replay(a.plan)
    assert res.coverage == 1.0
    measured = a.final_metrics()
    replayed = res.final_metrics(tolerance=a.tolerance)
    assert [m["output"]["finite"] for m in measured] == [m["output"]["finite"] for m in replayed]
    for m, r in zip(measured, replayed):
        if m["output"]["finite"]:
            assert r["output"]["rel_l2"] == pytest.approx(m["output"]["rel_l2"], rel=1e-6)


def test_a_complete_scoped_replay_of_a_fused_candidate_equals_a_fresh_capture(scoped, tmp_path):
    _, _, run = scoped
    a = analyze(run)
    ml = Mixlist(black_add=("Sigmoid",))
    res = a.replay(a.plan_of(a.lists_with(ml)))
    assert res.coverage == 1.0
    fresh = analyze(capture(workload(), tmp_path / "fresh", mixlist=ml, dump="stats", local=False)).final_metrics()
    got = res.final_metrics(tolerance=a.tolerance)
    assert [f["output"]["finite"] for f in fresh] == [g["output"]["finite"] for g in got]
    for f, g in zip(fresh, got):
        assert g["output"]["rel_l2"] == pytest.approx(f["output"]["rel_l2"], rel=1e-5, abs=1e-9)
