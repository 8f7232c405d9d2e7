"""End to end through real HTTP: `atoll serve` in a child process, driven by aiohttp-free stdlib
requests and by the real `tritonclient.http` (separate venv). Outputs are compared with the same
model run directly in onnxruntime on an input preprocessed with OpenCV in the test."""

from __future__ import annotations

import io
import json
import os
import socket
import struct
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import onnxruntime as ort
import pytest
import soundfile
from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model
from tests.atoll.client_env import run_client

from atoll.bench.bodies import infer_body
from atoll.bench.corpus import jpeg_bomb, jpeg_bytes, jpeg_scan_bomb, synthetic_wav
from atoll.supervisor.server_process import ServerProcess
from atoll.kserve.protocol import HEADER_LENGTH

MODEL = "mobilenet_v3_small"
AUDIO_MODEL = "citrinet"
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    root = tmp_path_factory.mktemp("repo")
    for name in (MODEL, AUDIO_MODEL):
        write_model(root, name, build(name))
    return root


@pytest.fixture(scope="module")
def server(repository):
    with ServerProcess(["--repository", str(repository), "--backend", "cpu", "--front-ends", "2",
                        "--set", "batching.max_queue_delay_microseconds=2000"]) as s:  # fmt: skip
        yield s
    assert s.proc.returncode == 0, "\n".join(s.log[-20:])
    # every slot arena and pool segment of the server is gone with it
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"atoll-{s.proc.pid}-")]


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _post(url: str, body: bytes, headers: dict) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _reference_logits(repository, jpeg: bytes) -> np.ndarray:
    """cv2 decode -> RGB -> INTER_LINEAR resize (short side 256) -> centre crop 224 -> ImageNet
    normalisation, then onnxruntime: the expected output, computed without Atoll code."""
    rgb = cv2.cvtColor(cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    h, w = rgb.shape[:2]
    nh, nw = (256, int(256 * w / h)) if h <= w else (int(256 * h / w), 256)
    small = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_LINEAR)
    top, left = int(round((nh - 224) / 2)), int(round((nw - 224) / 2))
    crop = small[top:top + 224, left:left + 224]
    x = ((crop.astype(np.float32) / np.float32(255) - MEAN) / STD).transpose(2, 0, 1)[None]
    session = ort.InferenceSession(str(repository / MODEL / "1" / "model.onnx"))
    return session.run(None, {"input": np.ascontiguousarray(x)})[0][0]


def _decode_binary_response(headers: dict, payload: bytes) -> np.ndarray:
    n = int(headers[HEADER_LENGTH])
    head = json.loads(payload[:n])
    out = head["outputs"][0]
    return np.frombuffer(payload[n:], dtype=np.float32).reshape(out["shape"])


def test_health_and_metadata(server):
    assert _get(f"{server.url}/v2/health/live")[0] == 200
    assert _get(f"{server.url}/v2/health/ready")[0] == 200
    status, body = _get(f"{server.url}/v2")
    meta = json.loads(body)
    assert status == 200 and meta["name"] == "atoll" and "binary_tensor_data" in meta["extensions"]
    status, body = _get(f"{server.url}/v2/models/{MODEL}")
    meta = json.loads(body)
    assert meta["inputs"][0] == {"name": "image", "datatype": "BYTES", "shape": [-1, 1]}
    assert meta["outputs"][0]["shape"] == [-1, 1000]
    assert _get(f"{server.url}/v2/models/{MODEL}/ready")[0] == 200
    assert _get(f"{server.url}/v2/models/{MODEL}/versions/1/ready")[0] == 200
    status, body = _get(f"{server.url}/v2/models/nope")
    assert status == 404 and "nope" in json.loads(body)["error"]
    assert _get(f"{server.url}/v2/models/{MODEL}/versions/7")[0] == 404


def test_jpeg_inference_matches_opencv_plus_onnxruntime(server, repository):
    jpeg = jpeg_bytes(640, 480, seed=3)
    body, headers = infer_body("image", [jpeg])
    status, rheaders, payload = _post(f"{server.url}/v2/models/{MODEL}/infer", body, headers)
    assert status == 200, payload[:300]
    logits = _decode_binary_response(rheaders, payload)
    assert logits.shape == (1, 1000)
    np.testing.assert_allclose(logits[0], _reference_logits(repository, jpeg), rtol=1e-4, atol=1e-4)


