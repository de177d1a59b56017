"""report.html is self-contained (no network, no scripts) and exposes stable hooks; the terminal
summary names the edits; recommendation.json carries evidence and snippets."""
from __future__ import annotations

import json
import math
from html.parser import HTMLParser

from rich.console import Console

from advisor.recommend import recommend_graph, write_outputs
from advisor.recommend.diffing import DiffResult
from advisor.report import print_diff, print_recommendation, render_diff

from advisor.oplists import load_lists
from advisor.recommend.synthetic import Builder as G

LISTS = load_lists("ascend910b")


class Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def by_id(self, i):
        return [t for t in self.tags if t[1].get("id") == i]

    def by_class(self, c, tag=None):
        return [t for t in self.tags if c in (t[1].get("class") or "").split() and (tag is None or t[0] == tag)]


def _rec():
    b = G()
    mm = b.op("MatMulV2", "x", weight=True, shape=(512, 1024))
    ex = b.op("Exp", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    sg = b.op("Sigmoid", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    b.op("Add", ex, sg, shape=(512, 1024))
    return recommend_graph(b.g, LISTS, local=b.local())


def test_report_self_contained_with_stable_hooks(tmp_path):
    rec = _rec()
    paths = write_outputs(rec, tmp_path)
    html = paths["report"].read_text()
    low = html.lower()
    assert "<script" not in low and "http://" not in low.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in low and "<link" not in low and "@import" not in low
    p = Collect()
    p.feed(html)
    for i in ("summary", "status", "edits", "perf-edits", "flipped", "flips-table", "error-plot", "share-plot",
              "minimality", "alternative", "findings", "snippets", "notes", "mixlist", "prediction"):
        assert p.by_id(i), i
    assert p.by_id("status")[0][1]["data-status"] == "recommended"
    edits = p.by_class("edit", "div")
    assert sorted(t[1]["data-type"] for t in edits) == ["Exp", "Sigmoid"]
    assert all(t[1]["data-kind"] == "black-add" for t in edits)
    # the flipped-instances table has one row per predicted flip
    n_flips = sum(len(e.predicted_flips) for e in rec.edits)
    assert n_flips > 0
    rows_total = [t for t in p.by_class("flip", "tr")]
    assert len(rows_total) == 2 * n_flips        # per-edit tables + the global table
    bars = p.by_class("share-bar", "rect")
    shares = sorted(float(t[1]["data-share"]) for t in bars)
    want = sorted([rec.predicted.base.low_precision_share, rec.predicted.recommended.low_precision_share])
    assert shares == [round(x, 6) for x in want] or all(abs(a - b) < 1e-6 for a, b in zip(shares, want))
    assert p.by_class("series", "polyline")
    targets = {t[1]["data-target"] for t in p.by_class("snippet", "pre")}
    assert {"tf2_npu_device", "tf1_session_config", "tf1_npu_run_config", "atc", "ge_option",
            "pytorch_eager_autocast"} <= targets
    assert p.by_id("minimality") and 'data-proved="true"' in html


def test_recommendation_json_evidence_and_snippets(tmp_path):
    rec = _rec()
    paths = write_outputs(rec, tmp_path)
    d = json.loads(paths["recommendation"].read_text())
    assert d["confirmed"] is False and d["ok"] is True
    assert d["tolerance"]["rel_l2_max"] == 0.01
    for e in d["edits"]:
        ev = e["evidence"]
        assert ev["worst_instances"] and "local_rel_l2" in ev["worst_instances"][0]
        assert "received_rel_l2" in ev["worst_instances"][0]
        assert ev["local_vs_received"]["any_local_nonfinite"] is True
        assert e["predicted_flips"] and "predicted_time_change_us" in e
    assert str(paths["mixlist"].resolve()) in d["snippets"]["atc"]
    assert "precision_mode_v2 = 'mixed_float16'" in d["snippets"]["tf2_npu_device"]
    assert "ge.exec.modify_mixlist" in d["snippets"]["ge_option"]
    pt = d["snippets"]["pytorch_eager_autocast"]
    assert "torch.exp" in pt and "torch.sigmoid" in pt
    compile(pt, "policy", "exec")                    # the snippet is valid Python
    assert json.loads(paths["mixlist"].read_text()) == d["modify_mixlist"]


def test_outputs_never_silently_overwrite(tmp_path):
    rec = _rec()
    (tmp_path / "modify_mixlist.json").write_text("{}\n")
    paths = write_outputs(rec, tmp_path)
    assert (tmp_path / "modify_mixlist.json.bak").read_text() == "{}\n"
    assert "kept:modify_mixlist.json" in paths
    again = write_outputs(rec, tmp_path)             # identical content: nothing new kept
    assert "kept:modify_mixlist.json" not in again


def test_terminal_summary_names_edits_and_alternative():
    rec = _rec()
    con = Console(record=True, width=200)
    print_recommendation(rec.to_dict(), con)
    text = con.export_text()
    assert "black-list to-add Exp" in text and "black-list to-add Sigmoid" in text
    assert "fewest-edit alternative" in text and "MatMulV2" in text


def test_diff_render_hooks():
    res = DiffResult("a.json", "b.json", {"Exp": ("gray", "black")},
                     [{"node": "exp1", "type": "Exp", "before": "fp16", "after": "fp32",
                       "why_before": {"rule": "gray-inherit", "via": "mm0", "root": "mm0"},
                       "why_after": {"rule": "black", "via": None, "root": "exp1"}}],
                     {"a": {"time_us": 10.0}, "b": {"time_us": 11.0}}, ["no activations"], {"rel_l2_max": 0.01},
                     "mixed_float16", "ascend910b")
    html = render_diff(res.to_dict(), {})
    p = Collect()
    p.feed(html)
    assert p.by_id("list-changes") and p.by_id("flips-table")
    assert [t[1]["data-node"] for t in p.by_class("flip", "tr")] == ["exp1"]
    assert [t[1]["data-type"] for t in p.by_class("change", "tr")] == ["Exp"]
    con = Console(record=True, width=200)
    print_diff(res.to_dict(), con)
    assert "exp1" in con.export_text()
