"""Replay from the measured run when only the ops around the first departure were dumped with tensors
(advisor.replay_scope; msprobe statistics.tensor_list): the measured plan replays to the measured run, a
complete replay of a candidate equals a fresh capture with that list (the independent oracle), an edit that moves
undumped ops says it is incomplete, and recommend on such a run replays instead of estimating."""
from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from advisor.analysis import analyze
from advisor.emulator import capture
from advisor.mixlist import Mixlist
from advisor.recommend import recommend
from advisor.recommend.edits import Edit
from advisor.recommend.replay_search import ReplaySearch, dump_scope

SATURATES = math.log(2.0 ** 12)          # 8.32: sigmoid(z) rounds to 1.0 in fp16 above it


class Head(nn.Module):
    """A body (Linear, GELU, Linear, LayerNorm) and a multi-label head: sigmoid, per-label binary log-likelihood."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.LayerNorm(64))
        self.fc = nn.Linear(64, 8)

    def forward(self, x, y):
        p = torch.sigmoid(self.fc(self.body(x)))
        return -(y * torch.log(p) + (1.0 - y) * torch.log(1.0 - p))


def workload():
    torch.manual_seed(0)
    m = Head().eval()
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(8, 16, generator=g), (torch.rand(8, 8, generator=g) < 0.5).float()) for _ in range(3)]
    with torch.no_grad():
        z = torch.cat([m.fc(m.body(x)) for x, _ in batches]).flatten()
        m.fc.bias += SATURATES + 0.5 - torch.quantile(z, 0.8)
    return m, batches


@pytest.fixture(scope="module")
def scoped(tmp_path_factory):
    """The statistics run, the ops recommend names around its first departure, and the run dumping them."""
    root = tmp_path_factory.mktemp("scope")
    stats = capture(workload(), root / "stats", dump="stats")
    a = analyze(stats)
    scope = dump_scope(a, a.attribution().first_exceeding)
    run = capture(workload(), root / "scoped", dump="stats", dump_tensors=scope)
    return stats, scope, run


def _fresh(tmp_path, mixlist):
    d = capture(workload(), tmp_path / "fresh", mixlist=mixlist, dump="stats", local=False)
    return analyze(d).final_metrics()


def test_a_statistics_dump_writes_tensors_only_for_the_ops_named(scoped):
    stats, scope, run = scoped
    meta = json.loads((run / "run.json").read_text())
    assert meta["dump"] == "stats" and meta["dump_tensor_list"] == sorted(scope)
    d = json.loads(next((run / "dump" / "fp32").rglob("dump.json")).read_text())["data"]
    with_files = {e[: -len(".forward")] for e, body in d.items() if e.endswith(".forward") and not e.startswith(
        ("Model.", "Grad.")) and any("data_name" in r for r in body.get("output", []) if isinstance(r, dict))}
    assert with_files and with_files <= set(scope)
    assert any(e.startswith("Aten.") and e[: -len(".forward")] not in scope for e in d)     # the rest: statistics


def test_the_measured_plan_replays_to_the_measured_run(scoped):
    _, _, run = scoped
    a = analyze(run)
    assert a.recording.partial() and a.recording.replayable_share() > 0
    res = a.replay(a.plan)
    assert res.coverage == 1.0
    got = [m["output"] for m in res.final_metrics(tolerance=a.tolerance)]
    want = [m["output"] for m in a.final_metrics()]
    assert [g["finite"] for g in got] == [w["finite"] for w in want]
    for g, w in zip(got, want):
        if w["finite"]:
            assert g["rel_l2"] == pytest.approx(w["rel_l2"], rel=1e-9, abs=1e-12)


def test_a_complete_replay_of_a_candidate_equals_a_fresh_capture(scoped, tmp_path):
    _, _, run = scoped
    a = analyze(run)
    s = ReplaySearch(a, a.lists, None)
    t = s.replayed(frozenset({Edit("black-add", "Sigmoid")}))
    assert t.how == "replayed" and t.ok
    fresh = _fresh(tmp_path, Mixlist(black_add=("Sigmoid",)))
    assert a.tolerance.judge(fresh).ok
    for m, f in zip(t.metrics, fresh):
        assert m["output"]["rel_l2"] == pytest.approx(f["output"]["rel_l2"], rel=1e-6, abs=1e-12)


def test_an_edit_moving_undumped_ops_is_replayed_incomplete(scoped):
    _, scope, run = scoped
    a = analyze(run)
    s = ReplaySearch(a, a.lists, None)
    t = s.replayed(frozenset({Edit("black-add", "Gelu")}))          # the GELU is in the body, not dumped
    assert not any("gelu" in n for n in scope) and t.how == "replayed, incomplete"


def test_recommend_on_a_scoped_run_replays_and_its_advice_passes_a_fresh_capture(scoped, tmp_path):
    stats, _, run = scoped
    assert recommend(stats).predicted.how == "estimated"            # statistics alone: the error model
    rec = recommend(run)
    assert rec.status == "recommended" and rec.predicted.how == "replayed"
    assert a_passes(tmp_path, rec.modify_mixlist)


def a_passes(tmp_path, mixlist) -> bool:
    from advisor.compare.tolerance import Tolerance
    return Tolerance().judge(_fresh(tmp_path, mixlist)).ok
