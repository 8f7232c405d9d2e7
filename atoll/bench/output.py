"""Where a benchmark's results go: a JSON file always, stdout as JSON or as summary lines."""

from __future__ import annotations

import json
from pathlib import Path


def emit(doc: dict, path: Path, as_json: bool, summary: list[str]) -> None:
    text = json.dumps(doc, indent=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    if as_json:
        print(text)
    else:
        print("\n".join([*summary, f"wrote {path}"]))
