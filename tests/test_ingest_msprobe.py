"""msprobe dump reader: both dump.json layouts, tensor files, path containment, alignment, roots."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from advisor.errors import InputError
from advisor.ingest.msprobe import align, load_dump, load_dump_root, load_tensor, saturation

SHARED = Path(__file__).resolve().parent / "fixtures" / "real"
OLD = SHARED / "msprobe_dump_mstt_ut" / "dump.json"
PAIR = SHARED / "msprobe_dump_pair_cpu"


def test_old_format_statistics():
    d = load_dump(OLD)
    raw = json.loads(OLD.read_text())
    assert d.task == "statistics" and len(d) == len(raw["data"])
    assert not d.has_tensors
    e = d.entries["Tensor.__add__.0.forward"]
    assert [r.key for r in e.inputs] == ["input.0"]  # the int argument is not a tensor
    assert e.inputs[0].dtype == "int64" and e.inputs[0].shape == ()
    assert e.outputs[0].max == raw["data"]["Tensor.__add__.0.forward"]["output"][0]["Max"]
    bw = d.entries["NPU.npu_fusion_attention.0.backward"]  # new layout: input/output
    assert bw.inputs and bw.outputs
    assert bw.inputs[0].dtype == "bf16"


def test_new_format_tensor_mode_and_load():
    root = load_dump_root(PAIR / "pair_bf16")
    assert list(root) == [(0, 0)]
    d = root[(0, 0)]
    assert d.task == "tensor" and d.has_tensors and not d.missing_files
    lin = d.entries["Functional.linear.0.forward"]
    out = lin.outputs[0]
    assert out.dtype == "bf16" and out.shape == (16, 32)
    assert out.path.parent.name == "dump_tensor_data"  # resolved next to dump.json, not dump_data_dir
    a = load_tensor(out)
    assert a.dtype == np.float32 and a.shape == (16, 32)
    assert a.max() == pytest.approx(out.max) and a.min() == pytest.approx(out.min)
    ln = d.entries["Functional.layer_norm.0.forward"]
    assert [r.index for r in ln.inputs][:2] == ["0", "2"]  # index 1 is the int list
    bw = d.entries["Functional.linear.0.backward"]
    assert [r.index for r in bw.outputs] == ["0", "2"]  # null output skipped, index kept


def test_align_reports_one_sided(tmp_path):
    t = load_dump_root(PAIR / "pair_bf16")[(0, 0)]
    g = load_dump_root(PAIR / "pair_fp32")[(0, 0)]
    al = align(t, g)
    assert not al.only_target and not al.only_golden and len(al.common) == len(t)
    pairs = list(al.tensor_pairs())
    assert pairs and all(r.key == q.key for _, _, r, q in pairs)
    # drop an entry from a copy of the golden dump
    gd = tmp_path / "g"
    shutil.copytree(g.folder, gd)
    raw = json.loads((gd / "dump.json").read_text())
    raw["data"].pop("Tensor.sum.0.forward")
    raw["data"]["Extra.op.0.forward"] = {"output": []}
    (gd / "dump.json").write_text(json.dumps(raw))
    al2 = align(t, load_dump(gd))
    assert al2.only_target == ["Tensor.sum.0.forward"]
    assert al2.only_golden == ["Extra.op.0.forward"]
    assert "Tensor.sum.0.forward" in al2.report() and "Extra.op.0.forward" in al2.report()
    f = al2.frame()
    assert set(f["entry"]) == set(al2.common) - {e for e in al2.common if not t.entries[e].by_key}


def _mini_dump(folder: Path, data_name: str, payload=None, ext=".npy"):
    (folder / "dump_tensor_data").mkdir(parents=True, exist_ok=True)
    rec = {"type": "torch.Tensor", "dtype": "torch.float16", "shape": [3], "Max": 65504.0, "Min": -1.0,
           "Mean": 0.0, "Norm": 1.0, "requires_grad": False, "data_name": data_name}
    (folder / "dump.json").write_text(json.dumps({"task": "tensor", "level": "L1", "framework": "pytorch",
                                                  "dump_data_dir": "/elsewhere", "data": {"Op.a.0.forward": {
                                                      "input": [rec], "output": [rec]}}}))


def test_npy_and_saturation(tmp_path):
    _mini_dump(tmp_path, "a.npy")
    np.save(tmp_path / "dump_tensor_data" / "a.npy", np.array([1, 2, 65504], dtype=np.float16))
    d = load_dump(tmp_path)
    a = load_tensor(d.entries["Op.a.0.forward"].outputs[0])
    assert a.tolist() == [1.0, 2.0, 65504.0]
    assert len(saturation(d)) == 2


def test_escaping_data_name_rejected(tmp_path):
    _mini_dump(tmp_path, "../../etc/passwd")
    with pytest.raises(InputError) as ei:
        load_dump(tmp_path)
    assert "outside" in str(ei.value)


def test_absolute_data_name_rejected(tmp_path):
    _mini_dump(tmp_path, "/etc/passwd")
    with pytest.raises(InputError):
        load_dump(tmp_path)


def test_pickle_refused(tmp_path):
    import pathlib
    _mini_dump(tmp_path, "a.pt")
    # an arbitrary class instance: weights_only refuses to unpickle it
    torch.save({"obj": pathlib.PurePosixPath("x")}, tmp_path / "dump_tensor_data" / "a.pt")
    d = load_dump(tmp_path)
    with pytest.raises(InputError):
        load_tensor(d.entries["Op.a.0.forward"].outputs[0])


def test_multi_step_rank_root(tmp_path):
    for s in (0, 1):
        for r in (0, 1):
            _mini_dump(tmp_path / f"step{s}" / f"rank{r}", "x.npy")
    root = load_dump_root(tmp_path)
    assert sorted(root) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert root[(1, 0)].missing_files == ["x.npy"]


@pytest.mark.parametrize("content", [b"", b"\x00\x01garbage", b'{"task": "tensor", "data": {"a": {', b"[1, 2]",
                                     b'{"data": {"a": 3}}', b'{"data": {"a": {"output": [{"type": "torch.Tensor", "dtype": "x", "shape": "abc"}]}}}'])
def test_malformed(tmp_path, content):
    (tmp_path / "dump.json").write_bytes(content)
    with pytest.raises(InputError) as ei:
        load_dump(tmp_path)
    assert "\n" not in str(ei.value)


def test_fuzz(tmp_path_factory):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    d = tmp_path_factory.mktemp("fz")
    base = OLD.read_bytes()
    js = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                      lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                      max_leaves=20)

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cut=st.integers(0, len(base)), obj=js, mode=st.integers(0, 1))
    def run(cut, obj, mode):
        data = base[:cut] if mode == 0 else json.dumps({"task": "x", "data": {"e.0.forward": obj}}).encode()
        (d / "dump.json").write_bytes(data)
        try:
            load_dump(d)
        except InputError:
            pass
    run()
