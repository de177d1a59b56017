"""Safe file output and strict reading of users' files.

Writers: every output is written to a temp file in its folder and renamed into place (readers never
see half a file), created with the user's umask, never written through a FIFO, a device or a
symlink to one, and a user's differing file is kept as ``<name>.bak`` by a hard link made only once
the new content is complete (a full disk never costs the user's file).  Parallel writers are safe:
each either keeps what it replaces or finds its own content in place.  Every failure is one
:class:`~advisor.errors.OutputError` line (exit 2)."""
from __future__ import annotations

import errno
import json
import math
import os
import secrets
import stat
from pathlib import Path
from typing import Any, Callable, Iterator

from .errors import InputError, OutputError

_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV, errno.ENOSYS}
_MAX_BACKUPS = 10_000


Same = Callable[[bytes, bytes], bool]


def atomic_write_text(path: str | os.PathLike, text: str, keep_existing: bool = False,
                      same: Same | None = None) -> Path | None:
    """Write ``text`` (UTF-8) to ``path`` atomically.

    With ``keep_existing`` an existing file whose content differs is kept as ``<name>.bak``
    (``.bak1``, ``.bak2``, ... if taken) and that path is returned; identical content is left as it is --
    and so is content ``same(old, new)`` calls the same result (``same_but_timing``).
    """
    return atomic_write_bytes(path, text.encode("utf-8"), keep_existing, same)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, keep_existing: bool = False,
                       same: Same | None = None) -> Path | None:
    """:func:`atomic_write_text` for bytes (e.g. an .xlsx workbook)."""
    def fill(fd: int, tmp: Path) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    return _replace_with(path, fill, keep_existing, same)


# Timing fields: how long advisor's own computation took (``"seconds"`` of a search or a replay) -- wall-clock time
# that follows the machine's load, never the inputs.  Two outputs that differ only in them are the same result.
TIMING_KEYS = frozenset({"seconds"})


def without_timing(obj: Any) -> Any:
    """``obj`` (parsed JSON) with every ``TIMING_KEYS`` field removed, at any depth."""
    if isinstance(obj, dict):
        return {k: without_timing(v) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, list):
        return [without_timing(v) for v in obj]
    return obj


def same_but_timing(old: bytes, new: bytes) -> bool:
    """Two JSON documents that are equal once their timing fields are left out (``TIMING_KEYS``)."""
    try:
        return without_timing(json.loads(old)) == without_timing(json.loads(new))
    except ValueError:          # not JSON (a user's edited file): compared as bytes by the caller
        return False