def test_concurrent_clients_across_front_ends(server, repository):
    """Many connections at once (spread over the front ends by the kernel): each answer is its own."""
    jpegs = [jpeg_bytes(300 + 40 * i, 220 + 30 * i, seed=20 + i) for i in range(12)]

    def one(jpeg):
        body, headers = infer_body("image", [jpeg])
        status, rheaders, payload = _post(f"{server.url}/v2/models/{MODEL}/infer", body, headers)
        assert status == 200, payload[:300]
        return _decode_binary_response(rheaders, payload)[0]

    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(one, jpegs))
    for jpeg, logits in zip(jpegs, got):
        np.testing.assert_allclose(logits, _reference_logits(repository, jpeg), rtol=1e-4, atol=1e-4)
    assert any("2 front end(s)" in line for line in server.log)


def test_several_files_in_one_request_and_json_output(server):
    files = [jpeg_bytes(500, 375, seed=4), jpeg_bytes(375, 500, seed=5)]
    blob = b"".join(struct.pack("<I", len(f)) + f for f in files)
    head = json.dumps({"inputs": [{"name": "image", "datatype": "BYTES", "shape": [2, 1],
                                   "parameters": {"binary_data_size": len(blob)}}]}).encode()
    status, _, payload = _post(f"{server.url}/v2/models/{MODEL}/infer", head + blob,
                               {HEADER_LENGTH: str(len(head))})  # fmt: skip
    assert status == 200
    out = json.loads(payload)["outputs"][0]
    assert out["shape"] == [2, 1000] and len(out["data"]) == 2000


def test_ready_tensor_input_bypasses_preprocessing(server, repository):
    x = np.random.default_rng(5).normal(size=(2, 3, 224, 224)).astype(np.float32)
    head = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 3, 224, 224],
                                   "parameters": {"binary_data_size": x.nbytes}}],
                       "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    status, rheaders, payload = _post(f"{server.url}/v2/models/{MODEL}/infer", head + x.tobytes(),
                                      {HEADER_LENGTH: str(len(head))})  # fmt: skip
    assert status == 200
    session = ort.InferenceSession(str(repository / MODEL / "1" / "model.onnx"))
    np.testing.assert_allclose(_decode_binary_response(rheaders, payload),
                               session.run(None, {"input": x})[0], rtol=1e-4, atol=1e-4)  # fmt: skip


def test_bad_requests_get_reasons(server):
    body, headers = infer_body("image", [b"\xff\xd8\xff\xe0 definitely not a jpeg"])
    status, _, payload = _post(f"{server.url}/v2/models/{MODEL}/infer", body, headers)
    assert status == 400 and json.loads(payload)["error"]
    status, _, payload = _post(f"{server.url}/v2/models/nope/infer", body, headers)
    assert status == 404
    status, _, payload = _post(f"{server.url}/v2/models/{MODEL}/infer", b"{oops", {})
    assert status == 400 and "JSON" in json.loads(payload)["error"]
    # the server still answers after bad input
    good, headers = infer_body("image", [jpeg_bytes(320, 240, seed=1)])
    assert _post(f"{server.url}/v2/models/{MODEL}/infer", good, headers)[0] == 200


def test_metrics_show_batches(server):
    status, body = _get(f"{server.url}/metrics")
    text = body.decode()
    assert status == 200
    assert f'nv_inference_request_success{{model="{MODEL}",version="1"}}' in text
    assert "atoll_batch_size_bucket" in text and f'model="{MODEL}"' in text


TRITON_CLIENT = r"""
import sys, json, numpy as np, tritonclient.http as httpclient
url, jpeg_path, model = sys.argv[1].replace("http://", ""), sys.argv[2], sys.argv[3]
client = httpclient.InferenceServerClient(url=url)
ready = client.is_server_ready()
meta = client.get_model_metadata(model)
data = np.array([[open(jpeg_path, "rb").read()]], dtype=object)
inp = httpclient.InferInput("image", [1, 1], "BYTES")
inp.set_data_from_numpy(data, binary_data=True)
res = client.infer(model, [inp], outputs=[httpclient.InferRequestedOutput("logits", binary_data=True)])
out = res.as_numpy("logits")
print(json.dumps({"ready": ready, "meta_name": meta["name"], "shape": list(out.shape),
                  "logits": out.reshape(-1).tolist()}))
"""


