"""Python-backend models as Triton's python_backend documents its examples (add_sub, a BLS model
calling it, a decoupled model answering N responses), written here, and a faulty one for
containment: config.pbtxt and 1/model.py each, in a repository folder."""

from __future__ import annotations

from pathlib import Path

TENSORS_4 = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

ADD_SUB = '''
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.dtypes = [pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, n)["data_type"])
                       for n in ("OUTPUT0", "OUTPUT1")]
        self.name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", (a + b).astype(self.dtypes[0])),
                pb_utils.Tensor("OUTPUT1", (a - b).astype(self.dtypes[1]))]))
        return responses

    def finalize(self):
        pb_utils.Logger.log_info(f"{self.name}: finalize")
'''

# Calls the model MODEL_NAME names with INPUT0/INPUT1 twice, by exec() and by async_exec().
BLS = '''
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            model = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0].decode()
            inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
            call = pb_utils.InferenceRequest(model_name=model, requested_output_names=["OUTPUT0", "OUTPUT1"],
                                             inputs=inputs)
            sync = call.exec()
            if sync.has_error():
                raise pb_utils.TritonModelException(sync.error().message())
            first, second = await asyncio.gather(call.async_exec(), call.async_exec())
            out0 = pb_utils.get_output_tensor_by_name(sync, "OUTPUT0").as_numpy()
            out1 = pb_utils.get_output_tensor_by_name(first, "OUTPUT1").as_numpy()
            assert np.array_equal(out1, pb_utils.get_output_tensor_by_name(second, "OUTPUT1").as_numpy())
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out0),
                                                         pb_utils.Tensor("OUTPUT1", out1)]))
        return responses
'''

# Triton's repeat example, shortened: one response per element of IN, from a thread, then the final flag.
REPEAT = '''
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        assert pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            threading.Thread(target=self.answer, args=(request.get_response_sender(), values)).start()
        return None

    def answer(self, sender, values):
        for i, value in enumerate(values):
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([value], np.int32)),
                                                    pb_utils.Tensor("IDX", np.array([i], np.uint32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
'''

# MODE 0 echoes, 1 raises, 2 hangs (past atoll.execute_timeout_s), 3 kills its own process.
FAULTY = '''
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = int(pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0])
            if mode == 1:
                raise ValueError("asked to fail")
            if mode == 2:
                time.sleep(600)
            if mode == 3:
                os._exit(3)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("ECHO", request.inputs()[0].as_numpy())]))
        return responses
'''

MODELS = {
    "add_sub": ('backend: "python"' + TENSORS_4 + "instance_group [ { kind: KIND_CPU } ]", ADD_SUB),
    "add_sub_batched": ('backend: "python"\nmax_batch_size: 8\ndynamic_batching { }' + TENSORS_4
                        + "instance_group [ { count: 2 kind: KIND_CPU } ]", ADD_SUB),
    "bls": ('backend: "python"\ninput [ { name: "MODEL_NAME" data_type: TYPE_STRING dims: [ 1 ] } ]' + TENSORS_4, BLS),
    "repeat": ('backend: "python"\nmodel_transaction_policy { decoupled: true }\n'
               'input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]\n'
               'output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, '
               '{ name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]', REPEAT),
    "faulty": ('backend: "python"\ninput [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
               'output [ { name: "ECHO" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
               'parameters { key: "atoll.execute_timeout_s" value { string_value: "2" } }', FAULTY),
}  # fmt: skip


def write_repository(root: Path, names=tuple(MODELS)) -> Path:
    for name in names:
        config, code = MODELS[name]
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}\n')
        (root / name / "1" / "model.py").write_text(code)
    return root
