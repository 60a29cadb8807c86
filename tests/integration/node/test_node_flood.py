"""Floods on the Link service, from a real gRPC client against a live node (n3). n1 is played by the
test (a configured neighbour that misbehaves), n2 is a real, well-behaved neighbour that keeps sending to n3.

- A neighbour that floods bad frames and never reads the refusals: n3 answers what its writer can hand on, then
  stops reading (HTTP/2 flow control holds the flooder back) and resets the session; its memory stays bounded.
- More concurrent RPCs than the data server allows (4 per neighbour + 16): the rest get RESOURCE_EXHAUSTED,
  the live session goes on, and a neighbour that reconnects afterwards gets in.
"""
from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from node.link import GRPC_OPTIONS
from node.rpc import link_pb2, link_pb2_grpc
from nodenet_support import FAST, wait_until
from tests.integration.support import rss_bytes

pytestmark = pytest.mark.timeout(120)

MB = 1 << 20
HOLD = FAST["session"]["hold_time"]


def _net(localnet):
    net = localnet(names=["n1", "n2", "n3"], edges=[("n1", "n3"), ("n2", "n3")], start=False)
    net.start("n2", "n3")               # n1 (it dials n3: the name that sorts first dials) is played by the test
    return net


def _open() -> link_pb2.FrameBatch:
    return link_pb2.FrameBatch(frames=[link_pb2.Frame(open=link_pb2.Open(node="n1", peer="n3", version=1,
                                                                            session_id=7, hold_time=HOLD))])


def _bad(seq: int) -> link_pb2.Frame:
    # a hop count of 0 is refused by the codec: the cheapest frame for us, one Refuse for the node
    return link_pb2.Frame(fragment=link_pb2.Fragment(msg_id="x1", offset=0, total_size=5, hops=0, data=b"hello",
                                                     src="n1", recipients=[{"node": "n3", "user": "bob"}], seq=seq,
                                                     submit_ts=1.0))


async def _flood_without_reading(addr: str, seconds: float) -> int:
    """Bad frames as fast as the node takes them, never reading its answers; the frames written."""
    async with grpc.aio.insecure_channel(addr, options=GRPC_OPTIONS) as ch:
        call = link_pb2_grpc.LinkStub(ch).Session()
        await call.write(_open())
        reply = await asyncio.wait_for(call.read(), 10)
        assert reply.frames[0].open.node == "n3"
        seq = 0
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                batch = link_pb2.FrameBatch(frames=[_bad(seq + i + 1) for i in range(512)])
                await asyncio.wait_for(call.write(batch), 2 * HOLD)
                seq += 512
        except (asyncio.TimeoutError, grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass          # the node stopped reading, or ended the session: the flood is over
        call.cancel()
        return seq


class _Peak:
    """The highest resident memory of a process while the `with` block runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes(self.pid))
            time.sleep(0.02)

    def __enter__(self) -> "_Peak":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _send_while(net, busy: threading.Event, ids: list[str]) -> None:
    with net.client("n2") as c:
        while busy.is_set():
            r = c.send(["n3"], size=2000)
            assert r.accepted, r.reason
            ids.append(r.msg_id)
            time.sleep(0.1)


def _delivered(net, ids: list[str]) -> None:
    with net.client("n3") as c:
        wait_until(lambda: {i.msg_id for i in c.mailbox()} >= set(ids), 20, what="n2's messages at n3")


def test_a_neighbour_flooding_bad_frames_without_reading_is_held_back_and_reset(localnet) -> None:
    net = _net(localnet)
    pid = net.nodes["n3"].proc.pid
    before = rss_bytes(pid)
    busy, ids = threading.Event(), []
    busy.set()
    sender = threading.Thread(target=_send_while, args=(net, busy, ids))
    sender.start()
    try:
        with _Peak(pid) as peak:
            written = asyncio.run(_flood_without_reading(net.nodes["n3"].cfg.data_listen, 20.0))
    finally:
        busy.clear()
        sender.join()
    with net.client("n3") as c:
        refused = c.stats()["neighbours"]["n1"]["refused_in"]
    # the node read only part of the flood: it stopped reading once its answers could not be written
    assert 0 < refused < written, (refused, written)
    log = (net.workdir / "n3" / "node.log").read_text()
    assert "n1 does not read this node's answers" in log
    # bounded: well under what the 100k+ pending refusals of the old bound (REFUSE_MAX) cost (~75 MB)
    assert peak.peak - before < 30 * MB, f"n3 grew by {(peak.peak - before) / MB:.0f} MB under the flood"
    assert ids
    _delivered(net, ids)                   # the well-behaved neighbour was served throughout
    with net.client("n3") as c:
        assert c.stats()["neighbours"]["n2"]["reconnects"] == 0


async def _stall_many(addr: str, n: int) -> list[grpc.StatusCode]:
    """n Link streams at once that never send OPEN; how each one ended."""
    async with grpc.aio.insecure_channel(addr, options=GRPC_OPTIONS) as ch:
        async def one() -> grpc.StatusCode:
            call = link_pb2_grpc.LinkStub(ch).Session()
            try:
                await asyncio.wait_for(call.read(), 4 * HOLD + 5)
            except grpc.aio.AioRpcError as exc:
                return exc.code()
            except asyncio.TimeoutError:
                call.cancel()
                return grpc.StatusCode.OK       # still open: not limited
            return grpc.StatusCode.OK
        return await asyncio.gather(*(one() for _ in range(n)))


def test_more_concurrent_rpcs_than_allowed_are_refused_and_the_neighbours_are_served(localnet) -> None:
    net = _net(localnet)
    pid = net.nodes["n3"].proc.pid
    limit = 4 * len(net.nodes["n3"].cfg.neighbours) + 16         # node/daemon.py: the data server's bound
    strangers = 3 * limit
    busy, ids = threading.Event(), []
    busy.set()
    sender = threading.Thread(target=_send_while, args=(net, busy, ids))
    sender.start()
    before = rss_bytes(pid)
    try:
        with _Peak(pid) as peak:
            codes = asyncio.run(_stall_many(net.nodes["n3"].cfg.data_listen, strangers))
    finally:
        busy.clear()
        sender.join()
    exhausted = codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED)
    timed_out = codes.count(grpc.StatusCode.DEADLINE_EXCEEDED)          # admitted, no OPEN within the hold time
    assert exhausted >= strangers - limit and exhausted + timed_out == strangers, codes
    assert peak.peak - before < 30 * MB
    _delivered(net, ids)                    # n2's session (admitted before) carried on
    net.stop("n2")                          # and a neighbour that reconnects now gets in
    net.start("n2")
    with net.client("n3") as c:
        wait_until(lambda: c.stats()["neighbours"]["n2"]["up"], 10, what="n2's new session")
