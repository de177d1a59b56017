"""The CLI's options: one group for the tolerance and one for the chip tables, declared once and used by every
command (every earlier spelling still accepted); help texts print as written (rich markup escaped) and a flag shows
no value placeholder."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from advisor.cli import app, main
from advisor.compare.cli_options import TOLERANCE_OPTIONS

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("lint", "inspect", "capture", "compare", "recommend", "diff", "replay", "tune")
JUDGING = ("compare", "recommend", "diff", "replay", "tune")
TOLERANCE_FLAGS = ("--min-cosine", "--max-rel-l2", "--allow-nonfinite", "--max-loss-rel", "--min-grad-cosine",
                   "--msprobe-rule", "--grad-negligible", "--max-grad-abs", "--max-weight-drift", "--min-loss-scale")


def _options(name: str) -> set[str]:
    cmd = typer.main.get_command(app).commands[name]
    return {o for p in cmd.params for o in p.opts}


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_takes_the_chip_group(name):
    assert {"--soc", "--ops-info", "--cann"} <= _options(name)


@pytest.mark.parametrize("name", JUDGING)
def test_every_judging_command_takes_the_whole_tolerance_group(name):
    assert set(TOLERANCE_FLAGS) <= _options(name), set(TOLERANCE_FLAGS) - _options(name)


def test_chip_and_tolerance_options_are_declared_in_one_place():
    """--soc / --ops-info / --cann declared only in commands/options.py, the tolerance flags only in
    compare/cli_options.py: a new chip option is one more line there and reaches every command."""
    def declared(text: str, flag: str) -> bool:
        return re.search(r'typer\.Option\([^()]*"' + re.escape(flag) + '"', text) is not None
    for f in sorted((ROOT / "advisor").rglob("*.py")):
        text = f.read_text()
        rel = f.relative_to(ROOT).as_posix()
        if rel != "advisor/commands/options.py":
            assert not any(declared(text, flag) for flag in ("--soc", "--ops-info", "--cann")), rel
        if rel != "advisor/compare/cli_options.py":
            assert not any(declared(text, flag) for flag in TOLERANCE_FLAGS), rel
    assert {o for opt in TOLERANCE_OPTIONS.values() for o in opt.param_decls} == set(TOLERANCE_FLAGS)


def test_recommend_and_diff_take_msprobe_rule(tmp_path, capfd):
    """They lacked it while declaring the tolerance inline; now it reaches the Tolerance they judge with."""
    from advisor.commands.options import TOLERANCE
    tol = TOLERANCE.build(**{n: opt.default for n, _, opt in TOLERANCE.options} | {"msprobe_rule": True})
    assert tol.use_msprobe_rule
    for cmd in (["recommend", "--profile", str(tmp_path / "none")],
                ["diff", "defaults", "defaults", "--profile", str(tmp_path / "none")]):
        capfd.readouterr()
        assert main([*cmd, "--msprobe-rule"]) == 2           # parsed: the run is what is missing, not the option
        err = capfd.readouterr().err
        assert "no such run directory" in err and "No such option" not in err


@pytest.mark.parametrize("args, word", [(["--soc", "nosoc"], "nosoc"), (["--cann", "7.0"], "--cann"),
                                        (["--min-cosine", "1.5"], "--min-cosine"),
                                        (["--grad-negligible", "2"], "--grad-negligible")])
def test_a_group_refuses_a_bad_value_in_one_line(tmp_path, capfd, args, word):
    for cmd in (["compare", "--run", str(tmp_path)], ["recommend", "--profile", str(tmp_path)]):
        capfd.readouterr()
        assert main([*cmd, *args]) == 2
        out, err = capfd.readouterr()
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("advisor: error: ") and word in lines[0], err


def _help(name: str, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "250")
    with pytest.raises(SystemExit):
        app(args=[name, "--help"], standalone_mode=True)
    return capsys.readouterr().out


def test_help_prints_markup_like_text_as_written(capsys, monkeypatch):
    text = _help("inspect", capsys, monkeypatch)
    assert "needs advisor[cluster]" in text           # rich markup used to eat "[cluster]"


@pytest.mark.parametrize("name", COMMANDS)
def test_flags_show_no_value_placeholder(name, capsys, monkeypatch):
    text = _help(name, capsys, monkeypatch)
    assert "<bool>" not in text
    assert re.search(r"--help\s+Show this message", text)


@pytest.mark.parametrize("args, files", [(["--ops-info", "a.json"], ["a.json"]),
                                         (["--ops-info", "a.json", "--ops-info", "b.json"], ["a.json", "b.json"]),
                                         ([], None)])
def test_the_chip_group_takes_ops_info_once_or_repeated(args, files):
    """--ops-info keeps its single-file spelling and may be given several times; the command's Chip has the files in
    the order given, and --cann beside them."""
    from advisor.commands.options import CHIP_FIXED
    cmd = typer.main.get_command(app).commands["lint"]
    ctx = cmd.make_context("lint", [*args, "--cann", "8.1", "m.json"])
    values = {n: ctx.params[n] for n, _, _ in CHIP_FIXED.options}
    chip = CHIP_FIXED.build(**{k: list(v) if isinstance(v, tuple) else v for k, v in values.items()})
    assert chip.ops_info == files and chip.cann == "8.1" and chip.soc == "ascend910b"
