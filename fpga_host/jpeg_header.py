"""Frame size of a JPEG from its SOF header, so the host can size output buffers before a run."""

from __future__ import annotations

# SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC)
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_NO_LENGTH = {0x01, *range(0xD0, 0xD8)}  # TEM and RSTn stand alone


def frame_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from the first SOF marker, or None when the header is not a readable JPEG."""
    if data[:2] != b"\xff\xd8":
        return None
    pos = 2
    # Walks marker segments only (a handful per file), never entropy-coded data.
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _NO_LENGTH:
            pos += 2
            continue
        if marker in (0xD9, 0xDA):  # EOI or SOS before any SOF
            return None
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker in _SOF:
            if pos + 9 > len(data) or length < 8:
                return None
            h = int.from_bytes(data[pos + 5:pos + 7], "big")
            w = int.from_bytes(data[pos + 7:pos + 9], "big")
            return (h, w) if h and w else None
        pos += 2 + length
    return None
