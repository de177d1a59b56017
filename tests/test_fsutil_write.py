"""Writers of outputs: atomic, safe with parallel writers, never lose or write through a user's file,
created with the user's umask, one clear error (exit 2) for an output that cannot be written."""
from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

import pytest

from advisor import fsutil
from advisor.errors import InputError, OutputError
from advisor.fsutil import atomic_write_text, check_out_dir


def test_parallel_writers_keep_the_users_file(tmp_path):
    """8 writers at once on a user's file, many times: no writer fails, the user's content is always
    kept in a backup, and every writer either kept a backup or found its own content in place."""
    for trial in range(200):
        d = tmp_path / f"t{trial}"
        d.mkdir()
        p = d / "modify_mixlist.json"
        p.write_text("user's own list\n")
        results: dict[int, object] = {}
        start = threading.Barrier(8)

        def writer(i: int) -> None:
            start.wait()
            try:
                results[i] = atomic_write_text(p, f"writer {i}\n", keep_existing=True)
            except BaseException as e:  # noqa: BLE001 - the test reports it
                results[i] = e
        threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [r for r in results.values() if isinstance(r, BaseException)]
        assert not errors, errors
        assert p.read_text() in {f"writer {i}\n" for i in range(8)}
        backups = {q.name: q.read_text() for q in d.iterdir() if ".bak" in q.name}
        assert "user's own list\n" in backups.values()
        for kept in results.values():
            assert kept is None or Path(kept).is_file()
        assert not [q for q in d.iterdir() if ".tmp" in q.name]


def test_parallel_writers_of_identical_content_keep_one_backup(tmp_path):
    p = tmp_path / "summary.json"
    p.write_text("old\n")
    start = threading.Barrier(8)
    out: list = []

    def writer() -> None:
        start.wait()
        out.append(atomic_write_text(p, "same\n", keep_existing=True))
    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p.read_text() == "same\n"
    kept = [k for k in out if k is not None]
    assert kept and all(Path(k).read_text() == "old\n" for k in kept)


def test_outputs_get_the_users_umask(tmp_path):
    old = os.umask(0o022)
    try:
        p = tmp_path / "report.html"
        atomic_write_text(p, "<html></html>\n")
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
        atomic_write_text(p, "<html>2</html>\n", keep_existing=True)
        assert stat.S_IMODE(p.stat().st_mode) == 0o644
        os.umask(0o002)
        q = tmp_path / "new" / "x.json"
        atomic_write_text(q, "{}\n")
        assert stat.S_IMODE(q.stat().st_mode) == 0o664
        assert stat.S_IMODE(q.parent.stat().st_mode) == 0o775
    finally:
        os.umask(old)


@pytest.mark.parametrize("keep", [True, False])
def test_disk_full_leaves_the_users_file_in_place(tmp_path, monkeypatch, keep):
    p = tmp_path / "modify_mixlist.json"
    p.write_text("user's own list\n")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError, match="No space left on device") as e:
        atomic_write_text(p, "new list\n", keep_existing=keep)
    assert str(p) in str(e.value) and "\n" not in str(e.value)
    assert p.read_text() == "user's own list\n"
    assert sorted(q.name for q in tmp_path.iterdir()) == ["modify_mixlist.json"]


def test_short_writes_and_enospc_in_write(tmp_path, monkeypatch):
    p = tmp_path / "a.json"
    p.write_text("mine\n")
    real_write = os.write
    calls = []

    def write(fd, data):
        calls.append(len(data))
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, bytes(data[:3]))   # a short write
    monkeypatch.setattr(os, "write", write)
    with pytest.raises(OutputError, match="No space left"):
        atomic_write_text(p, "0123456789\n", keep_existing=True)
    assert p.read_text() == "mine\n" and sorted(q.name for q in tmp_path.iterdir()) == ["a.json"]
    calls.clear()
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:3])))
    atomic_write_text(p, "0123456789\n")
    assert p.read_text() == "0123456789\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("keep", [True, False])
def test_symlink_to_a_device_or_a_fifo_is_refused(tmp_path, keep):
    link = tmp_path / "recommendation.json"
    link.symlink_to("/dev/zero")
    fifo = tmp_path / "diff.json"
    os.mkfifo(fifo)
    for p in (link, fifo):
        with pytest.raises(OutputError, match="not a regular file"):
            atomic_write_text(p, "{}\n", keep_existing=keep)
    assert link.is_symlink() and os.readlink(link) == "/dev/zero"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    d = tmp_path / "dir.json"
    d.mkdir()
    with pytest.raises(OutputError, match="a directory"):
        atomic_write_text(d, "{}\n", keep_existing=keep)


def test_symlink_to_a_users_file_is_replaced_not_written_through(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text("user\n")
    link = tmp_path / "out" / "modify_mixlist.json"
    link.parent.mkdir()
    link.symlink_to(target)
    kept = atomic_write_text(link, "new\n", keep_existing=True)
    assert target.read_text() == "user\n"
    assert not link.is_symlink() and link.read_text() == "new\n"
    assert kept is not None and Path(kept).is_symlink()


def test_out_that_is_a_file_or_under_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(OutputError, match="not a directory") as e:
        check_out_dir(f)
    assert "\n" not in str(e.value)
    with pytest.raises(OutputError, match="not a directory"):
        check_out_dir(f / "sub" / "deeper")
    with pytest.raises(OutputError, match="not a directory"):
        atomic_write_text(f / "x.json", "{}\n")
    assert check_out_dir(tmp_path / "new" / "folder") == tmp_path / "new" / "folder"
    assert not (tmp_path / "new").exists()   # checking creates nothing


def test_read_only_folder(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:
        ro.chmod(0o555)
    else:  # root writes anywhere: simulate what a read-only folder answers
        real_open = os.open

        def deny(path, flags, *a, **kw):
            if str(path).startswith(str(ro)) and flags & os.O_CREAT:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return real_open(path, flags, *a, **kw)
        monkeypatch.setattr(os, "open", deny)
        monkeypatch.setattr(os, "access", lambda path, mode, **kw: not str(path).startswith(str(ro)))
    try:
        with pytest.raises(OutputError, match="[Pp]ermission denied|not writable"):
            atomic_write_text(ro / "x.json", "{}\n")
        with pytest.raises(OutputError, match="not writable"):
            check_out_dir(ro / "advice")
    finally:
        ro.chmod(0o755)


def test_output_error_is_an_input_error_exit_2():
    assert issubclass(OutputError, InputError) and OutputError("p", "x").exit_code == 2


def test_write_via_callback_keeps_existing(tmp_path):
    p = tmp_path / "g.graphml"
    p.write_text("user file")
    kept = fsutil.atomic_write_via(p, lambda tmp: Path(tmp).write_text("graph"), keep_existing=True)
    assert p.read_text() == "graph" and Path(kept).read_text() == "user file"
    assert fsutil.atomic_write_via(p, lambda tmp: Path(tmp).write_text("graph"), keep_existing=True) is None
