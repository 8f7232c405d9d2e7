"""One instance of a Python-backend model: a process of its own running the user's `model.py`.

It imports the model (its version folder first on `sys.path`, `triton_python_backend_utils` being
`pb_utils`), calls `initialize(args)` with the arguments Triton documents, then answers `Execute`
messages: each request's tensors are read from its slot rows (stacked along the batch dimension
for a batching model), `execute(requests)` runs (a coroutine `execute` too), and each response's
outputs are written into the rows' slots (split back into rows). A decoupled model answers through
each request's response sender: every response goes to a one-off shared-memory segment, named in a
`Streamed` message. `Stop` calls `finalize()`. An exception of the model's answers its requests
with an error; whatever else goes wrong (a crash, a hang) is the supervisor's to contain.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import logging
import math
import os
import signal
import sys
import threading
import traceback

import numpy as np
from gpu_runtime.thread_names import name_this_thread
from gpu_runtime.vgpu import shm
from gpu_runtime.vgpu.messages import Row, RowInput
from gpu_runtime.vgpu.slots import SlotArena

from atoll.kserve.datatypes import DTYPES
from atoll.pybackend import pb_utils
from atoll.pybackend.bls import BlsClient
from atoll.pybackend.messages import (Execute, Executed, InstanceSetup, StartFailed, Started, Stop,
                                      Streamed)  # fmt: skip

log = logging.getLogger(__name__)


def instance_main(conn, setup: InstanceSetup) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor stops it (Stop, or the pipe closing)
    name_this_thread("atoll-py")  # its stage in the CPU account of `atoll bench serve`
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s {setup.model}/{setup.instance} "
                                                   "%(name)s: %(message)s")  # fmt: skip
    try:
        instance = Instance(conn, setup)
    except BaseException as exc:  # noqa: BLE001 - the model's own code: any failure is its load's reason
        conn.send(StartFailed(_reason(exc)))
        return
    conn.send(Started(os.getpid()))
    instance.serve()


def _reason(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(exc)).strip()


def _bytes_elements(region: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """BYTES elements as `slots.pack_bytes` laid them in a row, as Triton hands them: bytes objects."""
    data, out, at = region.tobytes(), np.empty(math.prod(shape), object), 0
    for i in range(len(out)):
        n = int.from_bytes(data[at : at + 4], "little")
        out[i] = data[at + 4 : at + 4 + n]
        at += 4 + n
    return out.reshape(shape)


class Instance:
    def __init__(self, conn, setup: InstanceSetup):
        self.conn, self.setup = conn, setup
        self._send_lock = threading.Lock()  # a decoupled model may answer from threads of its own
        self._arenas: dict[str, SlotArena] = {}
        self._segments = itertools.count()
        sys.modules["triton_python_backend_utils"] = pb_utils
        pb_utils._bls = BlsClient(setup.server_url)
        folder = os.path.dirname(setup.file)
        sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location(f"atoll_model_{setup.model}", setup.file)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        self.model = module.TritonPythonModel()
        self._loop = asyncio.new_event_loop()  # for a coroutine `execute`, and the BLS async_exec it awaits
        if hasattr(self.model, "initialize"):
            self.model.initialize({
                "model_config": setup.model_config, "model_instance_kind": "CPU",
                "model_instance_name": f"{setup.model}_{setup.instance}", "model_instance_device_id": "0",
                "model_repository": os.path.dirname(folder), "model_version": setup.version,
                "model_name": setup.model})  # fmt: skip

    def _send(self, message) -> None:
        with self._send_lock:
            self.conn.send(message)

    def serve(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):  # the supervisor is gone
                break
            if isinstance(message, Stop):
                break
            if isinstance(message, Execute):
                self._execute(message)
        if hasattr(self.model, "finalize"):
            self.model.finalize()
        for arena in self._arenas.values():
            arena.close()

    def _arena(self, name: str) -> SlotArena:
        if name not in self._arenas:
            self._arenas[name] = SlotArena.attach(name)
        return self._arenas[name]

    # -- requests in ----------------------------------------------------------------------------------

    def _request(self, rows: tuple[Row, ...]) -> pb_utils.InferenceRequest:
        arena = self._arena(rows[0].arena)
        tensors = []
        for k, field in enumerate(self.setup.fields):
            parts = [self._part(arena, row, field, row.shapes[k]) for row in rows]
            tensors.append(pb_utils.Tensor(field.name, np.stack(parts) if self.setup.batched else parts[0]))
        return pb_utils.InferenceRequest(self.setup.model, tensors, [t.name for t in self.setup.outputs])

    @staticmethod
    def _part(arena: SlotArena, row: Row, field: RowInput, shape: tuple[int, ...]) -> np.ndarray:
        if field.dtype == object:
            return _bytes_elements(arena.input(row.index, (field.room,), np.uint8, field.offset), shape)
        return np.array(arena.input(row.index, shape, field.dtype, field.offset))  # its own: the slot is reused

    # -- execute ------------------------------------------------------------------------------------

    def _execute(self, message: Execute) -> None:
        results: list = [None] * len(message.requests)
        requests = []
        for i, rows in enumerate(message.requests):
            try:
                requests.append(self._request(rows))
            except Exception as exc:  # noqa: BLE001 - e.g. an arena gone with its front end
                results[i] = f"cannot read the request's inputs: {_reason(exc)}"
                requests.append(None)
        live = [i for i, r in enumerate(requests) if r is not None]
        pending = threading.Semaphore(0)
        if self.setup.decoupled:
            for i in live:
                requests[i]._sender = pb_utils.InferenceResponseSender(self._streamer(message.call, i, results,
                                                                                           pending))  # fmt: skip
        try:
            responses = self.model.execute([requests[i] for i in live])
            if asyncio.iscoroutine(responses):
                responses = self._loop.run_until_complete(responses)
        except Exception as exc:  # noqa: BLE001 - the model's error answers every request of the call
            reason = f"{self.setup.model}: execute raised {_reason(exc)}"
            log.error("%s", reason)
            for i in live:
                results[i] = reason if results[i] is None else results[i]  # those finished stay so
            self._send(Executed(message.call, tuple(results)))
            return
        if self.setup.decoupled:
            for _ in live:  # every request's final response, sent from here or from the model's threads
                pending.acquire()
        else:
            self._answer(message, live, responses, results)
        self._send(Executed(message.call, tuple(results)))

    def _answer(self, message: Execute, live: list[int], responses, results: list) -> None:
        if not isinstance(responses, (list, tuple)) or len(responses) != len(live):
            got = len(responses) if isinstance(responses, (list, tuple)) else type(responses).__name__
            reason = f"{self.setup.model}: execute must return one InferenceResponse per request ({len(live)}), got {got}"
            for i in live:
                results[i] = reason
            return
        for i, response in zip(live, responses):
            try:
                results[i] = self._store(message.requests[i], response)
            except ValueError as exc:
                results[i] = f"{self.setup.model}: {exc}"

    def _outputs(self, response) -> dict[str, np.ndarray]:
        """The response's outputs by name, checked against the config; ValueError names what is wrong."""
        if not isinstance(response, pb_utils.InferenceResponse):
            raise ValueError(f"execute returned a {type(response).__name__}, not an InferenceResponse")
        if response.has_error():
            raise ValueError(response.error().message())
        got = {t.name(): t.as_numpy() for t in response.output_tensors()}
        out = {}
        for spec in self.setup.outputs:
            if spec.name not in got:
                raise ValueError(f"the response lacks output {spec.name!r}")
            array, want = got[spec.name], DTYPES[spec.datatype]
            if array.dtype != want and not (want == object and array.dtype.kind in "OSU"):
                raise ValueError(f"output {spec.name!r} is {array.dtype}, its config says {spec.datatype}")
            out[spec.name] = array
        return out

    def _store(self, rows: tuple[Row, ...], response) -> tuple:
        """The response's outputs written into the rows' slots (split along the batch dimension)."""
        outputs = self._outputs(response)
        arena = self._arena(rows[0].arena)
        if self.setup.batched:
            bad = [n for n, a in outputs.items() if a.ndim == 0 or a.shape[0] != len(rows)]
            if bad:
                raise ValueError(f"output(s) {', '.join(bad)} must have the request's {len(rows)} row(s) first")
        layouts = []
        for k, row in enumerate(rows):
            mine = {n: a[k] for n, a in outputs.items()} if self.setup.batched else outputs
            _, size = shm.plan(mine)
            if size > arena.out_stride:
                raise ValueError(f"outputs of {size} bytes exceed a slot's room of {arena.out_stride} "
                                 "(dims of -1 take at most the parameter atoll.max_dim)")  # fmt: skip
            layouts.append(shm.store(arena.output(row.index), mine))
        return tuple(layouts)

    # -- decoupled ----------------------------------------------------------------------------------

    def _streamer(self, call: int, i: int, results: list, pending: threading.Semaphore):
        """Request `i`'s response sender: each response into a segment of its own, named in a Streamed."""

        def deliver(response, final: bool) -> None:
            segment, layout, error = None, [], ""
            if response is not None:
                try:
                    outputs = self._outputs(response)
                    segment = f"{self.setup.segment_prefix}-{next(self._segments)}"
                    layout = shm.write(segment, outputs)
                except ValueError as exc:
                    segment, error = None, f"{self.setup.model}: {exc}"
            self._send(Streamed(call, i, segment, layout, final, error))
            if final:
                results[i] = ()
                pending.release()

        return deliver
