"""JSON infer bodies read without a Python object per number, in bounded slices.

`Skeleton` walks the body's structure (the request's fields, each input's fields) and passes over
each input's `data` array without parsing it, recording where it lies (`Span`): fields other than
`data` are small (at most FIELD_BYTES each), so the walk costs the body's size in C scans only.
An input's name, datatype and shape are thus known before its numbers are read, and a prefix of
the body tells them for the inputs whose fields precede their data (`Skeleton.inputs` on
`Incomplete`). `values` then turns a span into an array of the declared datatype: the span is cut at
commas into slices of SLICE_BYTES, brackets become blanks (nesting is flattened, as Triton does;
the count must match the shape) and pysimdjson parses each slice straight into a buffer of int64,
uint64 or float64. Every step is a generator that yields between slices, so a caller on an event
loop can let other work run (`sliced`). Outputs are written by NumPy's formatting, not `json.dumps`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import sys
import warnings
from collections.abc import Generator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simdjson

from atoll.kserve.datatypes import DTYPES, ProtocolError, described

SLICE_BYTES = 128 * 1024  # of the body parsed or scanned between two yields
STRING_SLICE_BYTES = 16 * 1024  # of BYTES data (an object per element: ~8 times the work a byte)
FIELD_BYTES = 64 * 1024  # the most any value but an input's data may take
SMALL_HEADER_BYTES = 4096  # a whole JSON text this small with no input data is parsed at once
WINDOWS = (256, 4096, FIELD_BYTES)  # of the body a field is looked for in, in turn
# Walking a field costs some microseconds of Python: a body of a million tiny inputs or keys would
# cost its size many times over. No model has nearly so many inputs, nor an input so many fields.
MAX_INPUTS = 4096
MAX_MEMBERS = 256  # of the request's object and of each input's

_WS = re.compile(rb"[ \t\n\r]*")
_STRING = re.compile(rb'"(?:[^"\\\x00-\x1f]|\\.)*"')
_BLANK_BRACKETS = bytes.maketrans(b"[]", b"  ")
_DECODER = json.JSONDecoder()
_FLOAT_WORDS = re.compile(rb"[^0-9eE.+\-, \t\n\r\[\]]")  # what a float slice holds beyond numbers
_QUOTE, _BACKSLASH, _OPEN, _CLOSE = ord('"'), ord("\\"), ord("["), ord("]")

Steps = Generator[None, None, Any]
FLOATS = {"FP16", "BF16", "FP32", "FP64"}  # (bfloat16's NumPy kind is "V", not "f")


class Incomplete(Exception):
    """The buffer (a body's first bytes) ended before the JSON did."""


@dataclass(frozen=True)
class Span:
    """An input's `data` array: body[start:end], brackets included."""

    start: int
    end: int


@dataclass
class Skeleton:
    """A JSON infer body's fields, each input's `data` as a `Span` (or, when not an array, as the
    value sent). `inputs` holds each input's fields as far as they were read."""

    body: bytes | bytearray | memoryview
    fields: dict[str, Any] = field(default_factory=dict)
    inputs: list[dict[str, Any]] | None = None


def sliced_sync(steps: Steps) -> Any:
    """A generator's result, run to its end with no pause."""
    while True:
        done, value = _step(steps)
        if done:
            return value


async def sliced(steps: Steps, executor: Executor | None = None) -> Any:
    """A generator's result, letting the event loop run other work at each of its yields; each step
    run in `executor` where given (the loop's thread then only waits: a front end's loop is a
    SCHED_FIFO relay, and its executor's threads are ordinary)."""
    loop = asyncio.get_running_loop()
    while True:
        if executor is None:
            done, value = _step(steps)
            await asyncio.sleep(0)
        else:
            done, value = await loop.run_in_executor(executor, _step, steps)
        if done:
            return value


def _step(steps: Steps) -> tuple[bool, Any]:
    """One step: (True, the result) at the end (a future cannot carry StopIteration)."""
    try:
        next(steps)
    except StopIteration as stop:
        return True, stop.value
    return False, None


def decoded_bytes(datatype: str, count: int, span: Span) -> int:
    """What an input's JSON data will take once decoded: its tensor (a BYTES element as a bytes
    object of its text's length and a pointer)."""
    if datatype == "BYTES":
        return count * (sys.getsizeof(b"") + 8) + span.end - span.start
    return count * DTYPES[datatype].itemsize


class _Walk:
    """A cursor over a JSON text; `complete` False where the buffer is only the text's start."""

    def __init__(self, body, complete: bool, end: int | None = None):
        self.body, self.pos, self.complete = body, 0, complete
        self.end = len(body) if end is None else end

    def _ended(self, what: str):
        if not self.complete:
            raise Incomplete
        raise ProtocolError(f"request body is not valid JSON: it ends before {what}")

    def _invalid(self, what: str):
        raise ProtocolError(f"request body is not valid JSON: expected {what} at byte {self.pos}")

    def peek(self) -> int:
        bound = min(self.end, self.pos + FIELD_BYTES)
        self.pos = _WS.match(self.body, self.pos, bound).end()
        if self.pos == bound < self.end:  # one call over megabytes of blanks would hold the GIL
            raise ProtocolError(f"request body: over 64 KiB of whitespace before byte {self.pos}")
        if self.pos >= self.end:
            self._ended("its end")
        return self.body[self.pos]

    def expect(self, char: bytes, what: str) -> None:
        if self.peek() != char[0]:
            self._invalid(what)
        self.pos += 1

    def more(self, close: bytes) -> bool:
        """After a member: True at a comma (another follows), False at `close`."""
        c = self.peek()
        self.pos += 1
        if c == ord(","):
            return True
        if c != close[0]:
            self.pos -= 1
            self._invalid(f"',' or '{close.decode()}'")
        return False

    def key(self) -> str:
        self.peek()
        match = _STRING.match(self.body, self.pos, min(self.end, self.pos + FIELD_BYTES))
        if match is None:
            if self.end - self.pos < FIELD_BYTES and self.body[self.pos] == _QUOTE:
                self._ended("a key does")
            self._invalid("a key (a string of at most 64 KiB)")
        self.pos = match.end()
        self.expect(b":", "':'")
        raw = match.group()
        try:
            return raw[1:-1].decode() if b"\\" not in raw else json.loads(raw)
        except UnicodeDecodeError:
            raise ProtocolError(f"request body is not valid JSON: a key before byte {self.pos} is not UTF-8") from None

    def value(self) -> Any:
        """A value of at most FIELD_BYTES, parsed: from a window of the body that grows only while
        it cuts the value (most are a few bytes; a body of many small ones costs its size)."""
        self.peek()
        for size in WINDOWS:
            window = bytes(self.body[self.pos : min(self.end, self.pos + size)])
            text = window.decode("utf-8", "surrogateescape")
            try:
                value, end = _DECODER.raw_decode(text)
            except json.JSONDecodeError:
                end = -1
            except RecursionError:
                raise ProtocolError("request body nests too deeply") from None
            if 0 <= end < len(text):
                break
            if self.pos + len(window) >= self.end:  # not cut by the window: by the buffer, or not JSON
                if not self.complete:
                    raise Incomplete
                self._invalid("a JSON value")
        else:
            raise ProtocolError(f"request body: a field at byte {self.pos} is not valid JSON of at most 64 KiB")
        try:
            self.pos += len(text[:end].encode("utf-8"))
        except UnicodeEncodeError:  # bytes that are not UTF-8, which surrogateescape kept
            raise ProtocolError(f"request body is not valid JSON: the value at byte {self.pos} is not UTF-8") from None
        return value

    def array_end(self) -> Steps:
        """Past the array at the cursor, in slices (strings inside it skipped, escapes heeded)."""
        depth, strings, size = 0, _Strings(), min(WINDOWS[0], SLICE_BYTES)
        pos = self.pos
        while pos < self.end:
            stop = min(self.end, pos + size)
            size = min(SLICE_BYTES, size * 16)  # a small array costs its size, not a slice
            chunk = np.frombuffer(self.body, np.uint8, stop - pos, pos)
            delta = (chunk == _OPEN).view(np.int8) - (chunk == _CLOSE).view(np.int8)
            delta[strings.inside(chunk)] = 0
            level = np.cumsum(delta, dtype=np.int32)
            level += depth
            closed = np.flatnonzero(level == 0)
            if len(closed):
                self.pos = pos + int(closed[0]) + 1
                return
            depth = int(level[-1])
            pos = stop
            yield
        self.pos = self.end
        self._ended("an input's data does")


class _Strings:
    """Which bytes of a JSON text, fed in consecutive chunks, lie inside strings."""

    def __init__(self):
        self.in_string, self.backslashes = False, 0  # at the end of the last chunk

    def inside(self, chunk: np.ndarray) -> np.ndarray:
        quotes = chunk == _QUOTE
        if quotes.any():
            quotes &= ~_escaped(chunk, self.backslashes)
            inside = (np.cumsum(quotes, dtype=np.int32) + self.in_string) % 2 == 1
            self.in_string = bool(inside[-1])
        else:
            inside = np.full(len(chunk), self.in_string)
        others = np.flatnonzero(chunk != _BACKSLASH)
        self.backslashes = len(chunk) - 1 - int(others[-1]) if len(others) else self.backslashes + len(chunk)
        return inside


def _escaped(chunk: np.ndarray, carried: int) -> np.ndarray:
    """Which bytes follow an odd run of backslashes (`carried` of them ended the previous chunk)."""
    slash = chunk == _BACKSLASH
    if not slash.any() and not carried:
        return np.zeros(len(chunk), bool)
    index = np.arange(len(chunk))
    last_other = np.maximum.accumulate(np.where(slash, -1, index))  # last non-backslash at or before i
    run = index - last_other  # backslashes ending at i
    run[last_other < 0] += carried
    before = np.concatenate(([carried], run[:-1]))
    return before % 2 == 1


def skeleton(body, complete: bool = True, end: int | None = None) -> Steps:
    """The `Skeleton` of body[:end]; where `complete` is False (a prefix), `Incomplete` carries what
    was read as its first argument."""
    if complete and (end if end is not None else len(body)) <= SMALL_HEADER_BYTES:
        small = _small_skeleton(body, end)
        if small is not None:
            return small
    walk = _Walk(body, complete, end)
    result = Skeleton(body)

    def field_(name: str) -> Steps:
        if name == "inputs" and walk.peek() == ord("["):
            yield from _inputs(walk, result)
        else:
            result.fields[name] = walk.value()

    try:
        if walk.peek() != ord("{"):
            raise ProtocolError("request header must be a JSON object")
        yield from _members(walk, field_)
        if _WS.match(body, walk.pos, walk.end).end() != walk.end:
            walk._invalid("the body's end")
    except Incomplete:
        raise Incomplete(result) from None
    return result


def _small_skeleton(body, end: int | None) -> Skeleton | None:
    """The Skeleton of a small JSON text with no input data in it (the binary extension's header),
    parsed in C at once: the walk costs ~50 times more there. None for anything else (data arrays,
    anything unusual or invalid), which the walk reads and judges."""
    try:
        parsed = json.loads(bytes(body[:end]).decode())  # UTF-8 only, as the walk reads it
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict) or len(parsed) > MAX_MEMBERS:
        return None
    inputs = parsed.pop("inputs", None)
    if inputs is not None and not (isinstance(inputs, list) and all(
            isinstance(i, dict) and "data" not in i and len(i) <= MAX_MEMBERS for i in inputs)):  # fmt: skip
        return None
    return Skeleton(body, parsed, inputs)


