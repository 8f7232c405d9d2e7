"""Python-backend models in a repository: `backend: "python"` and `<version>/model.py`.

Triton's python backend (https://github.com/triton-inference-server/python_backend): the folder's
config.pbtxt names the inputs and outputs (nothing is completed from a graph: there is none), and
may set `instance_group [{ count: N }]` (N processes, default 1), `model_transaction_policy {
decoupled: true }` (several responses per request, over the gRPC stream) and Atoll's parameter
`atoll.execute_timeout_s` (default 60: an `execute` call running longer is taken for a hang, its
process killed and started again, its requests answered with an error).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from atoll.repository import pbtxt

MODEL_FILE = "model.py"
EXECUTE_TIMEOUT_S = 60.0


class PythonModelError(ValueError):
    pass


@dataclass(frozen=True)
class PythonModel:
    """What a Python-backend model has beyond a ModelSpec's tensors."""

    file: Path  # the newest version's model.py
    instances: int  # processes running it (instance_group counts summed)
    decoupled: bool  # model_transaction_policy { decoupled: true }
    execute_timeout_s: float


def is_python(cfg: dict) -> bool:
    return cfg.get("backend") == "python" or cfg.get("platform") == "python"


def read_python_model(name: str, file: Path, cfg: dict, parameters: dict[str, str]) -> PythonModel:
    counts = [group.get("count", 1) for group in pbtxt.as_list(cfg.get("instance_group"))]
    if any(not isinstance(c, int) or c < 1 for c in counts):
        raise PythonModelError(f"{name}: instance_group count must be a positive integer")
    policy = cfg.get("model_transaction_policy") or {}
    decoupled = policy.get("decoupled", False)
    if not isinstance(decoupled, bool):
        raise PythonModelError(f"{name}: model_transaction_policy.decoupled must be true or false")
    try:
        timeout = float(parameters.get("atoll.execute_timeout_s", EXECUTE_TIMEOUT_S))
    except ValueError:
        timeout = -1.0
    if not timeout > 0:
        raise PythonModelError(f"{name}: parameter atoll.execute_timeout_s must be a positive number of seconds")
    return PythonModel(file, sum(counts) or 1, decoupled, timeout)
