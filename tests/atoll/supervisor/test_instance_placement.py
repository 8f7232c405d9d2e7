"""`instance_group` read (atoll.repository.instances) and placed on a server's vGPUs
(atoll.supervisor.instance_placement), as Triton's model_configuration.md "Instance Groups" states:
KIND_GPU `count` instances on every GPU or on those `gpus` names; KIND_CPU `count` on the CPU
(default 2 for ONNX Runtime); KIND_AUTO a GPU where there is one, else the CPU."""

from __future__ import annotations

import pytest

from atoll.repository import pbtxt
from atoll.repository.instances import InstanceGroupError, read_instance_groups
from atoll.repository.specs import ModelSpec
from atoll.supervisor.instance_placement import InstancePlacementError, place_instances, restricted_vgpus
from gpu_runtime.vgpu.discovery import VGpuInfo

MIGS = [VGpuInfo(f"mig{i}", "mig", "slice", f"MIG-{i}", "a100-1g.5gb", 14, None) for i in range(3)]
CPUS = [VGpuInfo(f"cpu{i}", "cpu", "cpu", None, "cpu", None, None, threads=2) for i in range(2)]


def spec(groups: str) -> ModelSpec:
    parsed = read_instance_groups(pbtxt.loads(groups).get("instance_group"), "m")
    return ModelSpec("m", "1", None, "onnxruntime_onnx", 8, [], [], "none", "none", instance_groups=parsed)


@pytest.mark.parametrize("groups, vgpus, placed", [
    ("", MIGS + CPUS, None),  # none: every vGPU, as the server places it
    ("instance_group [ { count: 2 kind: KIND_GPU } ]", MIGS + CPUS, {"mig0": 2, "mig1": 2, "mig2": 2}),
    ("instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] }, { count: 2 kind: KIND_GPU gpus: [ 1, 2 ] } ]",
     MIGS, {"mig0": 1, "mig1": 2, "mig2": 2}),  # Triton's own example
    ("instance_group [ { count: 3 kind: KIND_CPU } ]", MIGS + CPUS, {"cpu0": 2, "cpu1": 1}),  # spread over the CPU
    ("instance_group [ { kind: KIND_CPU } ]", CPUS, {"cpu0": 1, "cpu1": 1}),  # count 2 by default
    ("instance_group [ { count: 1 } ]", MIGS + CPUS, {"mig0": 1, "mig1": 1, "mig2": 1}),  # AUTO: the GPUs
    ("instance_group [ { count: 1 } ]", CPUS, {"cpu0": 1}),  # AUTO without GPUs: the CPU
    ("instance_group [ { count: 1 kind: KIND_GPU gpus: [ 2 ] }, { count: 1 kind: KIND_GPU gpus: [ 2 ] } ]",
     MIGS, {"mig2": 2}),  # groups naming one vGPU add up
])  # fmt: skip
def test_placement(groups, vgpus, placed):
    assert place_instances(spec(groups), vgpus) == placed


@pytest.mark.parametrize("groups, vgpus, message", [
    ("instance_group [ { kind: KIND_GPU } ]", CPUS, "m: instance_group 0 (KIND_GPU) needs a GPU; this server has "
     "CPU vGPUs only"),
    ("instance_group [ { kind: KIND_GPU gpus: [ 0, 3 ] } ]", MIGS, "m: instance_group 0 (KIND_GPU): gpus [3] beyond "
     "this server's GPU vGPUs 0..2 (mig0, mig1, mig2)"),
    ("instance_group [ { kind: KIND_CPU } ]", MIGS, "m: instance_group 0 (KIND_CPU) needs the CPU; this server has "
     "no CPU vGPU (vgpus.cpu_vgpus)"),
])  # fmt: skip
def test_what_the_server_lacks_is_refused(groups, vgpus, message):
    with pytest.raises(InstancePlacementError) as caught:
        place_instances(spec(groups), vgpus)
    assert str(caught.value) == message


@pytest.mark.parametrize("groups, message", [
    ("instance_group [ { kind: KIND_MODEL } ]", "KIND_MODEL is not supported"),
    ("instance_group [ { kind: KIND_TPU } ]", "unknown kind 'KIND_TPU'"),
    ("instance_group [ { count: -1 } ]", "count must be a positive integer, got -1"),
    ("instance_group [ { kind: KIND_CPU gpus: [ 0 ] } ]", "a KIND_CPU group names no gpus"),
    ("instance_group [ { passive: true } ]", "'passive' is not supported by Atoll"),
    ("instance_group [ { host_policy: \"p\" } ]", "'host_policy' is not supported by Atoll"),
])  # fmt: skip
def test_unsupported_fields_are_refused_by_name(groups, message):
    with pytest.raises(InstanceGroupError, match=message):
        spec(groups)


def test_only_preba_places_a_model_on_some_vgpus():
    every = ["mig0", "mig1", "cpu0"]
    assert restricted_vgpus("m", None, every, "triton") is None
    assert restricted_vgpus("m", {"mig0": 1, "mig1": 1, "cpu0": 1}, every, "triton") is None
    assert restricted_vgpus("m", {"mig1": 2, "mig0": 1}, every, "preba") == ("mig0", "mig1")
    with pytest.raises(InstancePlacementError, match="the triton batcher places every model on every vGPU"):
        restricted_vgpus("m", {"mig0": 1}, every, "triton")
