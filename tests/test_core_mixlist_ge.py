"""GE's own modify_mixlist tests as oracles: the fixtures of hicann/ge (tests/fixtures/real/ge_mix_list, SOURCES.md)
give exactly the policies GE's tests assert, and a file GE's parser rejects is rejected by advisor.

GE's tests: ``tests/engines/nn_engine/ut/testcase/fusion_engine/fusion_manager/ut_configuration.cc``
(``modify_mixlist_case1``-``case6``, l.1686-1819) and ``tests/engines/nn_engine/st/testcase/fusion_manager/
st_configuration.cc`` (``modify_mixlist_case4``-``case6``, l.1592-1680); the parser is
``compiler/engines/nn_engine/utils/common/config_parser/modify_mixlist_config_parser.cc``."""
from __future__ import annotations

import itertools
import json

import pytest

from advisor.errors import MixlistError
from advisor.mixlist import Mixlist, apply, load, parse_text
from advisor.oplists import OpLists

from conftest import REAL

GE = REAL / "ge_mix_list"
TYPES = frozenset("ABCDEFGHIJK")


def policy(path, op_type: str, kernel_policy: str) -> str:
    """GE's ``Configuration::GetPrecisionPolicy(op_type, kernel_policy)`` with the file at ``path``: the type's list
    after the mixlist when its ops-info puts it in ``kernel_policy``."""
    lists = OpLists(frozenset({op_type}) if kernel_policy == "white" else frozenset(),
                    frozenset({op_type}) if kernel_policy == "black" else frozenset(), TYPES)
    return apply(lists, load(path)).lists.list_of(op_type)


# ut_configuration.cc modify_mixlist_case1 (GRAY), case2 (BLACK), case3 (WHITE) with op_mix_list1.json: every
# type of the file, whose 11 types are exactly GE's 11 templates
CASES_LIST1 = {
    "gray": dict(A="gray", B="gray", C="gray", D="gray", E="black", F="black", G="black", H="gray", I="white",
                 J="white", K="white"),
    "black": dict(A="black", B="gray", C="black", D="gray", E="black", F="black", G="black", H="black", I="white",
                  J="white", K="white"),
    "white": dict(A="white", B="white", C="gray", D="white", E="black", F="black", G="black", H="gray", I="white",
                  J="white", K="white"),
}


@pytest.mark.parametrize("kernel_policy", sorted(CASES_LIST1))
def test_ge_op_mix_list1_gives_the_policy_ges_tests_assert_for_every_template(kernel_policy):
    got = {t: policy(GE / "op_mix_list1.json", t, kernel_policy) for t in sorted(TYPES)}
    assert got == CASES_LIST1[kernel_policy]


def test_ge_op_mix_list1_gray_list_to_add_leaves_every_policy_unchanged():
    """st_configuration.cc:1619-1626: A is only in gray-list to-add; GRAY, BLACK, WHITE stay what they are."""
    assert [policy(GE / "op_mix_list1.json", "A", p) for p in ("gray", "black", "white")] == ["gray", "black", "white"]


def test_ge_op_mix_list2_black_add_with_white_remove_is_black_from_every_list():
    """st_configuration.cc:1601-1608 (and again at :1628-1635)."""
    assert [policy(GE / "op_mix_list2.json", "A", p) for p in ("gray", "black", "white")] == ["black"] * 3


def test_ge_op_mix_list3_black_remove_with_white_add_is_white_from_every_list():
    """st_configuration.cc:1610-1617."""
    assert [policy(GE / "op_mix_list3.json", "A", p) for p in ("gray", "black", "white")] == ["white"] * 3


def test_ge_op_mix_list4_one_type_in_two_to_adds_rejects_the_file():
    """modify_mixlist_case5 (st :1638-1658): RefreshParameters FAILED; the message is GE's VerifyMixlist one."""
    with pytest.raises(MixlistError, match='"Operation add white list, add black list for op A is invalid"'):
        load(GE / "op_mix_list4.json")


def test_ge_op_mix_list5_unknown_list_keys_reject_the_file():
    """modify_mixlist_case6 (st :1660-1680): "grey-list" / "whi-list" are not list keys (LoadModifyMixlistJson :150)."""
    with pytest.raises(MixlistError, match="unknown key 'grey-list'"):
        load(GE / "op_mix_list5.json")


