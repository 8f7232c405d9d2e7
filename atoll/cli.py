"""The `atoll` command line: a thin dispatcher over one module per subcommand.

Each module in COMMANDS defines `register(subparsers)` (adds its parser and sets `func`) and keeps
heavy imports inside its functions, so `atoll --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from atoll import __version__

# subcommand -> module; an explicit registry, no discovery magic.
COMMANDS: dict[str, str] = {
    "info": "atoll.commands.info",
    "serve": "atoll.commands.serve",
    "demo": "atoll.commands.demo",
    "bench": "atoll.commands.bench",
    "zoo": "atoll.commands.zoo",
    "preprocess": "atoll.commands.preprocess",
    "model": "atoll.commands.model",
    "simulate": "atoll.commands.simulate",
    "profile": "atoll.commands.profile",
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
        importlib.import_module(module).register(sub)
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
