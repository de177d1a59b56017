"""Safe file output: atomic writes, never silently overwrite a user's file, stay inside a folder."""
from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from .errors import InputError


def atomic_write_text(path: str | os.PathLike, text: str, keep_existing: bool = False) -> Path | None:
    """Write ``text`` to ``path`` atomically (temp file + rename in the same folder).

    With ``keep_existing`` an existing file whose content differs is first renamed to
    ``<name>.bak`` (``.bak1``, ``.bak2``, ... if taken); the kept path is returned.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    kept = None
    if keep_existing and p.exists():
        try:
            same = p.read_text(encoding="utf-8") == text
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            kept = free_backup_name(p)
            os.replace(p, kept)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return kept


def atomic_write_json(path: str | os.PathLike, obj: Any, keep_existing: bool = False, indent: int = 2) -> Path | None:
    return atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False, default=_json_default) + "\n",
                             keep_existing=keep_existing)


def _json_default(o: Any) -> Any:
    try:
        import numpy as np
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def free_backup_name(p: Path) -> Path:
    """``<name>.bak``, or ``<name>.bak1``, ``.bak2``, ... when taken."""
    cand = p.with_name(p.name + ".bak")
    i = 1
    while cand.exists():
        cand = p.with_name(f"{p.name}.bak{i}")
        i += 1
    return cand


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


def read_user_text(path: str | os.PathLike, what: str) -> str:
    """A user's text file, or one clear InputError: unreadable, empty, binary or not UTF-8.
    ``what`` names the expected file in the message ("an msprobe dump.json")."""
    p = Path(path)
    raw = read_user_bytes(p, what)
    if not raw.strip():
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