def test_real_tritonclient(server, repository, tmp_path):
    jpeg = jpeg_bytes(800, 600, seed=6)
    path = tmp_path / "x.jpg"
    path.write_bytes(jpeg)
    out = json.loads(run_client(TRITON_CLIENT, server.url, str(path), MODEL))
    assert out["ready"] is True and out["meta_name"] == MODEL
    assert out["shape"] == [1, 1000]
    np.testing.assert_allclose(out["logits"], _reference_logits(repository, jpeg), rtol=1e-4, atol=1e-4)


def test_wav_inference_matches_librosa_plus_onnxruntime(server, repository):
    """The audio path end to end: WAV -> librosa features (ARCHITECTURE 4.2) -> CitriNet, the
    features zero-padded to the upper edge of their 2.5 s bucket (every batch is, so the model
    only ever sees the bucket lengths) and the output cut back to the clip's share of it."""

    import librosa  # heavy: librosa loads numba, paid only where audio is used


    wav = synthetic_wav(np.random.default_rng(7), 3.2, rate=22050)
    body, headers = infer_body("audio", [wav])
    status, rheaders, payload = _post(f"{server.url}/v2/models/{AUDIO_MODEL}/infer", body, headers)
    assert status == 200, payload[:300]
    got = _decode_binary_response(rheaders, payload)

    y, sr = soundfile.read(io.BytesIO(wav), dtype="float32")
    y = librosa.effects.preemphasis(librosa.resample(y, orig_sr=sr, target_sr=16000), coef=0.97)
    S = librosa.feature.melspectrogram(y=y, sr=16000, n_fft=512, hop_length=160, win_length=400,
                                       window="hann", center=True, pad_mode="constant", power=2.0,
                                       n_mels=80, fmin=0, fmax=8000, htk=False, norm="slaney")
    L = np.log(S + 2.0 ** -24)
    x = (L - L.mean(axis=1, keepdims=True)) / (L.std(axis=1, ddof=1, keepdims=True) + 1e-5)
    padded = np.zeros((1, 80, 501), np.float32)  # 3.2 s lies in (2.5, 5] s: 5 s = 501 frames
    padded[0, :, : x.shape[1]] = x
    session = ort.InferenceSession(str(repository / AUDIO_MODEL / "1" / "model.onnx"))
    full = session.run(None, {"features": padded})[0]
    want = full[:, : int(np.ceil(full.shape[1] * x.shape[1] / 501))]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_audio_batches_are_bucketed_in_metrics(server):
    """PREBA buckets audio by 2.5 s: clips of 1 s and 6 s land in buckets 0 and 2."""

    rng = np.random.default_rng(8)
    for seconds in (1.0, 6.0):
        body, headers = infer_body("audio", [synthetic_wav(rng, seconds)])
        assert _post(f"{server.url}/v2/models/{AUDIO_MODEL}/infer", body, headers)[0] == 200
    text = _get(f"{server.url}/metrics")[1].decode()
    buckets = {line.split('bucket="')[1].split('"')[0] for line in text.splitlines()
               if line.startswith("atoll_batch_size_count") and f'model="{AUDIO_MODEL}"' in line}
    assert {"0", "2"} <= buckets
    # every shape those batches needed was built at load: nothing was built while serving
    builds = [line for line in text.splitlines() if line.startswith("atoll_program_builds_total")]
    assert builds and all(line.endswith(" 0.0") for line in builds)


# -- hostile clients (issue #13): each refused before any work, with a JSON reason -------------------


