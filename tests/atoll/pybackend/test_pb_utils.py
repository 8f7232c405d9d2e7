"""triton_python_backend_utils as a model uses it, without a server (issue #43)."""

from __future__ import annotations

import numpy as np
import pytest

from atoll.pybackend import pb_utils


def test_tensors_keep_their_arrays_and_name_their_datatypes():
    t = pb_utils.Tensor("x", np.zeros((2, 3), np.float16))
    assert (t.name(), t.shape(), t.triton_dtype()) == ("x", [2, 3], "FP16")
    words = pb_utils.Tensor("w", np.array([b"a", b"bc"]))
    assert words.triton_dtype() == "BYTES" and words.as_numpy().tolist() == [b"a", b"bc"]
    assert pb_utils.triton_string_to_numpy("TYPE_INT32") is np.int32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_


def test_requests_and_responses_find_tensors_by_name():
    request = pb_utils.InferenceRequest("m", [pb_utils.Tensor("a", np.ones(2)), pb_utils.Tensor("b", np.zeros(2))],
                                        ["out"], parameters={"k": 3})  # fmt: skip
    assert pb_utils.get_input_tensor_by_name(request, "b").as_numpy().tolist() == [0, 0]
    assert pb_utils.get_input_tensor_by_name(request, "c") is None
    assert request.parameters() == '{"k": 3}'
    response = pb_utils.InferenceResponse([pb_utils.Tensor("out", np.arange(3))])
    assert not response.has_error() and pb_utils.get_output_tensor_by_name(response, "out").as_numpy().tolist() == [0, 1, 2]
    failed = pb_utils.InferenceResponse(error=pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG))
    assert failed.has_error() and failed.error().message() == "bad"


def test_configs_give_their_tensors_and_policy():
    config = {"output": [{"name": "y", "data_type": "TYPE_FP32"}], "model_transaction_policy": {"decoupled": True}}
    assert pb_utils.get_output_config_by_name(config, "y")["data_type"] == "TYPE_FP32"
    assert pb_utils.get_output_config_by_name(config, "z") == {}
    assert pb_utils.using_decoupled_model_transaction_policy(config)


def test_a_response_sender_ends_with_its_final_flag():
    sent = []
    sender = pb_utils.InferenceResponseSender(lambda response, final: sent.append((response, final)))
    with pytest.raises(pb_utils.TritonModelException):
        sender.send()  # neither a response nor the final flag
    sender.send(pb_utils.InferenceResponse([]))
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert [final for _, final in sent] == [False, True]
    with pytest.raises(pb_utils.TritonModelException):
        sender.send(pb_utils.InferenceResponse([]))
    with pytest.raises(pb_utils.TritonModelException):  # a request of a model that is not decoupled
        pb_utils.InferenceRequest("m").get_response_sender()


def test_bls_needs_an_instance():
    with pytest.raises(pb_utils.TritonModelException, match="inside a model's instance"):
        pb_utils.InferenceRequest("m").exec()
