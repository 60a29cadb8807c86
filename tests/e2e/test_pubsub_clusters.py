"""Publish/subscribe across three clusters: `testbed run scenarios/pubsub-clusters.yaml --quick`.

Publishers in cluster 1; durable and non-durable subscribers in clusters 2 and 3. Cluster 2's gateway is
killed -9 and restarted, then cluster 3 is cut off and healed. Every expected durable receipt must arrive
exactly once (the pub/sub account, testbed/accounting/pubsub.py), and both faults must have caught
publications on their way (copies waiting at cluster 1's gateway while the path was down).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.e2e.test_testbed_run import REPO, leftovers, only_rep, quick_run_in_tempdir, read_jsonl

SCENARIO = REPO / "scenarios" / "pubsub-clusters.yaml"
RUN_TIMEOUT = 300.0


@pytest.fixture(scope="module")
def run() -> Iterator[dict[str, Any]]:
    with quick_run_in_tempdir(SCENARIO, RUN_TIMEOUT) as result:
        yield result


@pytest.mark.root
@pytest.mark.timeout(600)
def test_the_drill_runs_clean_and_leaves_nothing_behind(run) -> None:
    assert run["rc"] == 0, f"stdout:\n{run['stdout'][-4000:]}\nstderr:\n{run['stderr'][-4000:]}"
    assert leftovers(run["run_ids"]) == []
    summary = json.loads((only_rep(run) / "summary.json").read_text())
    assert summary["complete"] and summary["schema"]["problems"] == 0


@pytest.mark.root
@pytest.mark.timeout(600)
def test_every_durable_receipt_arrives_exactly_once(run) -> None:
    rep = only_rep(run)
    acc = json.loads((rep / "summary.json").read_text())["pubsub"]
    total = acc["total"]
    assert total["published"] > 100 and total["expected_durable"] > 100
    assert total["received_durable"] == total["expected_durable"]
    assert total["lost_durable"] == total["late_durable"] == total["duplicates"] == 0 and acc["ok"]
    # from the files themselves: each durable subscriber's receipts are exactly the publications expected for it
    expected: dict[str, set[str]] = {}
    for f in rep.glob("nodes/*/publications.jsonl"):
        for p in read_jsonl(f):
            for sub in p["expected_durable"]:
                expected.setdefault(sub, set()).add(p["pub_id"])
    assert set(expected) == {"c2n1/archive2", "c3n1/archive3", "c3n3/pager"}
    for sub, want in expected.items():
        got = [r["pub_id"] for r in read_jsonl(rep / "subscribers" / sub / "receipts.jsonl")]
        assert len(got) == len(set(got)) and set(got) == want, sub


@pytest.mark.root
@pytest.mark.timeout(600)
def test_the_kill_and_the_cut_caught_publications_on_their_way(run) -> None:
    rep = only_rep(run)
    events = read_jsonl(rep / "events.jsonl")
    at = {e["event"]: e["ts"] for e in events if e["event"] in ("kill", "restart", "partition", "heal")}
    assert set(at) == {"kill", "restart", "partition", "heal"}
    metrics = read_jsonl(rep / "nodes" / "c1g1" / "metrics.jsonl")

    def waiting(peer: str, start: float, end: float) -> int:
        """The most publication copies cluster 1's gateway held for `peer` while the path was down."""
        return max((m["neighbours"][peer]["queue_messages"] for m in metrics if start < m["ts"] < end), default=0)
    assert waiting("c2g1", at["kill"], at["restart"]) > 0
    assert waiting("c3g1", at["partition"], at["heal"]) > 0
    # the restarted gateway found copies in its spool or its inbox, or its neighbours sent them again
    c2g1_log = (rep / "nodes" / "c2g1" / "node.log").read_text()
    assert c2g1_log.count("recovered") == 2