def _members(walk: _Walk, member) -> Steps:
    """The members of the object at the cursor, each value read by `member(its name)`."""
    walk.pos += 1
    if walk.peek() == ord("}"):
        walk.pos += 1
        return
    for _ in range(MAX_MEMBERS):
        yield from member(walk.key())
        if not walk.more(b"}"):
            return
    raise ProtocolError(f"request body: an object of more than {MAX_MEMBERS} fields")


def _inputs(walk: _Walk, result: Skeleton) -> Steps:
    walk.pos += 1
    result.inputs = []
    if walk.peek() == ord("]"):
        walk.pos += 1
        return
    while True:
        if len(result.inputs) == MAX_INPUTS:
            raise ProtocolError(f"request has more than {MAX_INPUTS} inputs")
        if walk.peek() != ord("{"):
            raise ProtocolError(f"each input must be a JSON object, got {described(walk.value())}")
        fields: dict[str, Any] = {}
        result.inputs.append(fields)
        yield from _members(walk, functools.partial(_input_field, walk, fields))
        yield
        if not walk.more(b"]"):
            return


def _input_field(walk: _Walk, fields: dict[str, Any], name: str) -> Steps:
    """An input's field: its data passed over (a `Span`), any other read."""
    if name == "data" and walk.peek() == ord("["):
        start = walk.pos
        fields["data"] = None  # its fields so far are those before it (`Incomplete`)
        yield from walk.array_end()
        fields["data"] = Span(start, walk.pos)
    else:
        fields[name] = walk.value()


