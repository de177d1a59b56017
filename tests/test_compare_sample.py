"""advisor compare on the real msprobe 26.2.0 fp32 vs bf16 pair (tests/fixtures/real/msprobe_dump_pair_cpu)."""
import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from advisor.cli import main
from advisor.compare.judge import compare_dumps
from advisor.ingest.run import run_from_dumps
from advisor.compare import attribute

SAMPLE = Path(__file__).resolve().parent / "fixtures" / "real" / "msprobe_dump_pair_cpu"


def _rank_dir(which: str) -> Path:
    return next((SAMPLE / which / "step0").iterdir())


def _direct(entry: str, idx: int = 0):
    t = torch.load(_rank_dir("pair_bf16") / "dump_tensor_data" / f"{entry}.output.{idx}.pt", weights_only=True)
    g = torch.load(_rank_dir("pair_fp32") / "dump_tensor_data" / f"{entry}.output.{idx}.pt", weights_only=True)
    t, g = t.double().flatten(), g.double().flatten()
    return torch.nn.functional.cosine_similarity(t, g, dim=0).item(), (t - g).abs().max().item(), \
        ((t - g).norm() / g.norm()).item()


def test_cli_table_and_json_agree_with_torch(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "220")
    out = tmp_path / "r.json"
    csv = tmp_path / "r.csv"
    rc = main(["compare", "--target", str(SAMPLE / "pair_bf16"), "--golden", str(SAMPLE / "pair_fp32"),
               "--json", str(out), "--csv", str(csv)])
    text = capsys.readouterr().out
    assert rc in (0, 1)
    res = json.loads(out.read_text())
    ops = {o["node"]: o for o in res["ops"]}
    assert "Functional.linear.0.forward" in ops and "Torch.softmax.0.forward" in ops
    checked = 0
    for name, o in ops.items():
        cos, mx, rel = _direct(name)
        assert o["out_cosine"] == pytest.approx(cos, abs=1e-9)
        assert o["out_max_abs"] == pytest.approx(mx, rel=1e-9)
        assert o["out_rel_l2"] == pytest.approx(rel, rel=1e-9)
        # the terminal table shows the same figures
        assert f"{cos:.6f}" in text
        checked += 1
    assert checked == 5
    # first op over tolerance is the first one in execution order whose figures exceed the thresholds
    order = list(ops)
    exceeding = [n for n in order if ops[n]["out_cosine"] < 0.999 or ops[n]["out_rel_l2"] > 1e-2]
    assert res["first_exceeding"] == (exceeding[0] if exceeding else None)
    assert res["verdict"]["ok"] == (rc == 0)
    header = csv.read_text().splitlines()[0].split(",")
    for col in ("node", "type", "precision", "out_rel_l2", "out_cosine", "out_max_abs", "in_rel_l2", "growth",
                "introduced", "blamed_on"):
        assert col in header


def test_all_tensor_pairs_including_backward_match_torch():
    df = compare_dumps(SAMPLE / "pair_bf16", SAMPLE / "pair_fp32", io=("output",))
    bwd = df[df["entry"].str.endswith(".backward")]
    assert len(bwd) > 0
    for _, r in df.iterrows():
        tf = _rank_dir("pair_bf16") / "dump_tensor_data" / f"{r['entry']}.output.{r['pos']}.pt"
        gf = _rank_dir("pair_fp32") / "dump_tensor_data" / f"{r['entry']}.output.{r['pos']}.pt"
        t = torch.load(tf, weights_only=True).double().flatten()
        g = torch.load(gf, weights_only=True).double().flatten()
        assert r["max_abs"] == pytest.approx((t - g).abs().max().item(), rel=1e-9, abs=1e-30)
        if t.norm() > 0 and g.norm() > 0:
            assert r["cosine"] == pytest.approx(torch.nn.functional.cosine_similarity(t, g, dim=0).item(), abs=1e-9)


def test_dump_only_dataflow_is_inferred():
    a = attribute(run_from_dumps(SAMPLE / "pair_bf16", SAMPLE / "pair_fp32"))
    assert a.ops.loc["Functional.layer_norm.0.forward", "in_from"] == "Functional.linear.0.forward"
    assert a.ops.loc["Torch.softmax.0.forward", "in_from"] == "Tensor.__mul__.0.forward"
    # received error of layer_norm = produced error of linear
    assert a.ops.loc["Functional.layer_norm.0.forward", "in_rel_l2"] == pytest.approx(
        a.ops.loc["Functional.linear.0.forward", "out_rel_l2"])
    json.dumps(a.to_dict())


