"""Gateway policies end to end: `testbed run scenarios/emg-gateway.yaml --quick` as a subprocess.

The quick section is the full loop (gamma 1, every action) with a threshold of 50: o1 gets 1.5 msg/s for a
capacity of 1, so its queue passes the threshold near 100 model s and the gateway must act. One run is shared
by every check: the decisions in nodes/gw/gateway.jsonl, summary.json's `gateway`, and the checker's verdict
(nothing lost; a copy the gateway dropped is `reported`). Budget: about 40 s on 2 cores.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from node import schema
from testbed.accounting import check_run
from testbed.scenario import load
from tests.e2e.test_testbed_run import REPO, leftovers, only_rep, quick_run_in_tempdir, read_jsonl

SCENARIO = REPO / "scenarios" / "emg-gateway.yaml"
QUICK = load(SCENARIO, quick=True)
GW = QUICK.gateway.node
RUN_TIMEOUT = 240.0         # wall seconds: 30 s of workload at time_scale 0.1, set-up, drain and teardown


@pytest.fixture(scope="module")
def run() -> Iterator[dict[str, Any]]:
    with quick_run_in_tempdir(SCENARIO, RUN_TIMEOUT) as result:
        yield result


def summary(run: dict[str, Any]) -> dict[str, Any]:
    return json.loads((only_rep(run) / "summary.json").read_text())


@pytest.mark.root
@pytest.mark.timeout(400)
def test_quick_run_is_clean_and_leaves_nothing_behind(run) -> None:
    assert run["rc"] == 0, f"stdout:\n{run['stdout'][-4000:]}\nstderr:\n{run['stderr'][-4000:]}"
    assert leftovers(run["run_ids"]) == []
    s = summary(run)
    assert s["complete"] and s["schema"]["problems"] == 0
    assert s["accepted"] > 0 and s["lost"] == 0 and s["duplicates"] == 0 and s["accounting"]["ok"]


@pytest.mark.root
@pytest.mark.timeout(400)
def test_the_gateway_records_its_decisions(run) -> None:
    decisions = read_jsonl(only_rep(run) / "nodes" / GW / "gateway.jsonl")
    assert decisions, "o1 passed the threshold but the gateway recorded no decision"
    assert all(schema.validate("gateway", d) == [] for d in decisions)
    # the full loop acts on o1 first by taking it out of s1's round robin, at the configured threshold
    first = decisions[0]
    assert (first["event"], first["action"], first["connector"]) == ("queue_high", "deactivate_lb", "o1")
    assert first["queue"] > QUICK.gateway.threshold
    assert first["gamma"] == summary(run)["gateway"]["gamma"] == 1.0      # the quick sweep's one cell


@pytest.mark.root
@pytest.mark.timeout(400)
def test_summary_has_the_gateway_account(run) -> None:
    gw = summary(run)["gateway"]
    assert gw["node"] == GW and gw["threshold"] == QUICK.gateway.threshold and gw["samples"] > 0
    assert set(gw["outgoing"]) == set(QUICK.gateway.outgoing)
    o1 = gw["outgoing"]["o1"]
    assert o1["max_queue"] > QUICK.gateway.threshold and o1["deactivated_s"] > 0
    assert gw["decisions"].get("deactivate_lb", 0) >= 1
    # o3 is alone behind s2 and paced above s2's offer: it never queues up to the threshold
    assert gw["outgoing"]["o3"]["max_queue"] < QUICK.gateway.threshold


@pytest.mark.root
@pytest.mark.timeout(400)
def test_the_independent_checker_passes_and_drops_are_reported(run) -> None:
    v = check_run(only_rep(run))
    assert v.problems == 0, (v.first_problems, v.spool_problems)
    assert v.accepted > 0 and v.lost == 0, v.lost_pairs[:10]
    assert v.duplicate == 0 and v.extra_deliveries == 0, v.duplicate_pairs
    # a copy the gateway dropped is a non-delivery report, never a loss
    dropped = summary(run)["gateway"]["dropped"]
    assert v.reported_by_reason.get("dropped by gateway policy", 0) == dropped
    assert v.delivered + v.reported == v.accepted
