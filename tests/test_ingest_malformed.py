"""Crafted variants of real files through the CLI: wrong numbers, wrong JSON types, hostile paths and
FIFOs give one line naming the file (and line / column where there is one), exit 2; never a traceback,
a hang or a silent success."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app

HERE = Path(__file__).resolve().parent
REAL = HERE / "fixtures" / "real"
KD = (REAL / "torch_npu_profile_mstt" / "kernel_details.csv").read_text()
KD_LINES = KD.splitlines(keepends=True)
HEADER = KD_LINES[0].rstrip("\n").split(",")


def _run(args):
    r = CliRunner().invoke(app, args)
    return r.exit_code, r.stdout, r.stderr


def _one_line_error(code, err, *needles):
    assert code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("advisor: error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]


def _profile(tmp_path: Path, kernel_details: str | None = KD, trace: object = None, info: object = None) -> Path:
    out = tmp_path / "w_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    if kernel_details is not None:
        (out / "kernel_details.csv").write_text(kernel_details)
    if trace is not None:
        (out / "trace_view.json").write_text(trace if isinstance(trace, str) else json.dumps(trace))
    if info is not None:
        (tmp_path / "w_ascend_pt" / "profiler_info.json").write_text(info if isinstance(info, str) else json.dumps(info))
    return tmp_path


def _with_cell(column: str, value: str, row: int = 5) -> str:
    """The real kernel_details.csv with one cell replaced (file line ``row + 1``)."""
    import csv
    import io
    rows = list(csv.reader(io.StringIO(KD)))
    rows[row][rows[0].index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


# ------------------------------------------------------------------------------ kernel tables

@pytest.mark.parametrize("value", ["nan", "inf", "-200", "1e308", "-inf", "NaN"])
def test_impossible_duration(tmp_path, value):
    code, out, err = _run(["inspect", "--profile", str(_profile(tmp_path, _with_cell("Duration(us)", value)))])
    _one_line_error(code, err, "kernel_details.csv", "line 6", "'Duration(us)'", repr(value))


def test_impossible_duration_in_recommend(tmp_path):
    code, out, err = _run(["recommend", "--profile", str(_profile(tmp_path, _with_cell("Duration(us)", "-200"))),
                           "--out", str(tmp_path / "o")])
    _one_line_error(code, err, "line 6", "'Duration(us)'")


def test_step_id_out_of_range(tmp_path):
    code, out, err = _run(["inspect", "--profile", str(_profile(tmp_path, _with_cell("Step Id", "1e300", 3)))])
    _one_line_error(code, err, "line 4", "'Step Id'")


def test_op_summary_error_names_its_own_header(tmp_path):
    text = (HERE / "fixtures" / "ingest" / "op_summary_new.csv").read_text().splitlines(keepends=True)
    cells = text[1].split(",")
    col = text[0].split(",").index("Task Duration(us)")
    cells[col] = "oops"
    d = tmp_path / "PROF_1" / "mindstudio_profiler_output"
    d.mkdir(parents=True)
    (d / "op_summary_1.csv").write_text(text[0] + ",".join(cells) + "".join(text[2:]))
    code, out, err = _run(["inspect", "--profile", str(tmp_path)])
    _one_line_error(code, err, "op_summary_1.csv", "line 2", "'Task Duration(us)'")
    assert "duration_us" not in err


def test_missing_column_named_as_written(tmp_path):
    code, out, err = _run(["inspect", "--profile", str(_profile(tmp_path, KD.replace("Duration(us)", "Dur", 1)))])
    _one_line_error(code, err, "Duration(us)")
    assert "duration_us" not in err


def test_duplicated_column(tmp_path):
    text = KD_LINES[0].rstrip("\n") + ",Duration(us)\n" + "".join(x.rstrip("\n") + ",1.0\n" for x in KD_LINES[1:])
    code, out, err = _run(["inspect", "--profile", str(_profile(tmp_path, text))])
    _one_line_error(code, err, "'Duration(us)' appears twice")


def test_header_only(tmp_path):
    code, out, err = _run(["inspect", "--profile", str(_profile(tmp_path, KD_LINES[0]))])
    _one_line_error(code, err, "kernel_details.csv", "no data rows")


def test_row_with_a_missing_field_names_its_line(tmp_path):
    lines = list(KD_LINES)
    lines[9] = lines[9].rsplit(",", 3)[0] + "\n"      # file line 10 loses its last three fields
    code, out, err = _run(["inspect", "--profile", str(_profile(tmp_path, "".join(lines)))])
    _one_line_error(code, err, "kernel_details.csv", "line 10")


def test_op_statistic_numbers(tmp_path):
    root = _profile(tmp_path)
    (root / "w_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv").write_text(
        "OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
        "MatMulV2,AI_CORE,4,12.5,3,3.125,3.5,80.0\nAdd,AI_VECTOR_CORE,2.5,1,0.5,0.5,0.5,20\n")
    code, out, err = _run(["inspect", "--profile", str(root)])
    _one_line_error(code, err, "op_statistic.csv", "line 3", "'Count'")


# ------------------------------------------------------------------------------ trace_view.json

HW = {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "Ascend Hardware"}}


def _kernel_event(i: int) -> dict:
    import csv
    import io
    row = list(csv.DictReader(io.StringIO(KD)))[i]
    return {"ph": "X", "name": row["Name"], "pid": 9, "tid": 1, "ts": row["Start Time(us)"].strip(),
            "dur": float(row["Duration(us)"])}


@pytest.mark.parametrize("cmd", ["inspect", "recommend"])
def test_trace_without_cpu_ops(tmp_path, cmd):
    """Valid kernels and no cpu_op event: the run loads; the trace links nothing and says so."""
    root = _profile(tmp_path, trace=[HW, _kernel_event(0), _kernel_event(1)])
    args = [cmd, "--profile", str(root)] + (["--out", str(tmp_path / "o"), "--engine", "ge"] if cmd == "recommend"
                                            else ["--json"])   # an eager profile: GE lists only when asked
    code, out, err = _run(args)
    assert code == 0, err
    if cmd == "inspect":
        s = json.loads(out)
        assert s["trace"]["kernels"] == 2 and s["trace"]["framework_ops"] == 0
        assert any("none of its device kernels matches" in m for m in s["missing"])


@pytest.mark.parametrize("event", [
    {"ph": "M", "name": "process_name", "pid": 9, "args": [1]},
    {"ph": "X", "name": "k", "pid": [9], "tid": {"a": 1}, "ts": "1e999", "dur": "x", "args": [1]},
    {"ph": "X", "cat": "cpu_op", "name": ["aten::mm"], "pid": 1, "tid": 1, "ts": {"t": 1}, "dur": [1], "args": 5},
    {"ph": "s", "cat": "async_npu", "id": [1], "pid": None, "tid": 1, "ts": 1e308},
    {"ph": "f", "cat": "async_npu", "id": {"x": 1}, "pid": 9, "tid": 1, "ts": "9" * 4000},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": -5, "dur": 1e308},
])
def test_trace_wrong_json_types(tmp_path, event):
    root = _profile(tmp_path, trace=[HW, _kernel_event(0), event])
    code, out, err = _run(["inspect", "--profile", str(root), "--json"])
    assert code == 0, err
    assert json.loads(out)["trace"]["kernels"] >= 1


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, '[{"ph": "X", "ts": ' + "1" * 5000 + "}]"])
def test_trace_deep_or_long_numbers_is_a_note(tmp_path, text):
    """A broken trace is optional enrichment (docs/formats.md): the run loads, the reason is listed."""
    code, out, err = _run(["inspect", "--profile", str(_profile(tmp_path, trace=text)), "--json"])
    assert code == 0, err
    assert any("trace_view.json" in m and "not linked" in m for m in json.loads(out)["missing"])


# ------------------------------------------------------------------------------ profiler_info / run.json

@pytest.mark.parametrize("info,needle", [
    ('{"rank_id": 1e999}', "rank_id"),
    ('{"rank_id": [0]}', "rank_id"),
    ('{"rank_id": true}', "rank_id"),
    ('{"a": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deeply"),
    ('{"rank_id": ' + "1" * 5000 + "}", "unreadable JSON value"),
])
def test_profiler_info_values(tmp_path, info, needle):
    code, out, err = _run(["inspect", "--profile", str(_profile(tmp_path, info=info))])
    _one_line_error(code, err, "profiler_info.json", needle)


@pytest.mark.parametrize("meta,needle", [
    ({"soc": ["ascend910b"]}, "'soc'"),
    ({"mode": ["mixed_float16"]}, "'mode'"),
    ({"ops_info": 5}, "'ops_info'"),
    ({"mixlist": 5}, "'mixlist'"),
    ({"emulated": "yes"}, "'emulated'"),
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ('{"seed": ' + "7" * 5000 + "}", "unreadable JSON value"),
    ("[1, 2]", "JSON object"),
])
@pytest.mark.parametrize("cmd", ["inspect", "recommend"])
def test_run_json_types(tmp_path, meta, needle, cmd):
    root = _profile(tmp_path)
    (root / "run.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    args = [cmd, "--profile", str(root)] + (["--out", str(tmp_path / "o")] if cmd == "recommend" else [])
    code, out, err = _run(args)
    _one_line_error(code, err, "run.json", needle)


# ------------------------------------------------------------------------------ local_error.csv

def test_local_error_text_is_an_error(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(HERE.parent / "profiles" / "two_hazards", run)
    lines = (run / "local_error.csv").read_text().splitlines(keepends=True)
    cells = lines[2].split(",")
    cells[3] = "large"                                   # local_rel_l2 of the second op
    lines[2] = ",".join(cells)
    (run / "local_error.csv").write_text("".join(lines))
    code, out, err = _run(["recommend", "--profile", str(run), "--out", str(tmp_path / "o")])
    _one_line_error(code, err, "local_error.csv", "line 3", "'local_rel_l2'", "'large'")


# ------------------------------------------------------------------------------ msprobe data_name

def _dump_with_name(tmp_path: Path, data_name: str) -> Path:
    d = tmp_path / "dump" / "step0" / "rank0"
    (d / "dump_tensor_data").mkdir(parents=True)
    rec = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": 1, "Min": 0, "Mean": 0, "Norm": 1,
           "data_name": data_name}
    (d / "dump.json").write_text(json.dumps({"task": "tensor", "data": {"A.a.0.forward": {"output": [rec]}}}))
    return d


@pytest.mark.parametrize("kind", ["loop", "nul", "long"])
def test_hostile_data_names(tmp_path, kind):
    name = {"loop": "loop.pt", "nul": "a\x00b.pt", "long": "x" * 5000 + ".pt"}[kind]
    d = _dump_with_name(tmp_path, name)
    if kind == "loop":
        os.symlink("loop.pt", d / "dump_tensor_data" / "loop.pt")
    code, out, err = _run(["inspect", "--profile", str(tmp_path)])
    _one_line_error(code, err, "data_name")


def test_refused_pickle_prints_no_warnings(tmp_path):
    """A plain pickle where a tensor file belongs: refused (never unpickled), and torch's warning about
    its pickle protocol is not printed before the one-line error."""
    import pickle

    from advisor.errors import InputError
    from advisor.ingest.msprobe import load_dump, load_tensor
    d = _dump_with_name(tmp_path, "t.pt")
    (d / "dump_tensor_data" / "t.pt").write_bytes(pickle.dumps({"a": 1}, protocol=4))
    rec = load_dump(d).entries["A.a.0.forward"].outputs[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(InputError, match="cannot load tensor"):
            load_tensor(rec)
    assert caught == []


# ------------------------------------------------------------------------------ FIFOs (must not hang)

@pytest.mark.parametrize("where", ["w_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", "dump/step0/rank0/dump.json",
                                   "run.json", "local_error.csv"])
def test_fifo_is_refused_not_read(tmp_path, where):
    root = _profile(tmp_path) if where != "w_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv" else \
        _profile(tmp_path, kernel_details=None)
    f = root / where
    f.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(f)
    # the timeout only guards the test run against the hang this test is about
    p = subprocess.run([sys.executable, "-m", "advisor", "inspect", "--profile", str(root)], capture_output=True,
                       text=True, cwd=HERE.parent, timeout=300, stdin=subprocess.DEVNULL)
    _one_line_error(p.returncode, p.stderr, f.name, "not a regular file")


# ------------------------------------------------------------------------------ messages print real values

def test_no_none_printed(tmp_path):
    """A GE-dump graph has no single step and a graph input decides with no `via`: print nothing."""
    code, out, err = _run(["inspect", "--profile", str(REAL / "ge_proto_ge_st")])
    assert code == 0, err
    assert "op graph (rank unknown): 124 ops" in out and "None" not in out
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"black-list": {"to-add": []}}')
    b.write_text('{"black-list": {"to-add": ["MatMulV2"]}}')
    code, out, err = _run(["diff", str(a), str(b), "--profile", str(HERE.parent / "profiles" / "two_hazards"),
                           "--out", str(tmp_path / "d")])
    assert code == 0, err
    assert "flipped instance" in out and "None" not in out
