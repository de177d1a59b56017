"""advisor tune on TensorFlow/Keras workloads, end to end through the CLI (emulator runner -> compare ->
recommend -> re-capture)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from advisor.cli import main  # noqa: E402
from advisor.mixlist import load  # noqa: E402

pytestmark = pytest.mark.tf

EX = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_keras_planted_exp_overflow_confirms_with_single_black_list_edit(tmp_path):
    out = tmp_path / "tune"
    rc = main(["tune", f"{EX / 'keras_hazard.py'}:workload", "--out", str(out)])
    s = json.loads((out / "summary.json").read_text())
    assert rc == 0 and s["confirmed"]
    assert s["edits"]["black-list"]["to-add"] == ["Exp"]
    assert s["edits"]["white-list"] == {"to-add": [], "to-remove": []}
    assert s["runs"] - 1 <= 3
    assert s["final"]["finite"] and s["final"]["rel_l2"] <= 1e-2
    assert load(out / "modify_mixlist.json").black_add == ("Exp",)
    first = s["history"][0]
    assert first["ok"] is False                      # the default lists overflow
    run = json.loads((out / s["history"][s["best_iteration"]]["dir"] / "run" / "run.json").read_text())
    assert run["framework"] == "tensorflow" and "Exp" in json.dumps(run["mixlist"])


@pytest.mark.slow
def test_keras_control_confirms_without_edit(tmp_path):
    out = tmp_path / "tune"
    rc = main(["tune", f"{EX / 'keras_hazard.py'}:control", "--out", str(out), "--max-runs", "3"])
    s = json.loads((out / "summary.json").read_text())
    assert rc == 0 and s["confirmed"]
    assert s["edits"]["black-list"]["to-add"] == []
    assert s["history"][0]["ok"] is True


@pytest.mark.slow
def test_keras_training_control_confirms_without_edit(tmp_path):
    out = tmp_path / "tune"
    rc = main(["tune", f"{EX / 'keras_train.py'}:workload", "--out", str(out), "--max-runs", "3"])
    s = json.loads((out / "summary.json").read_text())
    assert rc == 0 and s["confirmed"] and s["history"][0]["ok"] is True
    assert s["edits"]["black-list"]["to-add"] == []
    run = out / s["history"][0]["dir"] / "run"
    assert json.loads((run / "run.json").read_text())["training"] is True
    d = json.loads((run / "dump" / "mixed" / "step0" / "rank0" / "dump.json").read_text())["data"]
    assert "Model.loss.0.forward" in d and any(k.startswith("Grad.") for k in d)


@pytest.mark.slow
def test_node_names_are_the_same_in_every_iteration(tmp_path):
    # tune re-captures in one process; Keras' auto-naming must not drift between iterations
    import pandas as pd
    out = tmp_path / "tune"
    main(["tune", f"{EX / 'keras_hazard.py'}:workload", "--out", str(out)])
    s = json.loads((out / "summary.json").read_text())
    names = []
    for h in s["history"]:
        (kd,) = (out / h["dir"] / "run").glob("profile/*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv")
        names.append(list(pd.read_csv(kd)["Name"]))
    assert len(names) >= 2 and all(n == names[0] for n in names)
