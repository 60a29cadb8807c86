"""Image commands: image build."""
from __future__ import annotations

import argparse

from testbed.errors import NotAvailableYet


def _build(args: argparse.Namespace) -> int:
    raise NotAvailableYet("image build", 8)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("image", help="the node container image")
    isub = p.add_subparsers(dest="image_command", metavar="ACTION")
    b = isub.add_parser("build", help="build the node image (online or offline), cached")
    b.set_defaults(handler=_build)
    p.set_defaults(handler=lambda a: p.print_help() or 2)
