"""A line-rate checker for the DPU's HLS C++ that reads the code with libclang.

From each kernel top it follows the call graph, binding every callee's parameters to what the
caller passed (an m_axi port, a port plus an offset, a local array), and reports what Vitis HLS
would schedule below line rate or not at all: narrow or multi-beat port accesses in pipelined loops,
float sums carried across iterations, more array reads than a partition has ports, runtime windows
into partitioned arrays, integer divides, loops without a trip count, m_axi ports in structs or
with arithmetic, partitioned parameters below the top, doubles and null pointers (each rule by
name: docs/hardware.md). Loops nested in a pipelined loop count once per unrolled iteration and
calls inside are inlined, as in Vitis HLS. `python -m sim_tb.hls_hygiene` prints the findings.
"""

from __future__ import annotations

import argparse
import functools
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import clang.cindex as ci

K = ci.CursorKind
LOOPS = (K.FOR_STMT, K.WHILE_STMT, K.DO_STMT)
WIDE_PORT_BYTES = 64  # 512 bits, the HBM port width of the U55C
# Arrays of fewer elements are registers: Vitis HLS partitions them completely by itself
# (syn.array_partition.complete_threshold, default 4: UG1399 2026.1 'Array Partition').
SMALL_ARRAY = 4
FLOATS = (ci.TypeKind.FLOAT, ci.TypeKind.DOUBLE)
ASSIGN = {"=", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.rule}: {self.message}"


@dataclass(frozen=True)
class Root:
    """What an expression points into: an m_axi port or an on-chip array (`decl` is its key)."""

    kind: str  # "port" | "array"
    name: str
    decl: str
    width: int = 0  # bytes per element (ports)
    offset: bool = False  # reached through pointer arithmetic
    elements: int = 0  # arrays: elements in all dimensions


def elements(t) -> int:
    n = 1
    t = t.get_canonical()
    while t.kind == ci.TypeKind.CONSTANTARRAY:
        n *= t.get_array_size()
        t = t.get_array_element_type().get_canonical()
    return n


