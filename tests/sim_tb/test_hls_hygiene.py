"""Constructs Vitis HLS synthesizes badly or not at all stay out of the DPU kernels (issue 16).

Scanned: every C++ source and header under hls/ (kernels, their units and the blackbox C models),
comments and string literals removed first. The rules:

- no `double`: kernel datapaths are float32 or fixed point;
- no `while` and no `for (;;)`-style loops: every loop is a `for` with an init and a bound;
- every `for` not bounded by a compile-time constant (a literal, an ALL_CAPS or kConstant name,
  possibly in one `&&` term of its condition) carries `#pragma HLS LOOP_TRIPCOUNT`;
- no `nullptr` / `NULL`: an m_axi interface pointer is an address register, never null;
- a loop pipelined at II = 1 that touches a local array more than twice per iteration (a
  dual-port RAM's limit; constant-bound inner loops are unrolled, so their accesses multiply)
  has that array partitioned (`ARRAY_PARTITION variable = <name>` in the same file).
"""

from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path

import pytest

HLS = Path(__file__).resolve().parents[2] / "hls"
SOURCES = sorted(p for p in HLS.rglob("*") if p.suffix in (".h", ".cpp"))
CONSTANT = re.compile(r"^(?:[A-Z][A-Z0-9_]*|k[A-Z]\w*|\d+u?)$")
IDENTIFIER = re.compile(r"(?<!\w)[A-Za-z_]\w*")
# Names in a loop bound that are no runtime values: types, casts, sizeof.
NOT_VALUES = {"int", "uint32_t", "int32_t", "uint64_t", "int64_t", "uint16_t", "int16_t", "uint8_t",
              "static_cast", "sizeof", "const", "unsigned", "long"}


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', text)


