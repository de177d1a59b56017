"""Multi-rank jobs: every rank analysed by independent tasks (in this process, a local process pool, Ray), the
cross-rank findings of inspect (precision mix, slow rank) and compare (a rank that overflows alone)."""
from __future__ import annotations

import importlib.util
import json
import pickle
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.errors import InputError
from advisor.ingest.discover import discover
from advisor.ingest.msprobe import dump_files
from advisor.ingest.ranks import load_rank, parse_ranks, rank_dumps, rank_groups, summarize
from rank_workloads import exp_workload  # tests/ is on sys.path (pytest's rootdir import)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
gen_ranks = pytest.importorskip("gen_ranks")
capture_mod = pytest.importorskip("advisor.emulator.capture")

DIFF, SLOW = 5, 3


def _cli(args):
    r = CliRunner().invoke(app, args)
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """8 ranks x 2,364 kernel rows: LayerNormV3 runs fp32 on rank 5 only, rank 3 is 30 % slower."""
    out = tmp_path_factory.mktemp("job")
    info = gen_ranks.generate(out, ranks=8, rows=2000, diff_rank=DIFF, slow_rank=SLOW)
    assert info["rows_per_rank"] >= 2000
    return out


@pytest.fixture(scope="module")
def local_json(job) -> dict:
    code, out, err = _cli(["inspect", "--profile", str(job), "--json", "--workers", "1"])
    assert code == 0, err
    return json.loads(out)


def test_inspect_reports_every_rank_and_names_the_different_and_the_slow_one(job, local_json):
    s = local_json
    assert s["ranks"] == list(range(8)) and [d["rank"] for d in s["per_rank"]] == list(range(8))
    assert all(d["kernels"] >= 2000 for d in s["per_rank"])
    assert s["kernels"] == sum(d["kernels"] for d in s["per_rank"])
    mix = [f for f in s["cross_rank"] if f["kind"] == "precision-mix"]
    assert [(f["type"], f["ranks"], f["here"], f["others"]) for f in mix] == [("LayerNormV3", [DIFF], "fp32", "fp16")]
    slow = [f for f in s["cross_rank"] if f["kind"] == "slow-rank"]
    assert [f["ranks"] for f in slow] == [[SLOW]] and slow[0]["ratio"] == pytest.approx(1.3, abs=0.05)
    # nothing else differs between the ranks (the 1 % jitter is no finding)
    assert {f["kind"] for f in s["cross_rank"]} == {"precision-mix", "slow-rank"}
    # the fp32 LayerNorm there also keeps gray ops after it in fp32 by inheritance
    fp32_inh = {d["rank"]: d["fp32_by_inheritance"]["time_us"] for d in s["per_rank"]}
    assert fp32_inh[DIFF] > 2 * max(v for r, v in fp32_inh.items() if r not in (DIFF, SLOW))
    code, out, err = _cli(["inspect", "--profile", str(job), "--workers", "1"])
    assert code == 0, err
    assert "Ranks: 8 analysed" in out
    assert f"op type LayerNormV3 runs fp32 on rank {DIFF} but fp16 on the 7 other ranks" in out
    assert f"rank {SLOW} is slow: 1.3" in out


def test_workers_give_exactly_the_results_of_one_process(job, local_json):
    code, out, err = _cli(["inspect", "--profile", str(job), "--json", "--workers", "2"])
    assert code == 0, err
    assert json.loads(out) == local_json
    lib1 = [s.to_dict() for s in summarize(job, workers=1)]
    assert lib1 == [s.to_dict() for s in summarize(job, workers=2)]
    assert lib1 == local_json["per_rank"]


def test_rank_subsets(job):
    code, out, err = _cli(["inspect", "--profile", str(job), "--json", "--rank", "2-4", "--rank", "6"])
    assert code == 0, err
    s = json.loads(out)
    assert s["ranks"] == [2, 3, 4, 6] and s["graph_rank"] == 2
    assert [f["ranks"] for f in s["cross_rank"] if f["kind"] == "slow-rank"] == [[SLOW]]
    assert not [f for f in s["cross_rank"] if f["kind"] == "precision-mix"]
    code, out, err = _cli(["inspect", "--profile", str(job), "--rank", "9"])
    assert code == 2 and err.strip().count("\n") == 0 and "ranks found: 0, 1, 2, 3, 4, 5, 6, 7" in err
    for bad in (["--rank", "x"], ["--rank", "5-2"], ["--workers", "0"], ["--workers", "2", "--ray", "local"]):
        code, out, err = _cli(["inspect", "--profile", str(job), *bad])
        assert code == 2 and err.startswith("advisor: error: ") and err.strip().count("\n") == 0, (bad, err)
    assert parse_ranks(["3", "0,8", "4-6"]) == [0, 3, 4, 5, 6, 8] and parse_ranks(None) is None


