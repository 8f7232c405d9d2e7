"""The executor of each model: the server's kernel runtime where it implements every operator and
every tensor is floating point, onnxruntime otherwise, naming what is missing; and a real server on
the numpy kernel runtime serving both kinds side by side."""

from __future__ import annotations

import numpy as np
import onnx
from gpu_runtime.compiler.importer import missing_operators
from onnx import TensorProto, helper
from tests.atoll.supervisor.test_failing_models import SERVER, _post
from tests.atoll.user_models import FP32_PAIR_CONFIG, SIMPLE_CONFIG, fp32_pair, simple, words, write

from atoll.supervisor.server_process import ServerProcess
from atoll.supervisor.executor_choice import choose


def test_the_kernel_runtime_where_it_can_onnxruntime_where_it_cannot(tmp_path):
    pair = write(tmp_path, "pair", fp32_pair(), None) / "1" / "model.onnx"
    assert choose("numpy", pair, ["FP32", "FP32", "FP32"]).executor == "numpy"
    ints = choose("numpy", write(tmp_path, "simple", simple(), None) / "1" / "model.onnx", ["INT32"] * 4)
    assert ints.executor == "onnxruntime" and ints.reason == "numpy computes in FP32/FP16, not INT32"
    lookup = choose("numpy", write(tmp_path, "words", words(), None) / "1" / "model.onnx", ["BYTES", "INT64"])
    assert lookup.executor == "onnxruntime" and lookup.missing == ("ai.onnx.ml.CategoryMapper",)
    assert lookup.reason == "numpy lacks operator(s) ai.onnx.ml.CategoryMapper"
    assert choose("onnxruntime", pair, ["FP32"]).executor == "onnxruntime"  # not a kernel runtime: as set
    assert choose(None, pair, ["FP32"]).executor is None  # the pool's own
    counted = choose("numpy", pair, ["FP32"] * 3, instances=2)  # instance_group count 2 on a vGPU
    assert counted.executor == "onnxruntime"
    assert counted.reason == ("instance_group asks for 2 instances on a vGPU, and numpy runs one "
                              "(REEF interleaves its programs)")
    assert choose("numpy", pair, ["FP32"] * 3, instances=1).executor == "numpy"


def test_operators_the_importer_folds_are_not_counted_and_variable_shapes_go_to_onnxruntime(tmp_path):
    # Swin-T's way: a mask computed from constants and shapes (Equal, Where) is folded at import
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    one = helper.make_tensor("one", TensorProto.INT64, [], [1])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["width"]),
             helper.make_node("Equal", ["width", "one"], ["narrow"]),
             helper.make_node("Where", ["narrow", "zero", "zero"], ["bias"]),
             helper.make_node("Add", ["x", "bias"], ["y"]),
             helper.make_node("Where", ["x_positive", "x", "y"], ["z"])]  # fmt: skip
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4]),
                                           helper.make_tensor_value_info("x_positive", TensorProto.BOOL, ["b", 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["b", 4])], [zero, one])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert missing_operators(model) == ("Where",)  # the Where on a graph input stays; Equal, Shape fold
    pair = write(tmp_path, "pair", fp32_pair(), None) / "1" / "model.onnx"
    varying = choose("numpy", pair, ["FP32"] * 3, variable=["x"])
    assert varying.executor == "onnxruntime"
    assert varying.reason == "numpy builds a program per shape at load, and input(s) x have variable dimensions"
    onnx.checker.check_model(model)


def test_a_server_on_the_kernel_runtime_runs_what_it_cannot_on_onnxruntime(tmp_path):
    write(tmp_path, "pair", fp32_pair(), FP32_PAIR_CONFIG)
    write(tmp_path, "simple", simple(), SIMPLE_CONFIG)
    with ServerProcess(["--repository", str(tmp_path), *SERVER, "--executor", "numpy"]) as server:
        x, a = np.arange(16, dtype=np.float32), np.arange(16, dtype=np.int32)
        pair = _post(f"{server.url}/v2/models/pair/infer",
                     {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "data": x.tolist()}]})
        summed = _post(f"{server.url}/v2/models/simple/infer", {"inputs": [
            {"name": n, "datatype": "INT32", "shape": [1, 16], "data": a.tolist()} for n in ("INPUT0", "INPUT1")]})
    assert server.proc.returncode == 0
    assert pair[0] == 200 and pair[1]["outputs"][1]["data"] == (2 * x).tolist()
    assert summed[0] == 200 and summed[1]["outputs"][0]["data"] == (2 * a).tolist()
    chosen = [line for line in server.log if " runs on " in line]
    assert len(chosen) == 1 and chosen[0].endswith("simple runs on onnxruntime: numpy computes in FP32/FP16, not INT32")
