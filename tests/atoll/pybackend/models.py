"""Python-backend models as Triton's python_backend documents its examples (add_sub, a BLS model
calling it, a decoupled model answering N responses), written here, a faulty one for containment,
and ensembles: Python pre-processing + an ONNX model + Python post-processing (top-k), and one
whose step fails: config.pbtxt and 1/model.py (1/model.onnx, an empty 1/) each, in a repository."""

from __future__ import annotations

from pathlib import Path

from tests.atoll.user_models import FP32_PAIR_CONFIG, fp32_pair, write

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

# MODE 0 echoes, 1 raises, 2 hangs (past atoll.execute_timeout_s), 3 kills its own process, 4 answers
# its process id (for the client to kill it while it idles).
FAULTY = '''
import os
import time

import numpy as np

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
            echo = np.array([os.getpid()], np.int32) if mode == 4 else request.inputs()[0].as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("ECHO", echo)]))
        return responses
'''

# A media model's input as the DPU or the CPU path made it, answered back.
IDENTITY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("output", r.inputs()[0].as_numpy())]) for r in requests]
'''

# Answers the version its instance was started for (args["model_version"]).
VERSION = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.version = int(args["model_version"])

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("VERSION", np.array([self.version], np.int32))])
                for _ in requests]
'''

# Pre-processing: UINT8 pixels [16] -> FP32 in [0, 1].
SCALE = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "SCALED", pb_utils.get_input_tensor_by_name(r, "RAW").as_numpy().astype(np.float32) / 255)])
            for r in requests]
'''

# Post-processing: the K highest scores of each row and their indices, K from the config's parameters.
TOPK = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.k = int(json.loads(args["model_config"])["parameters"]["k"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            scores = pb_utils.get_input_tensor_by_name(request, "SCORES").as_numpy()
            best = np.argsort(-scores, axis=-1, kind="stable")[..., : self.k]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("TOPK_INDICES", best.astype(np.int32)),
                pb_utils.Tensor("TOPK_SCORES", np.take_along_axis(scores, best, axis=-1))]))
        return responses
'''

PIPELINE = """platform: "ensemble"
max_batch_size: 8
input [ { name: "RAW" data_type: TYPE_UINT8 dims: [ 16 ] } ]
output [ { name: "TOPK_INDICES" data_type: TYPE_INT32 dims: [ 3 ] },
         { name: "TOPK_SCORES" data_type: TYPE_FP32 dims: [ 3 ] },
         { name: "DOUBLED" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling { step [
  { model_name: "scale" model_version: -1 input_map { key: "RAW" value: "RAW" } output_map { key: "SCALED" value: "scaled" } },
  { model_name: "pair" model_version: 1 input_map { key: "x" value: "scaled" }
    output_map [ { key: "y" value: "plus_one" }, { key: "z" value: "DOUBLED" } ] },
  { model_name: "topk" model_version: -1 input_map { key: "SCORES" value: "plus_one" }
    output_map [ { key: "TOPK_INDICES" value: "TOPK_INDICES" }, { key: "TOPK_SCORES" value: "TOPK_SCORES" } ] }
] }"""

BROKEN = """platform: "ensemble"
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "ECHO" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "faulty" model_version: -1 input_map { key: "MODE" value: "MODE" }
                               output_map { key: "ECHO" value: "ECHO" } } ] }"""

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
               'parameters { key: "atoll.execute_timeout_s" value { string_value: "3" } }', FAULTY),
    "scale": ('backend: "python"\nmax_batch_size: 8\ninput [ { name: "RAW" data_type: TYPE_UINT8 dims: [ 16 ] } ]\n'
              'output [ { name: "SCALED" data_type: TYPE_FP32 dims: [ 16 ] } ]', SCALE),
    "topk": ('backend: "python"\nmax_batch_size: 8\ninput [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
             'output [ { name: "TOPK_INDICES" data_type: TYPE_INT32 dims: [ 3 ] }, '
             '{ name: "TOPK_SCORES" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
             'parameters { key: "k" value { string_value: "3" } }', TOPK),
    "ident_image": ('backend: "python"\nmax_batch_size: 4\n'
                    'input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]\n'
                    'output [ { name: "output" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]\n'
                    'parameters { key: "atoll.preprocess" value { string_value: "image" } }', IDENTITY),
    "no_init": ('backend: "python"' + TENSORS_4, ADD_SUB.replace("    def initialize(self, args):\n",
                                                                 "    def initialize(self, args):\n        1 / 0\n")),
    "pipeline": (PIPELINE, None),
    "broken": (BROKEN, None),
}  # fmt: skip


def write_repository(root: Path, names=tuple(MODELS)) -> Path:
    """The models of MODELS (an ensemble's version folder empty), and `pair` (user_models.fp32_pair)."""
    for name in names:
        config, code = MODELS[name]
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"\n{config}\n')
        if code is not None:
            (root / name / "1" / "model.py").write_text(code)
    write(root, "pair", fp32_pair(), FP32_PAIR_CONFIG)
    versioned = root / "versioned"  # two versions served at once, each answering its version number
    for version in ("1", "2"):
        (versioned / version).mkdir(parents=True)
        (versioned / version / "model.py").write_text(VERSION)
    (versioned / "config.pbtxt").write_text('name: "versioned"\nbackend: "python"\nversion_policy: { all { } }\n'
                                            'input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
                                            'output [ { name: "VERSION" data_type: TYPE_INT32 dims: [ 1 ] } ]\n')
    return root
