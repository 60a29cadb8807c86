"""Fixtures for multi-process node tests on loopback: real daemons, real gRPC, real SQLite."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import pytest

from testbed.localnet import LocalNet

from nodenet_support import FAST


@pytest.fixture
def localnet(request: pytest.FixtureRequest) -> Iterator[Callable[..., LocalNet]]:
    """Factory: localnet(hops=H, mode=...) or localnet(names=[...], edges=[...]); all are torn down after the test.

    The daemons' spools live in a directory of our own, not pytest's tmp_path: a concurrent pytest
    session on this machine prunes old basetemp folders and would delete spools under running daemons.
    Kept on failure (path in the test report), removed on success.
    """
    made: list[LocalNet] = []
    tmp_path = Path(tempfile.mkdtemp(prefix="wanbed-node-test-"))

    def make(hops: int | None = None, names: list[str] | None = None, edges: list[tuple[str, str]] | None = None,
             start: bool = True, **overrides) -> LocalNet:
        kw = {**FAST, **overrides}
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
        failed = getattr(request.node, "rep_call", None) is None or request.node.rep_call.failed
        if failed:
            print(f"node test files kept in {tmp_path}")
        else:
            shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    rep = yield
    if rep.when == "call":
        item.rep_call = rep          # lets the fixture know whether the test passed
    return rep

