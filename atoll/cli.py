"""The `atoll` command line: a thin dispatcher over one module per subcommand.

Each module in COMMANDS defines `register(subparsers)` (adds its parser and sets `func`).
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from atoll import __version__
from atoll.commands import bench, cluster, demo, info, model, preprocess, profile, rt, serve, simulate, zoo

# subcommand -> its module; an explicit registry, no discovery magic.
COMMANDS: dict[str, ModuleType] = {
    "info": info, "serve": serve, "demo": demo, "bench": bench, "zoo": zoo, "preprocess": preprocess,
    "model": model, "simulate": simulate, "profile": profile, "cluster": cluster, "rt": rt,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="atoll",
        description="Atoll inference server: FPGA preprocessing, PREBA batching, REEF scheduling.",
    )
    parser.add_argument("--version", action="version", version=f"atoll {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMANDS.values():
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
