"""Fixtures for the resource-management tests: several real node daemons on loopback (real gRPC, SQLite)."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import pytest

from testbed.localnet import LocalNet

from resnet_support import FAST, ring_routes, set_routes


@pytest.fixture
def ringnet(request: pytest.FixtureRequest) -> Iterator[Callable[..., LocalNet]]:
    """Factory: ringnet(n, unidirectional=..., **node settings) -> a started ring n1..nN, torn down after the test."""
    made: list[LocalNet] = []
    tmp = Path(tempfile.mkdtemp(prefix="wanbed-res-test-"))

    def make(n: int, unidirectional: bool = False, **overrides) -> LocalNet:
        names = [f"n{i}" for i in range(1, n + 1)]
        edges = list(zip(names, names[1:] + names[:1]))
        net = LocalNet.build(tmp / f"net{len(made)}", names, edges, **{**FAST, **overrides})
        made.append(net)
        if unidirectional:
            set_routes(net, ring_routes(names))
        net.start()
        return net

    try:
        yield make
    finally:
        for net in made:
            net.close()
        rep = getattr(request.node, "rep_call", None)
        if rep is None or rep.failed:
            print(f"resource test files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    rep = yield
    if rep.when == "call":
        item.rep_call = rep
    return rep
