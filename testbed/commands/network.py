"""Network commands: up, down, status, exec, link, partition, heal, clean."""
from __future__ import annotations

import argparse

from testbed.errors import NotAvailableYet


def _pending(name: str):
    def handler(args: argparse.Namespace) -> int:
        raise NotAvailableYet(name, 4)
    return handler


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="build the emulated WAN of a scenario and keep it up")
    p.add_argument("scenario", help="scenario YAML file")
    p.set_defaults(handler=_pending("up"))
    p = sub.add_parser("down", help="tear down the running network")
    p.set_defaults(handler=_pending("down"))
    p = sub.add_parser("status", help="hosts, links and their state")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=_pending("status"))
    p = sub.add_parser("exec", help="run a command inside a host")
    p.add_argument("node")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    p.set_defaults(handler=_pending("exec"))
    p = sub.add_parser("link", help="change a link's parameters or state")
    p.add_argument("a")
    p.add_argument("b")
    p.set_defaults(handler=_pending("link"))
    p = sub.add_parser("partition", help="cut two sets of hosts apart")
    p.add_argument("side_a")
    p.add_argument("side_b")
    p.set_defaults(handler=_pending("partition"))
    p = sub.add_parser("heal", help="undo partitions")
    p.set_defaults(handler=_pending("heal"))
    p = sub.add_parser("clean", help="remove everything a crashed testbed left behind (its prefix only)")
    p.set_defaults(handler=_pending("clean"))
