"""The nemesis drill end to end: `testbed run scenarios/drill-nemesis.yaml --quick` as a subprocess.

Both modes, one repetition each: every fault of the quick timeline must be applied (partitions of
adjacent and of non-adjacent sides and their heals; kill -9 and restart of the originator, the relay
and the recipient; pause and resume), each must have hit data on its way (the evidence below), and the
independent checker (testbed.accounting.check_run, not summary.json) must find nothing lost, nothing
twice and nothing still held. Budget: about a minute on 2 cores (measured 58 s).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from testbed.accounting import check_run
from testbed.scenario import load
from tests.e2e.test_testbed_run import MODES, REPO, leftovers, quick_run_in_tempdir, read_jsonl
from tests.integration.support import recoveries

DRILL = REPO / "scenarios" / "drill-nemesis.yaml"
QUICK = load(DRILL, quick=True)
ORIGINATOR, RELAY, RECIPIENT, PAUSED = "n3", "n4", "n5", "n2"      # the roles the scenario's header names
CHORD = ("n1", "n4")                     # MTA neighbours without a link: the non-adjacent partition's sides
ADJACENT = [["n1", "n2", "n3"], ["n4", "n5", "n6"]]      # the adjacent partition's sides (two links cut)
HOLD = QUICK.nodes.all["session"]["hold_time"]
METRICS_EVERY = QUICK.nodes.all["metrics_interval"]
RUN_TIMEOUT = 300.0                      # wall seconds: 2 cells of 1 s warm-up + 20 s workload + drain, set-up


@pytest.fixture(scope="module")
def drill() -> Iterator[dict[str, Any]]:
    with quick_run_in_tempdir(DRILL, RUN_TIMEOUT) as result:
        yield result


def rep(drill: dict[str, Any], mode: str) -> Path:
    return drill["out"] / f"mode-{mode}" / "1"


def events(rep_dir: Path) -> list[dict]:
    return read_jsonl(rep_dir / "events.jsonl")


def fault_ts(evs: list[dict], event: str, target: Any) -> float:
    [ts] = [e["ts"] for e in evs if e["event"] == event and e["target"] == target]
    return ts


def steady_gap(node: str, to: str) -> float:
    """The interval of the quick workload's constant stream node -> to."""
    [gap] = [g.interarrival.mean for g in QUICK.workload.generators
             if g.nodes == [node] and g.recipients.nodes == [to] and g.interarrival.dist == "constant"
             and g.stop is None]
    return gap


def link_metrics(rep_dir: Path, node: str, peer: str) -> list[tuple[float, dict]]:
    """(ts, `node`'s counters for its neighbour `peer`) from node's metrics.jsonl, in order."""
    return [(r["ts"], r["neighbours"][peer]) for r in read_jsonl(rep_dir / "nodes" / node / "metrics.jsonl")
            if peer in r.get("neighbours", {})]


def resent_across(rep_dir: Path, upstream: str, peer: str, at: float) -> int:
    """How many pieces `upstream` handed back (retransmissions towards `peer`) because of a fault at `at`:
    its last metrics line before the fault against its first one once a dead session has surely been
    noticed (hold time) and written down (two metrics intervals). `upstream` must not restart in between."""
    lines = link_metrics(rep_dir, upstream, peer)
    before = [st for ts, st in lines if ts < at]
    after = [st for ts, st in lines if ts >= at + HOLD + 2 * METRICS_EVERY]
    assert before and after, f"{upstream} wrote no metrics around {at}"
    return after[0]["retransmissions"] - before[-1]["retransmissions"]


@pytest.mark.root
@pytest.mark.timeout(600)
def test_drill_exits_zero_and_leaves_nothing_behind(drill):
    assert drill["rc"] == 0, f"stdout:\n{drill['stdout'][-4000:]}\nstderr:\n{drill['stderr'][-4000:]}"
    assert drill["run_ids"] and leftovers(drill["run_ids"]) == []
    doc = json.loads((drill["out"] / "experiment.json").read_text())
    assert doc["status"] == "complete"
    assert {c["id"] for c in doc["cells"]} == {f"mode-{m}" for m in MODES}


@pytest.mark.root
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", MODES)
def test_every_fault_of_the_timeline_was_applied(drill, mode):
    evs = events(rep(drill, mode))
    assert not [e for e in evs if e["event"] == "fault_failed"], evs
    applied = [(e["event"], e["target"]) for e in evs
               if e["event"] in ("partition", "heal", "kill", "restart", "pause", "resume")]
    planned = [(f.action, "all" if f.action == "heal" else f.target) for f in QUICK.faults]
    assert applied == planned, f"applied {applied}\nplanned {planned}"
    # the roles: both kinds of partition, the originator, relay and recipient killed and restarted, a pause
    partitions = [t for a, t in applied if a == "partition"]
    assert ADJACENT in partitions and [[CHORD[0]], [CHORD[1]]] in partitions, partitions
    for node in (ORIGINATOR, RELAY, RECIPIENT):
        assert ("kill", node) in applied and ("restart", node) in applied
    assert ("pause", PAUSED) in applied and ("resume", PAUSED) in applied
    assert sum(1 for a, _ in applied if a == "heal") == 2
    # the node faults hit the processes themselves (kill -9 of the daemon, not of its host)
    assert all(e.get("scope") == "process" for e in evs if e["event"] in ("kill", "restart"))


