"""`testbed check`: the independent loss checker on a repetition, a cell or a whole experiment."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from node.errors import UserError
from testbed.commands import examples

EXIT_FAILED = 1       # a repetition failed the checker (Verdict.ok) or a subsystem's account


def _check(args: argparse.Namespace) -> int:
    from testbed import accounting
    from node import clockmodel
    from testbed.accounting import stall
    from testbed.subsystems import SUBSYSTEMS

    root = Path(args.run_dir)
    if args.max_late is not None and args.max_late < 0:
        raise UserError(f"--max-late must be 0 or more, got {args.max_late}.")
    if not root.is_dir():
        raise UserError(f"{root} is not a run directory (no such directory).")
    reps = accounting.find_repetitions(root)
    if not reps:
        raise UserError(f"{root} is not a run directory: no repetition (a folder with nodes/ or summary.json) "
                        f"in it or below it.")
    rows: list[dict[str, Any]] = []
    all_ok = True
    for rep in reps:
        verdict = accounting.check_run(rep, SUBSYSTEMS)
        max_late = args.max_late if args.max_late is not None else accounting.scenario_max_late(rep)
        checked = [(sub, sub.checked(rep)) for sub in SUBSYSTEMS]     # each subsystem's own account
        ok = verdict.ok(max_late) and all(sub.check_ok(acc) for sub, acc in checked)
        all_ok = all_ok and ok
        name = accounting.label(rep)
        stalled = _stall_info(rep)
        clock = clockmodel.load(rep)     # None on one machine: nothing to say
        if args.json:
            rows.append({"repetition": name, "dir": str(rep), **verdict.to_dict(max_late, limit=None),
                         **{k: v for _, acc in checked for k, v in acc.items()},
                         **({"stall": stalled} if stalled else {}),
                         **({"clock": clock.to_dict()} if clock is not None else {})})
            continue
        _say(accounting.verdict_line(name, verdict, max_late))
        for line in accounting.verdict_details(verdict):
            _say(f"  {line}")
        for sub, acc in checked:
            for line in sub.check_lines(acc):
                _say(f"  {line}")
        if stalled:
            _say(f"  {stall.text(stalled)}")
        uncertain = clockmodel.problem_text(clock.to_dict()) if clock is not None else None
        if uncertain:
            _say(f"  {uncertain}")
        rows.append({"ok": ok, **{k: getattr(verdict, k) for k in _COUNTS}})
    total = {k: sum(r[k] for r in rows) for k in _COUNTS}
    passed = sum(1 for r in rows if r["ok"])
    if args.json:
        _say(json.dumps({"ok": all_ok, "repetitions": rows,
                         "total": {**total, "repetitions": len(rows), "passed": passed}}, indent=1))
    elif len(rows) > 1:
        _say(f"total: {len(rows)} repetitions: {total['accepted']} accepted: {total['delivered']} delivered, "
             f"{total['reported']} reported, {total['late']} late, {total['lost']} lost, "
             f"{total['duplicate']} duplicates — {passed} of {len(rows)} OK")
    return 0 if all_ok else EXIT_FAILED


_COUNTS = ("accepted", "delivered", "reported", "late", "lost", "duplicate")


def _stall_info(rep: Path) -> dict[str, Any] | None:
    """The run's stall verdict from its summary.json (the runner computes it; the spools cannot tell when the
    last delivery was): a stalled run's held copies are late, which the verdict alone does not explain."""
    try:
        summary = json.loads((rep / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    info = summary.get("stall") if isinstance(summary, dict) else None
    return info if isinstance(info, dict) and info.get("stalled") else None


def _say(text: str) -> None:
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # the reader stopped reading (`| head`): check on for the exit status, writing nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check",
                       description="Classify every accepted message copy of each repetition as delivered, "
                                   "duplicate, reported undeliverable, late (still held in a spool: where) or lost; "
                                   "with publications, every expected receipt of a subscription too. "
                                   "Exit status 0 when every repetition passes, 1 when any lost or duplicated a "
                                   "copy (or a durable receipt), lost a non-delivery report, had an unreadable "
                                   "spool, disagreed with the workload driver's accepted.jsonl, had a node that "
                                   "could not write a record line, or had more late copies than allowed; 2 on bad "
                                   "input.",
                       **examples("testbed check runs/quickstart", "testbed check runs/quickstart/default/rep1 --json",
                                  "testbed check runs/drill-nemesis --max-late 0"))
    p.add_argument("run_dir", metavar="RUN_DIR",
                   help="a repetition directory (<experiment>/<cell>/<rep>) or any directory above it")
    p.add_argument("--max-late", type=int, default=None, metavar="N",
                   help="late (still held) copies a repetition may have and pass (default: the repetition's "
                        "scenario max_late, else any number)")
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON, with every pair id")
    p.set_defaults(handler=_check)
