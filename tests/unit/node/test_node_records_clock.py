"""The record writer's test-only clock offset (node/records.py): off by default, and when set it shifts the
times the node stamps itself, not the origin's times a message carries."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from node.errors import ConfigError
from node.records import TEST_CLOCK_OFFSET_ENV, Records, offset_from_env


def _delivery(tmp_path: Path, **kw: object) -> dict:
    r = Records(tmp_path, "n2", **kw)
    r.write("delivery", ts=100.0, msg_id="m", src="n1", dst="n2", submit_ts=99.0, deliver_ts=100.0)
    r.close()
    return json.loads((tmp_path / "deliveries.jsonl").read_text())


def test_no_offset_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TEST_CLOCK_OFFSET_ENV, raising=False)
    rec = _delivery(tmp_path)
    assert (rec["ts"], rec["deliver_ts"], rec["submit_ts"]) == (100.0, 100.0, 99.0)


def test_the_env_offset_shifts_the_nodes_own_times(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_CLOCK_OFFSET_ENV, "0.05")
    rec = _delivery(tmp_path)
    assert rec["ts"] == pytest.approx(100.05) and rec["deliver_ts"] == pytest.approx(100.05)
    assert rec["submit_ts"] == 99.0          # the origin's clock, not this node's


@pytest.mark.parametrize("text", ["fast", "nan", "inf"])
def test_a_bad_offset_is_one_sentence(text: str) -> None:
    with pytest.raises(ConfigError, match=TEST_CLOCK_OFFSET_ENV):
        offset_from_env({TEST_CLOCK_OFFSET_ENV: text})


def test_the_origin_stamps_the_submit_time_it_carries_with_its_offset(tmp_path: Path) -> None:
    """A node whose clock runs ahead stamps that clock into the message's submit_ts as well: a message it sends
    to itself is delivered with both times shifted alike (a delay of about 0, not minus the offset)."""
    import asyncio
    import time

    from node import registry
    from node.mta import make_engine
    from node.spool import Spool

    async def run() -> list[dict]:
        cfg = registry.config_from_dict({"name": "n3", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                                         "neighbours": {"n2": "127.0.0.1:3"}, "routes": {},
                                         "records_dir": str(tmp_path)})
        spool = Spool(cfg.spool_path, 0.001)
        spool.open()
        eng = make_engine(cfg, spool, Records(tmp_path, cfg.name, clock_offset=0.5))
        await eng.recover()
        ok, _msg_id, reason = await eng.submit("alice", [("n3", "bob")], b"x" * 10, None)
        assert ok, reason
        await eng.settle()
        spool.close()
        eng.records.close()
        return [json.loads(line) for line in (tmp_path / "deliveries.jsonl").read_text().splitlines()]

    before = time.time()
    [rec] = asyncio.run(run())
    assert rec["submit_ts"] - before >= 0.5 and rec["deliver_ts"] - before >= 0.5
    assert 0.0 <= rec["deliver_ts"] - rec["submit_ts"] < 0.5
