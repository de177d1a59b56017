"""The case oracle's search, share definition, cache and committed results (no captures here).

* ``search_black_subsets``: on fake monotone judges (a set passes iff it contains one of some hidden minimal
  sets) it finds exactly the minimal passing sets up to the size bound and judges every set that is not a
  strict superset of a passing one -- nothing more.
* ``oracle_case`` on a fake capture: best-share and fewest-edit sets, capture counts, resume from the cache
  without a single new capture.
* ``low_precision_share`` on a hand-written kernel_details.csv.
* the committed bench/cases/oracle_dev.json / oracle_holdout.json match the current generator (same case
  names and spec fingerprints) and are internally consistent.
"""
from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.cases import oracle as O  # noqa: E402
from bench.cases.generator import make_case  # noqa: E402
from bench.cases.search import low_precision_share, minimal_by, search_black_subsets  # noqa: E402
from bench.cases.suite import SETS  # noqa: E402

TYPES = ("Add", "Exp", "MatMulV2", "Mul", "RealDiv", "Sigmoid")


def monotone(minimal: list[frozenset]):
    calls: list[frozenset] = []

    def judge(s: frozenset) -> bool:
        calls.append(s)
        return any(m <= s for m in minimal)
    return judge, calls


def test_search_finds_minimal_sets_and_prunes_supersets():
    judge, calls = monotone([frozenset({"Exp"}), frozenset({"Mul", "Sigmoid"})])
    judged, passing = search_black_subsets(TYPES, judge, 3)
    assert passing == [frozenset({"Exp"}), frozenset({"Mul", "Sigmoid"})]
    assert judged == calls                                   # every judged set was judged once, in order
    assert len(set(judged)) == len(judged)
    assert judged[0] == frozenset()
    assert not any(p < s for s in judged for p in passing)  # no strict superset of a passing set
    # every other subset up to size 3 was judged: 1 + 6 + 15 + 20 subsets minus the supersets of the two
    expect = [frozenset(c) for k in range(4) for c in itertools.combinations(TYPES, k)
              if not any(p < frozenset(c) for p in passing)]
    assert judged == expect


def test_search_base_passing_judges_only_the_empty_set():
    judge, calls = monotone([frozenset()])
    judged, passing = search_black_subsets(TYPES, judge, 3)
    assert judged == passing == [frozenset()]


def test_search_nothing_passes_judges_everything_up_to_the_bound():
    judge, _ = monotone([frozenset(TYPES[:4])])
    judged, passing = search_black_subsets(TYPES, judge, 3)
    assert passing == []
    assert len(judged) == 1 + 6 + 15 + 20


@settings(max_examples=60, deadline=None)
@given(st.lists(st.frozensets(st.sampled_from(TYPES), min_size=1, max_size=4), min_size=0, max_size=4),
       st.integers(min_value=0, max_value=4))
def test_search_property_monotone_judge(minimal, bound):
    judge, calls = monotone(minimal)
    judged, passing = search_black_subsets(TYPES, judge, bound)
    small = {frozenset(c) for k in range(bound + 1) for c in itertools.combinations(TYPES, k)}
    passing_all = {s for s in small if any(m <= s for m in minimal)}
    truly_minimal = {s for s in passing_all if not any(o < s for o in passing_all)}
    assert set(passing) == truly_minimal
    assert set(judged) == {s for s in small if not any(p < s for p in truly_minimal)}
    assert len(calls) == len(judged)


def test_minimal_by_keeps_ties():
    sets = [frozenset({"A"}), frozenset({"B"}), frozenset({"A", "C"})]
    assert minimal_by(sets, len) == sets[:2]
    assert minimal_by([], len) == []


