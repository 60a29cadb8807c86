"""A generator's `originator:`: checked by the loader, carried into the plan, given a token, and an originator
without a token at its node is one error before the driver sends anything."""
from __future__ import annotations

from pathlib import Path

import pytest

from node.errors import UserError
from testbed import secrets
from testbed.experiment import nodeconfig, workload
from testbed.experiment.driver import WorkloadDriver
from testbed.scenario import ScenarioError, dump_resolved, load_text
from experiment_scenarios import ring_scenario



def gen(**extra) -> dict:
    """A generator at n1 to bob@n2 (a fresh mapping each: the scenario text must not share YAML nodes)."""
    return {"nodes": ["n1"], "interarrival": {"dist": "constant", "mean": "10s"},
            "recipients": {"choice": "fixed", "nodes": ["n2"], "user": "bob"}, **extra}


def test_the_originator_is_checked_kept_and_planned() -> None:
    s = ring_scenario([gen(originator="alice"), gen()], n=3, duration=30.0)
    assert [g.originator for g in s.workload.generators] == ["alice", ""]
    assert load_text(dump_resolved(s), "again.yaml") == s
    plan = workload.schedule(s, ["n1", "n2", "n3"])
    assert sorted({(p.originator, p.user) for p in plan}) == [("", "bob"), ("alice", "bob")]
    # its token: alice gets one at every node, as the workload's recipient users do
    users = nodeconfig.node_users(s, {n: {} for n in ("n1", "n2", "n3")})
    assert users == {n: ["alice", "bob"] for n in ("n1", "n2", "n3")}


@pytest.mark.parametrize("extra, what", [
    ({"originator": "a b"}, "not a valid user name"),
    ({"originator": 7}, "non-empty string"),
    ({"originator": "alice", "publish": {"topics": ["t"]}, "recipients": None}, "publishes has no originator"),
])
def test_a_bad_originator_is_one_error_naming_the_key(extra, what) -> None:
    with pytest.raises(ScenarioError) as e:
        ring_scenario([gen(**extra)], n=3, duration=30.0)
    msg = str(e.value)
    assert "workload.generators[0].originator" in msg and what in msg and "\n" not in msg.strip()


def test_an_originator_without_a_token_stops_the_driver_before_it_sends(tmp_path: Path) -> None:
    plan = [workload.PlannedSubmission(0.0, "n1", ("n2",), 10, 1, originator="alice")]
    run = secrets.RunSecrets(auth=True, admins={"n1": "x"}, users={"n1": {"bob": "y"}})
    driver = WorkloadDriver(None, plan, 1.0, tmp_path, address=lambda n: "unused", subsystems=(),
                            user_tokens=run.access)
    with pytest.raises(UserError, match="no token for user 'alice' at n1"):
        driver.start()
    assert driver.counters()["submitted"] == 0