# -- data: a span into an array ----------------------------------------------------------------------


def values(body, span: Span, datatype: str, shape: list[int], count: int, name: str) -> Steps:
    """Input `name`'s data, `count` values of `datatype` flattened from their nesting, as an array of
    `shape` (BYTES: an object array of UTF-8 encoded strings)."""
    if datatype == "BYTES":
        data = yield from _strings(body, span, count, name)
        return data.reshape(shape)
    dt = DTYPES[datatype]
    out = np.empty(count, dt)
    parser = simdjson.Parser()
    filled, pos, end = 0, span.start + 1, span.end - 1
    while pos < end:
        cut = end if end - pos <= SLICE_BYTES else body.rfind(b",", pos, pos + SLICE_BYTES)
        if cut <= pos:  # no comma in a slice: one value (or run of blanks) that long, up to a field's bound
            reach = min(end, pos + SLICE_BYTES + FIELD_BYTES)
            cut = body.find(b",", pos, reach)
            if cut < 0 and reach < end:
                raise ProtocolError(f"input {name!r}: data holds a value (or blanks) of more than 64 KiB")
            cut = end if cut < 0 else cut
        piece = b"[" + bytes(body[pos:cut]).translate(_BLANK_BRACKETS) + b"]"
        got = _piece(parser, piece, datatype, name)
        if filled + len(got) > count:
            raise ProtocolError(f"input {name!r}: more than {count} values for shape {shape}")
        out[filled : filled + len(got)] = got
        filled += len(got)
        pos = cut + 1
        yield
    if filled != count:
        raise ProtocolError(f"input {name!r}: {filled} values for shape {shape}")
    return out.reshape(shape)


