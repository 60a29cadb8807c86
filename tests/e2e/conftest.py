"""End-to-end tests: the real `testbed run` CLI as a subprocess on real namespaces, daemons and links.

Tests marked `root` are skipped when not running as root (namespaces, TAP
devices); the bad-input tests need nothing and always run.
"""
from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: testbed run builds network namespaces and links")
    for item in items:
        if "tests/e2e" in str(item.fspath) and item.get_closest_marker("root") is not None:
            item.add_marker(skip)
