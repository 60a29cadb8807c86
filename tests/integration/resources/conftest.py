"""Fixtures for the resource-management tests: several real node daemons on loopback (real gRPC, SQLite)."""
from __future__ import annotations

from typing import Callable

import pytest

from testbed.localnet import LocalNet

from resnet_support import FAST, ring_routes, set_routes


@pytest.fixture
def localnet_settings() -> dict:
    return FAST


@pytest.fixture
def ringnet(localnet: Callable[..., LocalNet]) -> Callable[..., LocalNet]:
    """Factory: ringnet(n, unidirectional=..., **node settings) -> a started ring n1..nN, torn down after the test."""
    def make(n: int, unidirectional: bool = False, **overrides) -> LocalNet:
        names = [f"n{i}" for i in range(1, n + 1)]
        edges = list(zip(names, names[1:] + names[:1]))
        net = localnet(names=names, edges=edges, start=False, **overrides)
        if unidirectional:
            set_routes(net, ring_routes(names))
        net.start()
        return net

    return make
