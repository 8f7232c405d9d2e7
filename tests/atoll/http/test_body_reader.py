"""A connection's body reader (`body_reader.BodyReader`): a body placed past the parser, and one
dropped in the kernel, on a real TCP socket, where MSG_TRUNC and SO_RCVLOWAT act."""

from __future__ import annotations

import select
import socket

import pytest

from atoll.http.bodies import BodyError, BodyLimits
from atoll.http.body_reader import BodyReader
from atoll.http.messages import HttpRequest


def test_a_body_is_placed_from_the_read_at_hand_then_by_the_kernel_into_what_is_left():
    reader = BodyReader(BodyLimits(1 << 20, 30.0))
    reader.sized(HttpRequest("POST", "/", "", {"content-length": "10"}))
    reader.place(4)
    assert reader.copy(memoryview(b"abcd")) == 4
    space = reader.space()
    space[:] = b"efghij"
    assert len(space) == 6 and reader.filled(6)
    assert reader.placed() == b"abcdefghij"


def test_a_body_declared_over_the_limit_is_refused_before_it_arrives():
    reader = BodyReader(BodyLimits(100, 30.0))
    request = HttpRequest("POST", "/", "", {"content-length": "101"})
    with pytest.raises(BodyError) as refused:
        reader.sized(request)
    assert refused.value.code.http == 413


def test_what_is_dropped_is_dropped_in_the_kernel_never_copied_and_what_follows_is_left_to_read():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        ours, _ = listener.accept()
        with client, ours:
            ours.setblocking(False)
            reader = BodyReader(BodyLimits(1 << 20, 30.0))
            reader.sock = ours
            client.sendall(b"\xab" * 100_000 + b"NEXT")
            buffer = memoryview(bytearray(4096))
            reader.sized(HttpRequest("POST", "/", "", {"content-length": "100000"}))
            reader.drop()
            while not reader.discard(buffer):  # each call drops what has come, and awaits the rest
                assert select.select([ours], [], [], 30)[0], "the rest of the body never came"
            assert reader.left == 0 and bytes(buffer) == bytes(4096)  # nothing was copied
            after = b""
            while len(after) < 4 and select.select([ours], [], [], 30)[0]:
                after += ours.recv(16)
            assert after == b"NEXT"
