"""The typed, versioned Recommendation: recommendation.json has one key per field, reads back as the same objects
(``from_dict``, what tune uses), version-1 files stay readable, a newer version is refused; the one Edit type
round-trips through its sentence and its journal entry."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest

from advisor.errors import InputError
from advisor.oplists import load_lists
from advisor.recommend import Recommendation, recommend_graph, write_outputs
from advisor.recommend.edits import Edit, edits_from_json, edits_of, edits_to_json, mixlist_of, proposable
from advisor.recommend.result import VERSION, EditReport, PlanSummary
from advisor.recommend.synthetic import Builder
from advisor.results import from_json, to_json

LISTS = load_lists("ascend910b")


def _rec():
    b = Builder()
    mm = b.op("MatMulV2", "x", weight=True, shape=(512, 1024))
    ex = b.op("Exp", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    sg = b.op("Sigmoid", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    b.op("Add", ex, sg, shape=(512, 1024))
    return recommend_graph(b.g, LISTS, local=b.local())


def test_recommendation_json_keys_are_its_field_names():
    d = _rec().to_dict()
    fields = {f.name for f in dataclasses.fields(Recommendation)}
    assert d["schema"] == "advisor.recommendation/1" and d["version"] == VERSION
    assert set(d) - {"schema", "version"} <= fields
    e = d["edits"][0]
    assert set(e) - {"list", "action", "type", "kind", "op", "line"} <= {f.name for f in dataclasses.fields(EditReport)}
    assert set(d["predicted"]["base"]) <= {f.name for f in dataclasses.fields(PlanSummary)}


def test_recommendation_json_reads_back_as_the_same_objects(tmp_path):
    rec = _rec()
    paths = write_outputs(rec, tmp_path)
    back = Recommendation.from_dict(json.loads(paths["recommendation"].read_text()))
    assert back.fixes == rec.fixes == {Edit("black-add", "Exp"), Edit("black-add", "Sigmoid")}
    assert back.modify_mixlist == rec.modify_mixlist and back.predicted == rec.predicted
    assert back.minimality == rec.minimality and back.edits == rec.edits
    assert back.to_dict() == json.loads(paths["recommendation"].read_text())


def test_a_version_1_file_is_readable_and_a_newer_one_refused():
    d = _rec().to_dict()
    v1 = {k: v for k, v in d.items() if k not in ("version", "dump_scope")}
    assert Recommendation.from_dict(v1).fixes == Recommendation.from_dict(d).fixes
    with pytest.raises(InputError, match="version"):
        Recommendation.from_dict({**d, "version": VERSION + 1})
    with pytest.raises(InputError, match="not a recommendation"):
        Recommendation.from_dict({"schema": "advisor.something/1"})
    with pytest.raises(InputError, match="edits"):
        Recommendation.from_dict({**d, "edits": [{"edit": "purple-list to-add Exp"}]})


def test_an_edit_round_trips_through_its_sentence_and_its_journal_entry():
    for e in (Edit("black-add", "Exp"), Edit("white-remove", "MatMulV2"), Edit("keep", "LayerNorm"),
              Edit("keep", "MatMulV2", "/fc/Gemm"), Edit("keep", "", "/a (b)/c")):
        assert Edit.parse(str(e)) == e
        assert Edit.of_entry(*e.entry) == e.journal_identity
    edits = frozenset({Edit("black-add", "Exp"), Edit("white-remove", "MatMulV2")})
    assert edits_from_json(edits_to_json(edits)) == edits
    assert edits_of(mixlist_of(edits)) == edits
    assert edits_to_json(edits) == [["black", "to-add", "Exp"], ["white", "to-remove", "MatMulV2"]]


def test_one_rule_says_which_types_are_never_proposed():
    assert proposable("Exp") and not proposable("Exp", exclude={"Exp"})
    assert not any(proposable(t) for t in ("", "Cast", "Data", "Const", "ZerosLike", "Less"))


def test_results_serde_reads_nested_types_by_their_hints():
    s = PlanSummary(final_rel_l2=1e-3, final_nonfinite=False, time_us=2.0, how="replayed", steps=[0, 1])
    assert from_json(PlanSummary, to_json(s)) == s
    assert "reasons" not in to_json(s)                       # an unknown optional is left out
    with pytest.raises(InputError, match="time_us"):
        from_json(PlanSummary, {**to_json(s), "time_us": "fast"}, "x")
