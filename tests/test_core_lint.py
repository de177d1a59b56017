"""advisor lint over real ModelZoo mixlists, planted typos, and malformed files."""
import json
import shutil
import subprocess
import sys

import pytest

from advisor.lint import lint_file, lint_text, suggest
from advisor.oplists import load_default

from conftest import FIXTURES

L910 = load_default("ascend910")

# Verified by hand against CANN 8.1.RC1's ascend910 tables: every other file of the 44 is clean.
EXPECTED_910 = {
    "TensorFlow2__built-in__nlp__albert-FineTune_Series_for_TensorFlow2.X__configs__ops_info.json": [
        ("graph-engine-op", "LabelGotoEx"), ("graph-engine-op", "LabelSet"), ("graph-engine-op", "LabelSwitchByIndex"),
        ("graph-engine-op", "Recv"), ("no-op-add", "ApplyAdamD"), ("no-op-add", "L2Loss"),
        ("no-op-add", "LogSoftmaxGrad"), ("no-op-add", "LogSoftmaxV2"), ("no-op-add", "Pow"),
        ("no-op-add", "ReduceMeanD"), ("no-op-add", "UnsortedSegmentSum")],
    "TensorFlow2__built-in__nlp__keras-bert_ID3157_for_TensorFlow2.X__configs__ops_info.json": [
        ("graph-engine-op", "Data"), ("no-op-add", "BiasAddGrad"), ("no-op-add", "ReduceMeanD"),
        ("no-op-add", "UnsortedSegmentSum")],
    "TensorFlow__built-in__cv__image_synthesis__Deep-multimodal-subspace-clustering-networks_ID1259_for_TensorFlow__ops_info.json": [
        ("no-op-add", "Log"), ("no-op-add", "MatMulV2"), ("no-op-add", "Pow")],
    "TensorFlow__built-in__nlp__GNMT_ID0015_for_TensorFlow__ops_info.json": [("no-op-add", "Pow")],
    "TensorFlow__built-in__nlp__GRU4Rec_ID0128_for_TensorFlow__gru4rec_BP__ops_info.json": [("no-op-add", "Log")],
    "TensorFlow__contrib__cv__HMR_ID0783_for_TensorFlow__src__ops_info.json": [("no-op-add", "SquareSumV1")],
}


def codes(findings):
    return sorted((f.code, f.op_type) for f in findings)


def test_modelzoo_mixlists_report_exactly_what_is_wrong(real):
    files = sorted((real / "mixlists_modelzoo").glob("*.json"))
    assert len(files) == 44
    for f in files:
        assert codes(lint_file(f, L910)) == sorted(EXPECTED_910.get(f.name, [])), f.name


def test_op_type_of_another_chip_is_reported_on_910b():
    text = (FIXTURES / "mixlists/TensorFlow__built-in__nlp__GNMT_ID0015_for_TensorFlow__ops_info.json").read_text()
    assert ("other-chip", "ArgMaxD") not in codes(lint_text(text, L910))
    text2 = '{"black-list": {"to-add": ["ArgMaxD"]}}'
    assert codes(lint_text(text2, load_default("ascend910b"))) == [("other-chip", "ArgMaxD")]


@pytest.mark.parametrize("typo,fix", [("MatMu1V2", "MatMulV2"), ("Loglp", "Log1p"), ("Matmul", "MatMul"),
                                      ("StrideSliceD", "StridedSliceD"), ("matmulv2", "MatMulV2"),
                                      ("ReduceSumd", "ReduceSumD")])
def test_planted_typos_in_a_real_mixlist_get_the_right_suggestion(tmp_path, typo, fix):
    src = FIXTURES / "mixlists/TensorFlow__built-in__nlp__GNMT_ID0015_for_TensorFlow__ops_info.json"
    d = json.loads(src.read_text())
    d["black-list"]["to-add"].append(typo)
    p = tmp_path / "typo.json"
    p.write_text(json.dumps(d, indent=2))
    unknown = [f for f in lint_file(p, L910) if f.code == "unknown-op-type"]
    assert [(f.op_type, f.suggestion) for f in unknown] == [(typo, fix)]
    assert unknown[0].line is not None


def test_no_suggestion_for_something_unrelated():
    assert suggest("CompletelyMadeUp", L910) is None


def test_cann_doc_example_has_comments_and_a_case_typo():
    f = lint_file(FIXTURES / "mixlists/cann_doc_example.json", load_default("ascend910b"))
    assert ("comments", None) in codes(f)
    assert [(x.op_type, x.suggestion) for x in f if x.code == "unknown-op-type"] == [("Matmul", "MatMul")]


def test_conflicts_and_no_op_removes():
    text = '{"black-list": {"to-add": ["Exp"], "to-remove": ["Exp", "MatMulV2"]}, "white-list": {"to-add": ["Exp"]}}'
    got = codes(lint_text(text, load_default("ascend910b")))
    assert got == [("conflict", "Exp"), ("no-op-remove", "MatMulV2")]      # one error for Exp, no moot warnings


