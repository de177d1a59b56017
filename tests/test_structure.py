"""The structure limits of tools/code_metrics.py (docs/architecture.md "Structure") and no dead code
(vulture at 80 % confidence) hold for the advisor package."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _code_metrics():
    spec = importlib.util.spec_from_file_location("code_metrics", ROOT / "tools" / "code_metrics.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_code_metrics_limits():
    cm = _code_metrics()
    r = cm.analyse()
    assert r["cycles"] == []
    assert r["modules_over_600"] == []
    assert len(r["functions_over_80"]) <= 5, r["functions_over_80"]
    assert [f["function"] for f in r["functions_over_80"] if not f["reason_given"]] == []
    assert r["private_imports"] == []
    assert len(r["getattr_defaults"]) <= 5, r["getattr_defaults"]


def test_code_metrics_json_says_ok():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "code_metrics.py"), "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    d = json.loads(out.stdout)
    assert out.returncode == 0 and d["ok"], d["counts"]
    assert d["counts"]["functions_over_80"] <= 5


def test_no_dead_code():
    if importlib.util.find_spec("vulture") is None:
        pytest.skip("vulture is not installed (pip install -e '.[dev]')")
    out = subprocess.run([sys.executable, "-m", "vulture", "advisor", "--min-confidence", "80"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr


def _stage_order():
    spec = importlib.util.spec_from_file_location("stage_order", ROOT / "tools" / "stage_order.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_no_stage_imports_from_a_stage_above_it():
    r = _stage_order().check()
    assert r["unplaced"] == [], f"give these a stage in tools/stage_order.py: {r['unplaced']}"
    assert r["upward"] == [], r["upward"]


def test_the_stage_order_check_catches_an_upward_import(tmp_path, monkeypatch):
    so = _stage_order()
    bad = so.STAGES[:]                    # pretend tune sat below recommend: tune's imports of recommend go up
    i, j = [n for n, _ in bad].index("recommend"), [n for n, _ in bad].index("tune")
    bad[i], bad[j] = bad[j], bad[i]
    monkeypatch.setattr(so, "STAGES", bad)
    r = so.check()
    assert any(u["module"].startswith("advisor.tune") and u["imports"].startswith("advisor.recommend")
               for u in r["upward"])