def write_kernels(path: Path, rows: list[tuple]) -> Path:
    path.mkdir(parents=True)
    lines = ["Step Id,Name,Type,Duration(us),Input Data Types,Output Data Types"]
    lines += [",".join(str(x) for x in r) for r in rows]
    (path / "kernel_details.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_low_precision_share_is_low_time_over_float_time(tmp_path):
    run = tmp_path / "run"
    write_kernels(run / "profile" / "x_ascend_pt" / "ASCEND_PROFILER_OUTPUT", [
        (0, "mm", "MatMulV2", 6.0, "FLOAT16;FLOAT16", "FLOAT16"),
        (0, "exp", "Exp", 2.0, "FLOAT", "FLOAT"),
        (0, "gather", "GatherV2", 100.0, "INT64", "INT64"),          # no float dtype: in neither sum
        (1, "mm", "MatMulV2", 6.0, "FLOAT16;FLOAT16", "FLOAT16"),
        (1, "exp", "Exp", 2.0, "BF16", "BF16"),
        (1, "cast", "Cast", 4.0, "FLOAT16", "FLOAT"),                # lowest float input: fp16
    ])
    assert low_precision_share(run) == pytest.approx((6 + 6 + 2 + 4) / (6 + 2 + 6 + 2 + 4))
    empty = tmp_path / "empty"
    write_kernels(empty / "profile", [(0, "g", "GatherV2", 1.0, "INT64", "INT64")])
    assert low_precision_share(empty) is None


# ------------------------------------------------------------------------------------------ oracle_case
HIDDEN = [frozenset({"Exp"}), frozenset({"MatMulV2"}), frozenset({"Mul", "Sigmoid"})]
SHARE = {"Exp": 0.3, "MatMulV2": 0.9, "Mul": 0.1, "Sigmoid": 0.1, "Add": 0.05, "RealDiv": 0.05}


def fake_capture(calls):
    def capture_and_judge(case, edits, work):
        calls.append(frozenset(edits))
        rec = {"ok": any(m <= edits for m in HIDDEN), "share": 1.0 - sum(SHARE[t] for t in edits),
               "worst": None, "reasons": [], "seconds": 0.0}
        if not edits:
            rec["types"] = list(TYPES)
        return rec
    return capture_and_judge


def test_oracle_case_records_best_share_fewest_edits_and_resumes(tmp_path, monkeypatch):
    calls: list[frozenset] = []
    monkeypatch.setattr(O, "capture_and_judge", fake_capture(calls))
    case = make_case(0)
    cache_file = tmp_path / "cache.json"
    rec = O.oracle_case(case, O.CaptureCache(cache_file), tmp_path)
    assert rec["base_passes"] is False
    assert [p["edits"] for p in rec["passing"]] == [["Exp"], ["MatMulV2"], ["Mul", "Sigmoid"]]
    assert [p["edits"] for p in rec["best_share"]] == [["Mul", "Sigmoid"]]  # share 0.8 > 0.7 (Exp) > 0.1
    assert [p["edits"] for p in rec["fewest_edits"]] == [["Exp"], ["MatMulV2"]]
    assert rec["captures"] == rec["new_captures"] == len(calls) == len(set(calls))
    assert rec["capture_seconds"] == 0.0
    assert not any(frozenset(p["edits"]) < c for p in rec["passing"] for c in calls)
    # resume: the same run from the cache file captures nothing
    calls.clear()
    again = O.oracle_case(case, O.CaptureCache(cache_file), tmp_path)
    assert calls == [] and again["new_captures"] == 0
    assert {k: v for k, v in again.items() if k not in ("new_captures", "seconds")} == \
        {k: v for k, v in rec.items() if k not in ("new_captures", "seconds")}
    # another spec (fingerprint) for the same name is a cache miss, never a stale hit; stale entries are dropped
    assert O.CaptureCache.key(case, frozenset({"Exp"})).startswith(f"{case.name}@{case.fingerprint}#")
    cache = O.CaptureCache(cache_file)
    cache.results[f"{case.name}@000000000000#{O.engine_fingerprint()}|Exp"] = {"ok": True}
    cache.results["other-case@000000000000|Exp"] = {"ok": True}
    assert cache.drop_stale([case]) == 1
    assert "other-case@000000000000|Exp" in O.CaptureCache(cache_file).results


def test_cache_never_serves_a_result_of_another_engine_model(tmp_path, monkeypatch):
    """The key carries the engine model's fingerprint: a result cached under an older engine model (the same case
    spec and edits) is a miss, and it is dropped."""
    calls: list[frozenset] = []
    monkeypatch.setattr(O, "capture_and_judge", fake_capture(calls))
    case = make_case(0)
    cache_file = tmp_path / "cache.json"
    O.oracle_case(case, O.CaptureCache(cache_file), tmp_path)
    n = len(calls)
    monkeypatch.setattr(O, "ENGINE_MODEL", O.ENGINE_MODEL + " (changed)")
    monkeypatch.setattr(O, "_ENGINE_FP", None)
    cache = O.CaptureCache(cache_file)
    assert cache.get(case, frozenset()) is None
    again = O.oracle_case(case, cache, tmp_path)
    assert again["new_captures"] == again["captures"] == len(calls) - n > 0
    assert cache.drop_stale([case]) == n
    assert all(k.startswith(O.CaptureCache.prefix(case)) for k in O.CaptureCache(cache_file).results)


def test_engine_fingerprint_hashes_the_tables(monkeypatch, tmp_path):
    """Changing a file under advisor/data changes the engine fingerprint (the tables decide what a capture does)."""
    import advisor
    base = O.engine_fingerprint()
    fake = tmp_path / "advisor"
    (fake / "data").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "data" / "t.json").write_text("{}")
    monkeypatch.setattr(advisor, "__file__", str(fake / "__init__.py"))
    monkeypatch.setattr(O, "_ENGINE_FP", None)
    one = O.engine_fingerprint()
    (fake / "data" / "t.json").write_text('{"a": 1}')
    monkeypatch.setattr(O, "_ENGINE_FP", None)
    assert len({base, one, O.engine_fingerprint()}) == 3


