"""Triton at its best at each load point of `atoll bench serve` (`--triton-sweep`, the default).

A few `TritonSettings` (instances, onnxruntime threads, the dynamic batcher's queue delay,
preferred and max batch sizes) are each tried briefly at the load point itself, reloading the
twins through Triton's model-control API with the config overridden (explicit mode, no restart);
the best is served for the measured run. Best: the most requests per server core among those
whose p99 is within a bound (Atoll's at the same point, else the SLO in open loop), else the
lowest p99; with no bound, the highest throughput. Failed requests count as out of bound.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from atoll.bench.cpustat import descendants
from atoll.bench.triton_baseline import TritonSettings
from atoll.repository.specs import ModelSpec

# tritonserver options of a server the sweep drives: every model loaded, reloadable with a config
# given in the load request (Triton's model repository extension, protocol/extension_model_repository.md:
# the load's "config" parameter, explicit model control only; checked on 2.51 with the Python backend)
SERVER_OPTIONS = ("--model-control-mode=explicit", "--load-model=*")
TRIAL_WARMUP_S = 1.0
TRIAL_S = 3.0
LOAD_TIMEOUT_S = 300.0  # a reload starts every instance's Python stub afresh


def candidates(cores: int) -> list[TritonSettings]:
    """The grid, the single config of --no-triton-sweep (one instance per core, 1 ms delay) first."""
    return [
        TritonSettings(cores),
        TritonSettings(cores, queue_delay_us=0),
        TritonSettings(cores, queue_delay_us=5000, preferred_batch_sizes=(4, 8)),
        TritonSettings(cores, max_batch_size=8),
        TritonSettings(2 * cores),
        TritonSettings(1, threads=cores, queue_delay_us=5000),
    ]  # fmt: skip


def choose(trials: list[dict], p99_bound_ms: float | None) -> int:
    """Index of the best of `trials` (each with throughput_rps, p99_ms, per_server_core, errors;
    per_server_core None where CPU time is not metered, then throughput decides)."""
    answered = [i for i, t in enumerate(trials) if t["p99_ms"] is not None and not t["errors"]]
    if not answered:
        return max(range(len(trials)), key=lambda i: trials[i]["throughput_rps"])
    if p99_bound_ms is None:
        return max(answered, key=lambda i: trials[i]["throughput_rps"])
    within = [i for i in answered if trials[i]["p99_ms"] <= p99_bound_ms]
    if not within:
        return min(answered, key=lambda i: trials[i]["p99_ms"])
    return max(within, key=lambda i: trials[i]["per_server_core"] or trials[i]["throughput_rps"])


def override(config: dict, spec: ModelSpec, settings: TritonSettings) -> dict:
    """`config` (Triton's JSON form of a twin's config, as GET .../config answers it) serving with
    `settings`: what POST .../load takes as its "config" parameter."""
    batching = {**config.get("dynamic_batching", {}), "max_queue_delay_microseconds": settings.queue_delay_us,
                "preferred_batch_size": settings.preferred(spec)}  # fmt: skip
    return {
        **config, "max_batch_size": settings.batch_bound(spec), "dynamic_batching": batching,
        "instance_group": [{"count": settings.instances, "kind": "KIND_CPU"}],
        "parameters": {**config.get("parameters", {}), "atoll_threads": {"string_value": str(settings.threads)}},
    }  # fmt: skip


def served(models: dict[str, ModelSpec], classes: tuple[str, ...]) -> dict[str, ModelSpec]:
    """The specs of the models a traffic's `classes` ("<model>/<rt|be>") send to: the twins to reload."""
    return {name: models[name] for name in dict.fromkeys(c.rsplit("/", 1)[0] for c in classes)}


def _call(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=LOAD_TIMEOUT_S) as reply:
        text = reply.read()
    return json.loads(text) if text else {}


def _stubs(system, names) -> set[int]:
    """The pids of the Python stubs (model instances) of the models `names` under `system`."""
    marks = [f"/models/{name}/1/model.py".encode() for name in names]
    out = set()
    for pid in descendants(system.pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # it exited meanwhile
            continue
        if any(mark in command for mark in marks):
            out.add(pid)
    return out


def apply(system, specs: dict[str, ModelSpec], settings: TritonSettings) -> None:
    """Reload the twins of `specs` on `system` (a server started with SERVER_OPTIONS) to serve with
    `settings`, unless they already do; `system.about["settings"]` says what they serve with.
    Triton ends the old instances after the load answers: the reload returns once they are gone,
    so that no CPU time of theirs is counted in (or, as they vanish, out of) the next point: once
    as many stubs are left as the new settings have instances (a change of the instance count
    alone keeps the instances there were and adds to them, so none of those ends)."""
    if system.about["settings"] == settings.about():
        return
    for name, spec in specs.items():
        config = _call(f"{system.url}/v2/models/{name}/config")
        _call(f"{system.url}/v2/repository/models/{name}/load",
              {"parameters": {"config": json.dumps(override(config, spec, settings))}})  # fmt: skip
    system.about["settings"] = settings.about()
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while len(_stubs(system, specs)) > settings.instances * len(specs) and time.monotonic() < deadline:
        time.sleep(0.1)


def tune(system, specs: dict[str, ModelSpec], bound: tuple[float | None, str], trial: Callable[[], dict],
         where: str) -> dict:
    """Try every candidate with `trial()` (a short load point's row) and serve the best, given the
    p99 `bound` (ms, and whose p99 it is): the record the measured row keeps of the sweep."""
    grid = candidates(system.about["cores"])
    trials = []
    for settings in grid:
        tqdm.write(f"triton sweep at {where}: trying {describe(settings)}", file=sys.stderr)
        apply(system, specs, settings)
        row = trial()
        trials.append({"settings": settings.about(), "throughput_rps": row["throughput_rps"],
                       "p99_ms": row["latency_ms"]["p99"], "server_cores": row["cpu_cores"]["server"],
                       "per_server_core": row["throughput_per_server_core"],
                       "errors": sum(row["errors"].values())})  # fmt: skip
    chosen = grid[choose(trials, bound[0])]
    apply(system, specs, chosen)
    tqdm.write(f"triton sweep at {where}: chose {describe(chosen)} (p99 bound {bound[0]} ms, {bound[1]})",
               file=sys.stderr)
    return {"p99_bound_ms": bound[0], "p99_bound_from": bound[1], "chosen": chosen.about(), "candidates": trials}


def describe(settings: TritonSettings) -> str:
    """e.g. "2 instances x 1 thread, delay 1000 us, preferred -, max batch model"."""
    preferred = ",".join(map(str, settings.preferred_batch_sizes)) or "-"
    return (f"{settings.instances} instances x {settings.threads} thread, delay {settings.queue_delay_us} us, "
            f"preferred {preferred}, max batch {settings.max_batch_size or 'model'}")
