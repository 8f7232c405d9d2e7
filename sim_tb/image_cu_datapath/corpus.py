"""The image CU's whole RTL datapath on every file of the decode test corpus, each output value checked.

`PYTHONPATH=$PWD python -m sim_tb.image_cu_datapath.corpus` (Verilator by default: the corpus runs
up to 4000x3000, too large for Icarus in reasonable time) runs each file of
`tests/fpga_host/jpeg_corpus.decode_corpus` (sampling factors, restart intervals, grayscale,
optimised tables, sizes 1x1 to 4000x3000) through hls/rtl/image_cu_datapath.v with the CU's default
preprocessing (shorter side to 256, 224 crop, float32), asserting every beat and the status against
the four units' C models chained (`datapath_sim.run`) and the float32 result against one CPU core's
OpenCV preprocessing (`fpga_host.cpu_backend`) bit for bit. Writes each file's cycles to
bench/results/dpu_rtl_corpus.json. `make test` runs five small files on Icarus
(sim_tb/image_cu_datapath/test_image_cu_datapath.py); this is the whole corpus, behind one command.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from fpga_host import cpu_backend

from sim_tb.image_cu_datapath import datapath_sim
from tests.fpga_host.jpeg_corpus import decode_corpus

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "dpu_rtl_corpus.json")
    args = parser.parse_args(argv)
    params = cpu_backend.ImageParams()
    cases = decode_corpus()
    jobs = [datapath_sim.job(c.name, c.make(), params.resize_short, params.crop, datapath_sim.F32) for c in cases]
    harness = datapath_sim.harness_params(jobs)  # one simulator build for every file
    rows, start = [], time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for k, job in enumerate(jobs):
            (result,) = datapath_sim.run([job], Path(tmp) / job.name, args.simulator, harness)
            rgb = datapath_sim.lanes(result.beats).view(np.float32).reshape(params.crop, params.crop, 3)
            if not np.array_equal(rgb.transpose(2, 0, 1), cpu_backend.image(job.jpeg, params=params)):
                raise SystemExit(f"{job.name}: the RTL datapath differs from OpenCV")
            w, h = job.frame[:2]
            rows.append({"file": job.name, "width": w, "height": h, "bytes": len(job.jpeg), "symbols": result.symbols,
                         "cu_cycles": result.cycles, "bit_exact": True})
            print(f"[{k + 1}/{len(jobs)}] {job.name}: {result.cycles} cycles, equal to the C models and OpenCV",
                  file=sys.stderr)
    doc = {"benchmark": "dpu-corpus", "simulator": args.simulator, "files": rows,
           "all_bit_exact": True, "wall_s": round(time.monotonic() - start, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{len(rows)} files, every output value equal; {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
