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
    assert ("conflict", None) in got and ("no-op-remove", "MatMulV2") in got and ("add-and-remove", "Exp") in got


def test_not_json_text_is_reported_with_position():
    f = lint_text("black-list: Exp, Log\n", L910)
    assert [(x.code, x.line, x.column) for x in f] == [("invalid-json", 1, 1)]


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "advisor", *args], capture_output=True, text=True)


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
