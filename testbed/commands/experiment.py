"""Experiment commands: run."""
from __future__ import annotations

import argparse

from testbed.errors import NotAvailableYet


def _run(args: argparse.Namespace) -> int:
    raise NotAvailableYet("run", 7)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a scenario (or a sweep) end to end into a run directory")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--out", default="runs", help="parent folder of run directories (default: runs)")
    p.add_argument("--reps", type=int, help="repetitions per cell (overrides the scenario)")
    p.add_argument("--resume", action="store_true", help="skip cells that are already complete")
    p.add_argument("--quick", action="store_true", help="apply the scenario's quick: section")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a scenario key")
    p.set_defaults(handler=_run)
