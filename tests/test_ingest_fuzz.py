"""Property: every reader, given a mutated real file (bytes cut, inserted, replaced; JSON values swapped
for arbitrary JSON), either reads it or stops with exit 2 and ONE line naming the file; never a
traceback, never a hang, and a success reports no impossible number.  Each reader is driven through
``advisor inspect`` as a user would."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from advisor.cli import app

HERE = Path(__file__).resolve().parent
REAL = HERE / "fixtures" / "real"
ING = HERE / "fixtures" / "ingest"
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _head(path: Path, lines: int) -> bytes:
    return b"".join(path.read_bytes().splitlines(keepends=True)[:lines])


KD = _head(REAL / "torch_npu_profile_mstt" / "kernel_details.csv", 30)
KD_BF16 = (REAL / "torch_npu_kernel_details_bf16_mstt" / "kernel_details.csv").read_bytes()
OPSUM = (ING / "op_summary_new.csv").read_bytes()
OPSTAT = (b"OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
          b"MatMulV2,AI_CORE,4,12.5,3,3.125,3.5,80.0\nAdd,AI_VECTOR_CORE,2,3.1,1.5,1.55,1.6,20\n")
GE_PROTO = _head(REAL / "ge_proto_ge_st" / "ge_proto_00046_afterUBMatch.txt", 400)
GE_PROTO = GE_PROTO[:GE_PROTO.rindex(b"\n  op {")] + b"\n}\n"          # the first ops, closed
LOCAL = (HERE.parent / "profiles" / "two_hazards" / "local_error.csv").read_bytes()
GE_ONNX = (HERE.parent / "profiles" / "two_hazards" / "graph" / "ge_onnx_00000_graph_0_Build.pbtxt").read_bytes()


def _mutate(data: bytes, cut: int, pos: int, junk: bytes, drop: int) -> bytes:
    data = data[:max(cut, len(data) // 2)]
    return data[:pos] + junk + data[pos + drop:]


byte_edits = dict(cut=st.integers(0, 1 << 16), pos=st.integers(0, 1 << 16), junk=st.binary(max_size=16),
                  drop=st.integers(0, 8))


def _check(root: Path, mutated: Path) -> None:
    r = CliRunner().invoke(app, ["inspect", "--profile", str(root), "--json"])
    if r.exit_code == 0:  # a success reports only real numbers: no negative or non-finite time, no nan %
        s = json.loads(r.stdout)
        assert math.isfinite(s["kernel_time_us"]) and s["kernel_time_us"] >= 0
        for row in s["precision_share"] + s["type_share"]:
            assert math.isfinite(row["time_us"]) and row["time_us"] >= 0 and 0 <= row["share"] <= 1
        return
    assert r.exit_code == 2, (r.stderr, r.exception)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("advisor: error: "), r.stderr
    assert str(mutated) in lines[0], lines[0]


def _layout(d: Path, kernels: bytes | None = KD) -> Path:
    if d.exists():
        shutil.rmtree(d)
    out = d / "w_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    if kernels is not None:
        (out / "kernel_details.csv").write_bytes(kernels)
    return d


CSV_CASES = {
    "kernel_details.csv": ("w_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", KD),
    "kernel_details_bf16.csv": ("w_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", KD_BF16),
    "op_summary": ("PROF_1/mindstudio_profiler_output/op_summary_1.csv", OPSUM),
    "op_statistic.csv": ("w_ascend_pt/ASCEND_PROFILER_OUTPUT/op_statistic.csv", OPSTAT),
    "local_error.csv": ("local_error.csv", LOCAL),
    "ge_proto": ("ge_proto_00046_graph_0_Build.txt", GE_PROTO),
    "ge_onnx": ("ge_onnx_00000_graph_0_Build.pbtxt", GE_ONNX),
}


@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_fuzz_bytes(tmp_path_factory, case):
    rel, base = CSV_CASES[case]
    d = tmp_path_factory.mktemp("fz") / "run"

    @SETTINGS
    @given(**byte_edits)
    def run(cut, pos, junk, drop):
        root = _layout(d, None if case in ("op_summary", "ge_proto", "ge_onnx") else KD)
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(_mutate(base, cut, pos, junk, drop))
        _check(root, f)
    run()


@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_fuzz_cells(tmp_path_factory, case):
    """Well-formed CSV rows (or proto fields) whose values are replaced by arbitrary text."""
    rel, base = CSV_CASES[case]
    d = tmp_path_factory.mktemp("fzc") / "run"
    cell = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=10)

    @SETTINGS
    @given(which=st.lists(st.tuples(st.integers(0, 1 << 12), st.integers(0, 60)), min_size=1, max_size=4),
           values=st.lists(cell, min_size=4, max_size=4))
    def run(which, values):
        import csv
        import io
        root = _layout(d, None if case in ("op_summary", "ge_proto", "ge_onnx") else KD)
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        text = base.decode()
        if case in ("ge_proto", "ge_onnx"):
            lines = text.splitlines(keepends=True)
            for (r, _), v in zip(which, values):  # a value after "key: "
                i = r % len(lines)
                if ": " in lines[i]:
                    k = lines[i].split(": ", 1)[0]
                    lines[i] = k + ": " + json.dumps(v) + "\n"
            f.write_text("".join(lines))
        else:
            rows = list(csv.reader(io.StringIO(text)))
            for (r, c), v in zip(which, values):
                row = rows[r % len(rows)]
                row[c % len(row)] = v
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(rows)
            f.write_text(buf.getvalue())
        _check(root, f)
    run()


# ------------------------------------------------------------------------------ JSON readers

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                      max_size=3),
                           max_leaves=8)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:40]):
            yield from _paths(v, prefix + (i,))


def _replace(obj, path, value):
    if not path:
        return value
    obj[path[0]] = _replace(obj[path[0]], path[1:], value)
    return obj


TRACE = json.loads((ING / "trace_view.json").read_text())
DUMP_DIR = REAL / "msprobe_train_pair_cpu" / "train_bf16" / "step0" / "proc8733"
DUMP = json.loads((DUMP_DIR / "dump.json").read_text())
DUMP["data"] = {k: v for k, v in list(DUMP["data"].items())[:6] + [("Module.fc1.Linear.parameters_grad.0",
                                                                      DUMP["data"]["Module.fc1.Linear.parameters_grad.0"])]}
JSON_CASES = {
    "trace_view.json": ("w_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json", TRACE),
    "profiler_info.json": ("w_ascend_pt/profiler_info.json",
                           {"config": {"common_config": {"activities": ["CPU", "NPU"]}}, "rank_id": 0}),
    "run.json": ("run.json", json.loads((HERE.parent / "profiles" / "two_hazards" / "run.json").read_text())),
    "dump.json": ("dump/step0/rank0/dump.json", DUMP),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(JSON_CASES))
def test_fuzz_json_values(tmp_path_factory, case):
    rel, base = JSON_CASES[case]
    paths = list(_paths(base))
    d = tmp_path_factory.mktemp("fzj") / "run"

    @SETTINGS
    @given(edits=st.lists(st.tuples(st.integers(0, len(paths) - 1), json_values), min_size=1, max_size=3))
    def run(edits):
        obj = json.loads(json.dumps(base))
        for i, v in edits:
            try:
                obj = _replace(obj, paths[i], v)
            except (KeyError, IndexError, TypeError):  # the path went away with an earlier edit
                pass
        root = _layout(d)
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        if case == "dump.json":
            shutil.copytree(DUMP_DIR / "dump_tensor_data", f.parent / "dump_tensor_data")
        f.write_text(json.dumps(obj, allow_nan=True))
        _check(root, f)
    run()


@pytest.mark.parametrize("case", sorted(JSON_CASES))
def test_fuzz_json_bytes(tmp_path_factory, case):
    rel, base = JSON_CASES[case]
    raw = json.dumps(base).encode()[:6000]
    d = tmp_path_factory.mktemp("fzb") / "run"

    @SETTINGS
    @given(**byte_edits)
    def run(cut, pos, junk, drop):
        root = _layout(d)
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(_mutate(raw, cut, pos, junk, drop))
        _check(root, f)
    run()
