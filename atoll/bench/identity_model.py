"""The Python-backend identity model of `atoll bench serve --python-identity` (copied into the
generated repository as `ident_py/1/model.py`). The same file is served by Atoll's Python backend
and, with `--baseline triton`, by Triton's: each request's INPUT comes back as OUTPUT, so what is
measured is the backend's own cost per request."""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", pb_utils.get_input_tensor_by_name(
            request, "INPUT").as_numpy())]) for request in requests]  # fmt: skip
