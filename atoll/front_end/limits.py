"""What one request's media may ask of a front end, checked from the files' headers before any of
them is decoded or queued for preprocessing.

Each image must be a whole Huffman-coded JPEG no larger than `max_image_dim` a side, of at most
`max_jpeg_scans` scans, and resizable within the DPU's line buffers (`cpu_backend.image_size`,
`resized_size`: a 1 KB file can claim 30000x30000, a 100 KB one hold 1,000 progressive scans of
a whole 8192x8192 image, a 16 KB 8192x1 one resize to 1.6 GB), each clip within the rate range
and `max_clip_seconds`; and all the request's images together may hold at most `max_pixels`
pixels, its clips `max_audio_seconds`, since those bound the preprocessing time one request can
take from everyone else.
"""

from __future__ import annotations

from dataclasses import dataclass

from fpga_host.cpu_backend import image_size, resized_size, validate_length

from atoll.config import PreprocessingConfig
from atoll.front_end.media import MediaError, audio_header


@dataclass(frozen=True)
class MediaLimits:
    max_image_dim: int
    max_jpeg_scans: int
    resize_short: int
    max_pixels: int
    max_clip_seconds: float
    max_audio_seconds: float

    @classmethod
    def of(cls, p: PreprocessingConfig) -> MediaLimits:
        return cls(p.max_image_dim, p.max_jpeg_scans, p.resize_short, p.max_request_pixels, p.max_audio_seconds,
                   p.max_request_audio_seconds)

    def check(self, kind: str, files: list[bytes]) -> None:
        """Raise PreprocessError for a file no backend will take, MediaError for a request whose
        files are too much together; `kind` is "image" or "audio"."""
        if kind == "image":
            pixels = 0
            for data in files:
                h, w = image_size(data, self.max_image_dim, self.max_jpeg_scans)
                resized_size(h, w, self.resize_short)
                pixels += h * w
            if pixels > self.max_pixels:
                raise MediaError(f"{len(files)} images of {pixels} pixels in all; a request may hold "
                                 f"at most {self.max_pixels}")  # fmt: skip
            return
        seconds = 0.0
        for data in files:
            header = audio_header(data)
            validate_length(header.frames, header.rate, self.max_clip_seconds)
            seconds += header.seconds
        if seconds > self.max_audio_seconds:
            raise MediaError(f"{len(files)} clips of {seconds:.1f} s in all; a request may hold at most "
                             f"{self.max_audio_seconds:g} s")  # fmt: skip