def _piece(parser: simdjson.Parser, piece: bytes, datatype: str, name: str) -> np.ndarray:
    """One slice's values (a flat JSON array), checked against the datatype's range."""
    dt = DTYPES[datatype]
    if b'"' in piece or b"{" in piece:
        raise ProtocolError(_not_values(name, datatype))
    try:
        if dt.kind == "b":
            n = len(parser.parse(piece))  # valid JSON; then only true and false
            flat = np.frombuffer(piece, np.uint8)
            truths = flat[(flat == ord("t")) | (flat == ord("f"))]
            if len(truths) != n:
                raise ProtocolError(_not_values(name, datatype))
            return truths == ord("t")
        kind = "d" if datatype in FLOATS else "u" if datatype == "UINT64" else "i"
        got = np.frombuffer(parser.parse(piece).as_buffer(of_type=kind), {"d": np.float64, "u": np.uint64, "i": np.int64}[kind])
    except TypeError:  # a value of another kind (a float for an integer type, a boolean, null)
        raise ProtocolError(_not_values(name, datatype)) from None
    except (ValueError, RuntimeError) as exc:  # simdjson's errors: a word, a range, a malformed number
        literals = b"NaN" in piece or b"Infinity" in piece  # Python's json writes them; JSON has none
        if datatype in FLOATS and (literals or "BIGINT" in str(exc) or "NUMBER_ERROR" in str(exc)):
            got = _with_literals(piece, name, datatype)  # past a double's range: Infinity, refused there
        elif literals or "OUT_OF_RANGE" in str(exc) or "BIGINT" in str(exc):
            raise ProtocolError(f"input {name!r}: a value is outside the range of {datatype}") from None
        else:
            raise ProtocolError(_not_values(name, datatype)) from None
    return _in_range(got, dt, name, datatype)