def _raw(url: str, head: bytes) -> str:
    """Send `head` (request line, headers, perhaps part of a body) on a fresh connection; the answer."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(head)
        return sock.recv(65536).decode(errors="replace")


@pytest.mark.parametrize("count", [1, 32])
def test_header_dimension_bombs_are_refused_from_the_header(server, count):
    """745 bytes claiming 30000x30000 once cost 9 s and 5.5 GB before their 400; 32 of them in one
    request were answered 200 after 17 s."""
    body, headers = infer_body("image", [jpeg_bomb()] * count)
    status, _, payload = _post(f"{server.url}/v2/models/{MODEL}/infer", body, headers)
    reason = json.loads(payload)["error"]
    assert status == 400 and "30000x30000 exceeds the 8192 pixel limit" in reason


@pytest.mark.parametrize("image, reason", [
    # 1,000 progressive scans of 8192x8192, within every size limit: 25 s of a preprocessing
    # thread, answered 200; four of them kept a good request waiting 51 s
    (lambda: jpeg_scan_bomb(), "more than 64 scans"),
    (lambda: jpeg_bomb(8192, 8192), "truncated"),  # 662 bytes decoded whole: 384 MB
    (lambda: jpeg_bytes(8192, 1), "over the 8192 pixel limit"),  # 16 KB resized to 256x2097152: 1.6 GB
])
def test_small_files_that_would_cost_seconds_or_gigabytes_are_refused_from_the_markers(server, image, reason):
    body, headers = infer_body("image", [image()])
    status, _, payload = _post(f"{server.url}/v2/models/{MODEL}/infer", body, headers)
    assert status == 400 and reason in json.loads(payload)["error"]


def test_progressive_jpegs_are_still_served(server):
    body, headers = infer_body("image", [jpeg_bytes(320, 240, progressive=True)])
    assert _post(f"{server.url}/v2/models/{MODEL}/infer", body, headers)[0] == 200


def test_a_bytes_batch_over_max_batch_size_is_400(server):
    body, headers = infer_body("image", [jpeg_bytes(64, 64)] * 33)
    status, _, payload = _post(f"{server.url}/v2/models/{MODEL}/infer", body, headers)
    assert status == 400 and "33 files in one request" in json.loads(payload)["error"]


def test_oversized_garbled_and_unknown_requests_get_json_errors(server):
    path = f"/v2/models/{MODEL}/infer"
    answer = _raw(server.url, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {70 << 20}\r\n\r\n{{".encode())
    assert answer.startswith("HTTP/1.1 413") and '"error"' in answer
    status, _, payload = _post(server.url + path, b"garbage" * 100, {"Content-Encoding": "gzip"})
    assert status == 400 and "content-encoding" in json.loads(payload)["error"].lower()
    status, body = _get(f"{server.url}/v2/no/such/endpoint")
    assert status == 404 and json.loads(body)["error"]


def test_what_the_http_parser_refuses_is_a_json_400(server):
    """aiohttp answered it in plain text (the cases and their logging: test_server_errors)."""
    answer = _raw(server.url, b"GET /v2 HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n")
    status, _, body = answer.partition("\r\n\r\n")
    assert status.split(" ")[1] == "400" and "application/json" in status
    assert json.loads(body)["error"] == "Invalid character in Content-Length"


def test_float_audio_far_past_full_scale_is_a_400(server):
    """Finite float samples of 3e38 overflowed to inf inside librosa, which refused the clip in
    mid-pipeline: a 500."""

    buf = io.BytesIO()
    soundfile.write(buf, np.full(16000, 3e38, np.float32), 16000, format="WAV", subtype="FLOAT")
    body, headers = infer_body("audio", [buf.getvalue()])
    status, _, payload = _post(f"{server.url}/v2/models/{AUDIO_MODEL}/infer", body, headers)
    reason = json.loads(payload)["error"]
    assert status == 400 and reason == "samples reach 3e+38; audio is taken up to 1e+06 (full scale is 1)"


def test_a_bogus_wav_is_a_400_without_object_reprs(server):
    body, headers = infer_body("audio", [b"RIFF\x10\x00\x00\x00WAVEfmt garbage"])
    status, _, payload = _post(f"{server.url}/v2/models/{AUDIO_MODEL}/infer", body, headers)
    reason = json.loads(payload)["error"]
    assert status == 400 and "audio" in reason and " at 0x" not in reason and "BytesIO" not in reason
