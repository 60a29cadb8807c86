"""A subsystem defined here reaches the driver, the node configs' users and the summary through the
registry's hooks alone (testbed/subsystems/base.py)."""
from dataclasses import dataclass
from pathlib import Path

from testbed.experiment import summary
from testbed.experiment.driver import WorkloadDriver
from testbed.scenario.spec import Scenario
from testbed.subsystems import SUBSYSTEMS, Subsystem


@dataclass(frozen=True)
class Ping:
    at: float
    node: str
    size: int = 1
    priority: int = 1


class Pinger(Subsystem):
    name = "pinger"
    counters = ("pinged", "ping_failed")

    def __init__(self) -> None:
        self.sent: list[tuple[str, bool]] = []

    def submits(self, planned):
        return isinstance(planned, Ping)

    def submit(self, client, planned, reachable):
        self.sent.append((planned.node, reachable))
        return "pinged" if reachable else "ping_failed"

    def account(self, rep_dir, reader, scenario, submissions):
        return {"pings": {"submissions": len(submissions)}}

    def problems(self, result):
        return ["pings went missing"] if result.get("pings") is not None else []


def test_the_driver_hands_a_subsystem_its_items_and_counts_them(tmp_path: Path) -> None:
    pinger = Pinger()
    driver = WorkloadDriver(None, [Ping(0.0, "n1"), Ping(0.0, "n2")], 1.0, tmp_path,
                            address=lambda n: "unused", reachable=lambda n: n == "n1", subsystems=[pinger])
    for p in driver.schedule:
        driver._submit(None, p)
    assert pinger.sent == [("n1", True), ("n2", False)]
    assert driver.counters() == {"planned": 2, "submitted": 0, "accepted": 0, "refused": 0, "unreachable": 0,
                                 "pinged": 1, "ping_failed": 1}


def test_the_registry_driver_counters_follow_the_core_ones(tmp_path: Path) -> None:
    driver = WorkloadDriver(None, [], 1.0, tmp_path, address=lambda n: "unused")
    assert tuple(driver.counters()) == summary.DRIVER_COUNTERS
    assert list(summary.DRIVER_COUNTERS[5:]) == [c for sub in SUBSYSTEMS for c in sub.counters]


def test_the_summary_has_every_registered_account(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(summary, "SUBSYSTEMS", SUBSYSTEMS + (Pinger(),))
    s = summary.summarize(tmp_path, Scenario(name="t"), complete=True)
    assert s["pings"] == {"submissions": 0}
    assert s["pubsub"] is None and s["overflowed"] is None and s["rate_control"] is None
    assert "pings went missing" in summary.check(s)
