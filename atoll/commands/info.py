"""`atoll info [--json]`: what this machine offers (DPU backends, vGPUs, executors), never crashing."""

from __future__ import annotations

import dataclasses
import json
import platform
import sys

from fpga_host.probe import probe_backends
from gpu_runtime.executors import probe_executors
from gpu_runtime.executors.probes import cupy_stack
from gpu_runtime.vgpu.discovery import discover

from atoll import __version__
from atoll.config import ConfigError, load_config


def register(subparsers) -> None:
    p = subparsers.add_parser("info", help="report preprocessing backends, vGPUs and executors")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument("--config", help="atoll.toml to read (manifest path, vGPU mode)")
    p.set_defaults(func=run)


def _safe(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:  # info must report, not crash
        return None, f"{type(exc).__name__}: {exc}"


def collect(config) -> dict:
    fpga, error = _safe(probe_backends, config.preprocessing.manifest)
    if fpga is None:
        fpga = {"backend": "cpu", "backends": {}, "error": error}
    found, error = _safe(discover, config.vgpus.mode, config.vgpus.cpu_vgpus or None,
                         config.vgpus.green_context_sms or None)
    executors, exec_error = _safe(probe_executors)
    return {
        "atoll": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "fpga": fpga,
        "vgpus": [dataclasses.asdict(v) for v in (found.vgpus if found else [])],
        "vgpus_absent": found.absent if found else {},
        **({"vgpus_error": error} if error else {}),
        "executors": executors or {"error": exec_error},
        "cupy": cupy_stack(),
    }


def _table(info: dict) -> str:
    lines = [f"atoll {info['atoll']} on {info['platform']} (Python {info['python']})", "",
             f"preprocessing backend: {info['fpga']['backend']}"]
    for name, b in info["fpga"].get("backends", {}).items():
        state = "yes" if b.get("available") else "no "
        detail = b.get("reason") or ", ".join(
            f"{k}={v}" for k, v in b.items() if k != "available")
        lines.append(f"  {name:<5} {state}  {detail}")
    lines += ["", f"vGPUs: {len(info['vgpus'])}"]
    for v in info["vgpus"]:
        lines.append(f"  {v['id']:<10} {v['kind']:<14} {v['name']}")
    for kind, why in info["vgpus_absent"].items():
        lines.append(f"  no {kind}: {why}")
    if "vgpus_error" in info:
        lines.append(f"  error: {info['vgpus_error']}")
    lines += ["", "executors:"]
    for name, e in info["executors"].items():
        if not isinstance(e, dict):
            continue
        state = "yes" if e.get("available") else "no "
        detail = e.get("reason") or e.get("version", "")
        lines.append(f"  {name:<12} {state}  {detail}")
    cupy = info["cupy"]
    lines += ["", f"CuPy: {cupy['package'] or 'none'} ({cupy['why']})"]
    return "\n".join(lines)


def run(args) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"atoll info: {exc}", file=sys.stderr)
        return 2
    info = collect(config)
    print(json.dumps(info, indent=2, default=str) if args.json else _table(info))
    return 0
