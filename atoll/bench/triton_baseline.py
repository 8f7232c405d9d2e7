"""Real Triton as a baseline: `atoll bench serve --baseline triton`.

The `tritonserver` binary (with its Python backend) ships inside the `nvidia-pytriton` PyPI package.
Its Python backend is built against NumPy 1, so it lives in a virtual environment of its own
(INSTALL, at the repository root or where `ATOLL_TRITON_VENV` says); where it is missing or cannot
start, the bench skips Triton and says why. The bench writes a Triton repository beside the served
one: per model a Python-backend twin (`triton_model`: OpenCV/librosa per request, onnxruntime per
batch) under the same model and tensor names, so the same request bodies reach it (a Python-backend
model is served as itself, its model.py under Triton's python backend), behind Triton's
dynamic batcher, one instance per server core unless `TritonSettings` say otherwise (the bench's
sweep over them: `triton_sweep`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from atoll.bench.servers import System, pinned
from atoll.repository.specs import load_repository

ROOT = Path(__file__).resolve().parents[2]
MODEL_SOURCE = Path(__file__).with_name("triton_model.py")
INSTALL = ("python -m venv .venv-triton && .venv-triton/bin/pip install nvidia-pytriton "
           "opencv-python-headless onnxruntime librosa soundfile threadpoolctl 'numpy<2'")
QUEUE_DELAY_US = 1000  # Triton's dynamic batcher: wait up to 1 ms for a fuller batch
TYPES = {"BYTES": "TYPE_STRING", "FP32": "TYPE_FP32"}


class TritonUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class TritonSettings:
    """How Triton serves each twin: model instances (Python stub processes), onnxruntime threads in
    each, and the dynamic batcher's max_queue_delay_microseconds, preferred_batch_size (none: Triton
    fills in the largest) and max_batch_size (0: the model's own; a bound above it is the model's)."""

    instances: int
    threads: int = 1
    queue_delay_us: int = QUEUE_DELAY_US
    preferred_batch_sizes: tuple[int, ...] = ()
    max_batch_size: int = 0

    def batch_bound(self, spec) -> int:
        own = max(spec.max_batch_size, 1)
        return min(self.max_batch_size, own) if self.max_batch_size else own

    def preferred(self, spec) -> list[int]:
        return [b for b in self.preferred_batch_sizes if b <= self.batch_bound(spec)]

    def about(self) -> dict:
        return {**asdict(self), "preferred_batch_sizes": list(self.preferred_batch_sizes)}


def triton_home() -> Path:
    """pytriton's `tritonserver` folder (bin/, backends/, python_backend_stubs/), in the site-packages
    of the Triton environment."""
    venv = Path(os.environ.get("ATOLL_TRITON_VENV") or ROOT / ".venv-triton")
    found = sorted(venv.glob("lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver"))
    if not found:
        raise TritonUnavailable(f"no tritonserver in {venv}: {INSTALL}")
    return found[0].parents[1]


def _dims(dims) -> str:
    return "[ " + ", ".join(str(d) for d in dims) + " ]"


def model_config(spec, settings: TritonSettings) -> str:
    """config.pbtxt of the Python-backend twin of `spec`: the raw media input and the ready tensor
    input both optional (a request carries one of them)."""
    tensor = spec.inputs[0]
    ragged = " allow_ragged_batch: true" if -1 in tensor.dims else ""
    params = {"atoll_onnx": str(spec.path), "atoll_preprocess": spec.preprocess, "atoll_raw_input": spec.raw_input,
              "atoll_input": tensor.name, "atoll_threads": settings.threads}  # fmt: skip
    preferred = settings.preferred(spec)
    batching = f"max_queue_delay_microseconds: {settings.queue_delay_us}" + (
        f" preferred_batch_size: {_dims(preferred)}" if preferred else "")
    lines = [
        f'name: "{spec.name}"', 'backend: "python"', f"max_batch_size: {settings.batch_bound(spec)}",
        "input [",
        f'  {{ name: "{spec.raw_input}" data_type: TYPE_STRING dims: [ 1 ] optional: true }},',
        f'  {{ name: "{tensor.name}" data_type: {TYPES[tensor.datatype]} dims: {_dims(tensor.dims)} optional: true{ragged} }}',
        "]",
        "output [",
        *(f'  {{ name: "{o.name}" data_type: {TYPES[o.datatype]} dims: {_dims(o.dims)}'
          + (f' label_filename: "{o.label_filename}"' if o.label_filename else "") + " }" for o in spec.outputs),
        "]",
        f"dynamic_batching {{ {batching} }}",
        f"instance_group [ {{ count: {settings.instances} kind: KIND_CPU }} ]",
        *(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}' for k, v in params.items()),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _type(datatype: str) -> str:
    return TYPES.get(datatype, f"TYPE_{datatype}")  # Triton's names are KServe's but for BYTES


def _tensor(t) -> str:
    return f'  {{ name: "{t.name}" data_type: {_type(t.datatype)} dims: {_dims(t.dims)} }}'


def python_config(spec, settings: TritonSettings) -> str:
    """config.pbtxt for Triton's python backend serving a Python-backend model's own model.py:
    its tensors and parameters, batched and instanced as `settings` say (its ready tensors only:
    Triton has no media preprocessing in front of it)."""
    preferred = settings.preferred(spec)
    batching = f"max_queue_delay_microseconds: {settings.queue_delay_us}" + (
        f" preferred_batch_size: {_dims(preferred)}" if preferred else "")
    lines = [
        f'name: "{spec.name}"', 'backend: "python"', f"max_batch_size: {settings.batch_bound(spec)}",
        "input [", ",\n".join(map(_tensor, spec.inputs)), "]",
        "output [", ",\n".join(map(_tensor, spec.outputs)), "]",
        f"dynamic_batching {{ {batching} }}",
        f"instance_group [ {{ count: {settings.instances} kind: KIND_CPU }} ]",
        *(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}' for k, v in spec.parameters.items()),
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def write_repository(repository: str, root: Path, settings: TritonSettings, models: set[str] | None = None) -> None:
    """Per model (of `models`, if given) a twin (`model_config`), or for a Python-backend model its
    own model.py (`python_config`); ready-tensor models without a Python backend are not served."""
    for name, spec in load_repository(repository).items():
        if models is not None and name not in models:
            continue
        if spec.python is not None:
            (root / name / "1").mkdir(parents=True)
            (root / name / "config.pbtxt").write_text(python_config(spec, settings))
            shutil.copy(spec.path, root / name / "1" / "model.py")
            continue
        if spec.preprocess == "none":
            continue
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(model_config(spec, settings))
        shutil.copy(MODEL_SOURCE, root / name / "1" / "model.py")
        for output in spec.outputs:  # class labels, for classification
            if output.label_filename:
                shutil.copy(spec.path.parents[1] / output.label_filename, root / name / output.label_filename)


def _backends(home: Path, root: Path) -> Path:
    """A backend folder whose Python backend has the stub for the Triton environment's Python."""
    version = home.parents[2].name.removeprefix("python")  # .../lib/python3.11/site-packages/pytriton
    stub = home / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise TritonUnavailable(f"pytriton ships no Python backend stub for Python {version}")
    python = root / "backends" / "python"
    shutil.copytree(home / "backends" / "python", python)
    shutil.copy(stub, python / "triton_python_backend_stub")
    return root / "backends"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TritonUnavailable(f"tritonserver exited with {proc.returncode}: "
                                    + log.read_text()[-1500:])  # fmt: skip
        try:
            with urllib.request.urlopen(f"{url}/v2/health/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise TritonUnavailable(f"tritonserver not ready within {timeout_s:g} s: " + log.read_text()[-1500:])


@contextmanager
def server(repository: str, cpus: tuple[int, ...], options: tuple[str, ...] = (), models: set[str] | None = None):
    """Triton serving the twins of `repository` (of `models`, if given: no stubs started for
    nothing) over HTTP and gRPC (`System.grpc`), one instance per server core, with tritonserver's
    `options` (e.g. its model-control flags) added. The
    System's `about` says its cores and the settings it serves with (`settings`)."""
    home = triton_home()
    cores = len(cpus) if cpus else len(os.sched_getaffinity(0))
    settings = TritonSettings(cores)
    site_packages = home.parents[1]
    with tempfile.TemporaryDirectory(prefix="atoll-triton-") as tmp:
        root = Path(tmp)
        write_repository(repository, root / "models", settings, models)
        port, grpc_port = _free_port(), _free_port()
        libs = site_packages / "nvidia_pytriton.libs"
        env = {**os.environ, "LD_LIBRARY_PATH": ":".join(filter(None, [str(libs), os.environ.get("LD_LIBRARY_PATH")])),
               "PATH": f"{site_packages.parents[2] / 'bin'}:{os.environ['PATH']}"}  # fmt: skip
        command = [str(home / "bin" / "tritonserver"), f"--model-repository={root / 'models'}",
                   f"--backend-directory={_backends(home, root)}", f"--http-port={port}",
                   "--http-address=127.0.0.1", f"--grpc-port={grpc_port}", "--grpc-address=127.0.0.1",
                   "--allow-metrics=false", "--log-verbose=0", *options]  # fmt: skip
        log = root / "tritonserver.log"
        # The Python stub's interpreter (the Triton environment's, found through PATH) ignores
        # PYTHONPATH, but its sys.path starts with its working directory: started in this checkout,
        # model.py imports fpga_host and atoll.front_end from here, wherever the bench was run.
        with pinned(cpus), log.open("w") as out:
            proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, proc, log)
            yield System("triton", url, proc.pid, {"cores": cores, "settings": settings.about(),
                                                   "tritonserver": str(home / "bin" / "tritonserver")},
                         f"127.0.0.1:{grpc_port}")  # fmt: skip
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