def _stats_only_copy(tmp_path: Path, which: str) -> Path:
    src = _rank_dir(which)
    dst = tmp_path / which / "step0" / "rank0"
    dst.mkdir(parents=True)
    shutil.copy(src / "dump.json", dst / "dump.json")   # no dump_tensor_data/: statistics only
    return tmp_path / which


def test_statistics_only_dumps_get_the_labelled_subset(tmp_path):
    t, g = _stats_only_copy(tmp_path, "pair_bf16"), _stats_only_copy(tmp_path, "pair_fp32")
    a = attribute(run_from_dumps(t, g))
    assert set(a.ops["kind"]) == {"stats"}
    assert a.ops["out_cosine"].isna().all()
    d = json.loads((_rank_dir("pair_bf16") / "dump.json").read_text())["data"]
    e = json.loads((_rank_dir("pair_fp32") / "dump.json").read_text())["data"]
    nt, ng = d["Torch.softmax.0.forward"]["output"][0]["Norm"], e["Torch.softmax.0.forward"]["output"][0]["Norm"]
    assert a.ops.loc["Torch.softmax.0.forward", "out_rel_l2"] == pytest.approx(abs(nt - ng) / abs(ng))


def test_bad_inputs_exit_2(tmp_path, capsys):
    g = str(SAMPLE / "pair_fp32")
    bad = tmp_path / "bad" / "step0" / "rank0"
    bad.mkdir(parents=True)
    (bad / "dump.json").write_text('{"task": "tensor", "data": {"a": ')
    assert main(["compare", "--target", str(tmp_path / "bad"), "--golden", g]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "advisor: error:" in err
    # a data_name escaping the dump folder
    esc = tmp_path / "esc" / "step0" / "rank0"
    (esc / "dump_tensor_data").mkdir(parents=True)
    d = json.loads((_rank_dir("pair_bf16") / "dump.json").read_text())
    d["data"]["Functional.linear.0.forward"]["output"][0]["data_name"] = "../../../../etc/passwd"
    (esc / "dump.json").write_text(json.dumps(d))
    assert main(["compare", "--target", str(tmp_path / "esc"), "--golden", g]) == 2
    assert "outside" in capsys.readouterr().err
    assert main(["compare", "--target", str(tmp_path / "nope"), "--golden", g]) == 2
    assert main(["compare", "--golden", g]) == 2
    assert main(["compare", "--run", str(tmp_path), "--target", g, "--golden", g]) == 2
    assert main(["compare", "--run", str(tmp_path)]) == 2
    assert main(["compare", "--target", g, "--golden", g, "--min-cosine", "3"]) == 2


def test_thresholds_change_the_exit_code(tmp_path):
    t, g = str(SAMPLE / "pair_bf16"), str(SAMPLE / "pair_fp32")
    a = attribute(run_from_dumps(t, g))
    fin = a.final[0]["output"]
    # a threshold tighter than the measured final error fails, a looser one passes
    assert main(["compare", "--target", t, "--golden", g, "--max-rel-l2", str(fin["rel_l2"] * 0.5)]) == 1
    assert main(["compare", "--target", t, "--golden", g, "--max-rel-l2", str(fin["rel_l2"] * 2),
                 "--min-cosine", str(fin["cosine"] - 1e-6)]) == 0
    # existing output files are kept, not overwritten
    out = tmp_path / "x.json"
    out.write_text("mine")
    main(["compare", "--target", t, "--golden", g, "--json", str(out)])
    assert (tmp_path / "x.json.bak").read_text() == "mine"
    assert json.loads(out.read_text())["tolerance"]["max_rel_l2"] == 1e-2


MSTT = SAMPLE.parent / "msprobe_dump_mstt_ut"


def test_old_format_statistics_dump_against_a_perturbed_copy(tmp_path):
    d = json.loads((MSTT / "dump.json").read_text())
    same = tmp_path / "same" / "step0" / "rank0"
    same.mkdir(parents=True)
    (same / "dump.json").write_text(json.dumps(d))
    assert main(["compare", "--target", str(tmp_path / "same"), "--golden", str(MSTT / "dump.json")]) == 0
    rec = d["data"]["NPU.npu_rms_norm.0.forward"]["output"][0]
    rec["Norm"] = rec["Norm"] * 1.1
    bad = tmp_path / "bad" / "step0" / "rank0"
    bad.mkdir(parents=True)
    (bad / "dump.json").write_text(json.dumps(d))
    a = attribute(run_from_dumps(tmp_path / "bad", MSTT / "dump.json"))
    row = a.ops.loc["NPU.npu_rms_norm.0.forward"]
    assert row["kind"] == "stats" and row["out_rel_l2"] == pytest.approx(0.1)
    assert a.first_exceeding == "NPU.npu_rms_norm.0.forward"
    assert not any(n.startswith("Module.") for n in a.ops.index)


def test_entries_present_in_one_dump_only_are_reported(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    t = _stats_only_copy(tmp_path, "pair_bf16")
    f = t / "step0" / "rank0" / "dump.json"
    d = json.loads(f.read_text())
    del d["data"]["Torch.softmax.0.forward"]
    f.write_text(json.dumps(d))
    main(["compare", "--target", str(t), "--golden", str(SAMPLE / "pair_fp32"), "--json", str(tmp_path / "o.json")])
    assert "1 entries only in the golden dump: Torch.softmax.0.forward" in capsys.readouterr().out
    res = json.loads((tmp_path / "o.json").read_text())
    assert res["unmatched"]["golden_only"] == ["Torch.softmax.0.forward"]
    assert "Torch.softmax.0.forward" not in {o["node"] for o in res["ops"]}


# ---------------------------------------------------------------------- msprobe's own result table
MSPROBE_TENSOR_HEADER = [
    "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
    "NPU Requires_grad", "Bench Requires_grad", "Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr",
    "One Thousandth Err Ratio", "Five Thousandths Err Ratio", "NPU max", "NPU min", "NPU mean", "NPU l2norm",
    "Bench max", "Bench min", "Bench mean", "Bench l2norm", "Requires_grad Consistent", "Accuracy Reached or Not",
    "Err_message", "Data_name"]
MSPROBE_STATS_HEADER = [
    "NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape", "Bench Tensor Shape",
    "NPU Requires_grad", "Bench Requires_grad", "Max diff", "Min diff", "Mean diff", "L2norm diff",
    "MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr", "NPU max", "NPU min", "NPU mean",
    "NPU l2norm", "Bench max", "Bench min", "Bench mean", "Bench l2norm", "Requires_grad Consistent", "Result",
    "Err_message"]


def test_msprobe_result_table_as_xlsx_and_csv(tmp_path):
    import pandas as pd
    xlsx, csv = tmp_path / "compare_result.xlsx", tmp_path / "compare_result.csv"
    rc = main(["compare", "--target", str(SAMPLE / "pair_bf16"), "--golden", str(SAMPLE / "pair_fp32"),
               "--xlsx", str(xlsx), "--msprobe-csv", str(csv)])
    assert rc in (0, 1)
    for df in (pd.read_excel(xlsx), pd.read_csv(csv)):
        assert list(df.columns) == MSPROBE_TENSOR_HEADER + ["Step"]
        rows = df.set_index("NPU Name")
        r = rows.loc["Torch.softmax.0.forward.output.0"]
        t = torch.load(_rank_dir("pair_bf16") / "dump_tensor_data" / "Torch.softmax.0.forward.output.0.pt",
                       weights_only=True).double().flatten()
        g = torch.load(_rank_dir("pair_fp32") / "dump_tensor_data" / "Torch.softmax.0.forward.output.0.pt",
                       weights_only=True).double().flatten()
        assert float(r["Cosine"]) == pytest.approx(torch.nn.functional.cosine_similarity(t, g, dim=0).item(), abs=1e-9)
        assert float(r["EucDist"]) == pytest.approx((t - g).norm().item(), rel=1e-9)
        assert float(r["MaxAbsErr"]) == pytest.approx((t - g).abs().max().item(), rel=1e-9)
        assert r["NPU Dtype"] == "torch.bfloat16" and r["Bench Dtype"] == "torch.float32"
        assert r["NPU Tensor Shape"] == r["Bench Tensor Shape"] == "[16, 32]"
        # msprobe's rule: No if (cos < 0.99 and max abs > 0.001) or cos < 0.9 or max abs > 1
        for _, x in df.iterrows():
            if x["Cosine"] == "unsupported":          # a 0-d tensor: msprobe computes no cosine
                assert x["NPU Tensor Shape"] == "[]" and str(x["Accuracy Reached or Not"]) in ("None", "nan")
                continue
            cos, mx = float(x["Cosine"]), float(x["MaxAbsErr"])
            rule = not ((cos < 0.99 and mx > 0.001) or cos < 0.9 or mx > 1)
            assert x["Accuracy Reached or Not"] == ("Yes" if rule else "No")
        assert any(n.endswith(".input.0") for n in rows.index) and any(".backward." in n for n in rows.index)
    # an existing file with other content is kept, not overwritten
    xlsx.write_bytes(b"mine")
    main(["compare", "--target", str(SAMPLE / "pair_bf16"), "--golden", str(SAMPLE / "pair_fp32"), "--xlsx", str(xlsx)])
    assert (tmp_path / "compare_result.xlsx.bak").read_bytes() == b"mine"


def test_msprobe_result_table_of_statistics_dumps_has_the_statistics_columns(tmp_path):
    import pandas as pd
    t, g = _stats_only_copy(tmp_path, "pair_bf16"), _stats_only_copy(tmp_path, "pair_fp32")
    csv = tmp_path / "r.csv"
    main(["compare", "--target", str(t), "--golden", str(g), "--msprobe-csv", str(csv)])
    df = pd.read_csv(csv)
    assert list(df.columns) == MSPROBE_STATS_HEADER + ["Step"]
    r = df.set_index("NPU Name").loc["Torch.softmax.0.forward.output.0"]
    dt = json.loads((_rank_dir("pair_bf16") / "dump.json").read_text())["data"]["Torch.softmax.0.forward"]["output"][0]
    dg = json.loads((_rank_dir("pair_fp32") / "dump.json").read_text())["data"]["Torch.softmax.0.forward"]["output"][0]
    for col, k in (("Max diff", "Max"), ("Min diff", "Min"), ("Mean diff", "Mean"), ("L2norm diff", "Norm")):
        assert float(r[col]) == pytest.approx(dt[k] - dg[k])
    assert r["NormRelativeErr"] == f"{abs((dt['Norm'] - dg['Norm']) / dg['Norm']) * 100}%"
    assert r["Result"] != "Warning" or "Need double check" in r["Err_message"]


# ---------------------------------------------------------------------- --json on stdout
def test_json_flag_prints_the_result_on_stdout_and_json_out_writes_a_file(tmp_path, capsys):
    t, g = str(SAMPLE / "pair_bf16"), str(SAMPLE / "pair_fp32")
    rc = main(["compare", "--target", t, "--golden", g, "--json"])
    cap = capsys.readouterr()
    res = json.loads(cap.out)                       # stdout holds only the JSON
    assert res["verdict"]["ok"] == (rc == 0) and "worst ops" in cap.err
    out = tmp_path / "r.json"
    assert main(["compare", "--target", t, "--golden", g, "--json-out", str(out)]) == rc
    assert json.loads(out.read_text())["verdict"] == res["verdict"] and "deprecated" not in capsys.readouterr().err
    # the old spelling --json FILE still writes FILE, with a one-line note on stderr
    old = tmp_path / "old.json"
    assert main(["compare", "--target", t, "--golden", g, "--json", str(old), "--top", "3"]) == rc
    err = capsys.readouterr().err
    assert json.loads(old.read_text())["verdict"] == res["verdict"]
    assert [x for x in err.splitlines() if "deprecated" in x] == [
        f"advisor: note: --json FILE is deprecated, use --json-out {old} (--json alone prints the result on stdout)"]


def test_statistics_only_table_shows_statistics_differences_not_empty_cosines(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    t, g = _stats_only_copy(tmp_path, "pair_bf16"), _stats_only_copy(tmp_path, "pair_fp32")
    main(["compare", "--target", str(t), "--golden", str(g)])
    table = capsys.readouterr().out.split("first op exceeding")[0]
    assert "Max rel diff" in table and "Norm rel diff" in table and "cosine" not in table
    a = attribute(run_from_dumps(t, g))
    row = a.ops.loc["Torch.softmax.0.forward"]
    d = json.loads((_rank_dir("pair_bf16") / "dump.json").read_text())["data"]["Torch.softmax.0.forward"]["output"][0]
    e = json.loads((_rank_dir("pair_fp32") / "dump.json").read_text())["data"]["Torch.softmax.0.forward"]["output"][0]
    assert row["out_max_rel_diff"] == pytest.approx(abs(d["Max"] - e["Max"]) / abs(e["Max"]))
    assert f"{row['out_max_rel_diff']:.4g}" in table
