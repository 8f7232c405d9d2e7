"""Reading a request's audio (`media.read_wav`): WAV (RIFF, RF64, WAVE_FORMAT_EXTENSIBLE) and
FLAC are read as libsndfile (the reference, through soundfile) writes them; every other container
libsndfile knows is refused before it parses a byte, and float samples far past full scale too."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from atoll.front_end.media import MediaError, read_wav

TONE = (0.3 * np.sin(np.arange(8000) / 10)).astype(np.float32)


def _encoded(fmt: str, subtype: str, samples: np.ndarray = TONE) -> bytes:
    buf = io.BytesIO()
    soundfile.write(buf, samples, 16000, format=fmt, subtype=subtype)
    return buf.getvalue()


@pytest.mark.parametrize("fmt, subtype", [("WAV", "PCM_16"), ("WAV", "FLOAT"), ("WAVEX", "PCM_24"),
                                          ("RF64", "PCM_16"), ("FLAC", "PCM_16")])  # fmt: skip
def test_wav_and_flac_are_read_as_libsndfile_reads_them(fmt, subtype):
    data = _encoded(fmt, subtype)
    pcm, rate = read_wav(data)
    reference, _ = soundfile.read(io.BytesIO(data), dtype="float32")
    assert rate == 16000 and np.array_equal(pcm, reference)


@pytest.mark.parametrize("fmt, subtype", [("AIFF", "PCM_16"), ("CAF", "PCM_16"), ("W64", "PCM_16"),
                                          ("OGG", "VORBIS"), ("VOC", "PCM_16"), ("IRCAM", "PCM_16")])  # fmt: skip
def test_other_containers_never_reach_libsndfile(fmt, subtype, monkeypatch):
    data = _encoded(fmt, subtype)
    monkeypatch.setattr(soundfile, "SoundFile", lambda *a, **k: pytest.fail("libsndfile was asked to parse it"))
    with pytest.raises(MediaError, match="not a WAV or FLAC file"):
        read_wav(data)


def test_float_samples_far_past_full_scale_are_refused():
    """3e38 overflowed to infinity inside librosa, which refused the clip mid-pipeline (a 500)."""
    with pytest.raises(MediaError, match=r"samples reach 3e\+38; audio is taken up to 1e\+06"):
        read_wav(_encoded("WAV", "FLOAT", np.full(1600, 3e38, np.float32)))
    assert read_wav(_encoded("WAV", "FLOAT", np.full(1600, 8.0, np.float32)))[0].max() == 8.0  # headroom is fine