def json_safe(o: Any) -> Any:
    """THE convention for every JSON advisor writes (docs/formats.md "Numbers"): a copy where NaN and
    +-Infinity are ``null`` (strict JSON; where finiteness matters a sibling field says so, e.g.
    ``"finite": false``), numpy scalars/arrays are plain numbers/lists, tuples/sets are lists, paths
    are strings, objects with ``to_dict()`` are their dict, and keys are strings."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if o is None or isinstance(o, (str, bool, int)):
        return o
    if isinstance(o, dict):
        return {str(k): json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_safe(v) for v in o]
    if isinstance(o, (set, frozenset)):
        return sorted(json_safe(v) for v in o)
    if isinstance(o, Path):
        return str(o)
    try:
        import numpy as np
        if isinstance(o, np.ndarray):
            return json_safe(o.tolist())
        if isinstance(o, np.generic):
            return json_safe(o.item())
    except ImportError:  # pragma: no cover
        pass
    to_dict = getattr(o, "to_dict", None)
    if callable(to_dict):
        return json_safe(to_dict())
    return str(o)


def json_text(obj: Any, indent: int | None = 2) -> str:
    """Strict JSON text of ``obj`` under the convention of :func:`json_safe`."""
    return json.dumps(json_safe(obj), indent=indent, ensure_ascii=False, allow_nan=False)


def atomic_write_json(path: str | os.PathLike, obj: Any, keep_existing: bool = False, indent: int = 2) -> Path | None:
    return atomic_write_text(path, json_text(obj, indent) + "\n", keep_existing=keep_existing)


def atomic_write_via(path: str | os.PathLike, write: Callable[[str], Any], keep_existing: bool = False) -> Path | None:
    """Like :func:`atomic_write_text` for a writer that takes a file name (``write(tmp_name)``, e.g. a
    graph exporter): it fills a temp file in the same folder, which then replaces ``path``."""
    return _replace_with(path, lambda fd, tmp: write(str(tmp)), keep_existing)


def _replace_with(path: str | os.PathLike, fill: Callable[[int, Path], None], keep_existing: bool,
                  same: Same | None = None) -> Path | None:
    """Steps in the order that never loses the user's file: refuse a special file, write and sync the
    temp file, only then link the previous file to its backup name, then rename the temp into place."""
    p = Path(path)
    make_out_dir(p.parent)
    _refuse_special(p)
    fd, tmp = _new_temp(p)
    done = False
    try:
        try:
            fill(fd, tmp)
            os.fsync(fd)
        finally:
            os.close(fd)
        kept = _keep_previous(p, tmp, same) if keep_existing else None
        if kept is _SAME:
            return None
        os.replace(tmp, p)
        done = True
        return kept
    except OSError as e:
        raise OutputError(p, f"cannot write: {e.strerror or e}") from None
    finally:
        if not done:
            _unlink_quiet(tmp)


_SAME: Any = object()  # _keep_previous: the file in place already has the new content


def _new_temp(p: Path) -> tuple[int, Path]:
    """A new hidden temp file beside ``p`` (same suffix: writers that pick a format by suffix work),
    created (O_EXCL) with mode 0666 minus the user's umask."""
    while True:
        tmp = p.with_name(f".{p.stem}.{secrets.token_hex(4)}.tmp{p.suffix}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise OutputError(p.parent, f"cannot write {p.name} here: {e.strerror or e}") from None


def _refuse_special(p: Path) -> None:
    """An output name that is a directory, a FIFO, a device or a symlink to one is never replaced or
    written through (reading a FIFO to compare would hang, /dev/zero never ends)."""
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return  # nothing there, or a dangling symlink (replaced like a file)
    except OSError as e:
        raise OutputError(p, f"cannot write: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(p, "is a directory, not a file; refusing to replace it")
    if not stat.S_ISREG(st.st_mode):
        raise OutputError(p, "exists and is not a regular file (a FIFO, device or socket, or a symlink to one); "
                             "refusing to write it")


def backup_names(p: Path) -> Iterator[Path]:
    """``<name>.bak``, ``<name>.bak1``, ``.bak2``, ... (the caller claims one atomically)."""
    yield p.with_name(p.name + ".bak")
    for i in range(1, _MAX_BACKUPS):
        yield p.with_name(f"{p.name}.bak{i}")
    raise OutputError(p, f"{_MAX_BACKUPS} backups already exist beside it; clean them up")


def _keep_previous(p: Path, tmp: Path, same: Same | None = None) -> Any:
    """Keep the file now at ``p`` under a free backup name: a hard link claimed atomically (``link``
    fails when the name exists), so the file never leaves ``p``; identical content (or ``same``) -> ``_SAME``."""
    for cand in backup_names(p):
        try:
            os.link(p, cand, follow_symlinks=False)
        except FileExistsError:
            continue
        except FileNotFoundError:
            return None  # nothing (left) to keep
        except OSError as e:
            if e.errno not in _NO_HARD_LINKS:
                raise
            return _copy_previous(p, tmp, same)
        if _same_content(cand, tmp) or (same is not None and same(_read_regular(cand), _read_regular(tmp))):
            _unlink_quiet(cand)
            return _SAME
        return cand
    return None  # pragma: no cover - backup_names raises first


def _copy_previous(p: Path, tmp: Path, same: Same | None = None) -> Any:
    """The backup on a filesystem without hard links: a copy under a name claimed with O_EXCL."""
    try:
        old = _read_regular(p)
    except FileNotFoundError:
        return None
    new = Path(tmp).read_bytes()
    if old == new or (same is not None and same(old, new)):
        return _SAME
    for cand in backup_names(p):
        try:
            fd = os.open(cand, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        try:
            view = memoryview(old)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            os.close(fd)
            _unlink_quiet(cand)
            raise
        os.close(fd)
        return cand
    return None  # pragma: no cover


def _read_regular(p: Path) -> bytes:
    """Bytes of ``p`` if it is a regular file (opened without blocking, checked after opening)."""
    fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutputError(p, "exists and is not a regular file; refusing to write it")
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def _same_content(a: Path, b: Path) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(sa.st_mode):
        raise OutputError(a, "exists and is not a regular file; refusing to write it")
    return sa.st_size == sb.st_size and _read_regular(a) == _read_regular(b)


def _unlink_quiet(p: Path) -> None:
    try:
        os.unlink(p)
    except OSError:
        pass


def make_out_dir(d: str | os.PathLike) -> Path:
    """Create the folder ``d`` (and its parents, with the user's umask), or one OutputError line."""
    d = Path(d)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(d, "exists and is not a directory") from None
    except NotADirectoryError:
        raise OutputError(_nearest_existing(d), "is not a directory") from None
    except OSError as e:
        raise OutputError(d, f"cannot create the folder: {e.strerror or e}") from None
    return d


def check_out_dir(path: str | os.PathLike, what: str = "--out") -> Path:
    """Check, before any work and creating nothing, that ``path`` can be an output folder: it is (or
    its nearest existing ancestor is) a writable directory.  One OutputError line otherwise."""
    p = Path(path)
    q = _nearest_existing(p)
    try:
        st = os.stat(q)
    except OSError as e:
        raise OutputError(q, f"cannot use as {what}: {e.strerror or e}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(q, f"{'exists and ' if q == p else ''}is not a directory; cannot use it as {what}")
    if not os.access(q, os.W_OK | os.X_OK):
        raise OutputError(q, f"folder is not writable (permission denied); choose another {what}")
    return p


def _nearest_existing(p: Path) -> Path:
    """``p`` or its nearest ancestor that exists (a file in the middle of the path included)."""
    q = p
    while True:
        try:
            os.stat(q)
            return q
        except (FileNotFoundError, NotADirectoryError):
            if q.parent == q:
                return q
            q = q.parent
        except OSError:
            return q


def keep_dir_as_backup(p: Path) -> Path | None:
    """Move the folder (or symlink) ``p`` aside to a free ``<name>.bak[N]``, claimed atomically (an
    empty folder made with mkdir, then replaced by the rename).  None when ``p`` is gone."""
    for cand in backup_names(p):
        if os.path.islink(p):
            try:
                os.link(p, cand, follow_symlinks=False)
            except FileExistsError:
                continue
            except FileNotFoundError:
                return None
            os.unlink(p)
            return cand
        try:
            os.mkdir(cand)
        except FileExistsError:
            continue
        try:
            os.rename(p, cand)
        except OSError as e:
            os.rmdir(cand)
            if e.errno == errno.ENOENT:
                return None
            raise
        return cand
    return None  # pragma: no cover


def resolve_inside(base: str | os.PathLike, relative: str, what: str = "path") -> Path:
    """Resolve ``relative`` against ``base`` and refuse anything that escapes ``base``
    (``..``, absolute paths, symlinks pointing outside) or cannot be a path (a NUL byte, a
    symlink loop, a name too long): one InputError naming ``base``."""
    try:
        b = Path(base).resolve()
        target = (b / relative).resolve()
    except (OSError, ValueError, RuntimeError) as e:  # ValueError: NUL byte; RuntimeError: symlink loop
        raise InputError(base, f"{what} {str(relative)[:80]!r} is not a usable file name "
                               f"({getattr(e, 'strerror', None) or e})") from None
    if target != b and b not in target.parents:
        raise InputError(base, f"{what} {str(relative)[:80]!r} points outside the folder; refusing to read it")
    return target


def check_user_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a Path when it is a regular file (symlinks followed), else one clear InputError.

    Refuses what would hang or never end a read: a FIFO, a device (``/dev/zero``), a socket,
    and a directory where a file is expected.  Every reader of a user's file calls this first.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(p, f"no such file, expected {what}") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL byte in the path
        raise InputError(p, f"cannot read {what}: {getattr(e, 'strerror', None) or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(p, f"a directory, expected {what}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(p, f"not a regular file (a FIFO, device or socket), expected {what}")
    return p


def read_user_bytes(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of a user's regular file, or one clear InputError."""
    p = check_user_file(path, what)
    try:
        return p.read_bytes()
    except OSError as e:
        raise InputError(p, f"cannot read {what}: {e.strerror or e}") from None


def read_user_text(path: str | os.PathLike, what: str, allow_empty: bool = False) -> str:
    """A user's text file, or one clear InputError: unreadable, empty (unless ``allow_empty``), binary or not
    UTF-8.  ``what`` names the expected file in the message ("an msprobe dump.json")."""
    p = Path(path)
    raw = read_user_bytes(p, what)
    if not raw.strip() and not allow_empty:
        raise InputError(p, f"empty file, expected {what}")
    if b"\x00" in raw[:4096]:
        raise InputError(p, f"binary data, expected {what}")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InputError(p, f"not UTF-8 text, expected {what}") from None


def parse_json_text(text: str, source: object, what: str) -> Any:
    """Strict JSON of a user's file: one clear InputError for invalid JSON (line and column),
    nesting too deep, or a number too long for Python (``int`` digit limit)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(source, f"invalid JSON at line {e.lineno} column {e.colno} ({e.msg}); "
                                 f"expected {what}") from None
    except RecursionError:
        raise InputError(source, f"JSON nested too deeply; expected {what}") from None
    except ValueError as e:  # e.g. "Exceeds the limit (4300 digits) for integer string conversion"
        raise InputError(source, f"unreadable JSON value ({e}); expected {what}") from None


def read_user_json(path: str | os.PathLike, what: str) -> Any:
    """A user's JSON file (regular file, UTF-8, strict JSON), or one clear InputError.
    The caller checks the types of what it reads (a list where an object belongs, ...)."""
    return parse_json_text(read_user_text(path, what), path, what)
