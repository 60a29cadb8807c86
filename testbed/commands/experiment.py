"""Experiment commands: run."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from node.errors import UserError


def _default_out(scenario_path: str, sets: list[str], quick: bool) -> Path:
    """runs/<scenario name>: the name comes from the scenario itself (its `name:` or file stem)."""
    from testbed.scenario import loader
    return Path("runs") / loader.load(scenario_path, overrides=sets, quick=quick).name


def scenario_sets(args: argparse.Namespace) -> list[str]:
    """The --set overrides in order, with --runtime as a last `runtime=` override (so it wins over a --set)."""
    sets = list(args.set or [])
    if getattr(args, "runtime", None):
        sets.append(f"runtime={args.runtime}")
    return sets


def _run(args: argparse.Namespace) -> int:
    from testbed.experiment import console, runner

    if args.reps is not None and args.reps < 1:
        raise UserError(f"--reps must be at least 1, got {args.reps}.")
    sets = scenario_sets(args)
    out = Path(args.out) if args.out else _default_out(args.scenario, sets, args.quick)
    with console.progress_on(sys.stdout) as progress:
        return runner.run_experiment(args.scenario, out, args.reps, args.resume, args.quick, sets, progress)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a scenario (or a sweep) end to end into a run directory")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--out", default=None, help="experiment folder (default: runs/<scenario name>)")
    p.add_argument("--reps", type=int, help="repetitions per cell (overrides the scenario)")
    p.add_argument("--resume", action="store_true", help="skip cells that are already complete")
    p.add_argument("--quick", action="store_true", help="apply the scenario's quick: section")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key by its dotted path (repeatable; validated like the file)")
    p.add_argument("--runtime", choices=("netns", "docker"), default=None,
                   help="host runtime for every cell (shorthand for --set runtime=...; default: the scenario's)")
    p.set_defaults(handler=_run)