# ---------------------------------------------------------------------- VerifyMixlist's templates
# every (list, action) set GE accepts for one type, spelled as in its template table
# (kPrecisionReduceUpdateTemplate, modify_mixlist_config_parser.cc:46-60)
GE_TEMPLATES = [
    {("black", "to-remove")}, {("white", "to-remove")}, {("gray", "to-add")},
    {("gray", "to-add"), ("black", "to-remove")}, {("gray", "to-add"), ("white", "to-remove")},
    {("white", "to-add")}, {("white", "to-add"), ("gray", "to-remove")}, {("white", "to-add"), ("black", "to-remove")},
    {("black", "to-add")}, {("black", "to-add"), ("gray", "to-remove")}, {("black", "to-add"), ("white", "to-remove")},
]
EDITS = [(lst, act) for lst in ("black", "white", "gray") for act in ("to-add", "to-remove")]
ALL_SETS = [set(c) for n in range(1, 7) for c in itertools.combinations(EDITS, n)]
REJECTED = [s for s in ALL_SETS if s not in GE_TEMPLATES]


def _text(op_type: str, edits) -> str:
    d: dict = {}
    for lst, act in sorted(edits):
        d.setdefault(f"{lst}-list", {}).setdefault(act, []).append(op_type)
    return json.dumps(d)


def _name(edits) -> str:
    return "+".join(f"{lst}-{act[3:]}" for lst, act in sorted(edits))


def test_only_ges_eleven_templates_are_accepted():
    assert len(ALL_SETS) == 63 and len(REJECTED) == 52
    accepted = []
    for edits in ALL_SETS:
        try:
            parse_text(_text("Exp", edits), "m.json")
            accepted.append(edits)
        except MixlistError:
            pass
    assert sorted(map(_name, accepted)) == sorted(map(_name, GE_TEMPLATES))


@pytest.mark.parametrize("edits", [{("black", "to-add"), ("black", "to-remove")},
                                   {("white", "to-add"), ("white", "to-remove")}], ids=_name)
def test_to_add_and_to_remove_in_one_list_rejects_the_file(edits):
    with pytest.raises(MixlistError, match="to-add and to-remove in"):
        parse_text(_text("Exp", edits), "m.json")


def test_to_remove_from_black_and_white_rejects_the_file():
    with pytest.raises(MixlistError, match='"Operation remove white list, remove black list for op Exp is invalid"'):
        parse_text('{"black-list": {"to-remove": ["Exp"]}, "white-list": {"to-remove": ["Exp"]}}', "m.json")


def test_gray_list_to_remove_alone_rejects_the_file():
    with pytest.raises(MixlistError, match='"Operation remove gray list for op Exp is invalid"'):
        parse_text('{"gray-list": {"to-remove": ["Exp"]}}', "m.json")


def test_a_rejected_type_rejects_the_whole_file_even_beside_valid_edits():
    text = '{"black-list": {"to-add": ["Log", "Exp"]}, "white-list": {"to-add": ["MatMulV2", "Exp"]}}'
    col = text.rindex('"Exp"') + 1          # the entry that completes the rejected set: the second Exp
    with pytest.raises(MixlistError, match=f"line 1 column {col}: .*for op Exp is invalid"):
        parse_text(text, "m.json")


def test_a_built_mixlist_ge_rejects_is_refused_when_applied():
    with pytest.raises(MixlistError, match="remove gray list for op Exp"):
        apply(OpLists(frozenset(), frozenset(), frozenset({"Exp"})), Mixlist(gray_remove=("Exp",)))


def test_run_json_mixlist_ge_rejects_is_refused():
    from advisor.mixlist import parse_obj
    with pytest.raises(MixlistError, match="run.json mixlist: .*add black list, remove black list for op Exp"):
        parse_obj({"black-list": {"to-add": ["Exp"], "to-remove": ["Exp"]}}, "run.json mixlist")


