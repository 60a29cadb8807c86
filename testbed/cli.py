"""`testbed`: the one console command in front of everything a user types.

Each command group lives in testbed/commands/<group>.py and exposes
`register(subparsers)`; this module only assembles them and turns user errors
into one clear line and a non-zero exit status. Shell completion: argcomplete
(`eval "$(register-python-argcomplete testbed)"`, see README).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

# gRPC's own log lines (a refused TLS handshake, say) stay out of the CLI's output: a failure is one line of ours.
# Set before the command modules import grpc, which reads it when its core starts; a user's value stands.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from testbed import __version__  # noqa: E402
from testbed.commands import (check, dashboard, experiment, export, gateway, image, inspect, messaging, network, pools,
                              pubsub, reproduce, routing)
from node.errors import UserError

GROUPS = (network, messaging, inspect, routing, gateway, pools, pubsub, experiment, reproduce, check, dashboard, export,
          image)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="testbed",
        description="Emulated WAN testbed for store-and-forward messaging.",
        epilog="Run `testbed COMMAND --help` for the options and examples of one command.\n"
               "examples:\n  testbed validate scenarios/quickstart.yaml\n  sudo testbed run scenarios/quickstart.yaml\n"
               "  sudo testbed up scenarios/quickstart.yaml && sudo testbed send n1 --to n4 --size 10kB",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"testbed {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for group in GROUPS:
        group.register(sub)
    return parser


def _complete(parser: argparse.ArgumentParser) -> None:
    """Tab completion when the shell asks for it (argcomplete sets _ARGCOMPLETE); a no-op otherwise."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:      # completion is a convenience: without the package the command still runs
        return
    argcomplete.autocomplete(parser)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    _complete(parser)
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
    except BrokenPipeError:
        # the reader stopped reading (`testbed reproduce --list | head`): no traceback, and the final flush
        # at exit must not complain either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
