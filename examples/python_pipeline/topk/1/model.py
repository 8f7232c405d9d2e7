"""Top-k post-processing for a classifier, as a Triton python-backend model."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.k = int(config["parameters"]["k"]["string_value"])
        pb_utils.Logger.log_info(f"{args['model_name']} version {args['model_version']}: top {self.k}")

    def execute(self, requests):
        responses = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
            shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
            probabilities = (shifted / shifted.sum(axis=-1, keepdims=True)).astype(np.float32)
            best = np.argsort(-probabilities, axis=-1, kind="stable")[:, : self.k]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("PROBABILITIES", probabilities),
                pb_utils.Tensor("TOPK_INDICES", best.astype(np.int32)),
                pb_utils.Tensor("TOPK_SCORES", np.take_along_axis(probabilities, best, axis=-1)),
            ]))
        return responses
