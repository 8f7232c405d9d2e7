"""`atoll preprocess` end to end: exit codes, JSON lines and .npy contents (OpenCV/librosa references)."""

from __future__ import annotations

import argparse
import json

import cv2
import librosa
import numpy as np
import pytest
import soundfile as sf

from atoll.bench.corpus import jpeg_bytes, tone
from atoll.cli import main
from atoll.commands import preprocess


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="atoll")
    preprocess.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["preprocess", *argv])
    return args.func(args)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_images_good_and_corrupt(tmp_path, capsys):
    good = tmp_path / "cat.jpg"
    good.write_bytes(jpeg_bytes(320, 240, seed=3))
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xdb truncated")
    other = tmp_path / "sub" / "cat.jpg"
    other.parent.mkdir()
    other.write_bytes(jpeg_bytes(200, 300, seed=4))
    out = tmp_path / "out"
    code = run_cli(["image", str(good), str(bad), str(other), "--backend", "cpu", "--cpu-workers", "0",
                    "--stage", "crop", "--out", str(out), "--json"])
    assert code == 1  # one file failed, the others were still written
    records = json_lines(capsys.readouterr().out)
    assert [r["file"] for r in records] == [str(good), str(bad), str(other)]
    assert records[0]["status"] == "OK" and records[0]["backend"] == "cpu"
    assert records[0]["shape"] == [224, 224, 3] and records[0]["dtype"] == "uint8"
    assert records[1]["status"] == "CORRUPT" and records[1]["error"]
    rgb = cv2.imdecode(np.frombuffer(good.read_bytes(), np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    ref = cv2.resize(rgb, (341, 256), interpolation=cv2.INTER_LINEAR)[16:240, 58:282]
    np.testing.assert_array_equal(np.load(out / "cat.npy"), ref)
    assert np.load(out / "cat-2.npy").shape == (224, 224, 3)
    assert not (out / "broken.npy").exists()


def test_all_good_exits_zero_and_missing_file_is_reported(tmp_path, capsys):
    good = tmp_path / "a.jpg"
    good.write_bytes(jpeg_bytes(100, 80))
    assert run_cli(["image", str(good), "--backend", "cpu", "--cpu-workers", "0",
                    "--out", str(tmp_path / "o")]) == 0
    assert np.load(tmp_path / "o" / "a.npy").shape == (3, 224, 224)
    assert run_cli(["image", str(tmp_path / "nope.jpg"), "--backend", "cpu", "--cpu-workers", "0",
                    "--out", str(tmp_path / "o"), "--json"]) == 1
    record = json_lines(capsys.readouterr().out)[-1]
    assert record["status"] == "ERROR" and "No such file" in record["error"]


def test_forced_unavailable_backend_is_one_line(tmp_path, capsys):
    good = tmp_path / "a.jpg"
    good.write_bytes(jpeg_bytes(100, 80))
    assert run_cli(["image", str(good), "--backend", "xrt", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("atoll preprocess: error: backend 'xrt' unavailable") and len(err.splitlines()) == 1


def test_audio_wav_flac_stereo(tmp_path, capsys):
    mono = tmp_path / "mono.wav"
    sf.write(mono, tone(0.5, 16000), 16000, subtype="PCM_16")
    stereo = tmp_path / "stereo.flac"
    left, right = tone(0.5, 22050, dtype=np.float32), tone(0.5, 22050, freq=220, dtype=np.float32)
    sf.write(stereo, np.stack([left, right], 1), 22050, subtype="PCM_16")
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.int16), 16000, subtype="PCM_16")
    out = tmp_path / "out"
    code = run_cli(["audio", str(mono), str(stereo), str(empty), "--backend", "cpu",
                    "--cpu-workers", "0", "--stage", "mel", "--out", str(out), "--json"])
    assert code == 1
    records = json_lines(capsys.readouterr().out)
    assert [r["status"] for r in records] == ["OK", "OK", "EMPTY"]
    assert records[0]["shape"] == [80, 51] and records[0]["dtype"] == "float32"
    # librosa reference on what soundfile reads, downmixed by averaging the channels
    y, rate = sf.read(stereo, dtype="float32")
    y16 = librosa.effects.preemphasis(librosa.resample(y.mean(axis=1), orig_sr=rate, target_sr=16000),
                                      coef=0.97)
    S = librosa.feature.melspectrogram(y=y16, sr=16000, n_fft=512, hop_length=160, win_length=400,
                                       n_mels=80, fmax=8000, pad_mode="constant")
    np.testing.assert_allclose(np.load(out / "stereo.npy"), np.log(S + 2 ** -24), atol=1e-4)


@pytest.mark.parametrize("argv", [["image", "--out", "x"], ["video", "f", "--out", "x"],
                                  ["audio", "f.wav", "--stage", "crop", "--out", "x"]])
def test_usage_errors(argv):
    with pytest.raises(SystemExit) as exc:
        run_cli(argv)
    assert exc.value.code == 2


def test_registered_in_the_atoll_cli(tmp_path, capsys):
    good = tmp_path / "a.jpg"
    good.write_bytes(jpeg_bytes(100, 80))
    assert main(["preprocess", "image", str(good), "--backend", "cpu", "--cpu-workers", "0",
                 "--stage", "decode", "--out", str(tmp_path / "o"), "--json"]) == 0
    assert json_lines(capsys.readouterr().out)[0]["shape"] == [80, 100, 3]
