"""The default management pool is shared by concurrent runs: each takes the first free subnet of it."""
from __future__ import annotations

import pytest

import testbed.network as network_mod
from node.errors import UserError
from testbed.network import Network
from testbed.topology import generators
from testbed.topology.model import Direction


def net(n: int) -> Network:
    return Network(generators.linear(n, defaults=Direction()), run_dir="/nonexistent")


def test_first_free_subnet_sized_for_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(network_mod, "_root_routes", lambda: ["10.201.0.0/24", "192.0.2.0/24"])
    assert net(4)._free_mgmt_subnet() == "10.201.1.0/24"
    # 300 hosts need 303 addresses: a /23, the first one clear of 10.201.0.0/24
    assert net(300)._free_mgmt_subnet() == "10.201.2.0/23"


def test_whole_pool_taken_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(network_mod, "_root_routes", lambda: ["10.201.0.0/16"])
    with pytest.raises(UserError, match="in use by other runs"):
        net(4)._free_mgmt_subnet()
