"""What lowering makes of the zoo models: the layout ops, activations, scales, residual adds and
squeeze-excitation blocks that must leave no launch of their own. Counts are per kernel family
(the name's second word); split GEMMs add a `gemmsum` launch, which the tile choice decides."""

from __future__ import annotations

from collections import Counter

import pytest

from gpu_runtime.compiler.importer import import_model
from tests.gpu_runtime.zoo_cases import zoo_model


def _families(name, length=None, precision="fp32"):
    program = import_model(zoo_model(name), 1, length, precision=precision)
    names = [launch.kernel.name for launch in program.launches]
    families = Counter(n.split("_")[1] for n in names)
    elementwise = Counter(n.split("_")[2] for n in names if n.startswith("atoll_ew_"))
    return families, elementwise


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_mobilenet_is_convs_windows_and_one_launch_per_squeeze_excitation(precision):
    families, elementwise = _families("mobilenet_v3_small", precision=precision)
    assert families["gemm"] + families["hmma"] == 25  # 24 convs and 2 Gemms, stem-to-classifier
    assert families["window"] == 11 and families["se"] == 9 and families["mean"] == 1
    assert not elementwise  # BN, hardswish, SE scaling and residual adds all fused


def test_squeezenet_concats_are_written_in_place():
    families, elementwise = _families("squeezenet1_1")
    assert families["gemm"] == 26 and families["window"] == 3 and not elementwise


def test_swin_layout_ops_are_views():
    """Left: the shifted-window mask (5 blocks) and the residual Adds read through the rolled
    window reverse (a gathered operand), and one copy per patch merge (LayerNorm reads rows)."""
    families, elementwise = _families("swin_t")
    assert elementwise == Counter({"add": 15, "copy": 3})
    assert families["layernorm"] == 29 and families["softmax"] == 12


def test_conformer_keeps_only_the_glu():
    families, elementwise = _families("conformer", 64)
    assert elementwise == Counter({"mul": 16})  # mul_sigmoid: a * sigmoid(b) of the two halves
    assert families["window"] == 16 and families["layernorm"] == 80 and families["softmax"] == 16


def test_citrinet_blocks_end_in_their_residual_convolution():
    families, elementwise = _families("citrinet", 64)
    assert not elementwise and families["se"] == 9 and families["window"] == 27
