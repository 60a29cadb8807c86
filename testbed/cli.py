"""`testbed`: the one console command in front of everything a user types.

Each command group lives in testbed/commands/<group>.py and exposes
`register(subparsers)`; this module only assembles them and turns user errors
into one clear line and a non-zero exit status.
"""
from __future__ import annotations

import argparse
import logging
import sys

from testbed import __version__
from testbed.commands import (check, experiment, export, gateway, image, inspect, messaging, network, pubsub,
                              reproduce, routing)
from node.errors import UserError

GROUPS = (network, messaging, inspect, routing, gateway, pubsub, experiment, reproduce, check, export, image)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="testbed",
        description="Emulated WAN testbed for store-and-forward messaging.",
        epilog="Run `testbed COMMAND --help` for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"testbed {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except UserError as exc:
        print(f"testbed: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("testbed: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
