"""The DPU manifest: the committed file matches hls/ABI_DPU.md; malformed manifests are refused clearly."""

from __future__ import annotations

import copy
import json

import pytest

from fpga_host.manifest import DEFAULT_MANIFEST, ManifestError, load_manifest, parse_manifest
from fpga_host.dpu_driver import KERNEL_ARGS


def test_committed_manifest_matches_the_abi():
    m = load_manifest(DEFAULT_MANIFEST)
    assert m.platform == "xilinx_u55c_gen3x16_xdma_3_202210_1" and m.xclbin == "atoll_dpu.xclbin"
    assert {k: len(v.cus) for k, v in m.kernels.items()} == {
        "image_cu": 8, "audio_mel_cu": 2, "audio_norm_cu": 2}
    for name, args in KERNEL_ARGS.items():  # the driver sets exactly the ABI's arguments, in order
        assert tuple(a.name for a in m.kernel(name).args) == args
    image = m.kernel("image_cu")
    assert [a.dir for a in image.args if a.kind == "bo"] == ["in", "inout", "out", "out"]
    assert image.index("stage") == 7


def _doc():
    return json.loads(DEFAULT_MANIFEST.read_text())


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.pop("kernels"), "missing 'kernels'"),
    (lambda d: d["kernels"][0].update(cus=[]), "cus must be a non-empty list"),
    (lambda d: d["kernels"][0].update(cus=["a", "a"]), "distinct names"),
    (lambda d: d["kernels"][1].update(cus=["image_cu_1"]), "used by two kernels"),
    (lambda d: d["kernels"][0]["args"][1].update(kind="u64"), "kind 'u64'"),
    (lambda d: d["kernels"][0]["args"][0].pop("dir"), "needs dir"),
    (lambda d: d["kernels"][0]["args"][1].update(dir="in"), "only bo arguments"),
    (lambda d: d["kernels"][0]["args"].append({"name": "jpeg", "kind": "u32"}), "distinct"),
    (lambda d: d["kernels"].append(copy.deepcopy(d["kernels"][0])), "distinct"),
    (lambda d: d.update(xclbin=""), "'xclbin' must be a non-empty str"),
])
def test_malformed_manifests(mutate, message, tmp_path):
    doc = _doc()
    mutate(doc)
    with pytest.raises(ManifestError, match=message):
        parse_manifest(doc, tmp_path / "m.json")


def test_unreadable_and_incomplete(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ManifestError, match="cannot read manifest"):
        load_manifest(bad)
    doc = _doc()
    doc["kernels"][2]["args"].pop()
    spec = parse_manifest(doc, bad).kernel("audio_norm_cu")
    with pytest.raises(ManifestError, match="lacks argument.*status"):
        spec.require(KERNEL_ARGS["audio_norm_cu"])
    with pytest.raises(ManifestError, match="no kernel 'fft_cu'"):
        parse_manifest(doc, bad).kernel("fft_cu")
