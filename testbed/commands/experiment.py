"""Experiment commands: run, validate (the plan of a run without running it) and report (a run directory's
report, spark_analysis)."""
from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from pathlib import Path

from node.errors import UserError
from testbed.commands import dashboard, examples

# wall seconds a repetition takes beyond its duration and drain: building the network, starting the nodes,
# collecting the records and tearing down (an estimate for `validate`, measured on small scenarios)
SETUP_S = 10.0


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


def report_command(out: Path) -> str:
    return f"testbed report {shlex.quote(str(out))}"


def _run(args: argparse.Namespace) -> int:
    from testbed.experiment import console, runner

    if args.reps is not None and args.reps < 1:
        raise UserError(f"--reps must be at least 1, got {args.reps}.")
    dash = dashboard.options(args)
    sets = scenario_sets(args)
    out = Path(args.out) if args.out else _default_out(args.scenario, sets, args.quick)
    rows: list[dict[str, str]] = []
    server = None
    if dash is not None:
        from testbed.dashboard.server import DashboardServer
        # served from the experiment folder, which follows each cell and repetition as it starts
        server = DashboardServer(out, port=dash["port"], bind=dash["bind"], check=False, experiment=True).start()
        dashboard.announce(server.url, dash["bind"], sys.stderr)
    # progress on stderr; the closing table is the result: stdout, or with --json stderr beside the JSON
    try:
        with console.progress_on(sys.stderr) as progress:
            status = runner.run_experiment(args.scenario, out, args.reps, args.resume, args.quick, sets, progress,
                                           stream=sys.stderr if args.json else sys.stdout, rows=rows)
    finally:
        if server is not None:
            server.stop()
            print(f"dashboard stopped; replay the run: testbed dashboard {out}", file=sys.stderr)
    page = None
    if args.report:
        # with --json stdout holds only the JSON: the report's console summary goes to stderr
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():
            page = make_report(str(out), None)
    if args.json:
        print(json.dumps({"out": str(out), "exit_status": status, "repetitions": rows,
                          "report": str(page) if page else None, "report_command": report_command(out)}, indent=1))
    elif not args.report:
        print(f"make the report: {report_command(out)}")
    return status


def make_report(directory: str, out: str | None, master: str | None = None, plots: str = "png",
                pcaps: bool = True, quiet: bool = False) -> Path:
    from spark_analysis.__main__ import report
    page = report(directory, out, master, plots=plots, pcaps=pcaps, quiet=quiet)
    print(f"report written to {page}")
    return Path(page)


def _report(args: argparse.Namespace) -> int:
    make_report(args.run_dir, args.out, args.master, args.plots, not args.no_pcap, args.quiet)
    return 0


def plan_plain(scenario_path: str, reps: int | None, quick: bool, sets: list[str]) -> dict:
    """What `run` would do, checked as `run` checks it (scenario, sweep values, node settings) without building
    anything: cells, repetitions with their seeds, and an estimate of the wall time."""
    from testbed.experiment import runner, timescale

    out = _default_out(scenario_path, sets, quick)
    base, plans = runner.plan(scenario_path, out, reps, quick, sets)
    cells: dict[str, dict] = {}
    total = 0.0
    for p in plans:
        wall = timescale.to_wall(p.scenario)
        estimate = wall.duration + wall.workload.drain + SETUP_S
        total += estimate
        cell = cells.setdefault(p.cell.name, {"cell": p.cell.name, "overrides": p.cell.overrides, "reps": []})
        cell["reps"].append({"rep": p.rep, "seed": p.seed, "estimate_s": round(estimate, 1)})
    return {"scenario": base.name, "file": scenario_path, "out": str(out), "quick": quick, "sets": sets,
            "cells": list(cells.values()), "repetitions": len(plans), "estimate_s": round(total, 1)}


