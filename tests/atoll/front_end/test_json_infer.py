"""JSON infer requests checked against the model before their data: from the body's first bytes
(answered before the rest has come, the rest dropped), and from all of its fields before any data
is parsed."""

import asyncio
import json

import pytest

from tests.atoll.front_end.test_server_errors import (
    BODY,
    EchoFrontEnd,
    _infer_head,
    _served_raw,
    _serving,
)


async def _answer(reader) -> tuple[int, dict]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    return int(head.split()[1]), json.loads(await asyncio.wait_for(reader.readexactly(length), 30))


@pytest.mark.parametrize("head_alone", [False, True], ids=["head and body start in one write", "head alone first"])
def test_a_wrong_shape_is_refused_from_the_first_bytes_and_the_rest_dropped(head_alone):
    data = b"[" + b"0.5," * 250_000 + b"0.5]"  # 1 MB of numbers, of which only the first bytes are sent first
    body = b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1,250001],"data":' + data + b"}]}"
    endpoints = _serving(EchoFrontEnd())

    async def talk(reader, writer):
        if head_alone:  # as most clients send it: the body's first bytes come in a later read
            writer.write(_infer_head(len(body)))
            await writer.drain()
            await asyncio.sleep(0.05)  # (lets the head be read alone; the test holds either way)
        writer.write(_infer_head(len(body)) + body[:4096] if not head_alone else body[:4096])
        await writer.drain()
        status, answer = await _answer(reader)  # before the rest of the body was sent
        writer.write(body[4096:] + _infer_head(len(BODY)) + BODY.encode())
        await writer.drain()
        return (status, answer), await _answer(reader)

    (status, answer), (then, echoed) = asyncio.run(_served_raw(endpoints, talk))
    assert status == 400 and answer["error"] == "input 'x': shape [1, 250001] does not match [-1, 2]"
    assert then == 200 and echoed["outputs"][0]["data"] == [1.0, 2.0]  # the same connection serves on
    assert b'reason="REJECTED"' in endpoints.metrics.render()


def test_fields_after_the_data_are_checked_before_the_data_is_parsed():
    body = json.dumps({"inputs": [{"name": "x", "data": ["not", "numbers"], "datatype": "INT8", "shape": [1, 2]}]})

    async def talk(reader, writer):
        writer.write(_infer_head(len(body)) + body.encode())
        return await _answer(reader)

    status, answer = asyncio.run(_served_raw(_serving(EchoFrontEnd()), talk))
    assert status == 400 and answer["error"] == "input 'x': expected FP32, got INT8"  # not a data error
