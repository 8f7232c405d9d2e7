import pytest
from onnx import TensorProto
from tests.atoll.user_models import signature

from atoll.repository import pbtxt
from atoll.repository.specs import RepositoryError, load_repository

CONFIG = '''
name: "resnet"  # a comment
platform: "onnxruntime_onnx"
max_batch_size: 16
input [ { name: "input" data_type: TYPE_FP32 dims: [ 3, 224, 224 ] } ]
output { name: "logits" data_type: TYPE_FP32 dims: [ 1000 ] }
dynamic_batching { max_queue_delay_microseconds: 250 preferred_batch_size: [ 4, 8 ] }
parameters { key: "atoll.preprocess" value { string_value: "image" } }
parameters: { key: "note", value: { string_value: "a \\"quoted\\" word" } }
'''

RESNET = signature({"input": (TensorProto.FLOAT, ["N", 3, 224, 224])},
                   {"logits": (TensorProto.FLOAT, ["N", 1000])}).SerializeToString()


def test_pbtxt_messages_lists_and_repeats():
    cfg = pbtxt.loads(CONFIG)
    assert cfg["name"] == "resnet" and cfg["max_batch_size"] == 16
    assert cfg["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": [3, 224, 224]}]
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert [p["key"] for p in cfg["parameters"]] == ["atoll.preprocess", "note"]
    assert cfg["parameters"][1]["value"]["string_value"] == 'a "quoted" word'


def test_pbtxt_errors():
    with pytest.raises(pbtxt.PbtxtError, match="line 2"):
        pbtxt.loads('name: "x"\n$$$')
    with pytest.raises(pbtxt.PbtxtError):
        pbtxt.loads("input { name: 'x'")


def _model(root, name="resnet", config=CONFIG, version="1"):
    d = root / name
    (d / version).mkdir(parents=True)
    (d / "config.pbtxt").write_text(config)
    (d / version / "model.onnx").write_bytes(RESNET)
    return d


def test_repository_reads_triton_layout(tmp_path):
    d = _model(tmp_path)
    (d / "3").mkdir()
    (d / "3" / "model.onnx").write_bytes(RESNET)
    spec = load_repository(tmp_path)["resnet"]
    assert spec.version == "3" and spec.path == d / "3" / "model.onnx"
    assert spec.preprocess == "image" and spec.raw_input == "image"
    assert spec.max_queue_delay_microseconds == 250 and spec.preferred_batch_sizes == (4, 8)
    meta = spec.metadata()
    assert meta["inputs"][0] == {"name": "image", "datatype": "BYTES", "shape": [-1, 1]}
    assert meta["inputs"][1] == {"name": "input", "datatype": "FP32", "shape": [-1, 3, 224, 224]}
    assert meta["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 1000]}]


def test_repository_errors(tmp_path):
    with pytest.raises(RepositoryError, match="not found"):
        load_repository(tmp_path / "missing")
    with pytest.raises(RepositoryError, match="no model folders"):
        load_repository(tmp_path)
    _model(tmp_path, "other")
    with pytest.raises(RepositoryError, match="differs from folder"):
        load_repository(tmp_path)


def test_repository_rejects_unknown_preprocess(tmp_path):
    _model(tmp_path, config=CONFIG.replace('"image"', '"video"'))
    with pytest.raises(RepositoryError, match="atoll.preprocess"):
        load_repository(tmp_path)
