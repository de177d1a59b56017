"""The op-type tables: ops-info files written by others, op types whose precision means nothing, did-you-mean."""
import difflib
import json

import pytest
from hypothesis import given, settings, strategies as st

from advisor.errors import InputError
from advisor.oplists import PRECISION_FREE_TYPES, load_default, load_ops_info, precision_free, suggest


@pytest.mark.parametrize("flag", ["yes", 1, "maybe", None, 0.5, ["true"], {"v": "true"}, ""])
def test_invalid_precision_reduce_flag_is_refused_naming_file_and_type(tmp_path, flag):
    p = tmp_path / "aic-ascend910b-ops-info.json"
    p.write_text(json.dumps({"Exp": {"precision_reduce": {"flag": "true"}},
                             "MyOp": {"precision_reduce": {"flag": flag}}}))
    with pytest.raises(InputError) as e:
        load_ops_info(p)
    assert str(p) in str(e.value) and "MyOp" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("flag,lst", [("true", "white"), ("false", "black"), (" TRUE ", "white"), (True, "white"),
                                      (False, "black")])
def test_valid_precision_reduce_flags(tmp_path, flag, lst):
    p = tmp_path / "aic-ascend910b-ops-info.json"
    p.write_text(json.dumps({"MyOp": {"precision_reduce": {"flag": flag}}}))
    assert load_ops_info(p).list_of("MyOp") == lst


def test_ops_info_lists_are_labelled_by_their_file(tmp_path):
    p = tmp_path / "aic-ascend910b-ops-info.json"
    p.write_text(json.dumps({"MyOp": {"precision_reduce": {"flag": "true"}}}))
    assert str(p) in load_ops_info(p, "ascend910b").label
    assert load_default("ascend910b").label == "ascend910b"


def test_ops_info_fifo_is_refused(tmp_path):
    import os
    p = tmp_path / "aic-ascend910b-ops-info.json"
    os.mkfifo(p)
    with pytest.raises(InputError, match="FIFO"):
        load_ops_info(p)


def test_precision_free_types_are_real_op_types_and_include_the_reported_ones():
    assert {"ZerosLike", "OnesLike", "Less"} <= PRECISION_FREE_TYPES
    known = set().union(*(load_default(s).known for s in ("ascend910", "ascend910b", "ascend910_93", "ascend310p")))
    assert PRECISION_FREE_TYPES <= known
    assert precision_free("Less") and not precision_free("Exp") and not precision_free("Fill")


names = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_", min_size=1, max_size=24)


@settings(max_examples=300, deadline=None)
@given(st.one_of(names, st.sampled_from(sorted(load_default("ascend910b").known)).flatmap(
    lambda t: st.sampled_from([t, t.lower(), t[:-1], t + "x", t.replace("l", "1"), t[1:]]))))
def test_fast_suggest_equals_difflib(t):
    """The indexed did-you-mean gives exactly what difflib's get_close_matches gives."""
    lists = load_default("ascend910b")

    def norm(x):
        return x.lower().replace("1", "l").replace("0", "o").replace("_", "")

    by_norm = {}
    for k in sorted(lists.known | lists.white | lists.black):
        by_norm.setdefault(norm(k), k)
    n = norm(t)
    if n in by_norm and by_norm[n] != t:
        want = by_norm[n]
    else:
        close = difflib.get_close_matches(n, list(by_norm), n=1, cutoff=0.82)
        want = by_norm[close[0]] if close else None
    assert suggest(t, lists) == want