def _gcc_include() -> list[str]:
    try:
        path = subprocess.run(["gcc", "-print-file-name=include"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return []
    return ["-isystem", path] if path else []


def pragmas(cursor) -> list[tuple[int, list[str]]]:
    """(line, words) of each `#pragma HLS` in the cursor's extent, words upper-cased keys kept."""
    lines: dict[int, list[str]] = {}
    for tok in cursor.get_tokens():
        lines.setdefault(tok.location.line, []).append(tok.spelling)
    out = []
    for line, words in sorted(lines.items()):
        if words[:3] == ["#", "pragma", "HLS"] or words[:2] == ["pragma", "HLS"]:
            out.append((line, words[words.index("HLS") + 1:]))
    return out


def pragma_value(words: list[str], key: str) -> str | None:
    """The value of `key = value` in a pragma; a dotted value (h.ring) comes back joined."""
    for i, w in enumerate(words):
        if w.lower() == key and i + 2 < len(words) and words[i + 1] == "=":
            value, j = words[i + 2], i + 3
            while j + 1 < len(words) and words[j] == ".":
                value, j = value + "." + words[j + 1], j + 2
            return value
    return None


def operator(cursor) -> str:
    """The spelling of a binary or compound operator (libclang's Python API has no accessor)."""
    children = list(cursor.get_children())
    if not children:
        return ""
    end = children[0].extent.end.offset
    for tok in cursor.get_tokens():
        if tok.extent.start.offset >= end:
            return tok.spelling
    return ""


def unary_operator(cursor) -> str:
    toks = [t.spelling for t in cursor.get_tokens()]
    child = next(iter(cursor.get_children()), None)
    if not toks or child is None:
        return ""
    return toks[0] if toks[0] in ("*", "&", "++", "--", "-", "!", "~", "+") else toks[-1]


def strip(cursor):
    """The expression under implicit casts, parentheses and unexposed wrappers."""
    while cursor.kind in (K.UNEXPOSED_EXPR, K.PAREN_EXPR, K.CSTYLE_CAST_EXPR, K.CXX_STATIC_CAST_EXPR,
                          K.CXX_FUNCTIONAL_CAST_EXPR) or (cursor.kind == K.CALL_EXPR and cursor.referenced is None):
        children = [c for c in cursor.get_children() if c.kind != K.TYPE_REF]
        if len(children) != 1:
            break
        cursor = children[0]
    return cursor


class Analyzer:
    def __init__(self, hls: Path):
        self.hls = hls
        self.findings: set[Finding] = set()
        self.constants: dict[str, int | None] = {}
        self._visited: set[tuple] = set()

    # -- reporting ------------------------------------------------------------------------------

    def report(self, cursor, rule: str, message: str) -> None:
        loc = cursor.location
        if loc.file is None:
            return
        path = Path(loc.file.name).resolve()
        try:
            shown = str(path.relative_to(self.hls.parent))
        except ValueError:
            shown = str(path)
        self.findings.add(Finding(shown, loc.line, rule, message))

    # -- constants ------------------------------------------------------------------------------

    def value(self, cursor) -> int | None:
        """A compile-time integer value of an expression, when it has one."""
        cursor = strip(cursor)
        if cursor.kind == K.INTEGER_LITERAL:
            text = next(cursor.get_tokens()).spelling
            return int(re.sub(r"[uUlL]+$", "", text), 0)
        if cursor.kind == K.DECL_REF_EXPR and cursor.referenced is not None:
            ref = cursor.referenced
            if ref.kind == K.ENUM_CONSTANT_DECL:
                return ref.enum_value
            if ref.kind == K.VAR_DECL and ref.type.is_const_qualified():
                key = ref.get_usr()
                if key not in self.constants:
                    self.constants[key] = None
                    init = [c for c in ref.get_children() if c.kind not in (K.TYPE_REF, K.NAMESPACE_REF)]
                    self.constants[key] = self.value(init[-1]) if init else None
                return self.constants[key]
            return None
        if cursor.kind == K.BINARY_OPERATOR:
            a, b = (self.value(c) for c in cursor.get_children())
            if a is None or b is None:
                return None
            op = operator(cursor)
            ops = {"+": a + b, "-": a - b, "*": a * b, "<<": a << b if b < 64 else None,
                   ">>": a >> b, "/": a // b if b else None, "%": a % b if b else None}
            return ops.get(op)
        return None

    def constant_expr(self, cursor, loop_var: str | None) -> bool:
        """True when every name in the expression is the loop variable or a compile-time constant."""
        for c in cursor.walk_preorder():
            if c.kind == K.DECL_REF_EXPR and c.spelling != loop_var:
                ref = c.referenced
                if ref is None or ref.kind in (K.FUNCTION_DECL, K.CXX_METHOD):
                    continue
                if ref.kind in (K.ENUM_CONSTANT_DECL, K.TEMPLATE_NON_TYPE_PARAMETER):
                    continue
                if ref.kind == K.VAR_DECL and self.value(c) is not None:
                    continue
                return False
            if c.kind == K.MEMBER_REF_EXPR:
                return False
        return True

    # -- what expressions point to ----------------------------------------------------------------

    def root(self, cursor, env: dict) -> Root | None:
        cursor = strip(cursor)
        if cursor.kind == K.DECL_REF_EXPR and cursor.referenced is not None:
            ref = cursor.referenced
            key = ref.get_usr() or f"{ref.location.file}:{ref.location.line}:{ref.spelling}"
            if key in env:
                return env[key]
            if ref.kind == K.VAR_DECL and ref.type.kind in (ci.TypeKind.CONSTANTARRAY, ci.TypeKind.INCOMPLETEARRAY):
                return Root("array", ref.spelling, key, elements=elements(ref.type))
            return None
        if cursor.kind == K.ARRAY_SUBSCRIPT_EXPR:  # &a[i] or a row of a 2-D array
            base = self.root(next(cursor.get_children()), env)
            if base is not None:
                index = list(cursor.get_children())[1]
                fixed = self.value(index) is not None
                return Root(base.kind, base.name, base.decl, base.width, base.offset or not fixed, base.elements)
            return None
        if cursor.kind == K.MEMBER_REF_EXPR and cursor.referenced is not None and cursor.type.get_canonical().kind in (
                ci.TypeKind.CONSTANTARRAY, ci.TypeKind.INCOMPLETEARRAY):  # an array member of a struct
            return Root("array", cursor.spelling, cursor.referenced.get_usr(), elements=elements(cursor.type))
        if cursor.kind == K.UNARY_OPERATOR and unary_operator(cursor) == "&":
            return self.root(next(cursor.get_children()), env)
        if cursor.kind == K.BINARY_OPERATOR and operator(cursor) in ("+", "-"):
            for child in cursor.get_children():
                r = self.root(child, env)
                if r is not None:
                    return Root(r.kind, r.name, r.decl, r.width, True, r.elements)
        return None

    # -- traversal ------------------------------------------------------------------------------

    def kernel(self, top) -> None:
        env = {}
        partitions = self.partitions(top)
        for line, words in pragmas(top):
            if words and words[0].upper() == "INTERFACE" and (pragma_value(words, "mode") == "m_axi" or "m_axi" in words):
                port = pragma_value(words, "port")
                for param in top.get_arguments():
                    if param.spelling == port:
                        width = param.type.get_pointee().get_size()
                        env[param.get_usr()] = Root("port", port, param.get_usr(), width)
        self.function(top, env, partitions, top=True)

    def partitions(self, func) -> dict[str, float]:
        """Array name -> read ports per cycle, from the function's ARRAY_PARTITION pragmas."""
        out: dict[str, float] = {}
        for _, words in pragmas(func):
            if words and words[0].upper() == "ARRAY_PARTITION":
                name = (pragma_value(words, "variable") or "").split(".")[-1]  # h.ring: the member
                kind = "complete" if "complete" in words else pragma_value(words, "type") or (
                    "cyclic" if "cyclic" in words else "block")
                factor = pragma_value(words, "factor")
                out[name] = float("inf") if kind == "complete" else 2 * int(self._num(factor, 2))
        return out

    def _num(self, text: str | None, default: int) -> int:
        if text is None:
            return default
        if text.isdigit():
            return int(text)
        return self.named_constant(text) or default

    @functools.lru_cache(maxsize=None)  # noqa: B019 (one analyzer per run)
    def named_constant(self, name: str) -> int | None:
        for tu in self.units:
            for c in tu.cursor.walk_preorder():
                if c.kind == K.VAR_DECL and c.spelling == name and c.type.is_const_qualified():
                    init = [x for x in c.get_children() if x.kind not in (K.TYPE_REF, K.NAMESPACE_REF)]
                    if init:
                        return self.value(init[-1])
        return None

    def function(self, func, env: dict, partitions: dict, top: bool = False) -> None:
        key = (func.get_usr(), tuple(sorted((k, v) for k, v in env.items())))
        if key in self._visited:
            return
        self._visited.add(key)
        params = {p.spelling for p in func.get_arguments()}
        own = self.partitions(func)
        if not top:
            for line, words in pragmas(func):
                if words and words[0].upper() == "ARRAY_PARTITION" and pragma_value(words, "variable") in params:
                    self.report_at(func, line, "partition-param",
                                   f"ARRAY_PARTITION on parameter {pragma_value(words, 'variable')!r} of {func.spelling}")
        partitions = {**partitions, **own}
        body = next((c for c in func.get_children() if c.kind == K.COMPOUND_STMT), None)
        if body is not None:
            self.datapath_types(func)
            self.statements(body, env, partitions)

    def datapath_types(self, func) -> None:
        """No double precision in a kernel datapath, no null pointers (a port is an address register)."""
        for c in func.walk_preorder():
            if c.kind in (K.VAR_DECL, K.PARM_DECL, K.FUNCTION_DECL) and c.type.get_canonical().kind == ci.TypeKind.DOUBLE:
                self.report(c, "double", f"{c.spelling} is double precision")
            if c.kind in (K.CXX_NULL_PTR_LITERAL_EXPR, K.GNU_NULL_EXPR):
                self.report(c, "null", "null pointer in a kernel")

    def report_at(self, cursor, line: int, rule: str, message: str) -> None:
        loc = cursor.location
        if loc.file is not None:
            self.report(_At(loc.file, line), rule, message)

    def statements(self, node, env: dict, partitions: dict) -> None:
        """Loops and calls below `node` outside any pipelined loop."""
        for c in node.get_children():
            self.statement(c, env, partitions)

    def statement(self, c, env: dict, partitions: dict) -> None:
        if c.kind in LOOPS:
            self.loop(c, env, partitions)
            return
        if c.kind == K.CALL_EXPR:
            self.call(c, env, partitions, None)
        if c.kind == K.VAR_DECL:
            self.declared(c, env, partitions)
        if c.kind in (K.BINARY_OPERATOR, K.INIT_LIST_EXPR):
            self.stores(c, env)
        self.statements(c, env, partitions)

    def declared(self, var, env: dict, partitions: dict) -> None:
        """A pointer declared at a runtime offset into a partitioned array (a window): reported,
        and bound so accesses through it count against the array."""
        init = [x for x in var.get_children() if x.kind not in (K.TYPE_REF, K.NAMESPACE_REF)]
        if var.type.kind != ci.TypeKind.POINTER or not init:
            return
        r = self.root(init[-1], env)
        if r is None:
            return
        env[var.get_usr()] = r
        if r.kind == "array" and r.offset and partitions.get(r.name, 2) > 2:
            self.report(var, "runtime-window", f"{var.spelling} points into partitioned {r.name} at a runtime offset")

    def stores(self, node, env: dict) -> None:
        if node.kind == K.BINARY_OPERATOR and operator(node) == "=":
            lhs, rhs = list(node.get_children())
            r = self.root(rhs, env)
            if strip(lhs).kind == K.MEMBER_REF_EXPR and is_pointer(rhs) and r is not None and r.kind == "port":
                self.report(node, "port-in-struct", f"m_axi port {r.name} stored in {strip(lhs).spelling}")
        if node.kind == K.INIT_LIST_EXPR:
            for child in node.get_children():
                r = self.root(child, env)
                if is_pointer(child) and r is not None and r.kind == "port":
                    self.report(child, "port-in-struct", f"m_axi port {r.name} stored in a struct")

    def bind(self, call, env: dict) -> tuple[object, dict] | None:
        ref = call.referenced
        if ref is None or call.spelling.startswith("operator") or ref.kind == K.CONSTRUCTOR:
            return None  # copies and lane accesses of values
        definition = ref.get_definition()
        if definition is None or definition.location.file is None:
            return None
        if not Path(definition.location.file.name).resolve().is_relative_to(self.hls):
            return None
        inner: dict = {}
        params = list(definition.get_arguments())
        for param, arg in zip(params, call.get_arguments()):
            r = self.root(arg, env)
            if r is None:
                continue
            if r.kind == "port" and r.offset:
                self.report(arg, "port-arith", f"pointer arithmetic on m_axi port {r.name} passed to {definition.spelling}")
            inner[param.get_usr()] = r
        return definition, inner

    def call(self, call, env: dict, partitions: dict, counts: "Counts | None") -> None:
        bound = self.bind(call, env)
        if bound is None:
            return
        definition, inner = bound
        if counts is None:
            self.function(definition, inner, partitions)
        else:  # inlined into a pipelined loop
            body = next((c for c in definition.get_children() if c.kind == K.COMPOUND_STMT), None)
            if body is not None:
                counts.walk(body, inner, {**partitions, **self.partitions(definition)}, 1)

    # -- loops ----------------------------------------------------------------------------------

    def loop_info(self, loop) -> tuple[str | None, bool, int | None]:
        """(induction variable, bound is a compile-time constant, constant trip count)."""
        if loop.kind != K.FOR_STMT:
            return None, False, None
        children = list(loop.get_children())
        var = None
        start = None
        for c in children:
            if c.kind == K.DECL_STMT:
                decl = next(c.get_children(), None)
                if decl is not None:
                    var = decl.spelling
                    init = [x for x in decl.get_children() if x.kind not in (K.TYPE_REF, K.NAMESPACE_REF)]
                    start = self.value(init[-1]) if init else None
                break
        cond = next((c for c in children if c.kind == K.BINARY_OPERATOR), None)
        if cond is None:
            return var, False, None
        while operator(cond) == "&&":  # bounded when one term is a constant bound on the variable
            terms = [strip(t) for t in cond.get_children()]
            cond = next((t for t in terms if t.kind == K.BINARY_OPERATOR and self.constant_expr(t, var)
                         and any(x.kind == K.DECL_REF_EXPR and x.spelling == var for x in t.walk_preorder())),
                        terms[0])
        constant = self.constant_expr(cond, var) and any(
            x.kind == K.DECL_REF_EXPR and x.spelling == var for x in cond.walk_preorder())
        trip = None
        if constant and operator(cond) in ("<", "<=") and start is not None:
            bound = self.value(list(cond.get_children())[1])
            if bound is not None:
                step = self._step(children)
                trip = max(0, (bound - start + (operator(cond) == "<=") + step - 1) // step) if step else None
        return var, constant, trip

    def _step(self, children) -> int | None:
        inc = [c for c in children if c.kind in (K.UNARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR)]
        if not inc:
            return None
        if inc[0].kind == K.UNARY_OPERATOR:
            return 1
        return self.value(list(inc[0].get_children())[1])

    def loop(self, loop, env: dict, partitions: dict) -> None:
        var, constant, _ = self.loop_info(loop)
        own = direct_pragmas(loop)
        if not constant and not any(w and w[0].upper() == "LOOP_TRIPCOUNT" for w in own):
            self.report(loop, "no-tripcount", "loop bound is not a compile-time constant and has no LOOP_TRIPCOUNT")
        body = loop_body(loop)
        pipelined = any(w and w[0].upper() == "PIPELINE" and "off" not in w for w in own) or (
            self.auto_pipelined(loop, own, body))
        if pipelined:
            counts = Counts(self, loop, var)
            counts.walk_body(body, env, partitions, 1)
            counts.judge(partitions)
        else:
            if not constant:  # a stream of runtime length, not a few fixed words
                self.narrow_accesses(body, env, loop)
            self.statement(body, env, partitions)

    def auto_pipelined(self, loop, own: list[list[str]], body) -> bool:
        """Vitis HLS pipelines an innermost loop of more than 64 iterations by itself
        (syn.compile.pipeline_loops, default 64: UG1399 2025.2 'Automatic Loop Pipelining')."""
        if any(w and w[0].upper() == "PIPELINE" for w in own):
            return False  # PIPELINE off
        if self.has_loop(body, set()):
            return False
        _, constant, trip = self.loop_info(loop)
        if constant:
            return trip is not None and trip > 64
        counts = [w for w in own if w and w[0].upper() == "LOOP_TRIPCOUNT"]
        most = self.expression(counts[0][counts[0].index("max") + 2:]) if counts and "max" in counts[0] else None
        return most is not None and most > 64

    def has_loop(self, node, seen: set) -> bool:
        """A loop in `node` or in a function it calls (Vitis would have to unroll it to pipeline)."""
        for c in node.walk_preorder():
            if c.kind in LOOPS:
                return True
            if c.kind == K.CALL_EXPR and c.referenced is not None and c.referenced.kind != K.CONSTRUCTOR:
                d = c.referenced.get_definition()
                if d is not None and d.get_usr() not in seen and d.location.file is not None and \
                        Path(d.location.file.name).resolve().is_relative_to(self.hls):
                    seen.add(d.get_usr())
                    if self.has_loop(d, seen):
                        return True
        return False

    def expression(self, words: list[str]) -> int | None:
        """An integer pragma argument such as `kTypicalDim / 2`."""
        text = []
        for w in words:
            if w[0].isalpha() or w[0] == "_":
                v = self.named_constant(w)
                if v is None:
                    return None
                text.append(str(v))
            elif re.fullmatch(r"[0-9]+[uUlL]*|[-+*/()]", w):
                text.append(re.sub(r"[uUlL]+$", "", w).replace("/", "//"))
            else:
                break
        try:
            return int(eval("".join(text), {"__builtins__": {}}))  # digits and + - * // ( ) only
        except Exception:
            return None

    def narrow_accesses(self, body, env: dict, loop) -> None:
        """Ports narrower than 512 bits touched directly in a loop that is not pipelined."""
        for c in outside_loops(body):
            if c.kind == K.ARRAY_SUBSCRIPT_EXPR or (c.kind == K.UNARY_OPERATOR and unary_operator(c) == "*"):
                r = self.root(next(c.get_children()), env)
                if r is not None and r.kind == "port" and r.width < WIDE_PORT_BYTES:
                    self.report(c, "narrow-port", f"{r.name} ({8 * r.width}-bit m_axi port) accessed in a loop")


def outside_loops(node):
    """`node` and its descendants, not entering nested loops (they are judged on their own)."""
    yield node
    for c in node.get_children():
        if c.kind not in LOOPS:
            yield from outside_loops(c)


def is_pointer(expr) -> bool:
    return strip(expr).type.get_canonical().kind == ci.TypeKind.POINTER


class _At:
    """A stand-in cursor at a given line (pragma findings)."""

    def __init__(self, file, line: int):
        self.location = type("L", (), {"file": file, "line": line})()


def loop_body(loop):
    return list(loop.get_children())[-1] if loop.kind != K.DO_STMT else list(loop.get_children())[0]


def direct_pragmas(loop) -> list[list[str]]:
    """The HLS pragmas of a loop: those in its body and not inside a nested loop."""
    body = loop_body(loop)
    nested = [(c.extent.start.line, c.extent.end.line) for c in body.walk_preorder() if c.kind in LOOPS and c != loop]
    return [w for line, w in pragmas(body) if not any(a <= line <= b for a, b in nested)]


class Counts:
    """Accesses per iteration of one pipelined loop, with unrolled inner loops multiplied out."""

    def __init__(self, analyzer: Analyzer, loop, var: str | None):
        self.a, self.loop, self.var = analyzer, loop, var
        self.port_beats: dict[tuple[str, str], list] = {}
        self.array_reads: dict[str, list] = {}
        self.inlined_partitions: dict[str, float] = {}

    def walk(self, node, env: dict, partitions: dict, times: int) -> None:
        for c in node.get_children():
            self.visit(c, env, partitions, times)

    def walk_body(self, body, env: dict, partitions: dict, times: int) -> None:
        if body.kind == K.COMPOUND_STMT:
            self.walk(body, env, partitions, times)
        else:  # a loop body that is a single statement
            self.visit(body, env, partitions, times)

    def visit(self, c, env: dict, partitions: dict, times: int) -> None:
        a = self.a
        if c.kind in LOOPS:
            _, constant, trip = a.loop_info(c)
            if not constant or trip is None:
                a.report(c, "no-tripcount", "loop inside a pipelined loop has no constant trip count to unroll")
                trip = 1
            self.walk_body(loop_body(c), env, partitions, times * trip)
            return
        if c.kind == K.CALL_EXPR and c.spelling == "operator=":  # a struct (e.g. a Beat) stored
            target, value = list(c.get_arguments())
            self.access(target, env, times, write=True)
            self.visit_operand(target, env, partitions, times, skip_top=True)
            self.visit(value, env, partitions, times)
            return
        if c.kind == K.CALL_EXPR and c.referenced is not None and c.referenced.kind == K.CONSTRUCTOR:
            for arg in c.get_arguments():  # a struct (e.g. a Beat) copied out of a port or array
                self.access(arg, env, times, write=False)
                self.visit_operand(arg, env, partitions, times, skip_top=True)
            return
        if c.kind == K.CALL_EXPR:
            bound = a.bind(c, env)
            if bound is not None:
                definition, inner = bound
                body = next((x for x in definition.get_children() if x.kind == K.COMPOUND_STMT), None)
                if body is not None:
                    own = a.partitions(definition)
                    self.inlined_partitions.update(own)  # arrays the inlined callee declares
                    self.walk(body, inner, {**partitions, **own}, times)
        if c.kind == K.VAR_DECL:
            a.declared(c, env, partitions)
        if c.kind in (K.BINARY_OPERATOR, K.COMPOUND_ASSIGNMENT_OPERATOR):
            op = operator(c)
            lhs, rhs = list(c.get_children())
            if op in ASSIGN:
                self.access(lhs, env, times, write=True, compound=op != "=")
                self.float_carried(c, lhs, rhs, op)
                if op in ("/=", "%="):
                    self.divide(c, rhs)
                self.visit_operand(lhs, env, partitions, times, skip_top=True)
                self.visit(rhs, env, partitions, times)
                return
            if op in ("/", "%"):
                self.divide(c, rhs)
        if c.kind == K.ARRAY_SUBSCRIPT_EXPR or (c.kind == K.UNARY_OPERATOR and unary_operator(c) == "*"):
            self.access(c, env, times, write=False)
        self.walk(c, env, partitions, times)

    def visit_operand(self, lhs, env, partitions, times, skip_top: bool) -> None:
        """Visit an assignment target's index expressions without counting the target as a read."""
        target = strip(lhs)
        if skip_top and target.kind == K.ARRAY_SUBSCRIPT_EXPR:
            base, index = list(target.get_children())
            self.visit(index, env, partitions, times)
            if strip(base).kind == K.ARRAY_SUBSCRIPT_EXPR:
                self.visit_operand(base, env, partitions, times, skip_top)
        elif target.kind not in (K.DECL_REF_EXPR, K.MEMBER_REF_EXPR):
            self.visit(target, env, partitions, times)

    def access(self, expr, env: dict, times: int, write: bool, compound: bool = False) -> None:
        expr = strip(expr)
        if expr.kind not in (K.ARRAY_SUBSCRIPT_EXPR, K.UNARY_OPERATOR):
            return
        base = next(expr.get_children())
        while strip(base).kind == K.ARRAY_SUBSCRIPT_EXPR:  # a[i][j]: the root array
            base = next(strip(base).get_children())
        r = self.a.root(base, env)
        if r is None:
            return
        if r.kind == "port":
            for direction in (("write", "read") if compound else ("write" if write else "read",)):
                self.port_beats.setdefault((r.name, direction), [0, 0, r.width, expr])
                entry = self.port_beats[(r.name, direction)]
                entry[0] += times
                entry[1] += times * expr.type.get_size()
        elif (not write or compound) and not 0 < r.elements < SMALL_ARRAY:
            # the same element read twice in one iteration is one read
            text = "".join(t.spelling for t in expr.get_tokens())
            entry = self.array_reads.setdefault(r.name, [{}, expr])
            entry[0][text] = max(entry[0].get(text, 0), times)

    def float_carried(self, node, lhs, rhs, op: str) -> None:
        target = strip(lhs)
        if target.type.kind not in (ci.TypeKind.FLOAT, ci.TypeKind.DOUBLE):
            return
        if op == "=":
            name = target.spelling if target.kind == K.DECL_REF_EXPR else None
            if not name or not any(c.kind == K.DECL_REF_EXPR and c.spelling == name for c in rhs.walk_preorder()):
                return
        elif op not in ("+=", "-=", "*="):
            return
        if target.kind == K.DECL_REF_EXPR:
            decl = target.referenced
            inside = decl is not None and self.loop.extent.start.offset <= decl.extent.start.offset <= self.loop.extent.end.offset \
                and decl.location.file is not None and decl.location.file.name == self.loop.location.file.name
            if inside:
                return
        elif target.kind == K.ARRAY_SUBSCRIPT_EXPR:
            if self.var and any(c.kind == K.DECL_REF_EXPR and c.spelling == self.var for c in target.walk_preorder()):
                return  # interleaved partial sums, picked by the loop's index: distance > 1
        else:
            return
        name = "".join(t.spelling for t in target.get_tokens())
        self.a.report(node, "float-carried", f"float {op} on {name} carried across iterations")

    def divide(self, node, divisor) -> None:
        if node.type.get_canonical().kind in FLOATS:
            return  # a float divider pipelines at II=1 (one unit); integer ones are the cost
        v = self.a.value(divisor)
        if v is not None and v > 0 and v & (v - 1) == 0:
            return
        self.a.report(node, "divide", "integer divide in a pipelined loop")

    def judge(self, partitions: dict) -> None:
        for (port, direction), (beats, nbytes, width, expr) in self.port_beats.items():
            if width < WIDE_PORT_BYTES:
                self.a.report(expr, "narrow-port", f"{port} ({8 * width}-bit m_axi port) {direction} in a pipelined loop")
            if beats > 1:
                self.a.report(expr, "port-beats", f"{beats} {direction}s of {port} per iteration "
                                                  f"({nbytes} bytes): II >= {beats}")
        for name, (texts, expr) in self.array_reads.items():
            reads = sum(texts.values())
            ports = {**self.inlined_partitions, **partitions}.get(name, 2)
            if reads > ports:
                self.a.report(expr, "array-ports", f"{reads} reads of {name} per iteration, {ports:g} ports")


def kernel_sources(hls: Path) -> dict[str, Path]:
    """Kernel top -> its source: every `<kernel>.cpp` that an HLS-component config names."""
    tops = {}
    for cfg in sorted(hls.glob("*.cfg")):
        text = cfg.read_text()
        top = re.search(r"^syn\.top=(\w+)", text, re.M)
        src = re.search(r"^syn\.file=(\S+)", text, re.M)
        if top and src:
            tops[top[1]] = hls / src[1]
    return tops


def check(hls: Path, tops: dict[str, Path] | None = None, include: tuple[Path, ...] = ()) -> list[Finding]:
    """Findings for every kernel top in `tops` (default: the configs' kernels under `hls`);
    `include` are further header folders, searched after the kernel's own."""
    hls = hls.resolve()
    analyzer = Analyzer(hls)
    analyzer.units = []
    index = ci.Index.create()
    for name, source in (tops or kernel_sources(hls)).items():
        args = ["-x", "c++", "-std=c++17", f"-I{hls / 'common'}", f"-I{source.parent}",
                *(f"-I{d}" for d in include), *_gcc_include()]
        tu = index.parse(str(source), args=args)
        errors = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
        if errors:
            raise RuntimeError(f"{source}: {errors[0]}")
        analyzer.units.append(tu)
        top = next((c for c in tu.cursor.walk_preorder()
                    if c.kind == K.FUNCTION_DECL and c.spelling == name and c.is_definition()), None)
        if top is None:
            raise RuntimeError(f"{source}: no definition of kernel {name}")
        analyzer.kernel(top)
    return sorted(analyzer.findings, key=lambda f: (f.file, f.line, f.rule))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("hls", nargs="?", type=Path, default=Path(__file__).resolve().parents[1] / "hls")
    findings = check(p.parse_args(argv).hls)
    for f in findings:
        print(f)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