# ---------------------------------------------------------------------- lint: an error per rejected template
@pytest.mark.parametrize("edits", REJECTED, ids=_name)
def test_lint_reports_each_rejected_template_as_an_error_with_ges_reason(tmp_path, edits):
    from advisor.lint import lint_text
    from advisor.mixlist import describe, BIT
    from advisor.oplists import load_default
    found = [f for f in lint_text(_text("Exp", edits), load_default("ascend910b")) if f.severity == "error"]
    bits = sum(BIT[e] for e in edits)
    assert [(f.code, f.op_type) for f in found] == [("conflict", "Exp")]
    assert f'"Operation {describe(bits)} for op Exp is invalid"' in found[0].message


# ---------------------------------------------------------------------- every command reading a mixlist refuses
HEAD = ("Step Id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Wait Time(us),Block Dim,Input Shapes,"
        "Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats")
ROWS = ['1,MatMulV2_1,MatMulV2,AI_CORE,10.0,50.0,0,20,"""64,64;64,64""",FLOAT16;FLOAT16,ND;ND,"""64,64""",FLOAT16,ND',
        '1,Exp_2,Exp,AI_VECTOR_CORE,70.0,9.0,0,20,"""64,64""",FLOAT16,ND,"""64,64""",FLOAT16,ND']
REJECTED_TEXT = '{"black-list": {"to-add": ["Exp"]}, "white-list": {"to-add": ["Exp"]}}'
GE_REASON = '"Operation add white list, add black list for op Exp is invalid"'


def cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from advisor.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _profile(d):
    prof = d / "run"
    prof.mkdir()
    (prof / "kernel_details.csv").write_text("\n".join([HEAD] + ROWS) + "\n")
    return prof


COMMANDS = {
    "recommend": lambda prof, m, d: ["recommend", "--profile", str(prof), "--mixlist", str(m), "--out", str(d / "o")],
    "diff": lambda prof, m, d: ["diff", "defaults", str(m), "--profile", str(prof), "--out", str(d / "o")],
    "replay": lambda prof, m, d: ["replay", "--run", str(prof), "--mixlist", str(m)],
    "capture": lambda prof, m, d: ["capture", str(d / "nope.py") + ":workload", "--mixlist", str(m), "--out",
                                   str(d / "o")],
    "tune": lambda prof, m, d: ["tune", str(d / "nope.py") + ":workload", "--mixlist", str(m), "--out", str(d / "o")],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_refuses_a_mixlist_ge_rejects_in_one_line(tmp_path, command):
    prof = _profile(tmp_path)
    m = tmp_path / "start.json"
    m.write_text(REJECTED_TEXT)
    code, out, err = cli(*COMMANDS[command](prof, m, tmp_path))
    assert code == 2 and err.count("\n") == 1 and str(m) in err and GE_REASON in err, err
    assert "nope.py" not in err           # capture / tune: refused before the workload is even looked at


def test_inspect_refuses_a_run_whose_mixlist_ge_rejects(tmp_path):
    prof = _profile(tmp_path)
    (prof / "mixlist.json").write_text(REJECTED_TEXT)
    code, out, err = cli("inspect", "--profile", str(prof))
    assert code == 2 and err.count("\n") == 1 and str(prof / "mixlist.json") in err and GE_REASON in err, err


def test_lint_exits_non_zero_with_ges_reason_for_a_rejected_file(tmp_path):
    m = tmp_path / "m.json"
    m.write_text(REJECTED_TEXT)
    code, out, err = cli("lint", str(m))
    assert code == 1 and "error: [conflict]" in out and GE_REASON in out, out + err


@pytest.mark.parametrize("command", ["capture", "tune"])
@pytest.mark.parametrize("mode", ["force_fp16", "must_keep_origin_dtype", "allow_fp32_to_fp16", "fp16"])
def test_capture_and_tune_refuse_a_mixlist_in_a_non_mixed_mode_as_atc_does(tmp_path, command, mode):
    m = tmp_path / "ok.json"
    m.write_text('{"black-list": {"to-add": ["Exp"]}}')
    code, out, err = cli(*COMMANDS[command](None, m, tmp_path), "--mode", mode)
    assert code == 2 and err.count("\n") == 1 and str(m) in err and "Modify_mixlist is set" in err, err
    assert ("precision_mode_v2" in err) == (mode == "fp16") and "nope.py" not in err
