"""The `pools:` node-config section (node/pools/config.py): what it accepts and the one error for each mistake."""
from __future__ import annotations

import pytest

from node.errors import ConfigError
from node.pools.config import raft_address
from node.registry import config_from_dict

REPLICAS = {"r1": "10.0.0.1:7100", "r2": "10.0.0.2:7100", "r3": "10.0.0.3:7100"}
SECRET = "s" * 16


def cfg(name: str = "n1", **pools):
    return config_from_dict({"name": name, "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001",
                             "records_dir": "/tmp/x", "pools": {"enabled": True, "replicas": REPLICAS, **pools}})


def test_absent_is_off_and_a_full_section_is_read() -> None:
    off = config_from_dict({"name": "n1", "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001"})
    assert off.pools.enabled is False
    c = cfg("r1", password=SECRET, consumer={"name": "c1", "types": ["t1"]},
            apps={"A": {"algorithm": "load_aware", "move_share": 0.25, "types": ["t1"], "instances": {"i1": "n3"}}})
    p = c.pools
    assert p.is_replica("r1") and not p.is_replica("n1") and p.apps["A"].instances == {"i1": "n3"}
    assert str(p.journal_path(c)) == "/tmp/x/pools.journal" and p.consumer.types == ["t1"]
    assert raft_address("127.0.0.5:7000") == "127.0.0.5:7100"


@pytest.mark.parametrize("node, pools, message", [
    ("n1", {"replicas": {"r1": "10.0.0.1:7100"}}, "3 or 5 controller replicas"),
    ("n1", {"replicas": {**REPLICAS, "r4": "10.0.0.1:7100"}}, "3 or 5"),
    ("n1", {"replicas": {"r1": "a:1", "r2": "a:1", "r3": "b:1"}}, "the same Raft address"),
    ("n1", {"replicas": {"r1": "nohost", "r2": "a:1", "r3": "b:1"}}, "pools.replicas.r1 must be"),
    ("r1", {}, "pools.password"),
    ("n1", {"apps": {"A": {"types": ["t1"], "move_share": 0}}}, r"move_share must be in \(0, 1\]"),
    ("n1", {"apps": {"A": {"types": ["t1"], "move_share": 1.5}}}, "move_share"),
    ("n1", {"apps": {"A": {"types": ["t1"], "algorithm": "random"}}}, "algorithm 'random'"),
    ("n1", {"apps": {"A": {"types": []}}}, "at least one event type"),
    ("n1", {"apps": {"A.B": {"types": ["t1"]}}}, "not a valid application name"),
    ("n1", {"apps": {"A": {"types": ["t1"], "instances": {"i1": "bad node!"}}}}, "not a valid node name"),
    ("n1", {"consumer": {"name": "c1"}}, "event types it produces"),
    ("n1", {"consumer": {"name": "c:1", "types": ["t1"]}}, "consumer.name"),
    ("n1", {"consumer": {"name": "c1", "types": ["t1", "t1"]}}, "twice"),
    ("n1", {"consumer": {"name": "c1", "types": ["_fence"]}}, "must not start with '_'"),
    ("n1", {"heartbeat": 1.0, "crash_timeout": 1.0}, "crash_timeout longer"),
])
def test_each_mistake_is_one_clear_error(node: str, pools: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cfg(node, **pools)


def test_pools_need_the_broker() -> None:
    with pytest.raises(ConfigError, match="pools need the broker"):
        config_from_dict({"name": "n1", "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001",
                          "broker": {"enabled": False}, "pools": {"enabled": True, "replicas": REPLICAS}})
