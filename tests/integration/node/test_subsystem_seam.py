"""A subsystem needs no edit of a core file: one defined here, using every hook of node/subsystem.py, runs in
two real daemons (one event loop, real gRPC on loopback, real SQLite) next to the registered ones.

"tally" has a config section, an Extension frame kind (no proto message of its own), a message kind the
engine stores, forwards and hands to its consumer from the inbox, an admission layer that refuses one piece,
a queue layer, a metrics section, a gRPC service and a start and a stop.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import grpc
import pytest

from node.config import ConfigError
from node.daemon import NodeDaemon
from node.hooks import MessageKind
from node.piece import Piece
from node.refusal import Refusal
from node.registry import all_subsystems, config_from_dict
from node.origination import NewMessage
from node.rpc import control_pb2, control_pb2_grpc, link_pb2
from node.subsystem import Authorizer, FrameHandler, Subsystem
from testbed.localnet import free_port

KIND = "tally"
HELLO = "tally_hello"              # its Extension frame kind
SERVICE = "/wanbed.test.Tally/Echo"
REFUSED_ID = "tally.n1.refuse-me"
SESSION = {"keepalive": 0.2, "hold_time": 1.0, "backoff_min": 0.01, "backoff_max": 0.1}


@dataclass
class TallyConfig:
    greeting: str = "hello"

    def validate(self, node: Any) -> None:
        if not self.greeting:
            raise ConfigError("tally.greeting must not be empty.")


class RefusingPolicy:
    """The node's admission policy with one rule over it: the piece REFUSED_ID is refused for good."""

    def __init__(self, inner: Any, tally: "Tally") -> None:
        self.inner = inner
        self.tally = tally

    def admit(self, peer: str, p: Piece) -> Refusal | None:
        if p.msg_id == REFUSED_ID:
            self.tally.refused += 1
            return Refusal("tally refuses this one")
        return self.inner.admit(peer, p)

    def __getattr__(self, name: str) -> Any:      # everything else: the inner policy's
        return getattr(self.inner, name)


class Tally(Subsystem):
    name = KIND
    config = TallyConfig

    def __init__(self, cfg: Any) -> None:
        super().__init__(cfg)
        self.engine: Any = None
        self.hellos: list[bytes] = []
        self.consumed: list[tuple[str, bytes]] = []
        self.mail: list[str] = []
        self.sessions: list[tuple[str, bool]] = []
        self.queues: list[str] = []
        self.refused = 0
        self.pending: list[asyncio.Future] = []
        self.started = 0
        self.stopped = 0

    def wrap_policy(self, policy: Any) -> Any:
        return RefusingPolicy(policy, self)

    def wrap_queue(self, peer: str, queue: Any, wake: Callable[[], None]) -> Any:
        self.queues.append(peer)
        return queue

    def attach(self, engine: Any) -> None:
        self.engine = engine

    def frame_handlers(self) -> dict[str, FrameHandler]:
        return {HELLO: self._hello}

    def _hello(self, peer: Any, frame: link_pb2.Frame) -> None:
        self.hellos.append(frame.extension.body)

    def message_kinds(self) -> list[MessageKind]:
        return [MessageKind(KIND, lambda msg_id, _originator: msg_id.startswith("tally."), self._consume)]

    def _consume(self, piece: Piece, payload: bytes) -> None:
        self.consumed.append((piece.msg_id, payload))

        def take(c) -> None:
            c.execute("DELETE FROM inbox WHERE msg_id=?", (piece.msg_id,))
        self.pending.append(asyncio.ensure_future(self.engine.spool.run(take)))   # its own commit takes the row

    def on_delivery(self, piece: Piece, size: int) -> None:
        self.mail.append(piece.msg_id)

    def on_session(self, peer: str, up: bool) -> None:
        self.sessions.append((peer, up))
        if up:
            body = f"{self.section.greeting} from {self.cfg.name}".encode()
            self.engine.peers[peer].send_control(link_pb2.Frame(extension=link_pb2.Extension(kind=HELLO, body=body)))

    def snapshot(self) -> dict | None:
        return {"hellos": len(self.hellos), "consumed": len(self.consumed), "refused": self.refused}

    def services(self, server: Any, authorizer: Authorizer) -> None:
        async def echo(request: link_pb2.Extension, context: Any) -> link_pb2.Extension:
            return link_pb2.Extension(kind=KIND, body=b"tally:" + request.body)
        # a message type the node has: the service needs no proto file of its own for the test
        handler = grpc.unary_unary_rpc_method_handler(echo, request_deserializer=link_pb2.Extension.FromString,
                                                      response_serializer=link_pb2.Extension.SerializeToString)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("wanbed.test.Tally",
                                                                              {"Echo": handler}),))

    async def start(self) -> None:
        self.started += 1

    async def stop(self) -> None:
        self.stopped += 1


