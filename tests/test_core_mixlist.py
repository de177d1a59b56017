"""The modify_mixlist model: GE's semantics for to-add / to-remove, emit, diff."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from advisor.errors import MixlistError
from advisor.mixlist import Mixlist, apply, between, from_targets, list_changes, parse_text
from advisor.oplists import OpLists, load_default, load_ops_info

BASE = OpLists(white=frozenset({"A", "MatMulV2"}), black=frozenset({"Log"}),
               known=frozenset({"A", "MatMulV2", "Log", "Exp", "Add"}), soc="test")


# --- the four cases of the CANN mixed-precision document (A is white by default) ---
def test_seed_case_add_to_black_moves_white_op_to_black():
    res = apply(BASE, parse_text('{"black-list": {"to-add": ["A"]}}'))
    assert res.lists.list_of("A") == "black" and not res.warnings


def test_seed_case_add_to_black_and_remove_from_white_ends_black():
    res = apply(BASE, parse_text('{"black-list": {"to-add": ["A"]}, "white-list": {"to-remove": ["A"]}}'))
    assert res.lists.list_of("A") == "black" and not res.warnings


def test_seed_case_remove_from_white_only_leaves_gray_not_black():
    res = apply(BASE, parse_text('{"white-list": {"to-remove": ["A"]}}'))
    assert res.lists.list_of("A") == "gray"


def test_seed_case_remove_from_black_only_leaves_gray():
    res = apply(BASE, parse_text('{"black-list": {"to-remove": ["Log"]}}'))
    assert res.lists.list_of("Log") == "gray"


def test_remove_from_list_type_is_not_in_only_warns():
    res = apply(BASE, parse_text('{"black-list": {"to-remove": ["Exp"]}}'))
    assert res.lists == BASE and len(res.warnings) == 1 and "Exp" in res.warnings[0]


def test_add_to_white_moves_black_op_to_white():
    assert apply(BASE, Mixlist(white_add=("Log",))).lists.list_of("Log") == "white"


def test_same_type_in_black_and_white_to_add_is_an_error():
    with pytest.raises(MixlistError, match="Operation add white list, add black list for op Exp is invalid"):
        parse_text('{"black-list": {"to-add": ["Exp"]}, "white-list": {"to-add": ["Exp"]}}')


def test_gray_list_to_add_changes_nothing():
    """GetPrecisionPolicy has no branch for add-gray (modify_mixlist_config_parser.cc:265-294)."""
    res = apply(BASE, parse_text('{"gray-list": {"to-add": ["MatMulV2", "Log", "Exp"]}}'))
    assert [res.lists.list_of(t) for t in ("MatMulV2", "Log", "Exp")] == ["white", "black", "gray"]
    assert res.lists == BASE and all("gray-list to-add" in w for w in res.warnings)


def test_add_overrides_a_remove_from_another_list():
    """black to-remove + white to-add ends white from every list (GE's op_mix_list3.json)."""
    m = parse_text('{"black-list": {"to-remove": ["Exp", "Log", "A"]}, "white-list": {"to-add": ["Exp", "Log", "A"]}}')
    assert [apply(BASE, m).lists.list_of(t) for t in ("Exp", "Log", "A")] == ["white"] * 3


def test_types_are_exact_and_case_sensitive():
    res = apply(BASE, parse_text('{"black-list": {"to-add": ["matmulv2"]}}'))
    assert res.lists.list_of("MatMulV2") == "white"


def test_invalid_json_reports_line_and_column():
    with pytest.raises(MixlistError, match=r"line 2 column \d+"):
        parse_text('{"black-list":\n {"to-add": ["Exp",]}}', "x.json")


def test_comments_are_rejected_with_a_hint():
    with pytest.raises(MixlistError, match="comments"):
        parse_text('{"black-list": {"to-add": ["Exp"]} // hi\n}')


def test_wrong_structure_is_rejected():
    with pytest.raises(MixlistError, match="unknown key"):
        parse_text('{"blacklist": {"to-add": ["Exp"]}}')
    with pytest.raises(MixlistError, match="array"):
        parse_text('{"black-list": {"to-add": "Exp"}}')


def test_emitted_file_is_stable_and_round_trips():
    m = Mixlist(black_add=("Exp", "Add"), white_remove=("MatMulV2",))
    text = m.to_json()
    d = json.loads(text)
    assert list(d) == ["black-list", "white-list"]
    assert list(d["black-list"]) == ["to-add", "to-remove"]
    assert parse_text(text) == m
    assert text == m.to_json()


def test_diff_lists_effective_changes():
    after = apply(BASE, Mixlist(black_add=("A", "Exp"), black_remove=("Log",))).lists
    assert list_changes(BASE, after) == {"A": ("white", "black"), "Exp": ("gray", "black"), "Log": ("black", "gray")}


def test_from_targets_gray_becomes_to_remove_from_current_list():
    m = from_targets(BASE, {"A": "gray", "Log": "gray", "Exp": "black"})
    assert m.white_remove == ("A",) and m.black_remove == ("Log",) and m.black_add == ("Exp",)


def test_ops_info_file_flags_give_lists(tmp_path):
    p = tmp_path / "aic-ascend910b-ops-info.json"
    p.write_text(json.dumps({"MatMulV2": {"precision_reduce": {"flag": "true"}},
                             "Log": {"precision_reduce": {"flag": "false"}}, "Exp": {"input0": {}}}))
    lists = load_ops_info(p)
    assert (lists.soc, lists.list_of("MatMulV2"), lists.list_of("Log"), lists.list_of("Exp")) == \
        ("ascend910b", "white", "black", "gray")


def test_default_tables_match_reference_counts(real):
    ref = json.loads((real / "reference/precision_reduce_cann8.1RC1.json").read_text())
    for soc, d in ref.items():
        lists = load_default(soc, "8.1")
        assert lists.white == set(d["white"]) and lists.black == set(d["black"]) and lists.gray == set(d["gray"])
    b = load_default("ascend910b", "8.1.RC1")
    assert (b.list_of("MatMulV2"), b.list_of("ReduceSum"), b.list_of("Exp"), b.list_of("MatMulV3")) == \
        ("white", "black", "gray", "gray")


TYPES = ["A", "MatMulV2", "Log", "Exp", "Add", "Mul"]
type_lists = st.lists(st.sampled_from(TYPES), max_size=3, unique=True)


# every (list, action) set GE accepts for one type, spelled as in its source's template table (VerifyMixlist's
# kPrecisionReduceUpdateTemplate, modify_mixlist_config_parser.cc:46-60) - the oracle of the tests below
GE_TEMPLATES = [
    {("black", "to-remove")}, {("white", "to-remove")}, {("gray", "to-add")},
    {("gray", "to-add"), ("black", "to-remove")}, {("gray", "to-add"), ("white", "to-remove")},
    {("white", "to-add")}, {("white", "to-add"), ("gray", "to-remove")}, {("white", "to-add"), ("black", "to-remove")},
    {("black", "to-add")}, {("black", "to-add"), ("gray", "to-remove")}, {("black", "to-add"), ("white", "to-remove")},
]
EDITS = [(lst, act) for lst in ("black", "white", "gray") for act in ("to-add", "to-remove")]


def _mixlist_of(t, edits):
    return Mixlist(**{f"{lst}_{'add' if act == 'to-add' else 'remove'}": (t,) for lst, act in edits})


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_applying_a_mixlist_then_its_inverse_diff_restores_the_lists(data):
    parts: dict = {}
    for t in TYPES:       # each type: one of GE's templates, or nothing
        for lst, act in data.draw(st.sampled_from([set()] + GE_TEMPLATES)):
            parts.setdefault(f"{lst}_{'add' if act == 'to-add' else 'remove'}", []).append(t)
    m = Mixlist(**{k: tuple(v) for k, v in parts.items()})
    after = apply(BASE, m).lists
    restored = apply(after, between(after, BASE)).lists
    assert (restored.white, restored.black) == (BASE.white, BASE.black)
    assert apply(BASE, between(BASE, after)).lists == after


# --- files written by others: duplicate keys, limits, op types that do not exist ------------------------------
def test_duplicate_list_key_is_refused_naming_key_and_line(tmp_path):
    from advisor.mixlist import load
    p = tmp_path / "m.json"
    p.write_text('{\n  "black-list": {"to-add": ["Exp"]},\n  "white-list": {"to-add": []},\n'
                 '  "black-list": {"to-add": ["Sigmoid"]}\n}\n')
    with pytest.raises(MixlistError, match=r"line 4 column 3: duplicate key .black-list. \(first at line 2\)") as e:
        load(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_duplicate_inner_key_is_refused():
    with pytest.raises(MixlistError, match=r"line 2 column 2: duplicate key .to-add. in black-list"):
        parse_text('{"black-list": {"to-add": ["Exp"],\n "to-add": ["Sigmoid"]}}', "m.json")


@pytest.mark.parametrize("content", ['{"black-list": {"to-add": ' + "[" * 100000 + "]" * 100000 + "}}",
                                     '{"black-list": {"to-add": [1' + "0" * 5000 + "]}}",
                                     "[" * 100000 + "]" * 100000])
def test_too_deep_or_too_long_numbers_are_one_line_input_errors(tmp_path, content):
    from advisor.errors import InputError
    from advisor.mixlist import load
    p = tmp_path / "m.json"
    p.write_text(content)
    with pytest.raises(InputError) as e:
        load(p)
    assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_mixlist_remembers_its_file_without_changing_equality(tmp_path):
    from advisor.mixlist import load
    p = tmp_path / "m.json"
    p.write_text('{"black-list": {"to-add": ["Exp"]}}')
    m = load(p)
    assert m.source == str(p) and m == Mixlist(black_add=("Exp",))


def test_op_type_of_no_table_is_refused_with_did_you_mean():
    from advisor.mixlist import check_op_types
    lists = load_default("ascend910b")
    m = parse_text('{"black-list": {"to-add": ["Exp", "MatMu1V2"]}}', "start.json")
    with pytest.raises(MixlistError) as e:
        check_op_types(m, lists)
    msg = str(e.value)
    assert msg.startswith("start.json:") and "'MatMu1V2'" in msg and "'MatMulV2'" in msg and "ascend910b" in msg


def test_custom_op_types_of_the_run_graph_and_other_known_types_are_accepted():
    from advisor.mixlist import check_op_types
    lists = load_default("ascend910b")
    m = parse_text('{"black-list": {"to-add": ["MyFusedAttention", "ArgMaxD"]}, "white-list": {"to-remove": ["Data"]}}',
                   "m.json")
    check_op_types(m, lists, graph_types={"MyFusedAttention", "MatMulV2"})   # ArgMaxD: a 910 type; Data: GE node
    with pytest.raises(MixlistError, match="MyFusedAttention"):
        check_op_types(m, lists)


def _strip_comments_by_hand(text):
    """Oracle: a character scanner (strings are opaque; // and # to the end of the line and /* */
    become spaces, line breaks kept)."""
    out, i, n, had, in_str = [], 0, len(text), False, False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            in_str = c != '"'
            i += 1
        elif c == '"':
            in_str = True
            out.append(c)
            i += 1
        elif text.startswith("//", i) or c == "#":
            had = True
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            had = True
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out), had


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='ab"\\/*#\n {}[]', max_size=60))
def test_comment_stripping_equals_a_character_scanner(text):
    from advisor.mixlist import strip_json_comments
    assert strip_json_comments(text) == _strip_comments_by_hand(text)
