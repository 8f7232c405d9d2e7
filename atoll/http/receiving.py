"""Where a connection (`edge.Connection`) is in what it receives: one state, and the sets of states
its collaborators ask about."""

from __future__ import annotations

import enum


class Receiving(enum.Enum):
    """Where a connection is in what it receives; `Connection` makes every transition. IDLE -> HEAD
    (a request begins) -> BODY (its head is parsed: a body comes through the parser) -> IDLE (the
    body is whole). A body of known length is SIZED first, then -> BODY if the parser went on, else
    -> PLACING (read past the parser into its place) or -> DROPPING (answered from its head: the
    rest is dropped), then -> IDLE; PLACING -> DROPPING where the route answers once the body's
    first bytes (`edge.EARLY_BYTES`) are in place. A refusal ends parsing (`REFUSED`): in a head -> REFUSED_IN_HEAD,
    in a body -> REFUSED_IN_BODY (what still comes is dropped while the connection lingers), between
    requests -> ENDED, as does a client that half-closes or asks to upgrade (answered, then closed)."""

    IDLE = enum.auto()
    HEAD = enum.auto()
    BODY = enum.auto()
    SIZED = enum.auto()
    PLACING = enum.auto()
    DROPPING = enum.auto()
    REFUSED_IN_HEAD = enum.auto()
    REFUSED_IN_BODY = enum.auto()
    ENDED = enum.auto()


IDLE, HEAD, BODY, SIZED, PLACING, DROPPING, REFUSED_IN_HEAD, REFUSED_IN_BODY, ENDED = Receiving
STOPPED = frozenset({REFUSED_IN_HEAD, REFUSED_IN_BODY, ENDED})  # nothing more is parsed
REFUSED = {IDLE: ENDED, HEAD: REFUSED_IN_HEAD, ENDED: ENDED}  # the state a refusal leaves; else REFUSED_IN_BODY
BODY_ARRIVING = frozenset({BODY, SIZED, PLACING, DROPPING, REFUSED_IN_BODY})
