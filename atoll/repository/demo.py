"""The built-in demo model repository, written on first start from the zoo (no downloads).

It lives in the user's cache (`$ATOLL_HOME` or `~/.cache/atoll`), keyed by the Atoll version, and is
written to a temporary folder first so an interrupted build never leaves a half repository behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from gpu_runtime.zoo import build
from gpu_runtime.zoo.repository import write_model
from tqdm import tqdm

from atoll import __version__

DEMO_MODELS = ("mobilenet_v3_small", "citrinet")


def cache_dir() -> Path:
    return Path(os.environ.get("ATOLL_HOME") or Path.home() / ".cache" / "atoll")


def demo_repository(models: tuple[str, ...] = DEMO_MODELS, progress: bool = True) -> Path:
    root = cache_dir() / f"demo-repository-{__version__}"
    if all((root / m / "config.pbtxt").is_file() for m in models):
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-", dir=root.parent))
    try:
        for name in tqdm(models, desc="building demo models", disable=not progress, unit="model"):
            write_model(tmp, name, build(name))
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root
