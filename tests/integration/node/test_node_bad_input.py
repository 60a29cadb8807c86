"""Bad input on the Link service: impostors and malformed frames get a clear error on their stream only."""
from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from node.link import GRPC_OPTIONS
from node.rpc import link_pb2, link_pb2_grpc
from nodenet_support import wait_until

pytestmark = pytest.mark.timeout(120)


def _open(node: str, peer: str, version: int = 1) -> link_pb2.FrameBatch:
    return link_pb2.FrameBatch(frames=[link_pb2.Frame(open=link_pb2.Open(node=node, peer=peer, version=version,
                                                                            session_id=7, hold_time=5.0))])


async def _try_open(addr: str, batch: link_pb2.FrameBatch) -> tuple[grpc.StatusCode, str]:
    async with grpc.aio.insecure_channel(addr, options=GRPC_OPTIONS) as ch:
        call = link_pb2_grpc.LinkStub(ch).Session()
        await call.write(batch)
        try:
            reply = await asyncio.wait_for(call.read(), 10)
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details()
        return grpc.StatusCode.OK, str(reply)


def test_impostors_are_refused_while_real_sessions_go_on(localnet) -> None:
    net = localnet(hops=2)
    addr = net.nodes["n2"].cfg.data_listen
    cases = [(_open("n9", "n2"), grpc.StatusCode.PERMISSION_DENIED, "'n9' is not a neighbour of n2"),
             (_open("n1", "n7"), grpc.StatusCode.PERMISSION_DENIED, "this is node 'n2', not 'n7'"),
             (_open("n3", "n2"), grpc.StatusCode.FAILED_PRECONDITION, "n2 dials n3"),
             (_open("n1", "n2", version=99), grpc.StatusCode.FAILED_PRECONDITION, "version 99"),
             (link_pb2.FrameBatch(frames=[link_pb2.Frame(keepalive=link_pb2.Keepalive(ts=1))]),
              grpc.StatusCode.INVALID_ARGUMENT, "must be OPEN")]
    with net.client("n1") as c:
        for batch, code, words in cases:
            got_code, details = asyncio.run(_try_open(addr, batch))
            assert got_code == code and words in details
            assert c.send(["n3"], size=2000).accepted     # traffic keeps flowing between refusals
    with net.client("n3") as c:
        wait_until(lambda: len(c.mailbox()) >= len(cases), 20, what=f"{len(cases)} messages in the mailbox of n3")
        assert len(c.mailbox()) == len(cases)
    with net.client("n2") as c:
        st = c.stats()["neighbours"]
        assert st["n1"]["up"] and st["n3"]["up"] and st["n1"]["reconnects"] == 0


def _frag(seq: int, **kw) -> link_pb2.Frame:
    base = dict(msg_id="x1", offset=0, total_size=5, hops=1, data=b"hello", src="n1",
                recipients=[{"node": "n2", "user": "bob"}], seq=seq, submit_ts=1.0, expires_ts=0.0)
    base.update(kw)
    return link_pb2.Frame(fragment=link_pb2.Fragment(**base))


async def _malformed_session(addr: str) -> tuple[set[int], dict[int, str]]:
    async with grpc.aio.insecure_channel(addr, options=GRPC_OPTIONS) as ch:
        call = link_pb2_grpc.LinkStub(ch).Session()
        await call.write(_open("n1", "n2"))
        reply = await call.read()
        assert reply.frames[0].open.node == "n2"
        await call.write(link_pb2.FrameBatch(frames=[
            _frag(1),                                            # valid
            _frag(2, msg_id="x2", offset=4),                     # byte range outside the message
            _frag(3, msg_id="x3", hops=0),                       # impossible hop count
            _frag(4, msg_id=""),                                 # no id
            _frag(5, msg_id="x5", total_size=1 << 50),           # absurd size
            _frag(6, msg_id="x6", recipients=[]),                # nobody to deliver to
            link_pb2.Frame(ack=link_pb2.Ack(seqs=[999])),        # ack of an unknown sequence number
            link_pb2.Frame(refuse=link_pb2.Refuse(seq=77, reason="?")),
            link_pb2.Frame(),                                    # empty frame
            _frag(7),                                            # duplicate of 1
        ]))
        acks: set[int] = set()
        refuses: dict[int, str] = {}
        while not ({1, 7} <= acks and len(refuses) >= 5):
            batch = await asyncio.wait_for(call.read(), 10)
            for f in batch.frames:
                if f.WhichOneof("kind") == "ack":
                    acks.update(f.ack.seqs)
                elif f.WhichOneof("kind") == "refuse":
                    refuses[f.refuse.seq] = f.refuse.reason
        call.cancel()
    return acks, refuses


async def _garbage(addr: str) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(addr) as ch:
        raw = ch.stream_stream("/wanbed.Link/Session", request_serializer=None, response_deserializer=None)
        call = raw()
        await call.write(b"\xff\xfe\x00garbage that is no protobuf")
        try:
            await asyncio.wait_for(call.read(), 10)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK


def test_malformed_frames_are_refused_one_by_one_and_the_node_carries_on(localnet) -> None:
    net = localnet(names=["n1", "n2"], edges=[("n1", "n2")], start=False)
    net.start("n2")                     # this test plays n1 itself
    addr = net.nodes["n2"].cfg.data_listen
    acks, refuses = asyncio.run(_malformed_session(addr))
    assert acks == {1, 7}
    assert set(refuses) == {2, 3, 4, 5, 6}
    assert "does not fit" in refuses[2] and "hop count" in refuses[3] and "msg_id" in refuses[4]
    assert "exceeds the limit" in refuses[5] and "recipients" in refuses[6]
    assert asyncio.run(_garbage(addr)) != grpc.StatusCode.OK
    with net.client("n2") as c:
        assert c.health()
        items = wait_until(lambda: c.mailbox(include_payload=True), 10, what="the valid message in the mailbox of n2")
        assert [(i.msg_id, i.payload) for i in items] == [("x1", b"hello")]   # the valid one, exactly once
        assert c.stats()["neighbours"]["n1"]["refused_in"] == 5


async def _send_raw(addr: str, data: bytes) -> tuple[grpc.StatusCode, str]:
    async with grpc.aio.insecure_channel(addr, options=GRPC_OPTIONS) as ch:
        call = ch.stream_stream("/wanbed.Link/Session", request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)()
        await call.write(data)
        try:
            await asyncio.wait_for(call.read(), 10)
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details()
        return grpc.StatusCode.OK, ""


def test_a_stream_that_does_not_start_with_a_frame_batch_gets_a_clean_error(localnet) -> None:
    net = localnet(hops=1)
    code, details = asyncio.run(_send_raw(net.nodes["n2"].cfg.data_listen, b"\xff\xff\xff\xff not protobuf"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not a Link frame batch" in details
    log = (Path(net.nodes["n2"].cfg.records_dir) / "node.log").read_text()
    assert "Traceback" not in log and "DecodeError" not in log
