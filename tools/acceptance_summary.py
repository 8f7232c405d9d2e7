#!/usr/bin/env python3
"""acceptance.json for tools/gpu_acceptance.sh: each step's status, seconds and budget, and the
headline figures its files hold (issue #32's targets beside them), printed as a short table.

    python3 tools/acceptance_summary.py OUT MODE STEP:RC:MS:BUDGET_S ...

Exits 1 when a step failed or ran past its budget (a step whose file says why it could not run,
{"not_run": why}, is not a failure).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TIMED_OUT = (124, 137)
TARGETS = {"saturated_preempt_p99_us": 30.0, "rt_p50_overhead": 0.05, "latency_vs_torch_graph": 1.0}


def _load(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def steps(results: list[str]) -> dict:
    out = {}
    for item in results:
        name, rc, ms, budget = item.split(":")
        rc = int(rc)
        status = "ok" if rc == 0 else "over budget" if rc in TIMED_OUT else "failed"
        out[name] = {"status": status, "rc": rc, "seconds": round(int(ms) / 1e3, 1),
                     "budget_s": int(budget)}
    return out


def cubins(doc) -> dict | None:
    if doc is None or isinstance(doc, dict):
        return doc  # absent, or why it did not run
    return {"cubins": len(doc), "variants": len({r["name"] for r in doc}),
            "failed": sorted(r["name"] for r in doc if not r["ok"]),
            "spilled": sorted(r["name"] for r in doc if r["spill_stores"] or r["spill_loads"])}


def tests(path: Path) -> dict | None:
    if not path.is_file():
        return None
    suite = ET.parse(path).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}


def models(doc) -> dict | None:
    """Per model/batch/precision: our time, PyTorch graph's at the same precision, the ratio."""
    if doc is None:
        return None
    rows = {}
    for key, row in doc["results"].items():
        torch_ms = row.get(f"torch_graph_{key.rsplit('/', 1)[1]}_ms")
        rows[key] = {"atoll_ms": row.get("graph_ms"), "torch_graph_ms": torch_ms,
                     "ratio": round(row["graph_ms"] / torch_ms, 3) if torch_ms and row.get("graph_ms") else None,
                     "ok": row.get("ok"), "error": bool(row.get("error"))}
    return rows


def preempt(doc) -> dict | None:
    if doc is None:
        return None
    return {f"{r['policy']}/{r['be_load']}": {**{k: r["preempt_latency_us"][k] for k in ("p50", "p99", "p99.9")},
                                              "rt_overhead": r["rt_overhead"]}
            for r in doc["results"]}


def disb(doc) -> dict | None:
    if doc is None:
        return None
    return {r["policy"]: {"rt_p50_ms": r["rt_latency_ms"]["p50"], "rt_p99_ms": r["rt_latency_ms"]["p99"],
                          "rt_p50_overhead": (round(r["rt_p50_vs_rt_only"] - 1, 4)
                                              if r.get("rt_p50_vs_rt_only") else None),
                          "throughput_rps": r["throughput_rps"]}
            for r in doc["results"]}


def serve(doc) -> dict | None:
    if doc is None or "not_run" in doc:
        return doc
    return {"ideal_ratio": [r.get("ideal_ratio") for r in doc["results"]],
            "ideal_rps": (doc.get("ideal") or {}).get("ideal_rps")}


def main(argv: list[str]) -> int:
    out, mode, results = Path(argv[0]), argv[1], argv[2:]
    doc = {"mode": mode, "targets": TARGETS, "steps": steps(results),
           "cubins": cubins(_load(out / "cubins.json")), "tests": tests(out / "tests.xml"),
           "models": models(_load(out / "gpu_check.json")), "preempt": preempt(_load(out / "preempt.json")),
           "disb": {w: disb(_load(out / f"disb_{w}.json")) for w in ("A", "C")},
           "serve": serve(_load(out / "serve.json"))}
    device = (_load(out / "gpu_check.json") or {}).get("env", {}).get("device")
    doc["device"] = device
    (out / "acceptance.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"{mode} run on {device}: " + ", ".join(f"{k} {v['status']} {v['seconds']}/{v['budget_s']} s"
                                                    for k, v in doc["steps"].items()))
    for key, row in (doc["preempt"] or {}).items():
        print(f"preempt {key:24s} p50 {row['p50']} p99 {row['p99']} p99.9 {row['p99.9']} us, "
              f"RT overhead {row['rt_overhead']}")
    for key, row in (doc["models"] or {}).items():
        print(f"model {key:32s} {row['atoll_ms']} ms vs torch graph {row['torch_graph_ms']} ms: {row['ratio']}")
    for w, rows in doc["disb"].items():
        for policy, row in (rows or {}).items():
            print(f"disb {w} {policy:8s} RT p50 {row['rt_p50_ms']} ms, overhead {row['rt_p50_overhead']}")
    print(f"serve: {doc['serve']}")
    return 1 if any(v["status"] != "ok" for v in doc["steps"].values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
