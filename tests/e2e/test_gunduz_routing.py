"""Gunduz (2006) Tables 3-5 from real daemons on shaped links: `testbed run scenarios/gunduz-9broker.yaml --quick`.

Nine brokers measure their links with UDP probes (10 ms per thesis cost unit), flood the costs as
link-state adverts and run Dijkstra with hysteresis; the two cost changes of section 6.1 are timed link
changes. At the end of each phase broker b1's table (rebuilt from its routes.jsonl) must equal the
thesis' table: next hops exactly, costs within one quantum per link of 10x the thesis' costs. The
traffic b1 sends meanwhile must all arrive exactly once (the loss checker).

The thesis' ties (b1 reaches b20 for the same cost via b2 and via b3) hold only while every link reads within
half a quantum: a host that did not keep up (above all a hypervisor stealing a third of the CPU for tens of
seconds, which the kernel-stamped probes cannot see past: the link emulator itself runs late) breaks them. When
the tables miss on a saturated host the run is repeated once (tests/e2e/host_saturation.py).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from testbed.accounting import check_run
from testbed.scenario import load
from tests.e2e.host_saturation import rerun_saturated, saturation_note
from tests.e2e.test_testbed_run import REPO, leftovers, only_rep, quick_run_in_tempdir, read_jsonl

# timing-sensitive: runs while no other test does. Kernel-stamped probes keep the measured costs close to the
# configured delays on a loaded host, but the thesis' ties (b1 reaches b10 and b20 for the same cost via b2 and
# b3) need every link within half a quantum all along: beside other tests one fresh-clone run broke a tie.
pytestmark = pytest.mark.alone

SCENARIO = REPO / "scenarios" / "gunduz-9broker.yaml"
QUICK = load(SCENARIO, quick=True)
MS_PER_UNIT = 10.0
QUANTUM = 5.0
# Tables 3, 4 and 5 of the thesis: destination -> (next hop, cost in thesis units)
TABLE_3 = {"b2": ("b2", 1), "b3": ("b3", 1), "b10": ("b2", 2), "b11": ("b2", 2), "b12": ("b3", 2),
           "b20": ("b2", 3), "b21": ("b3", 2), "b30": ("b3", 3)}
TABLE_4 = {**TABLE_3, "b12": ("b2", 3)}
TABLE_5 = {"b2": ("b2", 3), "b3": ("b3", 1), "b10": ("b2", 4), "b11": ("b2", 4), "b12": ("b3", 4),
           "b20": ("b3", 3), "b21": ("b3", 2), "b30": ("b3", 3)}
RUN_TIMEOUT = 300.0
RERUN_TIMEOUT = 200.0     # the module's tests have 600 s for both runs


@pytest.fixture(scope="module")
def run() -> Iterator[dict[str, Any]]:
    with quick_run_in_tempdir(SCENARIO, RUN_TIMEOUT) as result:
        result["saturated_before"] = rerun_saturated(result, SCENARIO, RERUN_TIMEOUT,
                                                     lambda: not table_mismatches(rep_dir(result)))
        yield result


def rep_dir(run: dict[str, Any]) -> Path:
    return only_rep(run)


def table_at(routes: list[dict], ts: float) -> dict[str, tuple[str, float | None]]:
    """b1's table as of `ts`: the last line per destination at or before it."""
    out: dict[str, tuple[str, float | None]] = {}
    for r in sorted(routes, key=lambda r: r["ts"]):
        if r["ts"] <= ts:
            out[r["dst"]] = (r["next_hop"], r["cost"])
    return out


def phase_ends(rep: Path) -> list[float]:
    """Where each table is read: just before each change, and at the end of the workload."""
    events = read_jsonl(rep / "events.jsonl")
    changes = sorted({e["ts"] for e in events if e.get("event") == "link_set"})
    assert len(changes) == 3, f"expected the three link changes in events.jsonl, got {changes}"
    first, second = changes[0], changes[-1]
    assert second - first > 5, "the two changes of phase 2 and the one of phase 3 must be apart"
    [end] = [e["ts"] for e in events if e.get("event") == "workload_end"]
    return [first - 0.5, second - 0.5, end]


def table_mismatches(rep: Path) -> list[str]:
    """Where b1's tables at the ends of the phases differ from Tables 3, 4 and 5 (empty: they are the thesis')."""
    routes = read_jsonl(rep / "nodes" / "b1" / "routes.jsonl")
    if not routes:
        return ["b1 wrote no routes.jsonl"]
    problems = []
    for name, want, at in zip(("Table 3", "Table 4", "Table 5"), (TABLE_3, TABLE_4, TABLE_5), phase_ends(rep)):
        got = table_at(routes, at)
        hops = {d: h for d, (h, _c) in got.items()}
        wrong = sorted(d for d, (h, _c) in want.items() if hops.get(d) != h)
        if wrong or set(hops) != set(want):
            problems.append(f"{name}: b1's next hops {hops}; "
                            + "; ".join(_context(rep, routes, d, at) for d in wrong))
            continue
        for dst, (_hop, units) in want.items():
            cost = got[dst][1]
            # each link of the path is rounded to the quantum: at most one quantum off per link
            if cost is None or abs(cost - units * MS_PER_UNIT) > QUANTUM * units:
                problems.append(f"{name}: cost to {dst} {cost}; {_context(rep, routes, dst, at)}")
    return problems


@pytest.mark.root
@pytest.mark.timeout(600)
def test_b1_tables_after_each_phase_are_tables_3_4_5(run) -> None:
    assert run["rc"] == 0, f"stdout:\n{run['stdout'][-4000:]}\nstderr:\n{run['stderr'][-4000:]}"
    problems = table_mismatches(rep_dir(run))
    assert not problems, "; ".join(problems) + "; " + saturation_note(run, run["saturated_before"])


def _context(rep: Path, routes: list[dict], dst: str, at: float) -> str:
    """What a failed reading needs beside it: b1's route lines for `dst` in the 5 s before `at` and the rep's
    stall verdict (its saturation is in the failure message: tests/e2e/host_saturation.py)."""
    lines = [(round(r["ts"] - at, 2), r["next_hop"], r["cost"]) for r in routes
             if r["dst"] == dst and at - 5 <= r["ts"] <= at]
    summary = json.loads((rep / "summary.json").read_text())
    return f"b1's lines for {dst} (s before the reading, next hop, cost): {lines}; stall {summary.get('stall')}"


@pytest.mark.root
@pytest.mark.timeout(600)
def test_traffic_survives_the_route_changes_and_nothing_is_left(run) -> None:
    assert run["rc"] == 0
    verdict = check_run(rep_dir(run))
    assert verdict.accepted > 0
    assert (verdict.lost, verdict.duplicate, verdict.late) == (0, 0, 0), verdict
    assert leftovers(run["run_ids"]) == []
