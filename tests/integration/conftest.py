"""Shared by the integration tests: node daemons on loopback (LocalNet) and whether each test passed.

A folder's conftest sets the node settings its networks start from by overriding `localnet_settings`.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import pytest

from testbed.localnet import LocalNet


@pytest.fixture
def localnet_settings() -> dict:
    """Node settings under every network `localnet` makes (a test's own keywords win)."""
    return {}


@pytest.fixture
def localnet(request: pytest.FixtureRequest, localnet_settings: dict) -> Iterator[Callable[..., LocalNet]]:
    """Factory: localnet(hops=H, mode=...) or localnet(names=[...], edges=[...]); all are torn down after the test.

    The daemons' spools live in a directory of our own, not pytest's tmp_path: a concurrent pytest
    session on this machine prunes old basetemp folders and would delete spools under running daemons.
    Kept on failure (path in the test report), removed on success.
    """
    made: list[LocalNet] = []
    tmp_path = Path(tempfile.mkdtemp(prefix="wanbed-localnet-test-"))

    def make(hops: int | None = None, names: list[str] | None = None, edges: list[tuple[str, str]] | None = None,
             start: bool = True, **overrides) -> LocalNet:
        kw = {**localnet_settings, **overrides}
        d = tmp_path / f"net{len(made)}"
        net = LocalNet.chain(d, hops, **kw) if hops is not None else LocalNet.build(d, names, edges, **kw)
        made.append(net)
        if start:
            net.start()
        return net

    try:
        yield make
    finally:
        for net in made:
            net.close()
        rep = getattr(request.node, "rep_call", None)
        if rep is None or rep.failed:
            print(f"node test files kept in {tmp_path}")
        else:
            shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    rep = yield
    if rep.when == "call":
        item.rep_call = rep          # lets a fixture's teardown know whether the test passed
    return rep
