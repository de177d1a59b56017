"""report.html in a real headless browser (chromium --dump-dom): the stable hooks survive parsing
and nothing is fetched from the network."""
from __future__ import annotations

import math
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from advisor.oplists import load_lists
from advisor.recommend import recommend_graph, write_outputs
from advisor.recommend.synthetic import Builder

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason="needs chromium")]


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_report_dom_in_headless_chromium(tmp_path):
    b = Builder()
    mm = b.op("MatMulV2", "x", weight=True, shape=(512, 1024))
    ex = b.op("Exp", mm, shape=(512, 1024), local=math.inf, local_nf=1)
    b.op("MatMulV2", ex, weight=True, shape=(512, 1024))
    rec = recommend_graph(b.g, load_lists(), local=b.local())
    paths = write_outputs(rec, tmp_path)
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          paths["report"].resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-500:]
    p = Tags()
    p.feed(out.stdout)
    ids = {a.get("id") for _, a in p.tags}
    assert {"status", "edits", "flips-table", "error-plot", "share-plot", "minimality", "snippets"} <= ids
    edits = [a for t, a in p.tags if t == "div" and "edit" in (a.get("class") or "").split()]
    assert [(a["data-type"], a["data-kind"]) for a in edits] == [("Exp", "black-add")]
    flips = [a["data-node"] for t, a in p.tags if t == "tr" and a.get("class") == "flip"]
    assert set(flips) == {f.node for f in rec.edits[0].predicted_flips}
    assert not [a for t, a in p.tags if t in ("script", "link", "img", "iframe")]