def render_plan(plan: dict) -> str:
    lines = [f"{plan['file']}: valid (scenario {plan['scenario']}{', quick' if plan['quick'] else ''})",
             f"{len(plan['cells'])} cell(s), {plan['repetitions']} repetition(s) in all, into {plan['out']}"]
    for c in plan["cells"]:
        over = " ".join(f"{k}={v}" for k, v in c["overrides"].items()) or "(no sweep)"
        seeds = ", ".join(str(r["seed"]) for r in c["reps"])
        lines.append(f"  {c['cell']}: {over}; {len(c['reps'])} rep(s), seeds {seeds}")
    minutes = plan["estimate_s"] / 60
    lines.append(f"estimated wall time: {plan['estimate_s']:.0f} s (~{minutes:.1f} min; duration + drain + "
                 f"{SETUP_S:.0f} s set-up per repetition)")
    return "\n".join(lines)


def _validate(args: argparse.Namespace) -> int:
    if args.reps is not None and args.reps < 1:
        raise UserError(f"--reps must be at least 1, got {args.reps}.")
    plan = plan_plain(args.scenario, args.reps, args.quick, list(args.set or []))
    print(json.dumps(plan, indent=1) if args.json else render_plan(plan))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        description="Validate SCENARIO, then for every cell of its sweep and every repetition: build the network, "
                    "start the node daemons, warm up, drive the workload and faults, drain, collect and tear "
                    "down. Progress goes to standard error; the closing table (one row per repetition) to "
                    "standard output. Needs root. Exit status 0, 1 when a repetition failed or lost a message, "
                    "2 on bad input, 130 when interrupted.",
        **examples("sudo testbed run scenarios/quickstart.yaml",
                   "sudo testbed run scenarios/brachman-linear.yaml --quick --reps 2 --set seed=7",
                   "sudo testbed run scenarios/quickstart.yaml --resume --json > result.json",
                   "sudo testbed run scenarios/quickstart.yaml --dashboard"))
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file")
    p.add_argument("--out", default=None, help="experiment folder (default: runs/<scenario name>)")
    p.add_argument("--reps", type=int, help="repetitions per cell (overrides the scenario)")
    p.add_argument("--resume", action="store_true",
                   help="continue in --out: skip repetitions that completed (with the seed planned now), run "
                        "again those that started but did not complete; without it an existing experiment "
                        "there is moved aside")
    p.add_argument("--quick", action="store_true", help="apply the scenario's quick: section")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key by its dotted path (repeatable; validated like the file)")
    p.add_argument("--runtime", choices=("netns", "docker"), default=None,
                   help="host runtime for every cell (shorthand for --set runtime=...; default: the scenario's)")
    p.add_argument("--report", action="store_true", help="make the report (`testbed report`) when the run ends")
    dashboard.add_options(p, serve=True)
    p.add_argument("--json", action="store_true",
                   help="print the closing table as JSON (out, exit_status, repetitions: one object per row, "
                        "report, report_command); the text table goes to standard error")
    p.set_defaults(handler=_run)

    p = sub.add_parser(
        "validate",
        description="Check SCENARIO as `testbed run` checks it (the file, the --set overrides, every sweep "
                    "value and every node's settings), then print the plan: cells, repetitions, seeds and an "
                    "estimated wall time. Needs no root and builds no network.",
        **examples("testbed validate scenarios/quickstart.yaml",
                   "testbed validate scenarios/brachman-linear.yaml --quick --set seed=7 --json"))
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file")
    p.add_argument("--reps", type=int, help="repetitions per cell (overrides the scenario)")
    p.add_argument("--quick", action="store_true", help="apply the scenario's quick: section")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key by its dotted path (repeatable)")
    p.add_argument("--json", action="store_true", help="the plan as JSON")
    p.set_defaults(handler=_validate)

    p = sub.add_parser(
        "report",
        description="Ingest RUN_DIR (one repetition, a cell or a whole experiment of `testbed run`) with "
                    "Spark and write the comparison report: tables, plots and report.html.",
        **examples("testbed report runs/quickstart", "testbed report runs/quickstart --out /tmp/qs-report --no-pcap"))
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run, cell or experiment directory of `testbed run`")
    p.add_argument("--out", help="report folder (default: RUN_DIR/report)")
    p.add_argument("--master", default=None, help="Spark master URL (default: local[*])")
    p.add_argument("--plots", default="png", help="plot formats, comma-separated: png, svg (default: png)")
    p.add_argument("--no-pcap", action="store_true", help="skip the packet captures")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(handler=_report)