def test_ray_missing_is_one_line(job, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the [cluster] extra were not installed
    code, out, err = _cli(["inspect", "--profile", str(job), "--ray", "local"])
    assert code == 2 and err.strip().count("\n") == 0 and "pip install 'advisor[cluster]'" in err


def test_each_rank_reads_only_its_own_files(job, tmp_path):
    """A broken file of one rank breaks that rank's analysis only when it is read: load_rank(0) never opens
    rank 6's kernel_details.csv; a full inspect names that file in one line (from a worker process)."""
    j = tmp_path / "job"
    shutil.copytree(job, j)
    bad = next(j.glob("worker0006_*")) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    bad.write_text("Step Id;Name;Type\n1;a;b\n")
    run = load_rank(j, 0)
    assert set(run.kernels["rank"]) == {0} and run.rank == 0 and run.graph is not None
    assert run.sources["kernels"] == [str(next(j.glob("worker0000_*")) / "ASCEND_PROFILER_OUTPUT" /
                                          "kernel_details.csv")]
    code, out, err = _cli(["inspect", "--profile", str(j), "--workers", "2"])
    assert code == 2 and err.strip().count("\n") == 0 and str(bad) in err and "comma" in err


def test_one_rank_runs_stay_single_rank(tmp_path):
    """A bare kernel table (no rank) beside rank0 dumps is one rank, read as before."""
    d = tmp_path / "run"
    (d / "prof").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "fixtures" / "real" / "torch_npu_profile_mstt" / "kernel_details.csv", d / "prof")
    (d / "dump" / "step0" / "rank0").mkdir(parents=True)
    (d / "dump" / "step0" / "rank0" / "dump.json").write_text(json.dumps({"task": "statistics", "data": {}}))
    groups = rank_groups(discover(d))
    assert list(groups) == [0]
    code, out, err = _cli(["inspect", "--profile", str(d), "--json"])
    assert code == 0, err
    s = json.loads(out)
    assert len(s["per_rank"]) == 1 and s["cross_rank"] == [] and s["dumps"]["target"]


def test_msprof_cann8_rank_is_its_one_device_folder(tmp_path):
    fix = REPO / "tests" / "fixtures" / "ingest" / "op_summary_new.csv"
    for r in (3, 5):
        out = tmp_path / f"PROF_00{r}" / "mindstudio_profiler_output"
        out.mkdir(parents=True)
        (tmp_path / f"PROF_00{r}" / f"device_{r}").mkdir()
        shutil.copy(fix, out / "op_summary_20240101.csv")
    assert sorted(rank_groups(discover(tmp_path))) == [3, 5]
    assert set(load_rank(tmp_path, 5).kernels["rank"]) == {5}


def test_input_errors_cross_process_boundaries_intact():
    e = pickle.loads(pickle.dumps(InputError("/x/kernel_details.csv", "line 3: bad")))
    assert isinstance(e, InputError) and str(e) == "/x/kernel_details.csv: line 3: bad" and e.exit_code == 2


# ---------------------------------------------------------------------- compare: a rank that overflows alone


BAD = 2


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    """A 4-rank job from two captures: ranks 0, 1, 3 see inputs in [0, 1) (exp fine in fp16), rank 2 inputs in
    [0, 20) (exp overflows fp16 from 11.1 on: inf only there).  Laid out as a run directory (the clean capture
    plus dump/{mixed,fp32}/step*/rank1..3)."""
    base = tmp_path_factory.mktemp("cap")
    ok = capture_mod.capture(exp_workload(1.0), base / "ok")
    hot = capture_mod.capture(exp_workload(20.0), base / "hot")
    run = base / "run"
    shutil.copytree(ok, run)
    for side in ("mixed", "fp32"):
        for step_dir in sorted((ok / "dump" / side).glob("step*")):
            for r in (1, 2, 3):
                src = (hot if r == BAD else ok) / "dump" / side / step_dir.name / "rank0"
                shutil.copytree(src, run / "dump" / side / step_dir.name / f"rank{r}")
    return run


def _names_bad_rank(d: dict) -> None:
    assert [c["rank"] for c in d["per_rank"]] == [0, 1, 2, 3]
    assert [c["ok"] for c in d["per_rank"]] == [True, True, False, True]
    kinds = {f["kind"]: f for f in d["cross_rank"]}
    assert kinds["verdict"]["ranks"] == [BAD] and kinds["overflow"]["ranks"] == [BAD]
    assert kinds["op-error"]["type"].lower() == "exp" and kinds["op-error"]["ranks"] == [BAD]
    assert d["ok"] is False


