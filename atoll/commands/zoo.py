"""`atoll zoo list|build`: the seed models as ONNX files in a Triton-layout model repository."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpu_runtime.zoo import MODELS, build
from gpu_runtime.zoo.repository import write_model
from tqdm import tqdm


def register(subparsers) -> None:
    parser = subparsers.add_parser("zoo", help="list or build the seed models (random weights)")
    sub = parser.add_subparsers(dest="zoo_command", metavar="ACTION")
    sub.required = True
    p_list = sub.add_parser("list", help="list the zoo models")
    p_list.add_argument("--json", action="store_true", help="print JSON to stdout")
    p_list.set_defaults(func=run_list)
    p_build = sub.add_parser("build", help="write models as <out>/<model>/{config.pbtxt,1/model.onnx}")
    p_build.add_argument("--out", required=True, help="model repository directory")
    p_build.add_argument("--models", nargs="+", metavar="NAME", help="subset to build (default: all)")
    p_build.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    p_build.add_argument("--json", action="store_true", help="print what was written as JSON")
    p_build.set_defaults(func=run_build)


def run_list(args) -> int:
    rows = [
        {"name": m.name, "kind": m.kind, "input": [m.input_name, list(m.input_dims)],
         "output": [m.output_name, list(m.output_dims)], "description": m.description}
        for m in MODELS.values()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['name']:<20} {r['kind']:<6} {r['description']}")
    return 0


def run_build(args) -> int:
    names = args.models or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"atoll zoo: unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}",
              file=sys.stderr)
        return 2
    written = []
    for name in tqdm(names, desc="building zoo", unit="model", file=sys.stderr):
        path = write_model(Path(args.out), name, build(name, seed=args.seed))
        written.append({"model": name, "path": str(path), "bytes": path.stat().st_size})
    if args.json:
        print(json.dumps(written, indent=2))
    else:
        for w in written:
            print(f"{w['model']:<20} {w['bytes'] / 1e6:8.1f} MB  {w['path']}")
    return 0
