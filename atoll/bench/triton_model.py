"""The Triton Python-backend model of `atoll bench serve --baseline triton` (copied into the generated
model repository as `<model>/1/model.py`; it runs inside Triton's Python stub, not in Atoll).

What a Triton user writes for JPEG/WAV in, logits out without an FPGA: Triton's dynamic batcher
hands `execute` the requests it gathered; each request's media is decoded and preprocessed with
the same OpenCV/librosa code as Atoll's CPU path (`fpga_host.cpu_backend`), or its ready
FP32 tensor taken as is; the rows of all requests run as one onnxruntime batch on the config's
`atoll_threads` threads (one, with one model instance per core, unless the bench's sweep chose
otherwise); each request gets its own rows of the outputs back.
"""

import json

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils
from fpga_host import cpu_backend

from atoll.front_end.media import pad_stack, read_wav


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        cpu_backend.init_worker()
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(params["atoll_threads"])
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(params["atoll_onnx"], options, providers=["CPUExecutionProvider"])
        self.kind, self.raw, self.tensor = params["atoll_preprocess"], params["atoll_raw_input"], params["atoll_input"]
        self.outputs = [o["name"] for o in config["output"]]

    def _rows(self, request):
        raw = pb_utils.get_input_tensor_by_name(request, self.raw)
        if raw is not None:
            files = [bytes(b) for b in raw.as_numpy().reshape(-1)]
            if self.kind == "image":
                return np.stack([cpu_backend.image(f) for f in files])
            return pad_stack([cpu_backend.audio(*read_wav(f)) for f in files])
        tensor = pb_utils.get_input_tensor_by_name(request, self.tensor)
        if tensor is None:
            raise ValueError(f"needs input {self.raw!r} or {self.tensor!r}")
        return tensor.as_numpy().astype(np.float32, copy=False)

    def execute(self, requests):
        rows, errors = [], {}
        for i, request in enumerate(requests):
            try:
                rows.append(self._rows(request))
            except Exception as exc:  # one bad request fails alone, not its batch
                errors[i] = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)  # HTTP 400
                rows.append(None)
        good = [r for r in rows if r is not None]
        outputs = []
        if good:  # audio rows pad to the batch's longest
            batch = pad_stack([row for r in good for row in r])
            outputs = self.session.run(self.outputs, {self.tensor: batch})
        responses, start = [], 0
        for i, r in enumerate(rows):
            if r is None:
                responses.append(pb_utils.InferenceResponse(error=errors[i]))
                continue
            mine = [pb_utils.Tensor(name, out[start:start + len(r)]) for name, out in zip(self.outputs, outputs)]
            start += len(r)
            responses.append(pb_utils.InferenceResponse(output_tensors=mine))
        return responses
