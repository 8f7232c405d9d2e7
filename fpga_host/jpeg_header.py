"""What a JPEG's markers say before any decode: its frame (size, coding process, components: so
the host can size output buffers before a run, and know the least a whole file must hold) and its
number of scans (what a progressive decode costs)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC)
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_NO_LENGTH = {0x01, *range(0xD0, 0xD8)}  # TEM and RSTn stand alone
# Where libjpeg finds its next marker: skipping any bytes up to an FF, then fill FFs. Inside
# entropy-coded data FF00 is a stuffed byte and RSTn belongs to the scan, so neither ends it.
_MARKER = re.compile(rb"\xff[^\x00\x01\xd0-\xd8\xff]")


@dataclass(frozen=True)
class Frame:
    """What a JPEG's frame header (SOF) declares."""

    height: int
    width: int
    process: int  # the SOF marker less 0xC0: 0 baseline, 1 extended, 2 progressive (Huffman); 3 lossless,
    # 5-7 hierarchical, 9-15 arithmetic coding
    sampling: tuple[tuple[int, int], ...]  # each component's (horizontal, vertical) sampling factors

    def blocks(self) -> int:
        """8x8 blocks of all components (each component's own size, rounded up to whole blocks:
        the fewest that any scan layout codes)."""
        hmax = max(h for h, _ in self.sampling)
        vmax = max(v for _, v in self.sampling)
        return sum(_ceil(_ceil(self.width * h, hmax), 8) * _ceil(_ceil(self.height * v, vmax), 8)
                   for h, v in self.sampling)  # fmt: skip


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def frame(data: bytes) -> Frame | None:
    """The first SOF marker's frame, or None when the header is not a readable JPEG."""
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
            if pos + 10 > len(data) or length < 8:
                return None
            h = int.from_bytes(data[pos + 5:pos + 7], "big")
            w = int.from_bytes(data[pos + 7:pos + 9], "big")
            components = data[pos + 9]
            factors = data[pos + 11:pos + 10 + 3 * components:3]
            sampling = tuple((f >> 4, f & 15) for f in factors)
            if not (h and w and components and len(sampling) == components and all(a and b for a, b in sampling)):
                return None
            return Frame(h, w, marker - 0xC0, sampling)
        pos += 2 + length
    return None


def frame_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from the first SOF marker, or None when the header is not a readable JPEG."""
    f = frame(data)
    return None if f is None else (f.height, f.width)


def scan_count(data: bytes, stop_after: int) -> int:
    """The number of scans (SOS markers) libjpeg would decode from `data`, counted no further than
    `stop_after` + 1. Each scan of a progressive JPEG is a pass over the whole image, and an AC
    refinement scan can cover 32767 blocks with two bytes, so a small file can hold OpenCV for tens
    of seconds (docs/robustness.md); the count bounds that before any decode.

    Every marker libjpeg can read is counted, wherever it sits (after a scan's entropy-coded data,
    after junk it would skip), except inside length-delimited segments, which it skips as this
    does: so no layout can hide a scan from the count."""
    count, pos = 0, 2
    while count <= stop_after and (found := _MARKER.search(data, pos)):
        marker, pos = data[found.start() + 1], found.end()
        if marker == 0xD9:  # EOI: libjpeg reads no further
            break
        count += marker == 0xDA
        length = int.from_bytes(data[pos:pos + 2], "big")
        if length < 2:  # libjpeg stops on a bad length, and so does what it decodes
            break
        pos += length
    return count
