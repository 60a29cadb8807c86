"""Pooled event consumption end to end: `testbed run scenarios/pools.yaml --quick` as a subprocess.

The quick timeline keeps one of each change the pools must survive: an instance joins (A.a4), one leaves
(A.a2), an instance's client process is killed -9 (B.b1, its node stays up), and the controller's leader is
killed and restarted. One run is
shared by every check: summary.json's `pools` account (a re-balance per change that moves connections, no
event lost or duplicated, affinity kept), the records of the controller and the checker's verdict.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from testbed.accounting import check_run
from testbed.scenario import load
from tests.e2e.test_testbed_run import REPO, leftovers, only_rep, quick_run_in_tempdir, read_jsonl

SCENARIO = REPO / "scenarios" / "pools.yaml"
QUICK = load(SCENARIO, quick=True)
RUN_TIMEOUT = 300.0        # wall seconds: 34 s of workload at time_scale 1, set-up, a 20 s drain, teardown
# the changes that move connections: the join, the leave and the instance's crash (a leader's death moves none)
MOVING_CHANGES = {"pool_join", "pool_leave", "pool_kill"}


@pytest.fixture(scope="module")
def run() -> Iterator[dict[str, Any]]:
    with quick_run_in_tempdir(SCENARIO, RUN_TIMEOUT) as result:
        yield result


def pools(run: dict[str, Any]) -> dict[str, Any]:
    return json.loads((only_rep(run) / "summary.json").read_text())["pools"]


@pytest.mark.root
@pytest.mark.timeout(500)
def test_quick_run_loses_and_duplicates_no_event(run) -> None:
    assert run["rc"] == 0, f"stdout:\n{run['stdout'][-4000:]}\nstderr:\n{run['stderr'][-4000:]}"
    assert leftovers(run["run_ids"]) == []
    p = pools(run)
    assert p["events_published"] > 0 and p["events_received"] > 0
    assert (p["events_lost"], p["events_duplicated"], p["affinity_violations"]) == (0, 0, 0), p.get("lost_pairs")


@pytest.mark.root
@pytest.mark.timeout(500)
def test_every_change_is_rebalanced(run) -> None:
    faults = [e for e in read_jsonl(only_rep(run) / "events.jsonl") if e.get("event") in MOVING_CHANGES]
    assert len(faults) == sum(f.action in MOVING_CHANGES for f in QUICK.faults)
    p = pools(run)
    assert len(p["rebalance_s"]) >= len(faults), p["rebalance_s"]
    assert p["rebalance_p99_s"] is not None and p["moved"] > 0


@pytest.mark.root
@pytest.mark.timeout(500)
def test_the_leader_kill_names_its_node_and_a_new_term_is_elected(run) -> None:
    rep = only_rep(run)
    kill = [e for e in read_jsonl(rep / "events.jsonl") if e.get("event") == "kill"]
    assert kill and kill[0].get("resolved_from") == "pools.leader" and kill[0]["target"] in QUICK.pools.replicas, kill
    terms = {line["term"] for r in QUICK.pools.replicas
             for line in read_jsonl(rep / "nodes" / r / "pools.jsonl") if line.get("event") == "elected"}
    assert len(terms) >= 2, f"one election only ({terms}): the leader's death elected no successor"


@pytest.mark.root
@pytest.mark.timeout(500)
def test_the_independent_checker_passes(run) -> None:
    v = check_run(only_rep(run))
    assert v.problems == 0 and v.lost == 0 and v.duplicate == 0, (v.first_problems, v.lost_pairs[:10])


@pytest.mark.root
@pytest.mark.timeout(500)
def test_the_instance_kill_is_a_real_kill_9_and_its_successor_drains_it(run) -> None:
    rep = only_rep(run)
    [kill] = [e for e in read_jsonl(rep / "events.jsonl") if e.get("event") == "pool_kill"]
    app, inst = kill["target"].split(".")
    pid, node = kill["pid"], kill["host"]
    infos = {p.parent.name: json.loads(p.read_text()) for p in (rep / "subscribers").glob("*/pool.*/instance.json")}
    dead = infos[f"pool.{app}.{inst}"]
    # the pid it killed is the one the instance's own process wrote; every instance had a process of its own
    assert (dead["state"], dead["pid"], dead["killed"]) == ("killed", pid, pytest.approx(kill["ts"], abs=10))
    assert len({i["pid"] for i in infos.values()}) == len(infos)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # its node stayed up: no fault touched it, and a successor attached there and drained the dead one's backlog
    assert not [e for e in read_jsonl(rep / "events.jsonl") if e.get("target") == node and e.get("event") != "pool_kill"
                and e.get("event") in ("kill", "pause", "restart")]
    assert [n for n, i in infos.items() if inst in (i.get("takeovers") or [])], infos
    p = pools(run)
    assert (p["events_lost"], p["events_duplicated"]) == (0, 0)
    assert not [pair for pair in p["lost_pairs"] if pair[0] == app]
