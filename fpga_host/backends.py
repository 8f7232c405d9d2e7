"""The preprocessing backend registry: every backend by name, with how to probe and open it.
One table (`BACKENDS`); the CLI, config and `atoll info` read their choices from it.

- `probe(manifest)` -> {"available": bool, ...}; never raises (a reason instead), so `atoll info`
  and the `auto` choice work on any machine;
- `open(manifest=..., **options)` -> the DPU driver (`submit_image`, `submit_audio`, `cu_states`,
  `unopened`, `close`), raising `BackendUnavailable`; None for the CPU path, which needs no driver;
- `auto`: whether `auto` may pick it when available. `emu` runs the HLS C++ (written for hardware,
  not for a CPU) and is slower than OpenCV/librosa on the same cores, so it serves only when asked
  for, as Vitis users choose an emulation target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fpga_host import cpu_backend, pynq_driver, xrt_driver


@dataclass(frozen=True)
class Backend:
    probe: Callable[[Path], dict]
    open: Callable[..., object] | None
    auto: bool
    description: str


BACKENDS: dict[str, Backend] = {
    "xrt": Backend(xrt_driver.probe_xrt, xrt_driver.open_xrt, auto=True,
                   description="DPU compute units on an XRT device through pyxrt"),
    "pynq": Backend(pynq_driver.probe_pynq, pynq_driver.open_pynq, auto=True,
                    description="DPU compute units through pynq's Overlay (pynq 3.x, the fpga extra)"),
    "emu": Backend(xrt_driver.probe_emu, xrt_driver.open_emu, auto=False,
                   description="the DPU's C simulation behind an emulated pyxrt (functional model)"),
    "cpu": Backend(cpu_backend.probe_cpu, None, auto=True,
                   description="OpenCV and librosa in a process pool"),
}
BACKEND_CHOICES = ("auto", *BACKENDS)
CPU_PATH = next(name for name, spec in BACKENDS.items() if spec.open is None)  # no driver: CPU only


class UnknownBackend(ValueError):
    pass


def backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UnknownBackend(f"unknown backend {name!r}; expected one of {', '.join(BACKEND_CHOICES)}") from None

