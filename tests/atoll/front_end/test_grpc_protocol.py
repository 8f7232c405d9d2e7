"""gRPC messages to and from Atoll's requests: typed contents, raw contents, shared memory (what
`tritonclient.grpc` sends is raw contents; test_triton_protocol.py drives it end to end)."""

import asyncio
import logging
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
from gpu_runtime.priority import Priority
from grpc._cython.cygrpc import ExecuteBatchError
from tests.atoll.front_end.test_server_errors import SPEC, EchoFrontEnd, StuckFrontEnd
from tests.atoll.grpc_served import grpc_channel
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from atoll.bench.bodies import grpc_request
from atoll.front_end import grpc_service
from atoll.front_end.endpoints import Endpoints
from atoll.front_end.grpc_service import _CallEnded
from atoll.http.bodies import BodyBudget
from atoll.http.refusal_pace import RefusalPace
from atoll.kserve.errors import INTERNAL_ERROR, ApiError
from atoll.kserve.grpc_calls import STREAM_UNSENT
from atoll.kserve.grpc_codec import CONTENTS, request_from_proto, response_to_proto
from atoll.kserve.protocol import DTYPES, Output, ProtocolError, join_bytes
from atoll.kserve.shm_registry import Regions as MappedRegions
from atoll.observe.metrics import Metrics


class Regions:
    def read(self, ref):
        assert (ref.region, ref.offset, ref.byte_size) == ("r", 8, 8)
        return np.array([5, 6], np.int32).tobytes()


def test_typed_raw_and_shared_memory_inputs():
    msg = pb.ModelInferRequest(model_name="m", id="q1")
    msg.parameters["priority"].uint64_param = 1
    typed = msg.inputs.add(name="x", datatype="FP32", shape=[2, 2])
    typed.contents.fp32_contents.extend([1, 2, 3, 4.5])
    text = msg.inputs.add(name="s", datatype="BYTES", shape=[1])
    text.contents.bytes_contents.append(b"abc")
    shm = msg.inputs.add(name="z", datatype="INT32", shape=[2])
    shm.parameters["shared_memory_region"].string_param = "r"
    shm.parameters["shared_memory_offset"].int64_param = 8
    shm.parameters["shared_memory_byte_size"].int64_param = 8
    wanted = msg.outputs.add(name="y")
    wanted.parameters["classification"].int64_param = 2
    req = request_from_proto(msg, Regions())
    assert req.id == "q1" and req.parameters == {"priority": 1}
    assert req.inputs[0].data.tolist() == [[1, 2], [3, 4.5]] and req.inputs[0].data.dtype == np.float32
    assert req.inputs[1].data.tolist() == [b"abc"] and req.inputs[2].data.tolist() == [5, 6]
    assert req.outputs == [{"name": "y", "parameters": {"classification": 2}}]

    raw = pb.ModelInferRequest(model_name="m")
    raw.inputs.add(name="x", datatype="INT64", shape=[3])
    raw.raw_input_contents.append(np.array([1, -2, 3], np.int64).tobytes())
    assert request_from_proto(raw, Regions()).inputs[0].data.tolist() == [1, -2, 3]
    raw.inputs.add(name="w", datatype="INT64", shape=[1])  # more inputs than raw contents
    with pytest.raises(ProtocolError, match="raw_input_contents"):
        request_from_proto(raw, Regions())


def test_response_has_an_empty_raw_entry_for_an_output_in_shared_memory():
    outputs = [Output.of("y", np.array([[1.5, 2.5]], np.float32)), Output("z", None, "FP32", [1, 2]),
               Output.of("c", np.array([[b"0.5:1"]], dtype=object))]  # fmt: skip
    response = response_to_proto("m", "1", None, outputs)
    assert [o.name for o in response.outputs] == ["y", "z", "c"] and list(response.outputs[1].shape) == [1, 2]
    assert np.frombuffer(response.raw_output_contents[0], np.float32).tolist() == [1.5, 2.5]
    assert response.raw_output_contents[1] == b"" and response.raw_output_contents[2] == b"\x05\x00\x00\x000.5:1"


