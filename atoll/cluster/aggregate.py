"""The cluster's answers made from its nodes' answers: the repository index (a model READY where some
node has it READY), statistics (summed per model and version over the nodes), and Prometheus
metrics (every node's samples with a `node` label added, each family once). Pure functions over the
documents and texts the nodes answered, so that they are tested without a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{)?")
_MAX_KEYS = {"last_inference"}  # a timestamp: the latest, not a sum
_KEYS = {"batch_size"}  # what an entry is of, not a count


def union_index(indexes: Mapping[str, list[dict]]) -> list[dict]:
    """One entry per (model, version) from each node's index (node name -> its entries): the
    first READY one where a node has it READY, else its state with every node's reason."""
    found: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    for node, entries in indexes.items():
        for entry in entries:
            found.setdefault((entry.get("name", ""), entry.get("version", "")), []).append((node, entry))
    out = []
    for key in sorted(found):
        entries = found[key]
        ready = next((e for _, e in entries if e.get("state") == "READY"), None)
        if ready is not None:
            out.append(ready)
            continue
        entry = dict(entries[0][1])
        if not any(e.get("state") for _, e in entries):  # never loaded anywhere: its name alone
            out.append(entry)
            continue
        reasons = [f"{node}: {e.get('state', '')}{' (' + e['reason'] + ')' if e.get('reason') else ''}"
                   for node, e in entries]  # fmt: skip
        entry["reason"] = "; ".join(reasons)
        out.append(entry)
    return out


def summed_statistics(answers: Iterable[dict]) -> dict:
    """Triton's statistics answer summing the nodes' answers per (model, version): counts and
    durations added, `batch_stats` per batch size, `last_inference` the latest."""
    merged: dict[tuple[str, str], dict] = {}
    for answer in answers:
        for stats in answer.get("model_stats", []):
            key = (stats.get("name", ""), stats.get("version", ""))
            merged[key] = _sum(merged[key], stats, "") if key in merged else stats
    return {"model_stats": [merged[key] for key in sorted(merged)]}


def _sum(a, b, key: str):
    if a is None or b is None:
        return b if a is None else a
    if isinstance(a, dict):
        return {k: _sum(a.get(k), b.get(k), k) for k in a.keys() | b.keys()}
    if isinstance(a, (bool, str)):
        return a
    if isinstance(a, (int, float)):
        return a if key in _KEYS else max(a, b) if key in _MAX_KEYS else a + b
    if key == "batch_stats":
        sizes: dict[int, dict] = {}
        for entry in [*a, *b]:
            size = entry.get("batch_size", 0)
            sizes[size] = _sum(sizes.get(size), entry, "")
        return [sizes[size] for size in sorted(sizes)]
    return [*a, *b]


class _Family:
    __slots__ = ("help", "samples", "type")

    def __init__(self):
        self.help = self.type = None
        self.samples: list[str] = []


def merged_metrics(node_texts: Iterable[tuple[str, str]], own: str = "") -> str:
    """One Prometheus text from each node's (name, text), every sample given `node="name"`, each
    family's HELP and TYPE once and its samples together (as the format requires), then the
    endpoint's `own` families as they are."""
    families: dict[str, _Family] = {}
    for node, text in node_texts:
        _take(families, text, f'node="{_escaped(node)}"')
    _take(families, own, "")
    lines = []
    for family in families.values():
        lines += [line for line in (family.help, family.type) if line is not None]
        lines += family.samples
    return "\n".join(lines) + "\n" if lines else ""


def _take(families: dict[str, _Family], text: str, label: str) -> None:
    current = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                current = families.setdefault(parts[2], _Family())
                if parts[1] == "HELP" and current.help is None:
                    current.help = line
                elif parts[1] == "TYPE" and current.type is None:
                    current.type = line
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        family = current if current is not None and families.get(m.group(1)) in (None, current) else None
        family = family or families.setdefault(m.group(1), _Family())
        family.samples.append(_labelled(line, m, label) if label else line)


def _labelled(line: str, m: re.Match, label: str) -> str:
    end = m.end()
    if m.group(2) is None:  # no labels: `name value`
        return f"{m.group(1)}{{{label}}}{line[end:]}"
    return f"{line[:end]}{label}{'' if line[end:].startswith('}') else ','}{line[end:]}"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
