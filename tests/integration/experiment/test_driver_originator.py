"""The workload driver sends as a generator's originator with real daemons and client tokens: on the user's own
token (the driver carries no admin token here, so a submission without an originator is refused), and the
node records the originator."""
from __future__ import annotations

import pytest

from testbed.experiment.driver import WorkloadDriver
from testbed.experiment.workload import PlannedSubmission
from tests.integration.support import wait_until

pytestmark = pytest.mark.timeout(120)


def test_submissions_come_as_the_originator_on_its_token(localnet, tmp_path) -> None:
    net = localnet(names=["n1", "n2"], edges=[("n1", "n2")], auth=True, users={"n1": ["alice"], "n2": ["bob"]})
    plan = [PlannedSubmission(0.0, "n1", ("n2",), 100, 1, user="bob", originator="alice"),
            PlannedSubmission(0.05, "n1", ("n2",), 100, 1, user="bob")]
    driver = WorkloadDriver(None, plan, 1.0, tmp_path, address=lambda n: net.nodes[n].mgmt, subsystems=(),
                            user_tokens=net.secrets.access)
    driver.start()
    wait_until(lambda: driver.accepted + driver.unreachable + driver.refused == 2, 20, what="both submissions")
    driver.stop()
    assert (driver.accepted, driver.unreachable) == (1, 1)       # the one without an originator had no token
    subs = net.records("n1", "submission")
    assert [(r["accepted"], r.get("originator")) for r in subs] == [(True, "alice")]
