"""A small, tolerant reader for protobuf text format (the format of GE's ``ge_onnx_*.pbtxt`` and
``ge_proto_*.txt`` graph dumps).  No schema: every message becomes a dict ``field -> [values]``
(fields are repeated in general), scalars stay strings (quoted strings unescaped) so the caller
decides how to interpret them.  Malformed text raises ``InputError(path, "line N: ...")``."""
from __future__ import annotations

import codecs
import re
import warnings
from typing import Any

from ..errors import InputError

_TOKEN = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<punct>[{}<>:\[\],;])
  | (?P<word>[^\s{}<>:\[\],;"'\#]+)
""", re.VERBOSE)

Message = dict[str, list[Any]]


def _unescape(s: str) -> str:
    body = s[1:-1]
    if "\\" not in body:
        return body
    try:
        with warnings.catch_warnings():  # an unknown escape ("\\u") is kept as written, not a warning
            warnings.simplefilter("ignore", DeprecationWarning)
            return codecs.escape_decode(body.encode("utf-8"))[0].decode("utf-8", "replace")
    except (ValueError, UnicodeError):
        return body


def parse(text: str, path: object = None) -> Message:
    """Parse protobuf text format into nested dicts of lists.  Long because: one tokenizer loop over
    the whole dump (GE dumps reach hundreds of MB) whose state (current message, field, list) lives in
    locals; helper calls per token would cost more than the parsing itself."""
    root: Message = {}
    stack: list[tuple[Message, str]] = []  # (message, closing bracket)
    cur = root
    pos = 0
    n = len(text)
    field: str | None = None
    expect_value = False
    pending_list: list | None = None

    def line() -> int:
        return text.count("\n", 0, pos) + 1

    def err(msg: str) -> InputError:
        return InputError(path, f"line {line()}: {msg} (not a valid protobuf text graph dump)")

    m_iter = _TOKEN.match
    while pos < n:
        m = m_iter(text, pos)
        if m is None:
            raise err(f"unexpected character {text[pos]!r}")
        kind = m.lastgroup
        tok = m.group(kind)
        start = pos
        pos = m.end()
        if kind == "ws":
            continue
        if pending_list is not None:  # inside [a, b, c]
            if tok == "]":
                cur.setdefault(field, []).extend(pending_list)
                pending_list = None
                field = None
                expect_value = False
            elif tok == ",":
                pass
            elif kind in ("str", "word"):
                pending_list.append(_unescape(tok) if kind == "str" else tok)
            else:
                raise err(f"unexpected {tok!r} in a list")
            continue
        if field is None:
            if kind == "word":
                field = tok
                expect_value = False
                continue
            if tok in "}>":
                if not stack:
                    raise err(f"unbalanced {tok!r}")
                parent, close = stack.pop()
                if tok != close:
                    raise err(f"expected {close!r}, found {tok!r}")
                cur = parent
                continue
            if tok in ",;":
                continue
            raise err(f"expected a field name, found {tok!r}")
        # have a field name
        if tok == ":" and not expect_value:
            expect_value = True
            continue
        if tok in "{<":
            child: Message = {}
            cur.setdefault(field, []).append(child)
            stack.append((cur, "}" if tok == "{" else ">"))
            cur = child
            field = None
            continue
        if tok == "[" and expect_value:
            pending_list = []
            continue
        if expect_value and kind in ("str", "word"):
            if kind == "str":
                val = _unescape(tok)
                # adjacent string literals concatenate
                while True:
                    m2 = _TOKEN.match(text, pos)
                    if m2 is None:
                        break
                    if m2.lastgroup == "ws":
                        pos = m2.end()
                        continue
                    if m2.lastgroup == "str":
                        val += _unescape(m2.group("str"))
                        pos = m2.end()
                        continue
                    break
            else:
                val = tok
            cur.setdefault(field, []).append(val)
            field = None
            expect_value = False
            continue
        pos = start
        raise err(f"expected a value for field {field!r}, found {tok!r}")
    if field is not None or pending_list is not None:
        raise err("text ends in the middle of a field")
    if stack:
        raise err("text ends inside an unclosed message (truncated file?)")
    return root


def first(msg: Message, key: str, default: Any = None) -> Any:
    v = msg.get(key)
    return v[0] if v else default


def quote(s: str) -> str:
    """Quote a string for protobuf text format."""
    out = []
    for ch in str(s):
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 32:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