def _with_literals(piece: bytes, name: str, datatype: str) -> np.ndarray:
    """A slice of a float datatype's values that simdjson does not take (NaN, (-)Infinity, integers
    past 64 bits), parsed by NumPy's text reader (C's strtod), as json.loads reads them. Infinity
    only where the word says it."""
    words = piece.replace(b"NaN", b"").replace(b"Infinity", b"")
    if _FLOAT_WORDS.search(words):
        raise ProtocolError(_not_values(name, datatype))
    inner = piece[1:-1].translate(_BLANK_BRACKETS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy warns where the text is not read to its end
        try:
            got = np.fromstring(inner, dtype=np.float64, sep=",")
        except (DeprecationWarning, ValueError):
            raise ProtocolError(_not_values(name, datatype)) from None
    if len(got) != inner.count(b",") + 1:
        raise ProtocolError(_not_values(name, datatype))
    if np.isinf(got).sum() != piece.count(b"Infinity"):
        raise ProtocolError(f"input {name!r}: a value is outside the range of {datatype}")
    return got


def _in_range(got: np.ndarray, dt: np.dtype, name: str, datatype: str) -> np.ndarray:
    if datatype in FLOATS:
        with np.errstate(over="ignore"):
            narrowed = got.astype(dt)
        if datatype != "FP64" and (np.isinf(narrowed.astype(np.float64)) & np.isfinite(got)).any():
            raise ProtocolError(f"input {name!r}: a value is outside the range of {datatype}")
        return narrowed
    if dt.itemsize < 8 or (dt.kind == "u" and got.dtype.kind == "i"):
        info = np.iinfo(dt)
        if len(got) and (got.min() < info.min or got.max() > info.max):
            raise ProtocolError(f"input {name!r}: a value is outside the range of {datatype}")
    return got.astype(dt, copy=False)


def _not_values(name: str, datatype: str) -> str:
    if datatype == "BOOL":
        return f"input {name!r}: BOOL data must be true or false"
    return f"input {name!r}: data is not an array of {datatype} values"


def _strings(body, span: Span, count: int, name: str) -> Steps:
    """BYTES data: its strings, UTF-8 encoded, at any nesting; one `bytes` per element, as a BYTES
    tensor holds them. A slice at a time, cut at a comma outside strings, its brackets outside
    strings blanked, read by json.loads."""
    out = np.empty(count, dtype=object)
    filled, pos, end = 0, span.start + 1, span.end - 1
    while pos < end:
        stop = min(end, pos + STRING_SLICE_BYTES)
        while True:  # a slice starts after a comma outside strings, or at the data's start
            chunk = np.frombuffer(body, np.uint8, stop - pos, pos).copy()
            outside = ~_Strings().inside(chunk)
            commas = np.flatnonzero(outside & (chunk == ord(",")))
            if stop == end or len(commas):
                break
            stop = min(end, pos + 2 * (stop - pos))  # one string longer than a slice
        cut = len(chunk) if stop == end else int(commas[-1])
        chunk = chunk[:cut]
        chunk[outside[:cut] & ((chunk == _OPEN) | (chunk == _CLOSE))] = ord(" ")
        items = _string_list(b"[" + chunk.tobytes() + b"]", name)
        if filled + len(items) > count:
            raise ProtocolError(f"input {name!r}: more than {count} values for its shape")
        try:
            out[filled : filled + len(items)] = list(map(str.encode, items))
        except TypeError:  # not a str
            bad = next(item for item in items if not isinstance(item, str))
            raise ProtocolError(f"input {name!r}: BYTES data must be strings, got {described(bad)}") from None
        except UnicodeEncodeError:
            raise ProtocolError(f"input {name!r}: BYTES data holds a string that is not Unicode text "
                                "(a lone surrogate)") from None  # fmt: skip
        filled += len(items)
        pos += cut + 1
        yield
    if filled != count:
        raise ProtocolError(f"input {name!r}: {filled} values for its shape")
    return out


def _string_list(piece: bytes, name: str) -> list:
    try:
        return json.loads(piece)
    except UnicodeDecodeError:
        raise ProtocolError(f"input {name!r}: BYTES data is not UTF-8 text") from None
    except (json.JSONDecodeError, RecursionError):
        raise ProtocolError(f"input {name!r}: BYTES data is not an array of strings") from None


# -- outputs -----------------------------------------------------------------------------------------

_LITERALS = {"nan": b"NaN", "inf": b"Infinity", "-inf": b"-Infinity"}


def json_values(array: np.ndarray) -> bytes:
    """A numeric or BOOL array's values as a flat JSON array, formatted by NumPy (shortest repr that
    reads back the same value) with no Python object per element; NaN and infinities as Python's
    json writes them."""
    flat = array.reshape(-1)
    if flat.dtype.kind == "b":
        text = np.where(flat, b"true", b"false")
    else:
        if flat.dtype == DTYPES["BF16"]:
            flat = flat.astype(np.float32)  # formatted through float32, exactly
        text = flat.astype("S32")
        if flat.dtype.kind == "f":
            for word, literal in _LITERALS.items():
                text[text == word.encode()] = literal
    width = text.dtype.itemsize
    cells = np.zeros((len(text), width + 1), np.uint8)
    cells[:, :width] = text.view(np.uint8).reshape(len(text), width)
    cells[:, width] = ord(",")
    joined = cells.tobytes().replace(b"\0", b"")
    return b"[" + joined[:-1] + b"]"
