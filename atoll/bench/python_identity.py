"""The repository of `atoll bench serve --python-identity`: a Python-backend identity model
(`identity_model.py`) and the same identity as an ONNX graph, FP32 [3, 224, 224] with
`max_batch_size` 8, both `atoll.preprocess: image` so the bench drives them with the ready tensors
of its image traffic. Each is measured alone (a mix of its own); Triton serves the Python one,
the same model.py, through its python backend."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
from onnx import TensorProto, helper

PYTHON, ONNX = "ident_py", "ident_onnx"
MIXES = ({PYTHON: 1.0}, {ONNX: 1.0})
TRITON_MODELS = {PYTHON}  # Triton's yardstick is its python backend; pytriton ships no ONNX backend
SOURCE = Path(__file__).with_name("identity_model.py")
DIMS = (3, 224, 224)
CONFIG = """name: "{name}"
{runtime}
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ {dims} ] }} ]
dynamic_batching {{ }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "atoll.preprocess" value {{ string_value: "image" }} }}
"""


def write(root: Path) -> Path:
    """Both models under `root`; returns `root`."""
    dims = ", ".join(map(str, DIMS))
    for name, runtime in ((PYTHON, 'backend: "python"'), (ONNX, 'platform: "onnxruntime_onnx"')):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(CONFIG.format(name=name, runtime=runtime, dims=dims))
    shutil.copy(SOURCE, root / PYTHON / "1" / "model.py")
    shape = ["N", *DIMS]
    graph = helper.make_graph([helper.make_node("Identity", ["INPUT"], ["OUTPUT"])], "identity",
                              [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("OUTPUT", TensorProto.FLOAT, shape)])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    onnx.save(model, str(root / ONNX / "1" / "model.onnx"))
    return root
