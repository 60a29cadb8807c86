"""The accepted set from the client's side, with real daemons: a node whose submission lines cannot be written
(its submissions.jsonl is a directory, so every open fails, as on a full disk) still accepts and delivers; the
workload driver writes what it saw accepted to accepted.jsonl, the node's Control Stats count the lost lines
(`records_failed`), and the loss checker, reading that run directory, fails it."""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from testbed.accounting import check_run
from testbed.experiment.driver import WorkloadDriver
from testbed.experiment.record_failures import RecordFailures
from testbed.experiment.workload import PlannedSubmission
from testbed.localnet import LocalNet
from tests.integration.support import wait_until

pytestmark = pytest.mark.timeout(120)

MESSAGES = 3


def test_lost_submission_lines_show_in_the_drivers_record_and_the_nodes_stats() -> None:
    root = Path(tempfile.mkdtemp(prefix="wanbed-accepted-"))      # not tmp_path: daemons write here
    rep = root / "c" / "1"
    try:
        with LocalNet.chain(rep / "nodes", 1) as net:
            (rep / "nodes" / "n1" / "submissions.jsonl").mkdir()
            net.start()
            plan = [PlannedSubmission(0.05 * i, "n1", ("n2",), 300, 1) for i in range(MESSAGES)]
            driver = WorkloadDriver(None, plan, 1.0, rep, address=lambda n: net.nodes[n].mgmt, subsystems=())
            driver.start()
            wait_until(lambda: driver.accepted == MESSAGES, 20, what="the driver's submissions accepted")
            driver.stop()
            with net.client("n2") as c:
                wait_until(lambda: len(c.mailbox()) == MESSAGES, 20, what="the messages delivered at n2")
            failures = RecordFailures()
            for name, node in net.nodes.items():
                with net.client(name) as c:
                    failures.saw(name, node.proc, c.stats())
            assert failures.counts() == {"n1": MESSAGES, "n2": 0}
        # as the cell records the count at teardown (testbed/experiment/cell.py)
        (rep / "events.jsonl").write_text(json.dumps({"ts": 0.0, "node": "testbed", "event": "records_failed",
                                                      "target": "all", "counts": failures.counts()}) + "\n")
        lines = [json.loads(x) for x in (rep / "accepted.jsonl").read_text().splitlines()]
        ids = sorted(r["msg_id"] for r in lines)
        assert len(set(ids)) == MESSAGES and all(r["node"] == "n1" and r["dst"] == ["n2"] for r in lines)
        v = check_run(rep)
        assert (v.accepted, v.delivered, v.lost) == (MESSAGES, MESSAGES, 0)
        assert sorted(v.client.client_only) == [(m, "n2") for m in ids] and v.client.reconciled == 0
        assert v.records_failed == {"n1": MESSAGES, "n2": 0}
        assert not v.ok()
    finally:
        shutil.rmtree(root, ignore_errors=True)