def test_a_cancelled_grpc_call_cancels_its_request_and_counts_as_canceled(caplog):
    """The client gives up (its deadline passes, the call is cancelled): the request stops, gives
    its admission place back, and is counted as CANCELED at INFO, not as a BACKEND failure."""



    async def go():
        endpoints = Endpoints(StuckFrontEnd(), Metrics(), MappedRegions())
        endpoints.ready = True
        async with grpc_channel(endpoints) as channel:
            call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
            body = grpc_request(SPEC.name, "x", "FP32", [1, 2], np.ones(2, "<f4").tobytes())
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call(body, timeout=0.5)
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            for _ in range(3000):  # the server hears of it on its own time
                if b'reason="CANCELED"' in endpoints.metrics.render():
                    break
                await asyncio.sleep(0.01)
        return endpoints

    with caplog.at_level(logging.INFO):
        endpoints = asyncio.run(go())
    text = endpoints.metrics.render().decode()
    assert 'reason="CANCELED"' in text and 'reason="BACKEND"' not in text
    assert all(a.in_flight == 0 for a in endpoints.admission.values())
    cancelled = [r for r in caplog.records if "cancelled" in r.getMessage()]
    assert cancelled and all(r.levelno <= logging.INFO for r in cancelled)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_grpc_refusals_past_the_pace_wait_their_turn_as_http_503s_do():
    """UNAVAILABLE is gRPC's 503: past the pace (`refusal_pace`) each waits, and all are answered."""



    async def go():
        endpoints = Endpoints(StuckFrontEnd(), Metrics(), MappedRegions(), max_pending=1)
        endpoints.ready = True
        async with grpc_channel(endpoints, RefusalPace(1, lambda: None, endpoints.metrics.refusals_held, 0.001)) as channel:
            call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
            body = grpc_request(SPEC.name, "x", "FP32", [1, 2], np.ones(2, "<f4").tobytes())
            stuck = asyncio.ensure_future(call(body))  # admitted, then never answered
            while not endpoints.admission[Priority.BE].in_flight:
                if stuck.done():  # answered or failed before its admission: say how, rather than wait forever
                    pytest.fail(f"the first call ended before it was admitted: {stuck.exception() or stuck.result()}")
                await asyncio.sleep(0.01)
            codes = []
            for _ in range(3):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call(body, timeout=60)
                codes.append(info.value.code())
            stuck.cancel()
        return endpoints, codes

    endpoints, codes = asyncio.run(go())
    assert codes == [grpc.StatusCode.UNAVAILABLE] * 3
    assert "atoll_refusals_held_total 2.0" in endpoints.metrics.render().decode()


def _one_input(datatype="FP32", shape=(2,), raw=None, **contents) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="m")
    t = msg.inputs.add(name="x", datatype=datatype, shape=list(shape))
    for field, values in contents.items():
        getattr(t.contents, field).extend(values)
    if raw is not None:
        msg.raw_input_contents.append(raw)
    return msg


def _bool_shm_size() -> pb.ModelInferRequest:
    msg = _one_input()
    msg.inputs[0].parameters["shared_memory_region"].string_param = "r"
    msg.inputs[0].parameters["shared_memory_byte_size"].bool_param = True
    return msg


