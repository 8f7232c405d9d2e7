"""A reader for protobuf text format, enough for Triton's `config.pbtxt` files.

Messages become dicts; a field that appears more than once (or is written as a list) becomes a list.
Field names, not a schema, decide the shape, so callers use `as_list` for repeated fields.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<comment>\#[^\n]*) |
        (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*') |
        (?P<punct>[{}\[\]:,;<>]) |
        (?P<word>[A-Za-z_][\w.]*|[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)[fF]?|[-+]?inf|nan)
    )""",
    re.VERBOSE,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\"}


class PbtxtError(ValueError):
    pass


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            pos += len(text[pos:]) - len(text[pos:].lstrip())
            line = text.count("\n", 0, pos) + 1
            raise PbtxtError(f"line {line}: cannot read {text[pos:pos + 20]!r}")
        pos = m.end()
        if not m.group("comment"):
            out.append(m.group(m.lastgroup))
    return out


def _scalar(tok: str) -> Any:
    if tok[0] in "\"'":
        return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), tok[1:-1])
    if tok in ("true", "True"):
        return True
    if tok in ("false", "False"):
        return False
    try:
        return int(tok)
    except ValueError:
        pass
    try:
        return float(tok.rstrip("fF"))
    except ValueError:
        return tok  # an enum name such as TYPE_FP32


class _Parser:
    def __init__(self, tokens: list[str]):
        self.toks, self.i = tokens, 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        if self.i >= len(self.toks):
            raise PbtxtError("unexpected end of file")
        self.i += 1
        return self.toks[self.i - 1]

    def message(self, close: str | None) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        while self.peek() != close:
            if self.peek() is None:
                raise PbtxtError(f"missing {close!r}")
            name = self.take()
            if self.peek() == ":":
                self.take()
            value = self.value()
            if name in fields:
                prev = fields[name]
                fields[name] = (prev if isinstance(prev, list) else [prev]) + (
                    value if isinstance(value, list) else [value]
                )
            else:
                fields[name] = value
            if self.peek() in (",", ";"):
                self.take()
        if close is not None:
            self.take()
        return fields

    def value(self) -> Any:
        tok = self.take()
        if tok in ("{", "<"):
            return self.message("}" if tok == "{" else ">")
        if tok == "[":
            items = []
            while self.peek() != "]":
                items.append(self.value())
                if self.peek() == ",":
                    self.take()
            self.take()
            return items
        return _scalar(tok)


def loads(text: str) -> dict[str, Any]:
    return _Parser(_tokens(text)).message(None)


def as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]
