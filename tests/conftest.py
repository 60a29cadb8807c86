"""Suite-wide: tests that need root are skipped without it, and a test run must leave nothing of the testbed's behind.

Tests marked `root` (network namespaces, TAP devices, `testbed run`) are skipped when not running as root;
everything else runs anyway.

At the end of the session every namespace or interface carrying the testbed
prefix is checked against the run registry. One that belongs to no registered
run, to a run whose owner is dead, or to a run owned by this very pytest
process is a leak, and the session fails — a leak here is a leak on a user's
machine. Resources of runs owned by other live processes (a parallel test
session, a user's `testbed up`) are left alone.
"""
from __future__ import annotations

import os

import pytest

from testbed import registry
from testbed.cleanup import root_links
from testbed.runtime.netns import list_netns


def leaked_resources(owner_pid: int) -> list[str]:
    leaks = []
    for name in list_netns() + root_links():
        run_id = registry.run_id_of(name)
        if run_id is None:
            continue
        record = registry.load(run_id)
        if record is None or not registry.pid_alive(record.owner_pid) or record.owner_pid == owner_pid:
            leaks.append(name)
    return leaks


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: network namespaces and TAP devices")
    for item in items:
        if item.get_closest_marker("root") is not None:
            item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.geteuid() != 0 or hasattr(session.config, "workerinput"):
        return
    leaks = leaked_resources(os.getpid())
    if leaks:
        print("\nLEAK: the test run left testbed resources behind: " + ", ".join(sorted(leaks)))
        session.exitstatus = 1
