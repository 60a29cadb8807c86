"""Messaging commands: send, mailbox."""
from __future__ import annotations

import argparse

from testbed.errors import NotAvailableYet


def _pending(name: str):
    def handler(args: argparse.Namespace) -> int:
        raise NotAvailableYet(name, 5)
    return handler


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("send", help="submit a message through a node")
    p.add_argument("src", metavar="FROM")
    p.add_argument("--to", required=True, help="recipient node(s), comma separated")
    body = p.add_mutually_exclusive_group(required=True)
    body.add_argument("--size", type=int, help="generated payload of this many bytes")
    body.add_argument("--file", help="payload from a file")
    p.add_argument("--priority", type=int, default=1)
    p.set_defaults(handler=_pending("send"))
    p = sub.add_parser("mailbox", help="list messages delivered to a node")
    p.add_argument("node")
    p.set_defaults(handler=_pending("mailbox"))
