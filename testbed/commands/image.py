"""Image commands: image build."""
from __future__ import annotations

import argparse
import sys

from testbed.commands import examples


def _build(args: argparse.Namespace) -> int:
    from testbed.image import BuildOptions, build
    mode = "online" if args.online else "offline" if args.offline else "auto"
    res = build(BuildOptions(mode=mode, force=args.force), progress=lambda s: print(s, file=sys.stderr, flush=True))
    how = "cache hit, nothing rebuilt" if res.cached else f"built ({res.mode})"
    print(f"{res.image}: {how} in {res.seconds:.1f} s (content {res.content_hash[:12]})")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("image",
                       description="The container image the node daemons run in with `runtime: docker`.",
                       **examples("testbed image build", "testbed image build --offline --force"))
    isub = p.add_subparsers(dest="image_command", metavar="ACTION")
    b = isub.add_parser("build", help="build the node image (online or offline), cached",
                        description="Build the node image, or find it in the cache when the node sources are "
                                    "unchanged (content hash). Progress lines go to standard error.",
                        **examples("testbed image build", "testbed image build --online",
                                   "testbed image build --offline --force"))
    g = b.add_mutually_exclusive_group()
    g.add_argument("--online", action="store_true", help="FROM python:3.11-slim (needs a registry)")
    g.add_argument("--offline", action="store_true", help="debootstrap base + host-downloaded wheels")
    b.add_argument("--force", action="store_true", help="rebuild even when the content hash matches")
    b.set_defaults(handler=_build)
    p.set_defaults(handler=lambda a: p.print_help() or 2)