@pytest.mark.slow
def test_compare_names_the_rank_that_overflows(dumps):
    code, out, err = _cli(["compare", "--run", str(dumps), "--json", "--workers", "2"])
    assert code == 1, err
    d = json.loads(out)
    _names_bad_rank(d)
    assert d["verdict"]["ok"] is True  # the detailed part is rank 0's, within tolerance
    assert f"target dumps of rank {BAD} have inf/nan values" in err and "Ranks: 4 compared" in err
    t, g = dumps / "dump" / "mixed", dumps / "dump" / "fp32"
    code, out2, err = _cli(["compare", "--target", str(t), "--golden", str(g), "--json", "--workers", "1"])
    assert code == 1, err
    _names_bad_rank(json.loads(out2))
    code, out3, err = _cli(["compare", "--target", str(t), "--golden", str(g), "--rank", "0,1,3"])
    assert code == 0, err
    assert rank_dumps(dumps)[BAD]["golden"] and sorted(rank_dumps(dumps)) == [0, 1, 2, 3]
    # one rank's dump files are found without entering the other ranks' folders
    every = dump_files(t)
    assert dump_files(t, BAD) == {k: f for k, f in every.items() if k[1] == BAD} and len(every) == 8


# ---------------------------------------------------------------------- Ray: the same tasks, the same results
@pytest.fixture(scope="module")
def ray_local():
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (the [cluster] extra)")
    import ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_results_equal_the_local_ones(ray_local, job, local_json, dumps):
    code, out, err = _cli(["inspect", "--profile", str(job), "--json", "--ray", "auto"])
    assert code == 0, err
    assert json.loads(out) == local_json
    assert [s.to_dict() for s in summarize(job, ray="auto")] == local_json["per_rank"]
    code, local, err = _cli(["compare", "--run", str(dumps), "--json", "--workers", "1"])
    code2, on_ray, err2 = _cli(["compare", "--run", str(dumps), "--json", "--ray", "auto"])
    assert (code, code2) == (1, 1), err2
    assert json.loads(on_ray) == json.loads(local)


def _summary(rank: int, steps: dict, types: dict | None = None, overflow: int = 0):
    from advisor.ingest.ranks import RankSummary
    t = types or {"MatMul": {"fp16": [100.0, 10]}, "Add": {"fp32": [50.0, 5]}}
    prec: dict = {}
    for ps in t.values():
        for p, (tm, n) in ps.items():
            prec.setdefault(p, [0.0, 0])
            prec[p][0] += tm
            prec[p][1] += n
    return RankSummary(rank=rank, kernels=sum(v["kernels"] for v in steps.values()), types=t, precision=prec,
                       steps=steps, dumps={"target": [0]}, overflow={"count": overflow, "first": [
                           {"step": 0, "entry": "Aten.exp.default.0.forward", "tensor": "output.0"}] * overflow},
                       saturation={"count": 0, "first": []})


def test_cross_rank_steps_shares_types_and_overflow():
    from advisor.ingest.rankdiff import cross_rank

    def st(*comp, kernels=10):
        return {i + 1: {"kernels": kernels, "busy_us": c, "compute_us": c, "span_us": c} for i, c in enumerate(comp)}
    s = [_summary(r, st(100, 100, 200, 100, 100, 100)) for r in range(4)]  # step 3 slow on every rank
    s[1].steps[2]["compute_us"] = 180                                        # step 2 slow on rank 1 only
    s[2].steps[4]["kernels"] = 11                                            # another kernel count
    del s[3].steps[4]                                                        # rank 3 lacks step 4
    s[0].types = {"MatMul": {"fp16": [100.0, 10]}, "Add": {"fp32": [50.0, 5]}, "TopK": {"fp32": [5.0, 1]}}
    s[2] = _summary(2, s[2].steps, {"MatMul": {"fp32": [400.0, 10]}, "Add": {"fp32": [50.0, 5]}}, overflow=3)
    got = {(f["kind"], tuple(f["ranks"]), tuple(f.get("steps", ()))) for f in cross_rank(s)}
    assert ("slow-step", (0, 1, 2, 3), (3,)) in got
    assert ("slow-step-rank", (1,), (2,)) in got
    assert ("step-kernels", (2,), (4,)) in got and ("steps-missing", (3,), (4,)) in got
    assert ("precision-mix", (2,), ()) in got and ("low-share", (2,), ()) in got
    assert ("op-types", (0,), ()) in got and ("overflow", (2,), ()) in got
    assert not any(k == "slow-rank" for k, _, _ in got)
    msgs = " ".join(f["message"] for f in cross_rank(s))
    assert "op type TopK runs only on rank 0" in msgs and "rank 3 lacks step 4" in msgs
    # a split with no majority is named as such
    two = [_summary(0, st(1), {"X": {"fp16": [1.0, 1]}}), _summary(1, st(1), {"X": {"fp32": [1.0, 1]}})]
    mix = [f for f in cross_rank(two) if f["kind"] == "precision-mix"]
    assert mix and "fp16 on rank 0; fp32 on rank 1" in mix[0]["message"]