def test_not_json_text_is_reported_with_position():
    f = lint_text("black-list: Exp, Log\n", L910)
    assert [(x.code, x.line, x.column) for x in f] == [("invalid-json", 1, 1)]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True)


def cli(*args):
    """The command line in this process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from advisor.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_cli_exit_codes_and_json(tmp_path, real):
    clean = real / "mixlists_modelzoo/TensorFlow__built-in__graph__DCGAN_ID0686_for_TensorFlow__configs__ops_info.json"
    r = run_cli("lint", "--soc", "ascend910", str(clean))
    assert r.returncode == 0, r.stdout + r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"black-list": {"to-add": ["Loglp"]}}')
    r = run_cli("lint", "--json", str(bad))
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["files"][str(bad)][0]["suggestion"] == "Log1p"
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\x00\x01\x02binary")
    r = run_cli("lint", str(garbage))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "binary" in r.stderr and "Traceback" not in r.stderr


# --- every finding at its own occurrence -------------------------------------------------------------------------
POSITIONS = """{
  "white-list": {"to-add": ["Sigmoid"]},
  "black-list": {
    "to-remove": [
      "Yolo"
    ],
    "to-add": ["Log", "Exp", "Exp"]
  },
  "gray-list": {
    "to-add": ["Gelu"],
    "to-remove": ["MatMulV2"]
  },
  "white-list": {"to-add": ["Yolo", "Matmul"], "to-remove": ["Exp"]}
}
"""


def _at(text, needle, nth=1):
    """(line, column) of the nth occurrence of ``needle`` (1-based, as lint reports)."""
    i = -1
    for _ in range(nth):
        i = text.index(needle, i + 1)
    return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


def test_every_finding_points_at_its_own_array_element():
    got = {(f.code, f.op_type, f.line, f.column) for f in lint_text(POSITIONS, load_default("ascend910b"))}
    want = {
        ("no-op-remove", "Yolo", *_at(POSITIONS, '"Yolo"', 1)),       # black to-remove, line 5 (not the white one)
        ("no-op-add", "Log", *_at(POSITIONS, '"Log"')),
        ("duplicate", "Exp", *_at(POSITIONS, '"Exp"', 2)),            # the second Exp of the array
        ("no-op-add", "Gelu", *_at(POSITIONS, '"Gelu"')),              # gray-list findings have positions too
        ("conflict", "MatMulV2", *_at(POSITIONS, '"MatMulV2"')),       # gray-list to-remove alone: GE rejects
        ("unknown-op-type", "Matmul", *_at(POSITIONS, '"Matmul"')),
        ("no-op-remove", "Exp", *_at(POSITIONS, '"Exp"', 3)),          # white to-remove Exp (gray)
        ("duplicate-key", None, *_at(POSITIONS, '"white-list"', 2)),   # the second white-list key
    }
    assert got == want


def test_conflict_points_at_the_entry_completing_the_rejected_set():
    text = '{"black-list": {"to-add": ["Exp"], "to-remove": ["Exp"]},\n "white-list": {"to-add": ["Exp"], ' \
           '"to-remove": ["Exp"]}}'
    got = {(f.code, f.line, f.column) for f in lint_text(text, load_default("ascend910b"))}
    assert got == {("conflict", *_at(text, '"Exp"', 4))}        # one error per type, at its last new edit


def test_bad_structure_points_at_the_offending_key():
    text = '{"black-list": {"to-add": ["Exp"]},\n  "blacklist": {"to-add": ["Log"]}}'
    (f,) = lint_text(text, L910)
    assert (f.code, f.line, f.column) == ("bad-structure", *_at(text, '"blacklist"'))


# --- duplicate keys: JSON keeps one of the two ------------------------------------------------------------------
def test_duplicate_list_key_is_an_error_naming_both_lines():
    text = '{\n  "black-list": {"to-add": ["Exp"]},\n  "black-list": {"to-add": ["Sigmoid"]}\n}'
    fs = lint_text(text, load_default("ascend910b"), "m.json")
    dup = [f for f in fs if f.code == "duplicate-key"]
    assert [(f.severity, f.line, f.column) for f in dup] == [("error", 3, 3)]
    assert "black-list" in dup[0].message and "line 2" in dup[0].message


def test_duplicate_inner_key_is_an_error():
    text = '{"black-list": {"to-add": ["Exp"],\n "to-add": ["Sigmoid"]}}'
    assert [(f.code, f.line) for f in lint_text(text, L910) if f.severity == "error"] == [("duplicate-key", 2)]


# --- lists from an ops-info file: findings name the file --------------------------------------------------------
def test_findings_against_an_ops_info_file_name_the_file(tmp_path):
    info = tmp_path / "my-ops-info.json"
    info.write_text(json.dumps({"MyCustomOp": {"precision_reduce": {"flag": "false"}}, "Exp": {}}))
    m = tmp_path / "m.json"
    m.write_text('{"black-list": {"to-add": ["MyCustomOp", "Yolo"]}}')
    r = run_cli("lint", "--ops-info", str(info), str(m))
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert any("MyCustomOp" in x and "no-op-add" in x and str(info) in x for x in lines), lines
    assert any("Yolo" in x and str(info) in x for x in lines), lines
    assert "ascend910b" not in r.stdout
    # a flag GE refuses: exit 2, one line naming the file and the op type (a real process, no traceback)
    info.write_text(json.dumps({"MyCustomOp": {"precision_reduce": {"flag": "yes"}}}))
    r = run_cli("lint", "--ops-info", str(info), str(m))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "MyCustomOp" in r.stderr and str(info) in r.stderr


@pytest.mark.parametrize("flag", ['"yes"', "1", '"maybe"', "null", '["true"]', '""'])
def test_invalid_precision_reduce_flag_is_an_error_naming_file_and_type(tmp_path, flag):
    info = tmp_path / "aic-custom-ops-info.json"
    info.write_text('{"Exp": {"precision_reduce": {"flag": "true"}}, "MyOp": {"precision_reduce": {"flag": %s}}}' % flag)
    m = tmp_path / "m.json"
    m.write_text('{"black-list": {"to-add": ["Exp"]}}')
    code, out, err = cli("lint", "--ops-info", str(info), str(m))
    assert code == 2, out + err
    assert err.count("\n") == 1 and str(info) in err and "MyOp" in err and not out


@pytest.mark.parametrize("content", ["[" * 100000 + "]" * 100000, '{"Exp": {"precision_reduce": {"flag": 1' + "0" * 5000 + "}}}",
                                     "[1, 2]", '{"Exp": []}', '{"Exp": {"precision_reduce": "true"}}', "{}"])
def test_malformed_ops_info_is_one_line_exit_2(tmp_path, content):
    info = tmp_path / "aic-x-ops-info.json"
    info.write_text(content)
    m = tmp_path / "m.json"
    m.write_text('{"black-list": {"to-add": ["Exp"]}}')
    code, out, err = cli("lint", "--ops-info", str(info), str(m))
    assert code == 2 and err.count("\n") == 1 and str(info) in err and not out, err


@pytest.mark.parametrize("content", ['{"black-list": {"to-add": ' + "[" * 100000 + "]" * 100000 + "}}",
                                     '{"black-list": {"to-add": [1' + "0" * 5000 + "]}}"])
def test_mixlist_nested_too_deeply_or_with_a_huge_number_is_one_line_exit_2(tmp_path, content):
    m = tmp_path / "m.json"
    m.write_text(content)
    code, out, err = cli("lint", str(m))
    assert code == 2 and err.count("\n") == 1 and str(m) in err and not out, out + err


# --- scale: one suggestion per distinct type -------------------------------------------------------------------
def test_did_you_mean_is_computed_once_per_distinct_type(monkeypatch):
    import advisor.lint as lint_mod
    calls = []
    real_suggest = lint_mod.suggest

    def counting(t, lists):
        calls.append(t)
        return real_suggest(t, lists)

    monkeypatch.setattr(lint_mod, "suggest", counting)
    typos = ["MatMu1V2", "Loglp", "StrideSliceD"]
    text = json.dumps({"black-list": {"to-add": typos * 400, "to-remove": typos * 300},
                       "white-list": {"to-remove": typos * 300}})
    fs = lint_text(text, L910)
    assert sorted(calls) == sorted(typos)
    unknown = [f for f in fs if f.code == "unknown-op-type"]
    assert {(f.op_type, f.suggestion) for f in unknown} == {("MatMu1V2", "MatMulV2"), ("Loglp", "Log1p"),
                                                            ("StrideSliceD", "StridedSliceD")}


def test_json_output_of_a_lone_surrogate_type_is_valid_json(tmp_path):
    m = tmp_path / "m.json"
    m.write_text('{"black-list": {"to-add": ["\\ud800x"]}}')
    r = run_cli("lint", "--json", str(m))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr   # stderr: the human report (--json)
    (f,) = json.loads(r.stdout)["files"][str(m)]
    assert f["op_type"] == "\ud800x" and f["code"] == "unknown-op-type"


def test_lint_warns_that_a_gray_list_to_add_changes_nothing():
    """GE's GetPrecisionPolicy has no branch for add-gray: MatMulV2 stays white (hicann/ge st_configuration.cc:1619)."""
    fs = lint_text('{"gray-list": {"to-add": ["MatMulV2"]}}', load_default("ascend910b"))
    assert [(f.code, f.severity, f.op_type) for f in fs] == [("no-op-add", "warning", "MatMulV2")]
    assert "GE ignores gray-list to-add" in fs[0].message and "is white" in fs[0].message
