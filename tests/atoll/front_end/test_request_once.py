"""What a served request costs the front end's loop is paid once: the binary extension's JSON
header, read when its first bytes arrive to refuse early, is not parsed again for the request's
parameters; one row's outputs are copied out of its slot without a stack."""

import asyncio
import json

import numpy as np
from tests.atoll.front_end.test_server_errors import EchoFrontEnd, _serving
from tests.atoll.http_served import http_served

from atoll.front_end import http_routes
from atoll.front_end.media import pad_stack


def test_a_binary_request_header_is_parsed_once_and_answered(monkeypatch):
    parsed = []
    real = http_routes.request_skeleton

    def counted(*args, **kw):
        parsed.append(args[1:])
        return real(*args, **kw)

    monkeypatch.setattr(http_routes, "request_skeleton", counted)
    x = np.array([[1.5, -2.0]], np.float32)
    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
                                     "parameters": {"binary_data_size": x.nbytes}}]}).encode()  # fmt: skip

    async def go():
        async with http_served(_serving(EchoFrontEnd())) as client:
            response = await client.post("/v2/models/m/infer", data=header + x.tobytes(),
                                         headers={"Inference-Header-Content-Length": str(len(header))})  # fmt: skip
            return response.status, await response.json()

    status, answer = asyncio.run(go())
    assert status == 200 and answer["outputs"][0]["data"] == [1.5, -2.0]
    assert len(parsed) == 1  # the early look at the header; `parameters` took its skeleton


def test_one_row_is_copied_out_with_its_batch_axis():
    slot = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = pad_stack([slot])
    assert out.shape == (1, 2, 3) and out.flags.c_contiguous
    slot[:] = -1  # the slot is given back and written again: the answer keeps its values
    assert out.tolist() == [[[0, 1, 2], [3, 4, 5]]]
