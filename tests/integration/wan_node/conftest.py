"""Node daemons on the emulated WAN (wire shaper: real delay and rate): root only."""
from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root for network namespaces and TAP devices")
    for item in items:
        if "integration/wan_node" in str(item.fspath):
            item.add_marker(skip)
