"""Disk full: a submission is refused "congested, try later", nothing accepted is lost, and the node takes
submissions again once space returns. The spool and the record files live on a small tmpfs of our own."""
from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from node.spool import Spool
from tests.unit.node.test_node_engine_spool import _close, _engine

SIZE = 20_000


@pytest.fixture
def small_disk(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "wanbed-test-disk", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_refuses_submissions_keeps_accepted_and_recovers(small_disk: Path) -> None:
    async def go() -> None:
        eng = await _engine(small_disk)
        filler = small_disk / "filler"
        free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
        filler.write_bytes(b"\0" * max(0, free - 400_000))         # leave room for a few messages only
        accepted: list[str] = []
        refusal = ""
        for _ in range(200):
            ok, msg_id, reason = await eng.submit("alice", [("n5", "bob")], None, SIZE)
            if not ok:
                refusal = reason
                break
            accepted.append(msg_id)
        assert refusal.startswith("congested, try later"), refusal
        assert 0 < len(accepted) < 200
        for msg_id in accepted:                                      # every accepted message is kept, queued
            status = await eng.spool.run(Spool.op_status(msg_id))
            assert status["origin"] is not None and status["states"].get("queued")
        queued = {p.msg_id for p in eng.peers["n4"].queue.remove_if(lambda p: True)}
        assert queued == set(accepted)                               # and the refused one is in no queue
        filler.unlink()                                              # space returns
        ok, _msg_id, reason = await eng.submit("alice", [("n5", "bob")], None, SIZE)
        assert ok, reason
        await _close(eng)
    asyncio.run(go())
