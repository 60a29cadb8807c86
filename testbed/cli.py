"""`testbed`: the one console command in front of everything a user types.

Each command group lives in testbed/commands/<group>.py and exposes
`register(subparsers)`; this module only assembles them and turns user errors
into one clear line and a non-zero exit status. Shell completion: argcomplete
(`eval "$(register-python-argcomplete testbed)"`, see README).

`COMMANDS` lists every command with its group's module and its line in
`testbed --help`, so the parser knows every name without importing a command
module: a group's module (and the packages it needs: pyroute2, gRPC, Spark...)
is imported only when one of its commands is chosen, which keeps `testbed
--help` and a light command from paying for the heavy ones.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# gRPC's own log lines (a refused TLS handshake, say) stay out of the CLI's output: a failure is one line of ours.
# Set before the command modules import grpc, which reads it when its core starts; a user's value stands.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from testbed import __version__  # noqa: E402
from node.errors import UserError  # noqa: E402


@dataclass(frozen=True)
class Command:
    """One `testbed` command: the module whose register() adds its parser, and its line in `testbed --help`."""
    group: str
    help: str


_NETWORK, _MESSAGING, _INSPECT, _ROUTING, _PUBSUB, _EXPERIMENT = (
    f"testbed.commands.{g}" for g in ("network", "messaging", "inspect", "routing", "pubsub", "experiment"))

# In the order `testbed --help` lists them.
COMMANDS: dict[str, Command] = {
    "up": Command(_NETWORK, "build the emulated WAN of a scenario and keep it up (as root)"),
    "down": Command(_NETWORK, "stop the node daemons and tear down the running network"),
    "status": Command(_NETWORK, "hosts, links and their state"),
    "exec": Command(_NETWORK, "run a command inside a host: testbed exec NODE -- CMD..."),
    "link": Command(_NETWORK, "change a link's parameters or state"),
    "partition": Command(_NETWORK, "cut two sets of hosts apart: testbed partition A,B C,D"),
    "heal": Command(_NETWORK, "undo partitions"),
    "clean": Command(_NETWORK, "remove everything a crashed testbed left behind (its prefix only)"),
    "send": Command(_MESSAGING, "submit a message through a node"),
    "mailbox": Command(_MESSAGING, "list (or delete) messages delivered to a node"),
    "queue": Command(_INSPECT, "list the message copies a node holds for others"),
    "trace": Command(_INSPECT, "show where a message is, node by node"),
    "routes": Command(_ROUTING, "a live node's routing table and measured links"),
    "rules": Command(_ROUTING, "show or replace a live node's routing rules"),
    "gateway": Command("testbed.commands.gateway",
                       "a live node's gateway policies: show, set gamma and thresholds, ask about a user"),
    "pools": Command("testbed.commands.pools", "a controller replica's view of the pools: leader, term, maps, load"),
    "pub": Command(_PUBSUB, "publish on a topic through a node"),
    "sub": Command(_PUBSUB, "subscribe to a topic pattern at a node and print what arrives"),
    "unsub": Command(_PUBSUB, "remove a subscription at a node"),
    "subs": Command(_PUBSUB, "list the subscriptions at a node"),
    "run": Command(_EXPERIMENT, "run a scenario (or a sweep) end to end into a run directory (as root)"),
    "validate": Command(_EXPERIMENT, "check a scenario as `run` would and print its plan, building nothing"),
    "report": Command(_EXPERIMENT, "make the report of a run directory (tables, plots, report.html)"),
    "reproduce": Command("testbed.commands.reproduce",
                         "run one figure of a paper end to end (reproductions/NAME.yaml), resumable"),
    "check": Command("testbed.commands.check",
                     "check a run for lost, duplicated and late messages (reads only the run directory)"),
    "dashboard": Command("testbed.commands.dashboard",
                         "a web view of a run directory: live while it is written, a replay once it is done"),
    "export": Command("testbed.commands.export", "write a scenario's network as a Mininet script or a Kathará lab"),
    "image": Command("testbed.commands.image", "the node container image"),
}


class _Parsers(dict):
    """Command name -> its parser, filled as the groups' modules are imported: looking up a command not yet
    there imports its group, whose register() adds the parsers of all its commands."""

    def __init__(self, load: Any) -> None:
        super().__init__()
        self._load = load

    def __missing__(self, name: str) -> argparse.ArgumentParser:
        self._load(name)
        return dict.__getitem__(self, name)


class _Choices(Mapping):
    """The names argparse checks a command against and lists in its error, in COMMANDS order; a command's
    parser is built when asked for."""

    def __init__(self, parsers: _Parsers) -> None:
        self._parsers = parsers

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS

    def __iter__(self) -> Iterator[str]:
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)

    def __getitem__(self, name: str) -> argparse.ArgumentParser:
        if name not in COMMANDS:
            raise KeyError(name)
        return self._parsers[name]


class _LazySubParsers(argparse._SubParsersAction):
    """The subparsers action of `testbed`: every command is listed and checked from COMMANDS, and its group's
    module is imported (to build its parser) only when the command is chosen or its parser is asked for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._name_parser_map = _Parsers(self._import_group)
        self.choices = _Choices(self._name_parser_map)
        for name, command in COMMANDS.items():
            self._choices_actions.append(self._ChoicesPseudoAction(name, (), command.help))

    def _import_group(self, name: str) -> None:
        command = COMMANDS.get(name)
        if command is not None:
            importlib.import_module(command.group).register(self)

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        # a command's line in `testbed --help` comes from COMMANDS, listed before any module is imported
        if name not in COMMANDS or "help" in kwargs:
            raise ValueError(f"command {name!r}: list it, with its help line, in COMMANDS of testbed/cli.py")
        return super().add_parser(name, **kwargs)


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
    parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", action=_LazySubParsers)
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
