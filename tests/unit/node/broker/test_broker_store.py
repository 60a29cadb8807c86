"""The broker's spool tables without a daemon: durable subscriptions keep their owner, a spool from before
owners still opens, and the `broker.max_durable_per_user` key."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from node import registry
from node.broker import store
from node.config import ConfigError
from node.spool import Spool

BASE = {"name": "n1", "data_listen": "127.0.0.1:7000", "mgmt_listen": "127.0.0.1:7001"}


def test_a_spool_from_before_owners_opens_and_its_subscriptions_are_the_admins(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with sqlite3.connect(path) as c:       # the table as the first spools made it, with a subscription and a row
        c.execute("CREATE TABLE pub_subscription(name TEXT PRIMARY KEY, pattern TEXT NOT NULL, created REAL NOT NULL)")
        c.execute("INSERT INTO pub_subscription VALUES ('old', 'a.>', 1.0)")
        c.execute("CREATE TABLE pub_queue(seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, "
                  "pub_id TEXT NOT NULL, hops INTEGER NOT NULL, expires_ts REAL NOT NULL, body BLOB NOT NULL, "
                  "UNIQUE(name, pub_id))")
        c.execute("INSERT INTO pub_queue(name, pub_id, hops, expires_ts, body) VALUES ('old', 'p1', 1, 9e9, x'')")
    spool = Spool(path, 0.0)
    spool.open()
    try:
        assert spool.run_sync(store.op_create()) == [("old", "a.>", 1, "")]
        spool.run_sync(store.op_subscribe("mine", "b.*", 2.0, "alice"))
        assert spool.run_sync(store.op_create()) == [("mine", "b.*", 0, "alice"), ("old", "a.>", 1, "")]
    finally:
        spool.close()


def test_max_durable_per_user_is_a_count() -> None:
    assert registry.config_from_dict(BASE).broker.max_durable_per_user == 64
    assert registry.config_from_dict({**BASE, "broker": {"max_durable_per_user": 0}}).broker.max_durable_per_user == 0
    for value, why in ((-1, "must be at least 0"), ("64", "has the wrong type"), (True, "has the wrong type")):
        with pytest.raises(ConfigError, match=f"broker.max_durable_per_user {why}"):
            registry.config_from_dict({**BASE, "broker": {"max_durable_per_user": value}})