def matching(text: str, start: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes the one at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        depth += (text[i] == open_) - (text[i] == close)
        if depth == 0:
            return i + 1
    raise ValueError("unbalanced")


def for_loops(text: str):
    """(header, body) of every for loop; the body is the braced block or the single statement."""
    for m in re.finditer(r"\bfor\s*\(", text):
        head_end = matching(text, m.end() - 1, "(", ")")
        rest = text[head_end:]
        body_start = head_end + len(rest) - len(rest.lstrip())
        if text[body_start] == "{":
            body_end = matching(text, body_start, "{", "}")
        else:
            body_end = text.index(";", body_start) + 1
        yield text[m.end():head_end - 1], text[body_start:body_end]


def is_constant_bound(header: str) -> bool:
    """The loop condition bounds the loop by a compile-time constant (one `&&` term may do it)."""
    parts = header.split(";")
    if len(parts) != 3:
        return False
    loop_vars = set(IDENTIFIER.findall(parts[0])) - NOT_VALUES
    for term in parts[1].split("&&"):
        names = set(IDENTIFIER.findall(term)) - NOT_VALUES - loop_vars
        if all(CONSTANT.match(n) for n in names):
            return True
    return False


def named_constants() -> dict[str, int]:
    values = {}
    for path in SOURCES:
        for name, value in re.findall(r"\b(?:constexpr|const)\s+[\w:]+\s+(\w+)\s*=\s*(\d+)u?\s*;", path.read_text()):
            values[name] = int(value)
    return values


CONSTANTS = named_constants()


def constant_trip_count(header: str) -> int | None:
    m = re.match(r"\s*\w+\s+\w+\s*=\s*(\d+)\s*;\s*\w+\s*<\s*(\w+)\s*;", header)
    if m is None or not (m[2].isdigit() or m[2] in CONSTANTS):
        return None
    return int(m[2]) - int(m[1]) if m[2].isdigit() else CONSTANTS[m[2]] - int(m[1])


def declared_arrays(text: str) -> set[str]:
    """Local arrays and array parameters: `type name[...]` (pointers are interfaces or aliases)."""
    names = re.findall(r"\b[\w:]+\s+(\w+)\s*\[", text)
    return set(names) - {"return", "else", "case"}


def accesses(body: str) -> dict[str, int]:
    """Array accesses per name in one iteration, constant-bound inner loops unrolled."""
    counts: dict[str, int] = {}
    inner_spans = []
    for header, inner in for_loops(body):
        start = body.index(inner)
        inner_spans.append((start, start + len(inner)))
        factor = constant_trip_count(header) or 1
        for name, n in accesses(inner[1:] if inner.startswith("{") else inner).items():
            counts[name] = counts.get(name, 0) + factor * n
    outside = "".join(body[i] if not any(a <= i < b for a, b in inner_spans) else " " for i in range(len(body)))
    for name in set(re.findall(r"(?<![\w.])([a-z_]\w*)\s*\[", outside)):
        expressions = set(re.findall(rf"(?<![\w.]){name}\s*(\[[^\]]*\](?:\s*\[[^\]]*\])*)", outside))
        counts[name] = counts.get(name, 0) + len(expressions)
    return counts


def leading_pragmas(body: str) -> str:
    """The pragmas at the top of a braced loop body (where Vitis HLS reads loop pragmas)."""
    m = re.match(r"\{\s*(?:#pragma HLS [^\n]*\n\s*)*", body)
    return m[0] if m else ""


def ids(paths):
    return [str(p.relative_to(HLS)) for p in paths]


@pytest.mark.parametrize("path", SOURCES, ids=ids(SOURCES))
def test_no_double_no_null_checks_no_unbounded_loops(path: Path):
    text = strip_comments(path.read_text())
    assert not re.search(r"\bdouble\b", text), f"{path.name}: double-precision arithmetic"
    assert not re.search(r"\b(?:nullptr|NULL)\b", text), f"{path.name}: null check of a pointer"
    assert not re.search(r"\bwhile\s*\(", text), f"{path.name}: while loop"
    assert not re.search(r"\bfor\s*\(\s*;", text), f"{path.name}: for loop without an init"


@pytest.mark.parametrize("path", SOURCES, ids=ids(SOURCES))
def test_runtime_bounded_loops_carry_trip_counts(path: Path):
    text = strip_comments(path.read_text())
    missing = [header.strip() for header, body in for_loops(text)
               if not is_constant_bound(header) and "LOOP_TRIPCOUNT" not in leading_pragmas(body)]
    assert not missing, f"{path.name}: loops without LOOP_TRIPCOUNT: {missing}"


@pytest.mark.parametrize("path", SOURCES, ids=ids(SOURCES))
def test_ii1_pipelines_have_their_arrays_partitioned(path: Path):
    text = strip_comments(path.read_text())
    partitioned = set(re.findall(r"ARRAY_PARTITION\s+variable\s*=\s*([\w.]+)", text))
    arrays = declared_arrays(text)
    short = []
    for header, body in for_loops(text):
        if not re.search(r"#pragma HLS PIPELINE II\s*=\s*1\b", leading_pragmas(body)):
            continue
        for name, n in accesses(body[1:]).items():
            if n > 2 and name in arrays and name not in partitioned:
                short.append(f"{name} x{n} in for ({header.strip()})")
    assert not short, f"{path.name}: II=1 loops over unpartitioned arrays: {short}"


@pytest.fixture(scope="module")
def replacements():
    """The float64 replacements compiled with their references (sim_tb/c_model.py's cached build)."""
    sys.path.insert(0, str(HLS.parent))
    from sim_tb.c_model import build_shared_library

    here = Path(__file__).resolve().parent
    lib = ctypes.CDLL(str(build_shared_library(
        [here / "float64_replacements.cpp"], SOURCES, HLS.parent / "build" / "sim_tb" / "hygiene", "float64")))
    for name in ("resize_coordinate_mismatches", "resampled_length_mismatches"):
        getattr(lib, name).restype = ctypes.c_long
        getattr(lib, name).argtypes = [ctypes.c_uint32] * 3 + [ctypes.POINTER(ctypes.c_long)]
    return lib


def test_resize_coordinate_is_opencvs_float64_expression(replacements):
    """hls/image/resize.h's integer resize coordinate equals (float)((d + 0.5) * scale - 0.5) with
    scale = 1.0 / ((double)dst / src), OpenCV's float64 expression, bit for bit: every (src, dst)
    up to 100, 300 random pairs up to 8192 and 300 with dst a multiple of 2048 (float32 ties)."""
    compared = ctypes.c_long()
    assert replacements.resize_coordinate_mismatches(100, 300, 16, ctypes.byref(compared)) == 0
    assert compared.value > 3_000_000


def test_resampled_length_is_librosas_float64_expression(replacements):
    """hls/audio/resampler.h's resampled_length equals librosa's ceil(n * (16000 / rate)) in
    float64 at every rate 8..48 kHz, on the lengths where the float64 rounding decides it."""
    compared = ctypes.c_long()
    assert replacements.resampled_length_mismatches(40, 20, 16, ctypes.byref(compared)) == 0
    assert compared.value == 40001 * 60
