"""Readers of user files refuse what would hang or crash them, with one InputError line."""
import os

import pytest

from advisor.errors import InputError
from advisor.fsutil import check_user_file, read_user_json


def test_fifo_device_and_directory_are_refused(tmp_path):
    fifo = tmp_path / "kernel_details.csv"
    os.mkfifo(fifo)
    for p in (fifo, "/dev/zero", tmp_path):
        with pytest.raises(InputError, match="expected a profile"):
            check_user_file(p, "a profile")


def test_symlink_to_a_device_is_refused(tmp_path):
    link = tmp_path / "dump.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(InputError, match="not a regular file"):
        read_user_json(link, "an msprobe dump.json")


@pytest.mark.parametrize("text,problem", [
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ("1" * 5000, "unreadable JSON value"),
    ('{"a": 1,}', "invalid JSON at line 1 column 9"),
])
def test_bad_json_is_one_line(tmp_path, text, problem):
    p = tmp_path / "run.json"
    p.write_text(text)
    with pytest.raises(InputError, match=problem) as e:
        read_user_json(p, "a run.json")
    assert str(p) in str(e.value) and "\n" not in str(e.value)
