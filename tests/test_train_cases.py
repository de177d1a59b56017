"""Generated training cases whose problem appears only after some steps (bench/train_cases.py): compare over steps
finds each at the step the eager-FP32 oracle says (+-1), with the op and parameter leading there; a healthy run has
no departure; a run whose FP32 reference diverges too is not a precision problem."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.train_cases import make_train_case  # noqa: E402

from advisor.cli import main  # noqa: E402
from advisor.compare.steps import judge_steps  # noqa: E402
from advisor.emulator import capture  # noqa: E402
from advisor.ingest.steps import read_steps  # noqa: E402


def _judged(case, tmp_path):
    run = capture(case.workload(), tmp_path / case.name, local=False)
    return run, judge_steps(read_steps(run))


@pytest.mark.parametrize("seed", [0, 3])
def test_weights_growing_until_an_activation_overflows_depart_at_that_step(tmp_path, seed):
    case = make_train_case("weight_growth", seed)
    _, v = _judged(case, tmp_path)
    d = v.departure
    assert d is not None and abs(d.step - case.expected_step) <= 1 and d.reason == case.expected_reason == "non-finite"
    assert d.op == case.lead_op and d.phase == "fwd" and d.param.startswith("grow.") and d.precision


@pytest.mark.parametrize("seed", [1, 2])
def test_a_gradient_overflowing_every_step_collapses_the_dynamic_scale(tmp_path, seed):
    case = make_train_case("grad_spiral", seed)
    _, v = _judged(case, tmp_path)
    d = v.departure
    assert d is not None and abs(d.step - case.expected_step) <= 1
    assert d.reason == case.expected_reason == "scale-collapse"
    assert d.phase == case.lead_phase and d.param == case.lead_param and d.precision
    assert v.skipped == v.steps          # every step skipped: the spiral


@pytest.mark.parametrize("seed", [0, 4])
def test_a_healthy_run_has_no_departure(tmp_path, seed):
    case = make_train_case("healthy", seed)
    _, v = _judged(case, tmp_path)
    assert v.departure is None and v.ok and v.fp32_diverges_at is None


def test_when_the_fp32_run_diverges_too_it_is_not_a_precision_problem(tmp_path):
    case = make_train_case("diverging", 1)
    _, v = _judged(case, tmp_path)
    assert v.fp32_diverges_at == case.expected_step
    assert v.departure is not None and not v.departure.precision and v.ok
    assert "not a precision problem" in v.sentence()


def test_compare_reports_the_departure_and_exits_1(tmp_path, capsys):
    case = make_train_case("weight_growth", 2)
    run = capture(case.workload(), tmp_path / "run", local=False)
    rc = main(["compare", "--run", str(run), "--json"])
    doc = json.loads(capsys.readouterr().out)["training_steps"]
    assert rc == 1 and not doc["ok"] and doc["departure"]["step"] == case.expected_step
    assert doc["departure"]["op"] == case.lead_op and "departs at step" in doc["summary"]


def test_compare_on_a_healthy_training_run_exits_0(tmp_path, capsys):
    case = make_train_case("healthy", 2)
    run = capture(case.workload(), tmp_path / "run", local=False)
    rc = main(["compare", "--run", str(run)])
    out = capsys.readouterr().out
    assert rc == 0 and "training steps:" in out and "no departure" in out


def test_compare_html_draws_both_losses_the_scale_and_each_skipped_step(tmp_path):
    case = make_train_case("grad_spiral", 2)
    run = capture(case.workload(), tmp_path / "run", local=False)
    out = tmp_path / "steps.html"
    assert main(["compare", "--run", str(run), "--html", str(out)]) == 1
    page = out.read_text()
    for hook in ('id="training"', 'id="loss-plot"', 'id="scale-plot"', 'id="drift-plot"', 'id="departure"'):
        assert hook in page
    assert page.count('class="skipped-step"') == case.steps       # every step of the spiral is skipped
    assert f'data-step="{case.expected_step}" data-reason="scale-collapse"' in page


def test_compare_html_needs_a_training_run(tmp_path, capsys):
    run = capture(f"{REPO / 'examples' / 'mlp_exp.py'}:workload",
                  tmp_path / "run", local=False)
    rc = main(["compare", "--run", str(run), "--html", str(tmp_path / "x.html")])
    assert rc == 2 and "train/steps.jsonl" in capsys.readouterr().err
