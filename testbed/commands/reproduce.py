"""Reproduction commands: reproduce."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from node.errors import UserError


def _reproduce(args: argparse.Namespace) -> int:
    from testbed.experiment import console
    from testbed.reproduce import run, spec

    if args.list:
        for name in spec.names():
            try:
                print(run.describe(spec.load(spec.find(name))))
            except UserError as exc:
                print(f"{name:<24} (broken: {exc})")
        return 0
    if not args.name:
        raise UserError("testbed reproduce: give a figure NAME (testbed reproduce --list names them).")
    if args.reps is not None and args.reps < 1:
        raise UserError(f"--reps must be at least 1, got {args.reps}.")
    repro = spec.load(spec.find(args.name))
    out = Path(args.out) if args.out else run.default_out(repro, args.quick)
    with console.progress_on(sys.stdout) as progress:
        return run.reproduce(repro, out, args.reps, args.quick, progress, sys.stdout)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reproduce", help="run one figure of a paper end to end (reproductions/NAME.yaml), resumable")
    p.add_argument("name", nargs="?", help="the figure: a name from reproductions/ or a reproduction YAML file")
    p.add_argument("--list", action="store_true", help="list the figures in reproductions/")
    p.add_argument("--out", default=None, help="experiment folder (default: runs/reproduce/NAME)")
    p.add_argument("--reps", type=int, help="repetitions per cell (overrides the figure's sweep)")
    p.add_argument("--quick", action="store_true",
                   help="the scenario's quick: section (and the figure's); runs into NAME-quick, figure there")
    p.set_defaults(handler=_reproduce)
