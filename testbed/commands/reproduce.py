"""Reproduction commands: reproduce."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from node.errors import UserError
from testbed.commands import examples


def listing(quick: bool) -> list[dict[str, Any]]:
    """Every figure in reproductions/: name, title, repetitions and the estimated wall time of running it
    (as `testbed validate` estimates a run; with `quick` of `reproduce --quick`); `error` for one that cannot
    be planned."""
    from testbed.commands.experiment import plan_plain
    from testbed.reproduce import run, spec

    rows: list[dict[str, Any]] = []
    for name in spec.names(spec.FOLDER):
        row: dict[str, Any] = {"name": name, "title": None, "quick": quick, "repetitions": None,
                               "estimate_s": None, "error": None}
        try:
            repro = spec.load(spec.find(name, spec.FOLDER))
            row["title"] = repro.title
            plan = plan_plain(str(repro.scenario), None, quick, run.set_arguments(repro, quick))
            row["repetitions"], row["estimate_s"] = plan["repetitions"], plan["estimate_s"]
        except UserError as exc:
            row["error"] = str(exc)
        rows.append(row)
    return rows


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"~{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"~{max(1, minutes)} min"


def render_listing(rows: list[dict[str, Any]]) -> str:
    from spark_analysis.render import plain_lines     # rich comes with it: loaded only to print
    table = []
    for r in rows:
        if r["title"] is None:
            table.append([r["name"], "", f"(broken: {r['error']})"])
        elif r["estimate_s"] is None:
            table.append([r["name"], "?", f"{r['title']} (cannot plan: {r['error']})"])
        else:
            table.append([r["name"], _duration(r["estimate_s"]), f"{r['title']} ({r['repetitions']} repetitions)"])
    return "\n".join(plain_lines(["figure", "wall time", "title"], table, align="lrl"))


def _reproduce(args: argparse.Namespace) -> int:
    from testbed.experiment import console
    from testbed.reproduce import run, spec

    if args.list:
        rows = listing(args.quick)
        print(json.dumps(rows, indent=1) if args.json else render_listing(rows))
        return 0
    if args.json:
        raise UserError("--json goes with --list (a figure's run prints its table and writes the figure's CSV).")
    if not args.name:
        raise UserError("testbed reproduce: give a figure NAME (testbed reproduce --list names them).")
    if args.reps is not None and args.reps < 1:
        raise UserError(f"--reps must be at least 1, got {args.reps}.")
    repro = spec.load(spec.find(args.name))
    out = Path(args.out) if args.out else run.default_out(repro, args.quick)
    with console.progress_on(sys.stderr) as progress:
        return run.reproduce(repro, out, args.reps, args.quick, progress, sys.stdout)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reproduce",
        description="Run the scenario of figure NAME with the figure's overrides (as root; complete repetitions "
                    "of an earlier attempt are kept), make its report, then the figure's CSV and PNG. "
                    "--list names the figures with the estimated wall time of each.",
        **examples("testbed reproduce --list", "testbed reproduce --list --quick --json",
                   "sudo testbed reproduce brachman-6.4 --quick"))
    p.add_argument("name", metavar="NAME", nargs="?",
                   help="the figure: a name from reproductions/ or a reproduction YAML file")
    p.add_argument("--list", action="store_true",
                   help="list the figures in reproductions/ with their estimated wall time (of --quick with it)")
    p.add_argument("--json", action="store_true", help="with --list: the list as JSON (name, title, quick, "
                                                       "repetitions, estimate_s, error)")
    p.add_argument("--out", default=None, help="experiment folder (default: runs/reproduce/NAME)")
    p.add_argument("--reps", type=int, help="repetitions per cell (overrides the figure's sweep)")
    p.add_argument("--quick", action="store_true",
                   help="the scenario's quick: section (and the figure's); runs into NAME-quick, figure there")
    p.set_defaults(handler=_reproduce)
