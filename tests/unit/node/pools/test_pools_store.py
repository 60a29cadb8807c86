"""The consumer's spool tables (node/pools/store.py) in a real SQLite spool: sequence numbers advance only from
the number the event was numbered after, and the map survives a reopen."""
from __future__ import annotations

from pathlib import Path

import pytest

from node.pools import store
from node.spool import Spool


@pytest.fixture
def spool(tmp_path: Path):
    s = Spool(tmp_path / "s.db", 0.0)
    s.open()
    try:
        yield s
    finally:
        s.close()


def test_numbers_advance_from_the_expected_one_or_nothing_is_stored(spool: Spool) -> None:
    assert spool.run_sync(store.op_create("c1")) == store.Saved()
    spool.run_sync(store.op_advance("c1", {"A": (0, 1), "B": (0, 1)}))
    spool.run_sync(store.op_advance("c1", {"B": (1, 2)}))
    # numbered after a number the spool no longer holds (two events numbered alike): refused, nothing changes
    with pytest.raises(store.SeqConflict, match="c1/A is 1 in the spool, not 0"):
        spool.run_sync(store.op_advance("c1", {"B": (2, 3), "A": (0, 1)}))
    assert spool.run_sync(store.op_create("c1")).seqs == {"A": 1, "B": 2}
    assert spool.run_sync(store.op_create("c2")).seqs == {}          # per consumer


def test_the_map_and_the_unsent_fences_survive_a_reopen(tmp_path: Path) -> None:
    fence = {"consumer": "c1", "app": "A", "seq": 4, "old": "i1", "new": "i2", "version": 3, "term": 2}
    s = Spool(tmp_path / "s.db", 0.0)
    s.open()
    s.run_sync(store.op_create("c1"))
    s.run_sync(store.op_save_map("c1", 2, 3, {"A": ["i2", 3]}, {"term": 2, "version": 3,
                                                               "connections": {"A": "i2"}, "fences": {}}, [fence]))
    s.close()
    s = Spool(tmp_path / "s.db", 0.0)
    s.open()
    try:
        saved = s.run_sync(store.op_create("c1"))
    finally:
        s.close()
    assert (saved.term, saved.version, saved.in_force, saved.unsent) == (2, 3, {"A": ["i2", 3]}, [fence])
    assert saved.wanted["connections"] == {"A": "i2"}
