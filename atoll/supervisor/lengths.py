"""Audio lengths in the two units the data plane uses: seconds (the batcher's buckets) and mel
frames (tensor shapes). One frame is one hop of 160 samples at 16 kHz, and T frames of a centred
STFT cover (T - 1) hops."""

from __future__ import annotations

FRAME_SECONDS = 0.01


def seconds(frames: int) -> float:
    """A clip's own duration from its frame count."""
    return (frames - 1) * FRAME_SECONDS


def frames(seconds: float) -> int:
    """Frames spanning `seconds` (the padded length of a bucket whose upper edge it is)."""
    return int(round(seconds / FRAME_SECONDS)) + 1