@pytest.mark.root
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", MODES)
def test_checker_finds_nothing_lost_duplicated_or_late(drill, mode):
    rep_dir = rep(drill, mode)
    v = check_run(rep_dir)
    print(f"{mode}: accepted {v.accepted}, delivered {v.delivered}, duplicate {v.duplicate}, "
          f"reported {v.reported}, late {v.late}, lost {v.lost}")
    assert v.problems == 0, (v.first_problems, v.spool_problems)
    assert v.accepted > 0
    assert v.lost == 0, v.lost_pairs[:10]
    assert v.duplicate == 0 and v.extra_deliveries == 0, v.duplicate_pairs
    assert v.late == 0, list(v.late_pairs.items())[:10]
    assert v.delivered == v.accepted          # nothing needed a non-delivery report either
    assert v.ok(max_late=QUICK.max_late) and QUICK.max_late == 0


@pytest.mark.root
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", MODES)
def test_every_crash_and_cut_hit_data_in_flight(drill, mode):
    rep_dir = rep(drill, mode)
    evs = events(rep_dir)
    figures: dict[str, Any] = {}

    # Originator: killed while the workload was submitting to it (one every `gap` s): right after it
    # acknowledged one, or with one under way that the kill cut short (the driver's record of the failed
    # call, written as the daemon died; the node may have stored it already: the checker then finds it in
    # the spool's origin table, and it must still be delivered)
    gap = steady_gap(ORIGINATOR, RECIPIENT)
    [kill_at] = [f.at for f in QUICK.faults if f.action == "kill" and f.target == ORIGINATOR]
    killed = fault_ts(evs, "kill", ORIGINATOR)
    parted = fault_ts(evs, "partition", ADJACENT)
    subs = [r for r in read_jsonl(rep_dir / "nodes" / ORIGINATOR / "submissions.jsonl") if r["accepted"]]
    last = max(r["ts"] for r in subs if r["ts"] < killed)
    cut_short = [r for r in read_jsonl(rep_dir / "workload.jsonl") if r["node"] == ORIGINATOR
                 and r["planned_at"] < kill_at and 0 <= killed - r["ts"] < gap]
    figures["originator: last acceptance before the kill, s"] = round(killed - last, 3)
    figures["originator: calls to it failing as it died"] = len(cut_short)
    assert killed - last <= 2 * gap or cut_short, (killed, last)
    # ... with everything it accepted for RECIPIENT since the partition still in its spool (its next hop
    # RELAY was across the cut), all of which its restart found again. (A submission record's ts is when
    # the call began, so one that began before the cut may still be counted here: its pieces were queued
    # before the cut's first frame was dropped, or wait unacknowledged; either way they are in the spool.)
    stuck = [r for r in subs if r["dst"] == RECIPIENT and parted <= r["ts"] < killed]
    found = recoveries(rep_dir / "nodes" / ORIGINATOR / "node.log")
    figures["originator: accepted for the recipient during the partition"] = len(stuck)
    figures["originator: found at restart"] = found[-1]
    assert len(found) == 2 and found[1]["queued"] >= sum(r["fragments"] for r in stuck), (found, stuck)
    assert found[1]["queued"] > 0 or cut_short, found

    # Non-adjacent partition: what n1 accepts for n4 (one every `gap` s) waits at n1, unacknowledged or
    # queued: from one gap after the cut on, every metrics line of n1 shows some
    gap = steady_gap(*CHORD)
    parted = fault_ts(evs, "partition", [[CHORD[0]], [CHORD[1]]])
    healed = min(e["ts"] for e in evs if e["event"] == "heal" and e["ts"] > parted)
    waiting = [st["inflight"] + st["queue_fragments"] for ts, st in link_metrics(rep_dir, *CHORD)
               if parted + 2 * gap <= ts < healed]
    figures["chord: pieces waiting at n1 during the partition"] = max(waiting, default=None)
    assert waiting and min(waiting) > 0, waiting

    # Relay, pause, recipient: each came while a 1 MB message crossed the link into the victim, which
    # the link's rate cannot carry in under 2 s, so the sender had pieces in flight and took them back.
    for what, upstream, victim, event in (("relay kill", ORIGINATOR, RELAY, "kill"),
                                          ("pause", "n1", PAUSED, "pause"),
                                          ("recipient kill", RELAY, RECIPIENT, "kill")):
        n = resent_across(rep_dir, upstream, victim, fault_ts(evs, event, victim))
        figures[f"{what}: pieces {upstream} re-sent to {victim}"] = n
        assert n > 0, (what, n)
    for victim in (RELAY, RECIPIENT):
        figures[f"{victim} found at restart"] = recoveries(rep_dir / "nodes" / victim / "node.log")[-1]
    dups = {n: sum(st["duplicates_in"] for st in json.loads(
        (rep_dir / "nodes" / n / "metrics.jsonl").read_text().splitlines()[-1])["neighbours"].values())
        for n in ("n1", "n2", "n3", "n4", "n5", "n6")}
    figures["duplicates dropped (last metrics line per node)"] = dups
    print(f"{mode}: {json.dumps(figures)}")