def _cfgs(tmp: Path) -> dict:
    taken: set[int] = set()
    ports = {n: (free_port(taken), free_port(taken)) for n in ("n1", "n2")}
    subsystems = (*all_subsystems(), Tally)
    return {n: config_from_dict({"name": n, "data_listen": f"127.0.0.1:{d}", "mgmt_listen": f"127.0.0.1:{m}",
                                 "neighbours": {o: f"127.0.0.1:{ports[o][0]}" for o in ports if o != n},
                                 "records_dir": str(tmp / n), "session": SESSION, "metrics_interval": 0.2,
                                 "tally": {"greeting": f"hi {n}"}}, subsystems)
            for n, (d, m) in ports.items()}


async def _until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_a_subsystem_defined_outside_the_core_uses_every_hook(tmp_path: Path) -> None:
    cfgs = _cfgs(tmp_path)

    async def go() -> None:
        nodes = {n: NodeDaemon(c, subsystems=(*all_subsystems(), Tally)) for n, c in cfgs.items()}
        tallies = {n: d.subsystem(KIND) for n, d in nodes.items()}
        for d in nodes.values():
            await d.start()
        n1, n2 = nodes["n1"], nodes["n2"]
        t1, t2 = tallies["n1"], tallies["n2"]
        try:
            # its config section was read, its queue layer built, and its frame kind crossed the session
            assert t1.section.greeting == "hi n1" and t1.queues == ["n2"] and t2.queues == ["n1"]
            await _until(lambda: t1.hellos and t2.hellos)
            assert t2.hellos == [b"hi n1 from n1"] and t1.hellos == [b"hi n2 from n2"]
            assert ("n2", True) in t1.sessions and ("n1", True) in t2.sessions
            assert HELLO in n1.links.capabilities()
            # a message of its kind: stored at n1, forwarded, stored at n2 and handed to its consumer there
            ok, mid, why = await n1.engine.originate(NewMessage("", [("n2", "")], b"count me", 1, 60.0, kind=KIND,
                                                                msg_id="tally.n1.1"))
            assert ok and mid == "tally.n1.1", why
            await _until(lambda: t2.consumed)
            assert t2.consumed == [("tally.n1.1", b"count me")] and t1.consumed == []
            # ordinary mail still goes to the mailbox, and its delivery hook sees it
            ok, mail_id, why = await n1.engine.submit("alice", [("n2", "bob")], b"mail", None)
            assert ok, why
            await _until(lambda: t2.mail)
            assert t2.mail == [mail_id]
            # its admission layer refuses one piece at n2: n1 keeps it as an orphan, n2 stores nothing of it
            ok, _mid, why = await n1.engine.originate(NewMessage("", [("n2", "")], b"no", 1, 60.0, kind=KIND,
                                                                 msg_id=REFUSED_ID))
            assert ok, why
            await _until(lambda: n1.engine.peers["n2"].stats.refused_out == 1)
            assert t2.refused == 1 and [m for m, _ in t2.consumed] == ["tally.n1.1"]
            assert any(k[0] == REFUSED_ID for k in n1.engine.orphans)
            # its metrics section is in Stats, and its gRPC service answers on the management port
            async with grpc.aio.insecure_channel(cfgs["n2"].mgmt_listen) as ch:
                stats = json.loads((await control_pb2_grpc.ControlStub(ch).Stats(control_pb2.StatsRequest())).json)
                assert stats[KIND] == {"hellos": 1, "consumed": 1, "refused": 1}
                echo = ch.unary_unary(SERVICE, request_serializer=link_pb2.Extension.SerializeToString,
                                      response_deserializer=link_pb2.Extension.FromString)
                assert (await echo(link_pb2.Extension(body=b"ping"))).body == b"tally:ping"
            await asyncio.gather(*t2.pending)
            left = await n2.engine.spool.run(lambda c: c.execute("SELECT COUNT(*) FROM inbox").fetchone()[0])
            assert left == 0                        # the consumer took its row
        finally:
            for d in nodes.values():
                await d.stop()
        assert [(t.started, t.stopped) for t in (t1, t2)] == [(1, 1), (1, 1)]

    asyncio.run(go())


def test_a_config_read_without_the_subsystem_refuses_its_section() -> None:
    """The same section in a config read without the subsystem is an unknown key: one clear error."""
    with pytest.raises(ConfigError, match="unknown key tally"):
        config_from_dict({"name": "n1", "data_listen": "127.0.0.1:1", "mgmt_listen": "127.0.0.1:2",
                          "tally": {"greeting": "x"}})