# Each of the shapes was an UNKNOWN "Unexpected <class 'ValueError'>" from numpy's reshape, logged
# with a traceback; the integers an OverflowError.
@pytest.mark.parametrize("msg, match", [
    (_one_input(shape=[1] * 70, fp32_contents=[0]), "input 'x': shape must be a list of at most 32"),
    (_one_input(shape=[1] * 70, raw=b"\0" * 4), "input 'x': shape must be a list of at most 32"),
    (_one_input(shape=[-1, -1], fp32_contents=[0]), "non-negative integers"),
    (_one_input(shape=[2**62, 2**62, 0], raw=b""), "has too many elements"),
    (_one_input(shape=[2**62, 2**62], fp32_contents=[0]), "has too many elements"),
    (_one_input("INT8", int_contents=[1, 300]), "input 'x': a value is outside the range of INT8"),
    (_one_input("INT16", int_contents=[1, -40000]), "a value is outside the range of INT16"),
    (_one_input("UINT8", uint_contents=[1, 256]), "a value is outside the range of UINT8"),
    (_one_input("FP32", fp32_contents=[1]), "1 values for shape"),
    (_bool_shm_size(), "bad shared-memory parameters"),
])  # fmt: skip
def test_bad_tensors_are_protocol_errors(msg, match):
    with pytest.raises(ProtocolError, match=match):
        request_from_proto(msg, Regions())


def test_every_request_of_a_stream_is_answered_once_whatever_fails(caplog, monkeypatch):
    """A bad request is answered with its reason, a bug with its exception's name (and logged), and
    the stream goes on: each request gets exactly one answer. (A bad message was never answered,
    and its task's exception never retrieved.) A unary call's bug is INTERNAL, not grpcio's UNKNOWN
    with the exception's repr."""



    decode = grpc_service.request_from_proto

    def buggy(msg, regions):
        if msg.id == "bug":
            raise RuntimeError("a bug")
        return decode(msg, regions)

    monkeypatch.setattr(grpc_service, "request_from_proto", buggy)

    def request(id_: str, shape=(1, 2), values=(1.0, 2.0)) -> pb.ModelInferRequest:
        msg = pb.ModelInferRequest(model_name="m", id=id_)
        msg.inputs.add(name="x", datatype="FP32", shape=list(shape)).contents.fp32_contents.extend(values)
        return msg

    sent = [request("good"), request("shape", [1] * 70, [0.0]), request("bug"), request("values", values=[1.0]),
            request("after")]  # fmt: skip

    async def go():
        endpoints = Endpoints(EchoFrontEnd(), Metrics(), MappedRegions())
        endpoints.ready = True
        async with grpc_channel(endpoints) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            answers = [a async for a in stub.ModelStreamInfer(iter(sent), timeout=30)]
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ModelInfer(request("bug"), timeout=30)
        return answers, info.value

    with caplog.at_level(logging.INFO):
        answers, unary = asyncio.run(go())
    by_id = {a.infer_response.id: a.error_message for a in answers}
    assert len(answers) == len(sent) and set(by_id) == {m.id for m in sent}
    assert by_id["good"] == by_id["after"] == ""
    assert "shape must be a list of at most 32" in by_id["shape"] and "1 values for shape" in by_id["values"]
    assert by_id["bug"] == INTERNAL_ERROR  # no exception type, message or path in an answer
    assert unary.code() == grpc.StatusCode.INTERNAL and unary.details() == INTERNAL_ERROR
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2 and all(r.exc_info and "a bug" in str(r.exc_info[1]) for r in errors)


def test_a_stream_reads_no_further_ahead_of_its_client_than_its_window():
    """A client that sent 3,000 requests on a stream and read no answer grew a front end by 600 MB
    of answers waiting: the server now reads a request only while fewer than STREAM_UNSENT of its
    answers wait to be taken (an answer is taken when the next is asked for). Here the client takes
    one answer and asks for no more: however long the loop runs, STREAM_UNSENT requests are read."""



    read = [0]

    async def requests():
        for i in range(1000):
            read[0] += 1
            msg = pb.ModelInferRequest(model_name="m", id=str(i))
            msg.inputs.add(name="x", datatype="FP32", shape=[1, 2]).contents.fp32_contents.extend([1.0, 2.0])
            yield msg

    async def go():
        endpoints = Endpoints(EchoFrontEnd(), Metrics(), MappedRegions())
        endpoints.ready = True
        answers = grpc_service.GrpcService(endpoints).ModelStreamInfer(requests(), None)
        first = await anext(answers)
        for _ in range(200):  # the loop's turns: each would read on, were nothing holding it back
            await asyncio.sleep(0.005)
        await answers.aclose()
        return first

    assert asyncio.run(go()).error_message == ""
    assert read[0] == STREAM_UNSENT


