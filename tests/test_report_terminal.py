"""Terminal and report wording: compare fits an 80-column terminal, a measured pass is said confirmed, the
minimality table shows the numbers the edits' sections show, the search reads as a sentence without its timing,
and re-running recommend on the same inputs keeps no .bak when only the timing differs."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

from rich.console import Console

from advisor.cli import main
from advisor.oplists import load_lists
from advisor.recommend import recommend_graph, write_outputs
from advisor.recommend.synthetic import Builder as G
from advisor.report import print_recommendation
from advisor.report.html import render_recommendation

SAMPLE = Path(__file__).resolve().parent / "fixtures" / "real" / "msprobe_dump_pair_cpu"


def test_compare_fits_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    rc = main(["compare", "--target", str(SAMPLE / "pair_bf16"), "--golden", str(SAMPLE / "pair_fp32")])
    text = capsys.readouterr().out
    assert rc in (0, 1)
    lines = [ln for ln in text.splitlines() if not ln.startswith("note: ")]   # notes: one line each, for grep
    assert lines and max(len(ln) for ln in lines) <= 80, max(lines, key=len)
    # every op of the worst-ops table, whole, on one line (nothing folded mid-name), with its figures
    for name in ("Functional.linear.0.forward", "Torch.softmax.0.forward"):
        assert any(name in ln for ln in lines), name
    assert re.search(r"cosine \d\.\d{6}, rel L2 ", text)
    monkeypatch.setenv("COLUMNS", "200")               # a wide terminal still gets the table
    main(["compare", "--target", str(SAMPLE / "pair_bf16"), "--golden", str(SAMPLE / "pair_fp32")])
    assert "┃ op" in capsys.readouterr().out


def _no_change(measured_ok: bool) -> dict:
    return {"status": "no-change-needed", "ok": measured_ok, "confirmed": False, "mode": "mixed_float16",
            "soc": "ascend910b", "edits": [], "performance_edits": [],
            "predicted": {"measured": {"how": "measured", "meets_tolerance": measured_ok, "final_rel_l2": 1e-4}},
            "minimality": {"proved": True, "statement": "no edit is needed", "checks": []}}


def test_measured_pass_is_said_confirmed_by_the_measured_run():
    con = Console(record=True, width=200)
    print_recommendation(_no_change(True), con)
    text = con.export_text()
    assert "confirmed by the measured run" in text and "unconfirmed" not in text
    assert "the measured run meets the tolerance" in text
    html = render_recommendation(_no_change(True))
    assert 'data-confirmed="true"' in html and "confirmed by the measured run" in html
    con = Console(record=True, width=200)       # a prediction is still unconfirmed
    d = _no_change(True)
    d["predicted"]["measured"]["how"] = "replayed"
    print_recommendation(d, con)
    assert "unconfirmed until a re-run" in con.export_text()


def _rec():
    b = G()
    mm = b.op("MatMulV2", "x", weight=True, shape=(512, 1024))
    ex = b.op("Exp", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    sg = b.op("Sigmoid", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    b.op("Add", ex, sg, shape=(512, 1024))
    return recommend_graph(b.g, load_lists("ascend910b"), local=b.local())


def _minimality_cells(html: str) -> list[list[str]]:
    sec = html[html.index('<section id="minimality">'):]
    sec = sec[:sec.index("</section>")]
    return [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", sec) if "<td>" in row]


def test_minimality_table_shows_the_numbers_of_the_edits_sections():
    d = json.loads(json.dumps(_rec().to_dict()))
    rows = _minimality_cells(render_recommendation(d))
    assert rows and all(r[1] != "n/a" for r in rows), rows
    # a replayed check names its figures worst_rel_l2 / non_finite: shown, not n/a
    d["minimality"]["checks"] = [{"edit": d["edits"][0]["edit"], "meets_tolerance_without_it": False, "how": "replayed",
                                  "without_it": {"worst_rel_l2": 0.25, "non_finite": False, "how": "replayed"}},
                                 {"edit": d["edits"][1]["edit"], "meets_tolerance_without_it": False,
                                  "how": "replayed", "without_it": {"worst_rel_l2": None, "non_finite": True}}]
    rows = _minimality_cells(render_recommendation(d))
    assert rows[0][1:4] == ["0.25", "no", "replayed"] and rows[1][1:3] == ["inf", "yes"], rows


def test_report_search_is_a_sentence_without_timing():
    d = _rec().to_dict()
    d["search"] = {"method": "replay", "budget": 200, "enumerated": 11, "candidates": 4, "replays": 3,
                   "seconds": 0.201, "truncated": False, "max_edits": 4}
    html = render_recommendation(d)
    line = re.search(r'<p class="muted" id="search">(.*?)</p>', html).group(1)
    assert line == ("search: replay search, 11 edit sets enumerated, 4 candidate types, 3 replays, at most 4 edits "
                    "per set, budget 200")
    d["search"]["seconds"] = 9.9
    assert render_recommendation(d) == html       # timing does not reach the report


def test_rerun_with_identical_inputs_keeps_no_bak_when_only_timing_differs(tmp_path):
    rec = _rec()
    rec.search = {**rec.search, "seconds": 0.201}
    first = write_outputs(rec, tmp_path)
    rec.search = {**rec.search, "seconds": 0.245}        # the same search, the machine busier
    again = write_outputs(rec, tmp_path)
    assert not [k for k in again if k.startswith("kept:")], again
    assert sorted(q.name for q in tmp_path.iterdir() if ".bak" in q.name) == []
    assert json.loads(first["recommendation"].read_text())["search"]["seconds"] == 0.201   # the file was left
    rec.search = {**rec.search, "max_edits": 3}          # a different result: kept as .bak
    third = write_outputs(rec, tmp_path)
    assert "kept:recommendation.json" in third and (tmp_path / "recommendation.json.bak").exists()
