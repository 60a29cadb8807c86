"""Fixtures for the network layer: real namespaces, real links, real iptables. Needs root."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from network_support import VethShaper, free_mgmt_subnet, hand_plan
from testbed.topology.model import Topology


@pytest.fixture
def make_net(tmp_path: Path) -> Iterator[Callable[..., "object"]]:
    """Factory for started networks (veth links unless shaper= is given); all stopped after the test."""
    from testbed.network import Network

    made = []

    def make(topo: Topology, shaper: object | None = None, start: bool = True, real_plan: bool = False,
             **kw) -> Network:
        mgmt = free_mgmt_subnet()
        # real_plan: let Network ask the real address planner (plan=None) instead of the hand-made one
        plan = None if real_plan else hand_plan(topo, mgmt)
        net = Network(topo, plan, shaper=shaper or VethShaper(), run_dir=tmp_path / f"run{len(made)}",
                      pools=("10.200.0.0/16", "10.202.0.0/16", mgmt), kind="test", **kw)
        made.append(net)
        if start:
            net.start()
        return net

    try:
        yield make
    finally:
        for net in made:
            net.stop()