@pytest.mark.parametrize("content, problem", [
    ("[1, 2]", "expected"),
    ('{"meta": {"version": 1, "mode": "mixed_float16", "soc": "ascend910b", "tolerance": "default"}, '
     '"results": {"k": []}}', "not a capture record"),
    ('{"meta": {"version": 0}, "results": {}}', "other settings"),
    ("{not json", ""),
])
def test_bad_cache_is_one_line_exit_2(tmp_path, capsys, content, problem):
    cache = tmp_path / "c.json"
    cache.write_text(content, encoding="utf-8")
    assert O.main(["--set", "dev", "--cases", "0", "--out", str(tmp_path / "o.json"), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(cache) in err and problem in err
    assert not (tmp_path / "o.json").exists()


# ------------------------------------------------------------------------------------------ committed results
@pytest.mark.parametrize("set_name", sorted(SETS))
def test_committed_oracle_matches_the_generator(set_name):
    data = json.loads((REPO / "bench" / "cases" / f"oracle_{set_name}.json").read_text(encoding="utf-8"))
    cases = [make_case(s) for s in SETS[set_name]]
    assert [r["case"] for r in data["cases"]] == [c.name for c in cases]
    assert [r["fingerprint"] for r in data["cases"]] == [c.fingerprint for c in cases]
    assert data["max_size"] == 3 and data["summary"]["cases"] == len(cases)
    for r in data["cases"]:
        passing = [frozenset(p["edits"]) for p in r["passing"]]
        assert r["base_passes"] == (frozenset() in passing)
        assert all(len(p) <= 3 and set(p) <= set(r["candidate_types"]) for p in passing)
        assert not any(a < b for a in passing for b in passing)          # pruned: no superset of a passing set
        # the empty set first; when it fails, every single type (no singleton is a strict superset of a pass)
        assert r["captures"] == 1 if r["base_passes"] else r["captures"] >= 1 + len(r["candidate_types"])
        for best in r["best_share"]:
            assert best in r["passing"]
            assert all((best["share"] or 0) >= (p["share"] or 0) for p in r["passing"])
        for few in r["fewest_edits"]:
            assert few in r["passing"] and len(few["edits"]) == min(len(p) for p in passing)


def test_markdown_summary_counts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(O, "capture_and_judge", fake_capture([]))
    cache = O.CaptureCache(None)
    records = [O.oracle_case(make_case(s), cache, tmp_path) for s in (0, 1, 3)]     # hazard, control, training
    records[1]["base_passes"], records[1]["best_share"] = True, [{"edits": [], "share": 1.0}]
    data = {"set": "dev", "max_size": 3, "summary": O.summarize(records), "cases": records}
    md = O.markdown_summary(data)
    assert "| cases | 1 | 1 | 1 | 3 |" in md
    assert "| base passes (no edit needed) | 0 | 1 | 0 | 1 |" in md
    assert "| best-share set of 2 edits | 1 | 0 | 1 | 2 |" in md           # Mul+Sigmoid beats Exp on share
    assert "| best-share set has more edits than the fewest-edit set | 1 | 0 | 1 | 2 |" in md
    assert md.count("| hazard-exp_gate-s0 | fails | Mul+Sigmoid 80.0% | Exp 70.0%; MatMulV2 10.0% |") == 1
    path = tmp_path / "o.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert O.main(["--summary", str(path)]) == 0 and capsys.readouterr().out.strip() == md
    path.write_text('{"cases": {}}', encoding="utf-8")
    assert O.main(["--summary", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err