def test_an_answer_its_call_outlived_is_one_throttled_info_line(caplog):
    """grpcio logs ExecuteBatchError at ERROR with a traceback when a call ends (cancelled, past
    its deadline) before its answer is sent: a storm of 1-100 ms deadlines filled the log so. The
    filter grpc_service.start installs turns them into one INFO line every 10 s; other records pass."""



    gone = _CallEnded()

    def record(exc: Exception) -> logging.LogRecord:
        return logging.LogRecord("grpc._cython.cygrpc", logging.ERROR, __file__, 1, "raised in core", None,
                                 (type(exc), exc, None))  # fmt: skip

    with caplog.at_level(logging.INFO):
        passed = [gone.filter(record(ExecuteBatchError('Failed "execute_batch"'))) for _ in range(100)]
        other = gone.filter(record(RuntimeError("a real failure")))
    assert passed == [False] * 100 and other
    said = [r for r in caplog.records if r.name == "atoll.front_end.grpc_service"]
    assert [(r.levelno, "its call had ended" in r.getMessage()) for r in said] == [(logging.INFO, True)]


@pytest.mark.parametrize("datatype", [d for d in CONTENTS])
def test_typed_contents_give_the_tensor_raw_contents_give(datatype):
    dt = DTYPES[datatype]
    if datatype == "BYTES":
        array = np.array([b"", b"a", "é".encode(), b"\x00\xff"] * 3, dtype=object)
    elif datatype == "BOOL":
        array = np.array([True, False, True] * 4)
    elif dt.kind == "f":
        array = np.array([0.1, -1e30, np.inf, np.nan, 0.0, -0.0] * 2, dt)
    else:
        info = np.iinfo(dt)
        array = np.array([info.min, info.max, 0, 1, -1 if dt.kind == "i" else 2, 127] * 2, dt)
    typed, raw = pb.ModelInferRequest(model_name="m"), pb.ModelInferRequest(model_name="m")
    field = CONTENTS[datatype]
    getattr(typed.inputs.add(name="x", datatype=datatype, shape=[3, 4]).contents, field).extend(array.tolist())
    raw.inputs.add(name="x", datatype=datatype, shape=[3, 4])
    raw.raw_input_contents.append(join_bytes(array) if datatype == "BYTES" else array.tobytes())
    from_typed = request_from_proto(typed, None).inputs[0].data
    from_raw = request_from_proto(raw, None).inputs[0].data
    assert from_typed.shape == from_raw.shape == (3, 4)
    if datatype == "BYTES":
        assert from_typed.tolist() == from_raw.tolist()
    else:
        assert from_typed.dtype == from_raw.dtype and from_typed.tobytes() == from_raw.tobytes()


def test_infer_messages_count_in_the_body_budget_while_in_hand():
    budget = BodyBudget(1000)
    endpoints = Endpoints(EchoFrontEnd(), Metrics(), MappedRegions())
    endpoints.ready = True
    service = grpc_service.GrpcService(endpoints, budget=budget)
    small = _one_input(shape=[1, 2], fp32_contents=[1.0, 2.0])
    large = _one_input(shape=[1, 2], fp32_contents=[1.0] * 300)  # 1.2 KB packed, and its tensor

    async def go():
        answer = await service._infer(small)
        budget.take(SimpleNamespace(held=0), 1)  # another request holds something: no longer alone
        with pytest.raises(ApiError) as refused:
            await service._infer(large)
        return answer, refused.value

    answer, refused = asyncio.run(go())
    assert np.frombuffer(answer.raw_output_contents[0], np.float32).tolist() == [1.0, 2.0]
    assert refused.code.http == 503 and budget.used == 1  # both shares given back
