"""Fuzzing the trust defences of live nodes: strategies and drivers for the attacks on owners, TLS, tokens, probe
keys and lifetimes, against the network of fuzz_strategies.py (tls and auth on). Shared by
tests/integration/node/test_node_fuzz.py and bench/bench_fuzz.py like the targets of fuzz_strategies.py, and
judged through the same Fuzzer.

The attacks, one target each (TARGETS):
- takeover: a user (never the admin) attaches to, removes, lists, acknowledges for or publishes as another user's
  subscription (durable or not, the admin's too) and tries names that exist and names that do not; the owner's
  stream must go on and get its next publication, its backlog untouched, the attacker's listing its own only.
- plaintext: gRPC calls (any method, any bytes) and raw bytes (HTTP/2, HTTP/1, TLS-like garbage) in plaintext to
  the TLS management and data ports: no answer but a transport failure (or a TLS alert); a Send never arrives.
- certs: clients that trust another run's CA, check another name, or (on the data port) present a certificate
  of another CA or of another node: the call fails in the TLS handshake (or the OPEN is UNAUTHENTICATED), and
  what it would have sent never arrives; the right CA and name get through.
- probes: playing a0, the fuzzer answers n3's link probes truly for a while, then leaves some outstanding and
  sends forged datagrams (random or missing tags, old keys, the other direction's key, replayed and modified
  genuine ones, wrong names, stamps and sequence numbers): n3 takes none (its answered count, latency, jitter and
  cost for the link stay), counts every one in routing.probes_refused and answers no forged request.
- tokens: every method with no token, an empty one, garbage, another node's admin or user token, the digest the
  config stores, near misses of the right one or the right one under another key; with valid, undecodable,
  large or never-sent requests: UNAUTHENTICATED, also when the request never comes (so before it is read), and
  nothing the call asked for happens. The right tokens are the control: a stalled call then waits.
- late: Link frames as a0 carrying messages whose lifetime ended before they arrived (any time in the past,
  whole or in pieces, as runs or not, for the node or through it): each piece refused as expired, never
  delivered; a valid message beside them is taken; a late copy of one taken earlier is a duplicate at most.
"""
from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
import string
import struct
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import grpc
from hypothesis import strategies as st

import fuzz_strategies as fs
from node.client import tls_problem
from node.broker.topics import pattern_problem, topic_problem
from node.routing.monitor import HEADER, KEY_BYTES, KEY_KIND, MAGIC, REQUEST, RESPONSE, TAG, VERSION, Probe, \
    authentic, decode_probe
from node.rpc import common_pb2, control_pb2, link_pb2, link_pb2_grpc, pubsub_pb2, submit_pb2
from node.security.tokens import digest
from node.spool import EXPIRED_ON_ARRIVAL
from testbed import secrets as run_secrets

OK = grpc.StatusCode.OK
STALL_DEADLINE = 1.0      # seconds a client waits for the answer to a request it never sends
RAW_WAIT = 0.5            # seconds a raw socket waits for what a TLS port says to plaintext
PROBE_WAIT = 20 * fs.PROBE_INTERVAL     # n3 sends its next probe (or answers, or counts a datagram) within this
FAKE_CAPS = ("runs", "interest", "publication", "link_state", KEY_KIND)


def token(fz: fs.Fuzzer, node: str, user: str = "") -> str:
    """The token of `user` at `node` (its admin's for ""), as the run made it."""
    return fz.net.secrets.token(node, user)


def md(value: str) -> tuple:
    return (("authorization", value),)


def marker(prefix: str) -> str:
    """A user name (and node-name-sized tag) no other target uses: what a refused call would have left."""
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def others(node: str) -> list[str]:
    return [n for n in fs.LINK_TARGETS if n != node]


# -- subscription takeover ------------------------------------------------------------------------------------
@dataclass
class Takeover:
    """`owner` ("" the admin) makes subscription `name` at `node`; `attacker`, another user, runs `steps`:
    ("attach", "victim" | "absent", pattern or "", durable), ("unsubscribe", "victim" | "absent"),
    ("list", remote), ("ack",), ("spoof",) (publish as the owner)."""
    node: str
    owner: str
    durable: bool
    name: str
    pattern: str
    attacker: str
    absent: str
    steps: list

    _repr_pretty_ = fs._pretty

    def __repr__(self) -> str:
        return (f"Takeover({self.node}, owner={self.owner or 'admin'!r}, {'durable' if self.durable else 'live'} "
                f"{self.name!r} on {self.pattern!r}, attacker={self.attacker!r}, absent={self.absent!r}, "
                f"steps={fs.shown(self.steps, 400)})")


# patterns a subscription may have, with a topic they match that a publication may have
USABLE_PATTERN = fs.VALID_PATTERN.filter(lambda p: pattern_problem(p) is None and
                                         topic_problem(fs._topic_for(p)) is None)


@st.composite
def takeovers(draw) -> Takeover:
    node = draw(st.sampled_from(["n1", "n1", "n3"]))
    users = fs.USERS[node]
    owner = draw(st.sampled_from(["", *users]))
    attacker = draw(st.sampled_from([u for u in users if u != owner]))
    durable = draw(st.booleans())
    which = st.sampled_from(["victim", "victim", "absent"])
    # an attach as the owner made it (durable or not), then mostly that, or the other kind
    attach = st.tuples(st.just("attach"), which, st.one_of(st.just(""), USABLE_PATTERN),
                       fs.mostly(st.just(durable), st.booleans(), 3))
    step = st.one_of(attach, st.tuples(st.just("unsubscribe"), which), st.tuples(st.just("list"), st.booleans()),
                     st.tuples(st.just("ack")), st.tuples(st.just("spoof")))
    first = draw(st.tuples(st.just("attach"), st.just("victim"), st.one_of(st.just(""), USABLE_PATTERN),
                           fs.mostly(st.just(durable), st.booleans(), 4)))
    return Takeover(node, owner, durable, draw(fs.chars(fs.LOWER_ALNUM, 1, 6, "tk")),
                    draw(USABLE_PATTERN), attacker, draw(fs.chars(fs.LOWER_ALNUM, 1, 6, "tx")),
                    [first, *draw(st.lists(step, max_size=4))])


def _subscribe_call(fz: fs.Fuzzer, node: str, metadata: tuple):
    fn = fz.mgmt(node).stream_stream("/wanbed.PubSub/Subscribe",
                                     request_serializer=pubsub_pb2.SubscribeRequest.SerializeToString,
                                     response_deserializer=pubsub_pb2.SubscribeEvent.FromString)
    return fn(timeout=fs.EXAMPLE_TIMEOUT, metadata=metadata)


async def _start(call, start: pubsub_pb2.SubscribeStart) -> tuple[Any, grpc.StatusCode, str]:
    """Send `start`: (the first event, OK, "") or (None, the status that ended the stream)."""
    if not await fs.send(call, pubsub_pb2.SubscribeRequest(start=start)):
        code, details = await fs._status(call)
        return None, code, details
    try:
        ev = await asyncio.wait_for(call.read(), fs.CALL_TIMEOUT)
    except grpc.aio.AioRpcError as exc:
        return None, exc.code(), exc.details() or ""
    except asyncio.TimeoutError:
        return None, grpc.StatusCode.DEADLINE_EXCEEDED, "no first event (client side wait)"
    if ev is grpc.aio.EOF:
        code, details = await fs._status(call)
        return None, code, details
    return ev, OK, ""


async def _next_delivery(fz: fs.Fuzzer, call, pub_id: str, what: str, example: Any) -> None:
    """Read `call` until the delivery of `pub_id` (within 5 s)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + 5.0
    while True:
        try:
            ev = await asyncio.wait_for(call.read(), max(0.01, until - loop.time()))
        except asyncio.TimeoutError:
            fz.fail(f"{what}: publication {pub_id} never arrived\n  input: {example!r}")
        except grpc.aio.AioRpcError as exc:
            fz.fail(f"{what}: the stream ended ({exc.code().name} {exc.details()!r}) before publication {pub_id}"
                    f"\n  input: {example!r}")
        if ev is grpc.aio.EOF:
            code, details = await fs._status(call)
            fz.fail(f"{what}: the stream ended ({code.name} {details!r}) before publication {pub_id}\n"
                    f"  input: {example!r}")
        if ev.WhichOneof("kind") == "delivery" and ev.delivery.pub_id == pub_id:
            return


async def _publish(fz: fs.Fuzzer, node: str, topic: str, metadata: tuple, publisher: str = "") -> tuple:
    return await fs._unary(fz, node, "PubSub/Publish",
                           pubsub_pb2.PublishRequest(topic=topic, payload=b"tk", publisher=publisher), metadata)


async def _publish_ok(fz: fs.Fuzzer, node: str, topic: str, metadata: tuple, example: Any) -> str:
    code, details, reply = await _publish(fz, node, topic, metadata)
    fz.verdict("PubSub/Publish", code, details, example, expect=OK)
    if not reply.accepted:
        fz.fail(f"a valid publication on {topic!r} was refused: {reply.reason}\n  input: {example!r}")
    return reply.pub_id


async def drive_takeover(fz: fs.Fuzzer, tk: Takeover) -> None:
    node = tk.node
    owner_md, att_md, admin_md = md(token(fz, node, tk.owner)), md(token(fz, node, tk.attacker)), md(token(fz, node))
    topic = fs._topic_for(tk.pattern)
    owner = _subscribe_call(fz, node, owner_md)
    calls = [owner]
    mine: dict[str, Any] = {}          # the attacker's own subscriptions: name -> (durable, its stream)
    try:
        ev, code, details = await _start(owner, pubsub_pb2.SubscribeStart(pattern=tk.pattern, name=tk.name,
                                                                          durable=tk.durable))
        if ev is None or ev.WhichOneof("kind") != "subscribed" or ev.subscribed.name != tk.name:
            fz.fail(f"the owner could not subscribe: {code.name} {details!r} {ev}\n  input: {tk!r}")
        fz.verdict("PubSub/Subscribe", OK, "", tk)
        sent: list[str] = []
        if tk.durable:                 # one publication delivered and not acknowledged: it stays queued
            sent.append(await _publish_ok(fz, node, topic, admin_md, tk))
            await _next_delivery(fz, owner, sent[-1], "the owner's stream", tk)
        for step in tk.steps:
            kind = step[0]
            if kind == "attach":
                _, which, pattern, durable = step
                name = tk.name if which == "victim" else tk.absent
                if which == "absent" and name in mine:
                    continue               # attaching to its own twice is no attack
                thief = _subscribe_call(fz, node, att_md)
                calls.append(thief)
                ev, code, details = await _start(thief, pubsub_pb2.SubscribeStart(
                    pattern=pattern or tk.pattern, name=name, durable=durable))
                if which == "victim":
                    if ev is not None:
                        fz.fail(f"{tk.attacker} attached to {tk.owner or 'the admin'}'s subscription {tk.name}: "
                                f"{ev}\n  input: {tk!r}")
                    want = (grpc.StatusCode.PERMISSION_DENIED if tk.durable and durable
                            else grpc.StatusCode.ALREADY_EXISTS)
                    fz.verdict("PubSub/Subscribe", code, details, tk, expect=want)
                    fz.stats["takeover attaches refused"] += 1
                else:
                    if ev is None or ev.WhichOneof("kind") != "subscribed":
                        fz.fail(f"{tk.attacker} could not subscribe to the free name {name}: {code.name} "
                                f"{details!r}\n  input: {tk!r}")
                    fz.verdict("PubSub/Subscribe", OK, "", tk)
                    mine[name] = (durable, thief)
            elif kind == "unsubscribe":
                name = tk.name if step[1] == "victim" else tk.absent
                code, details, _ = await fs._unary(fz, node, "PubSub/Unsubscribe",
                                                   pubsub_pb2.UnsubscribeRequest(name=name), att_md)
                want = (grpc.StatusCode.PERMISSION_DENIED if name == tk.name else
                        OK if name in mine else grpc.StatusCode.NOT_FOUND)
                fz.verdict("PubSub/Unsubscribe", code, details, tk, expect=want)
                if name == tk.name:
                    fz.stats["takeover removals refused"] += 1
                mine.pop(name, None)
            elif kind == "list":
                code, details, reply = await fs._unary(fz, node, "PubSub/ListSubscriptions",
                                                       pubsub_pb2.ListSubscriptionsRequest(remote=step[1]), att_md)
                fz.verdict("PubSub/ListSubscriptions", code, details, tk, expect=OK)
                foreign = [(i.node, i.name, i.owner) for i in reply.subscriptions
                           if i.owner != tk.attacker or i.node != node]
                if foreign or tk.name in {i.name for i in reply.subscriptions}:
                    fz.fail(f"{tk.attacker}'s listing shows others' subscriptions: {foreign}\n  input: {tk!r}")
                if sorted(i.name for i in reply.subscriptions if i.name in (tk.name, tk.absent)) != \
                        sorted(n for n in mine):
                    fz.fail(f"{tk.attacker}'s listing {[i.name for i in reply.subscriptions]} misses its own "
                            f"{sorted(mine)}\n  input: {tk!r}")
            elif kind == "ack":
                # on a stream of its own: the only kind it can open; the owner's publications stay queued
                if tk.absent not in mine:
                    thief = _subscribe_call(fz, node, att_md)
                    calls.append(thief)
                    ev, code, details = await _start(thief, pubsub_pb2.SubscribeStart(
                        pattern=tk.pattern, name=tk.absent, durable=True))
                    if ev is None:
                        fz.fail(f"{tk.attacker} could not subscribe to the free name {tk.absent}: {code.name} "
                                f"{details!r}\n  input: {tk!r}")
                    mine[tk.absent] = (True, thief)
                stream = mine[tk.absent][1]
                if not await fs.send(stream, pubsub_pb2.SubscribeRequest(ack=pubsub_pb2.SubscribeAck(pub_ids=sent))):
                    code, details = await fs._status(stream)
                    fz.fail(f"the node ended {tk.attacker}'s own stream on an ack: {code.name} {details!r}\n"
                            f"  input: {tk!r}")
            elif kind == "spoof" and tk.owner:
                code, details, reply = await _publish(fz, node, topic, att_md, publisher=tk.owner)
                fz.verdict("PubSub/Publish", code, details, tk, expect=grpc.StatusCode.PERMISSION_DENIED)
        # the owner's stream goes on: the next publication reaches it, and nothing else changed its queue
        sent.append(await _publish_ok(fz, node, topic, admin_md, tk))
        await _next_delivery(fz, owner, sent[-1], f"{tk.owner or 'the admin'}'s stream after the attacks", tk)
        fz.stats["takeover owners' streams intact"] += 1
        code, details, reply = await fs._unary(fz, node, "PubSub/ListSubscriptions",
                                               pubsub_pb2.ListSubscriptionsRequest(), owner_md)
        fz.verdict("PubSub/ListSubscriptions", code, details, tk, expect=OK)
        got = [(i.owner, i.durable, i.connected) + ((i.backlog,) if tk.durable else ())
               for i in reply.subscriptions if i.name == tk.name and i.node == node]
        want = [(tk.owner, tk.durable, True) + ((len(sent),) if tk.durable else ())]
        if got != want:
            fz.fail(f"the owner's listing of {tk.name} is {got}, not {want} (owner, durable, connected"
                    f"{', backlog' if tk.durable else ''})\n  input: {tk!r}")
        if tk.durable:
            await fs.send(owner, pubsub_pb2.SubscribeRequest(ack=pubsub_pb2.SubscribeAck(pub_ids=sent)))
        await fs.send(owner, pubsub_pb2.SubscribeRequest(close=pubsub_pb2.SubscribeClose()))
        await owner.done_writing()
        code, details = await fs._drain_stream(owner)
        fz.verdict("PubSub/Subscribe", code, details, tk, expect=OK)
    finally:
        for c in calls:
            c.cancel()
        for name, by in ((tk.name, owner_md), *((n, att_md) for n, (durable, _) in mine.items() if durable)):
            if name == tk.name and not tk.durable:
                continue
            code, details, _ = await fs._unary(fz, node, "PubSub/Unsubscribe", pubsub_pb2.UnsubscribeRequest(name=name),
                                               by)
            if code not in (OK, grpc.StatusCode.NOT_FOUND):
                fz.fail(f"cannot remove the subscription {name}: {code.name} {details}")


# -- plaintext to the TLS ports ---------------------------------------------------------------------------------
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@dataclass
class Plaintext:
    """`data` in plaintext to `node`'s `port` ("mgmt" or "data"): as the request of gRPC `method`, or as raw bytes
    on a TCP connection (method "raw")."""
    node: str
    port: str
    method: str
    data: bytes

    _repr_pretty_ = fs._pretty

    def __repr__(self) -> str:
        return f"Plaintext({self.node}, {self.port}, {self.method}, {fs.shown(self.data)} ({len(self.data)} bytes))"


def raw_plaintext() -> st.SearchStrategy[bytes]:
    grpc_frame = st.binary(max_size=64).map(lambda b: b"\x00" + len(b).to_bytes(4, "big") + b)
    return st.one_of(
        st.just(b""), st.just(H2_PREFACE), st.just(H2_PREFACE + H2_SETTINGS),
        st.binary(max_size=200).map(lambda b: H2_PREFACE + H2_SETTINGS + b),
        st.just(b"GET / HTTP/1.1\r\nHost: n1\r\n\r\n"), st.just(b"POST /wanbed.Submit/Send HTTP/1.1\r\n\r\n"),
        grpc_frame, st.binary(max_size=300),
        st.binary(max_size=100).map(lambda b: b"\x16\x03\x01" + len(b).to_bytes(2, "big") + b),   # TLS-like
        st.binary(min_size=1, max_size=40).map(lambda b: b"\x16\x03\x03\xff\xff" + b),          # record too long
        st.binary(max_size=20).map(lambda b: b"\x80\x2e\x01\x00\x02" + b),                      # SSLv2-like
        st.just(b"\x00" * 70_000))


@st.composite
def plaintexts(draw) -> Plaintext:
    node = draw(st.sampled_from(fs.LINK_TARGETS))
    port = draw(st.sampled_from(["mgmt", "mgmt", "data"]))
    method = draw(st.sampled_from(["raw", "grpc", "grpc"]))
    if method == "grpc":
        method = draw(st.sampled_from(["Submit/Send", "Control/Health", "PubSub/Subscribe", "Link/Session",
                                       *sorted(fs.UNARY)]))
    if method == "raw":
        return Plaintext(node, port, method, draw(raw_plaintext()))
    if method == "Submit/Send":
        seed = submit_pb2.SendRequest(recipients=[common_pb2.Recipient(node=node, user="pt")], payload=b"plain")
    elif method == "PubSub/Subscribe":
        seed = pubsub_pb2.SubscribeRequest(start=pubsub_pb2.SubscribeStart(pattern="pt.>"))
    elif method == "Link/Session":
        seed = fs.open_batch(fs.FAKE, node)
    else:
        seed = fs.SEEDS[method]
    return Plaintext(node, port, method, draw(fs.mostly(st.just(seed.SerializeToString()),
                                                        fs.raw_bytes_for(seed), 3)))


def _is_tls_answer(data: bytes) -> bool:
    """Nothing, or TLS records (an alert, a handshake): never an HTTP/2 or HTTP/1 answer."""
    return data == b"" or (len(data) >= 3 and data[0] in (0x15, 0x16) and data[1] == 0x03)


async def drive_plaintext(fz: fs.Fuzzer, pt: Plaintext) -> None:
    addr = fz.net.nodes[pt.node].mgmt if pt.port == "mgmt" else fz.net.nodes[pt.node].cfg.data_listen
    if pt.method == "raw":
        host, port = addr.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        got = b""
        try:
            writer.write(pt.data)
            await writer.drain()
            loop = asyncio.get_running_loop()
            until = loop.time() + RAW_WAIT
            while len(got) < 1 << 16:
                chunk = await asyncio.wait_for(reader.read(4096), max(0.01, until - loop.time()))
                if not chunk:
                    break
                got += chunk
        except (asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass
        if not _is_tls_answer(got):
            fz.fail(f"the TLS {pt.port} port of {pt.node} answered plaintext with {fs.shown(got)}\n  input: {pt!r}")
        fz.stats["plaintext raw connections refused"] += 1
        return
    user = marker("pt")
    data = pt.data
    if pt.method == "Submit/Send" and data == submit_pb2.SendRequest(
            recipients=[common_pb2.Recipient(node=pt.node, user="pt")], payload=b"plain").SerializeToString():
        data = submit_pb2.SendRequest(recipients=[common_pb2.Recipient(node=pt.node, user=user)],
                                      payload=b"plain").SerializeToString()
        fz.forbid(pt.node, user)
    service, name = pt.method.split("/")
    async with grpc.aio.insecure_channel(addr, options=fs.GRPC_OPTIONS) as ch:
        path = f"/wanbed.{service}/{name}"
        try:
            if pt.method in fs.UNARY:
                await ch.unary_unary(path, request_serializer=None, response_deserializer=None)(
                    data, timeout=fs.CALL_TIMEOUT, metadata=md(token(fz, pt.node)))
                code, details = OK, "answered"
            else:
                call = ch.stream_stream(path, request_serializer=None, response_deserializer=None)(
                    timeout=fs.CALL_TIMEOUT, metadata=md(token(fz, pt.node)))
                await fs.send(call, data)
                got = await call.read()
                code, details = (OK, f"answered {fs.shown(got)}") if got is not grpc.aio.EOF else \
                    await fs._status(call)
        except grpc.aio.AioRpcError as exc:
            code, details = exc.code(), exc.details() or ""
    # UNAVAILABLE is the client's own: the connection never carried a call. Any other status came from a server
    # that read the call in plaintext.
    fz.verdict(pt.method, code, details, pt, expect=grpc.StatusCode.UNAVAILABLE)
    fz.stats["plaintext calls refused"] += 1


# -- certificates clients must refuse -------------------------------------------------------------------------
@dataclass
class CertCheck:
    """A call to `node`'s `port` from a client trusting `trust` ("run": the run's CA, "stranger": another run's)
    and checking `name`; on the data port it presents `client`'s certificate ("a0", "stranger": a0 named by
    another CA, or a node's of the run)."""
    node: str
    port: str
    trust: str
    name: str
    client: str

    _repr_pretty_ = fs._pretty

    def __repr__(self) -> str:
        return (f"CertCheck({self.node} {self.port}, trusts {self.trust} CA, checks {self.name!r}"
                + (f", presents {self.client}'s certificate)" if self.port == "data" else ")"))


@st.composite
def cert_checks(draw) -> CertCheck:
    node = draw(st.sampled_from(fs.LINK_TARGETS))
    port = draw(st.sampled_from(["mgmt", "data"]))
    mode = draw(st.sampled_from(["client", "client", "node", "ok"]))     # who must refuse, if anyone
    if mode == "ok":
        return CertCheck(node, port, "run", node, fs.FAKE)
    if mode == "node":      # the client is content; the node must refuse what it presents
        return CertCheck(node, "data", "run", node, draw(st.sampled_from(["stranger", "n2", "n1", "n3"])))
    trust = draw(st.sampled_from(["run", "stranger"]))
    name = draw(st.one_of(st.sampled_from([*fs.NAMES, fs.FAKE, "localhost", "127.0.0.1"]),
                          st.builds(str.__add__, st.sampled_from(string.ascii_lowercase), fs.chars(fs.LOWER_ALNUM + "-", 0, 12)), st.just(node)))
    if trust == "run" and name == node:
        name = others(node)[0]
    return CertCheck(node, port, trust, name, draw(st.sampled_from([fs.FAKE, fs.FAKE, "stranger", "n2"])))


def stranger(fz: fs.Fuzzer) -> Path:
    """A certificate naming FAKE from a CA of its own (another run's), made once per network."""
    got = fz.memory.setdefault("stranger", [])
    if not got:
        got.append(run_secrets.make_stranger(fz.net.workdir / "stranger", fs.FAKE))
    return got[0]


async def drive_cert(fz: fs.Fuzzer, cc: CertCheck) -> None:
    other = stranger(fz)
    ca = fz.net.secrets.ca if cc.trust == "run" else (other / "ca.crt").read_bytes()
    client_ok = cc.trust == "run" and cc.name == cc.node          # the client accepts the node's certificate
    if cc.port == "mgmt":
        addr = fz.net.nodes[cc.node].mgmt
        user = marker("ct")
        problem = None
        creds = grpc.ssl_channel_credentials(root_certificates=ca)
        async with grpc.aio.secure_channel(addr, creds, options=fs.GRPC_OPTIONS + [(fs.TARGET_NAME_OPTION, cc.name)]) \
                as ch:
            fn = ch.unary_unary("/wanbed.Submit/Send", request_serializer=submit_pb2.SendRequest.SerializeToString,
                                response_deserializer=submit_pb2.SendReply.FromString)
            try:
                reply = await fn(submit_pb2.SendRequest(recipients=[common_pb2.Recipient(node=cc.node, user=user)],
                                                        payload=b"cert"), timeout=fs.CALL_TIMEOUT,
                                 metadata=md(token(fz, cc.node)))
                code, details = OK, ""
            except grpc.aio.AioRpcError as exc:
                reply, code, details, problem = None, exc.code(), exc.details() or "", tls_problem(exc, addr, cc.name)
        if client_ok:
            fz.verdict("Submit/Send", code, details, cc, expect=OK)
            if not reply.accepted:
                fz.fail(f"{cc.node} refused a valid message: {reply.reason}\n  input: {cc!r}")
            fz.expect(cc.node, reply.msg_id, {user})
            return
        fz.forbid(cc.node, user)
        fz.verdict("Submit/Send", code, details, cc, expect=grpc.StatusCode.UNAVAILABLE)
        if problem is None:
            fz.fail(f"the client's refusal does not say it was the TLS check: {details!r}\n  input: {cc!r}")
        fz.stats["certificates refused by clients"] += 1
        return
    # the data port: a0's OPEN, and when the client must refuse the node, at once a valid one-piece message
    # (neither may leave the client)
    cert = None
    if cc.client == "stranger":
        cert = (other / "node.crt").read_bytes(), (other / "node.key").read_bytes()
    elif cc.client != fs.FAKE:
        d = fz.net.workdir / cc.client
        cert = (d / "node.crt").read_bytes(), (d / "node.key").read_bytes()
    msg_id = f"ct-{uuid.uuid4().hex[:12]}"
    now = time.time()
    piece = link_pb2.Frame(fragment=link_pb2.Fragment(
        msg_id=msg_id, offset=0, total_size=4, hops=1, data=b"cert", src=fs.FAKE, seq=1,
        recipients=[common_pb2.Recipient(node=cc.node, user="ct")], priority=1, submit_ts=now,
        expires_ts=now + 3600, fragments=1))
    ch = fz.data_channel(cc.node, ca=ca, name=cc.name, cert=cert)
    try:
        call = link_pb2_grpc.LinkStub(ch).Session(timeout=fs.CALL_TIMEOUT)
        try:
            await fs.send(call, fs.open_batch(fs.FAKE, cc.node))
            if not client_ok:
                await fs.send(call, link_pb2.FrameBatch(frames=[piece]))
            reply = await call.read()
            code, details = (OK, "") if reply is not grpc.aio.EOF else await fs._status(call)
            problem = None
        except grpc.aio.AioRpcError as exc:
            code, details = fs._seen(exc.code(), exc.details() or "")
            problem = tls_problem(exc, cc.node, cc.name)
        finally:
            call.cancel()
    finally:
        await ch.close()
    if client_ok and cc.client == fs.FAKE:
        fz.verdict("Link/Session", code, details, cc, expect=OK)
        return
    fz.forbid(cc.node, msg_id)
    if not client_ok:
        fz.verdict("Link/Session", code, details, cc, expect=grpc.StatusCode.UNAVAILABLE)
        if problem is None:
            fz.fail(f"the client's refusal does not say it was the TLS check: {details!r}\n  input: {cc!r}")
        fz.stats["certificates refused by clients"] += 1
    elif cc.client == "stranger":       # the node asks for a certificate of the run's CA
        fz.verdict("Link/Session", code, details, cc, expect=grpc.StatusCode.UNAVAILABLE)
        fz.stats["certificates refused by nodes"] += 1
    else:                                # of the run's CA, but another node's: the OPEN claims a0
        fz.verdict("Link/Session", code, details, cc, expect=grpc.StatusCode.UNAUTHENTICATED)
        fz.stats["certificates refused by nodes"] += 1


# -- forged and replayed link probes -----------------------------------------------------------------------------
# A forgery: (kind, args). Answers to n3's probes (outstanding ones, or the genuine answers sent before):
# ("answer", i, tag) tag "random" | "none" | "old" (a key of an earlier session) | "theirs" (n3's key, the other
# direction) | "zero"; ("stamp", i, delta) and ("seq", i, delta) under the right key; ("names", i, prober,
# addressee) under the right key; ("version2", i) the right answer in the datagram version before the receive
# stamps, under the right key; ("replay", i, pos, byte) a genuine answer with one byte set (or as it was);
# ("truncated", i, n); ("reflect",) n3's own answer to a0's probe sent back. Requests to n3: ("request", tag)
# tag "random" | "none" | "old" | "ours" (a0's key, the other direction); ("request_names", prober, addressee)
# under n3's key; ("old_request",) a0's genuine request of an earlier session. And ("garbage", bytes).
TAGS = ["random", "none", "old", "theirs", "zero"]


@dataclass
class ProbeAttack:
    genuine: int                # n3's probes answered truly first
    withheld: int               # then left outstanding while the forgeries come
    forgeries: list

    _repr_pretty_ = fs._pretty

    def __repr__(self) -> str:
        return f"ProbeAttack(genuine={self.genuine}, withheld={self.withheld}, forgeries={fs.shown(self.forgeries, 800)})"


def forgeries() -> st.SearchStrategy[tuple]:
    i = st.integers(0, 5)
    name = st.sampled_from(["n1", "n2", "n3", fs.FAKE, "zz", "N3", "n3\x00"])
    return st.one_of(
        st.tuples(st.just("answer"), i, st.sampled_from(TAGS)),
        st.tuples(st.just("stamp"), i, st.one_of(st.sampled_from([-1.0, 1e-6, 0.5, -1e9]), st.floats(-10, 10).filter(
            lambda d: d != 0))),
        st.tuples(st.just("seq"), i, st.one_of(st.integers(-3, 3).filter(bool), st.sampled_from([1 << 40, -(1 << 40)]))),
        st.tuples(st.just("names"), i, name, name).filter(lambda t: (t[2], t[3]) != ("n3", fs.FAKE)),
        st.tuples(st.just("version2"), i),
        st.tuples(st.just("replay"), i, st.integers(0, 80), st.integers(-1, 255)),
        st.tuples(st.just("truncated"), i, st.integers(0, 60)),
        st.tuples(st.just("reflect")),
        st.tuples(st.just("request"), st.sampled_from(["random", "none", "old", "ours"])),
        st.tuples(st.just("request_names"), name, name).filter(lambda t: (t[1], t[2]) != (fs.FAKE, "n3")),
        st.tuples(st.just("old_request")),
        st.tuples(st.just("garbage"), st.one_of(st.binary(min_size=1, max_size=80), st.builds(
            lambda seq, stamp: b"WB\x01\x02" + seq.to_bytes(8, "big") + stamp + b"n3", st.integers(0, 1 << 63),
            st.binary(min_size=8, max_size=8)))))


def probe_attacks() -> st.SearchStrategy[ProbeAttack]:
    return st.builds(ProbeAttack, st.integers(1, 3), st.integers(1, 3), st.lists(forgeries(), min_size=1, max_size=12))


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        self.queue.put_nowait((data, addr))


def _hostport(addr: str) -> tuple[str, int]:
    host, port = addr.rsplit(":", 1)
    return host, int(port)


async def _udp(fz: fs.Fuzzer, where: tuple[str, int]) -> tuple[asyncio.DatagramTransport, _Datagrams]:
    return await asyncio.get_running_loop().create_datagram_endpoint(_Datagrams, local_addr=where)


async def _probe_stats(fz: fs.Fuzzer) -> dict:
    """n3's link to a0 as its Stats tell it, with the total of refused probe datagrams."""
    code, details, reply = await fs._unary(fz, "n3", "Control/Stats", control_pb2.StatsRequest())
    if code != OK:
        fz.fail(f"n3 does not answer Stats: {code.name} {details}")
    routing = json.loads(reply.json)["routing"]
    link = routing["links"][fs.FAKE]
    return {"answered": link.get("probes_answered", 0), "latency_ms": link.get("latency_ms"),
            "jitter_ms": link.get("jitter_ms"), "cost": link.get("cost"),
            "refused": sum(routing.get("probes_refused", {}).values())}


class FakeSession:
    """A Link session as FAKE with `node` that stays up (keepalives) while the example needs it, reading what the
    node sends: its probe key, when it gives one."""

    def __init__(self, fz: fs.Fuzzer, node: str, caps: tuple = FAKE_CAPS) -> None:
        self.fz, self.node, self.caps = fz, node, caps
        self.call = link_pb2_grpc.LinkStub(fz.data(node)).Session(timeout=fs.EXAMPLE_TIMEOUT * 2)
        self.key: asyncio.Future = asyncio.get_running_loop().create_future()
        self.tasks: list[asyncio.Task] = []
        self.writing = asyncio.Lock()        # one write at a time on a gRPC stream

    async def open(self) -> None:
        await fs.send(self.call, fs.open_batch(fs.FAKE, self.node, caps=self.caps))
        reply = await asyncio.wait_for(self.call.read(), fs.CALL_TIMEOUT)
        if reply is grpc.aio.EOF or reply.frames[0].WhichOneof("kind") != "open":
            self.fz.fail(f"{self.node} did not answer a good OPEN: {reply}")
        self._take(reply)
        self.tasks = [asyncio.ensure_future(self._read()), asyncio.ensure_future(self._keepalive())]

    def _take(self, batch: link_pb2.FrameBatch) -> None:
        for f in batch.frames:
            if f.WhichOneof("kind") == "extension" and f.extension.kind == KEY_KIND and not self.key.done():
                self.key.set_result(f.extension.body)

    async def _read(self) -> None:
        while True:
            got = await self.call.read()
            if got is grpc.aio.EOF:
                return
            self._take(got)

    async def write(self, batch: link_pb2.FrameBatch) -> None:
        async with self.writing:
            if not await fs.send(self.call, batch):
                code, details = await fs._status(self.call)
                self.fz.fail(f"{self.node} ended a0's session ({code.name} {details!r})")

    async def _keepalive(self) -> None:
        while True:
            await self.write(fs.KEEPALIVE)
            await asyncio.sleep(fs.HOLD / 5)

    async def give_key(self, key: bytes) -> None:
        await self.write(link_pb2.FrameBatch(frames=[link_pb2.Frame(
            extension=link_pb2.Extension(kind=KEY_KIND, body=key))]))

    async def close(self) -> None:
        self.call.cancel()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def _next_request(fz: fs.Fuzzer, inbox: _Datagrams, key: bytes, example: Any) -> tuple[Probe, tuple]:
    """n3's next probe of a0 under `key` (others, sent under an earlier session's key, are skipped)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + PROBE_WAIT
    while True:
        try:
            data, addr = await asyncio.wait_for(inbox.queue.get(), max(0.01, until - loop.time()))
        except asyncio.TimeoutError:
            fz.fail(f"n3 sent a0 no probe under the key a0 gave it within {PROBE_WAIT:g} s\n  input: {example!r}")
        p = decode_probe(data)
        if p is not None and p.kind == REQUEST and authentic(data, key):
            if (p.prober, p.addressee) != ("n3", fs.FAKE):
                fz.fail(f"n3 sent a probe naming {p.prober!r} -> {p.addressee!r}\n  input: {example!r}")
            return p, addr


async def _until(cond: Callable[[], Any], timeout: float) -> Any:
    """Poll the coroutine function `cond` until it returns something true (or `timeout` passes): its last value."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout
    while True:
        got = await cond()
        if got or loop.time() > until:
            return got
        await asyncio.sleep(fs.PROBE_INTERVAL / 2)


def _mac(body: bytes, key: bytes) -> bytes:
    """The tag `key` gives `body` (written here from the datagram's description in node/routing/monitor.py)."""
    return hmac.new(key, body, hashlib.sha256).digest()[:TAG]


def _retag(body: bytes, key: bytes) -> bytes:
    """`body` (a datagram without its tag) with the tag `key` gives it."""
    return body + _mac(body, key)


def _body(kind: int, seq: int, stamp: float, prober: str, addressee: str) -> bytes:
    p, a = prober.encode(), addressee.encode()
    return HEADER.pack(MAGIC, VERSION, kind, seq % (1 << 64), stamp, 0.0, 0.0, len(p) % 256, len(a) % 256) + p + a


def _tagged(body: bytes, tag: str, theirs: bytes, old: bytes) -> bytes:
    """`body` with a tag that does not check: none, zeros, random bytes, an old key's, or the key of the other
    direction of the link (`theirs`)."""
    if tag == "none":
        return body
    if tag == "zero":
        return body + bytes(TAG)
    if tag == "random":
        return body + secrets.token_bytes(TAG)
    return _retag(body, old if tag == "old" else theirs)


async def drive_probes(fz: fs.Fuzzer, pa: ProbeAttack) -> None:
    n3 = _hostport(fz.net.nodes["n3"].cfg.data_listen)
    fake = _hostport(fz.net.nodes["n3"].cfg.neighbours[fs.FAKE])
    mem = fz.memory.setdefault("probes", {"ours": [], "theirs": [], "requests": []})
    ours = secrets.token_bytes(KEY_BYTES)                 # the key n3 probes a0 with, this session
    sock, inbox = await _udp(fz, fake)
    forger, heard = await _udp(fz, ("127.0.0.1", 0))
    session = FakeSession(fz, "n3")
    try:
        await session.open()
        try:
            theirs = await asyncio.wait_for(asyncio.shield(session.key), PROBE_WAIT)
        except asyncio.TimeoutError:
            fz.fail(f"n3 sent a0 no probe key on a session that lists {KEY_KIND}")
        if len(theirs) != KEY_BYTES:
            fz.fail(f"n3 sent a probe key of {len(theirs)} bytes")
        await session.give_key(ours)
        before = await _probe_stats(fz)
        # genuine: n3's probes answered truly, and one of a0's to n3 answered by it
        answers: list[bytes] = []
        for _ in range(pa.genuine):
            p, addr = await _next_request(fz, inbox, ours, pa)
            arrived = time.time()          # a0's receive and answer times, as a daemon stamps them
            answers.append(Probe(RESPONSE, p.seq, p.stamp, p.prober, p.addressee, arrived, time.time()).encode(ours))
            sock.sendto(answers[-1], addr)
        request = Probe(REQUEST, secrets.randbelow(1 << 63), time.monotonic(), fs.FAKE, "n3").encode(theirs)
        sock.sendto(request, n3)
        reflect = b""
        while not reflect:
            try:
                data, _ = await asyncio.wait_for(inbox.queue.get(), PROBE_WAIT)
            except asyncio.TimeoutError:
                fz.fail(f"n3 did not answer a0's genuine probe within {PROBE_WAIT:g} s")
            p = decode_probe(data)
            if p is not None and p.kind == RESPONSE and authentic(data, theirs):
                reflect = data
        want = before["answered"] + pa.genuine
        settled = await _until(lambda: _stats_if(fz, lambda s: s["answered"] >= want), PROBE_WAIT)
        if not settled or settled["answered"] != want:
            fz.fail(f"n3 counts {settled and settled['answered']} answered probes of a0, not {want} "
                    f"({pa.genuine} genuine answers)\n  input: {pa!r}")
        # outstanding: n3's next probes, left unanswered; then the forgeries
        pending = [(await _next_request(fz, inbox, ours, pa))[0] for _ in range(pa.withheld)]
        old = (mem["ours"][-1] if mem["ours"] else secrets.token_bytes(KEY_BYTES),
               mem["theirs"][-1] if mem["theirs"] else secrets.token_bytes(KEY_BYTES))
        forged = [_forge(f, pending, answers, reflect, ours, theirs, old, mem["requests"]) for f in pa.forgeries]
        mid = await _probe_stats(fz)
        for data in forged:
            forger.sendto(data, n3)
        target = mid["refused"] + len(forged)
        after = await _until(lambda: _stats_if(fz, lambda s: s["refused"] >= target), PROBE_WAIT)
        await asyncio.sleep(fs.PROBE_INTERVAL)        # anything else those datagrams did has happened too
        after = await _probe_stats(fz)
        fz.stats["forged probes sent"] += len(forged)
        fz.stats["forged probes refused"] += after["refused"] - mid["refused"]
        moved = {k: (mid[k], after[k]) for k in ("answered", "latency_ms", "jitter_ms", "cost") if mid[k] != after[k]}
        if moved:
            fz.fail(f"forged probe datagrams moved n3's measure of its link to a0: {moved}\n  input: {pa!r}")
        if after["refused"] - mid["refused"] != len(forged):
            fz.fail(f"n3 counted {after['refused'] - mid['refused']} refused probe datagrams of {len(forged)} "
                    f"forged\n  input: {pa!r}")
        if not heard.queue.empty():
            data, _ = heard.queue.get_nowait()
            fz.fail(f"n3 answered a forged probe request: {data!r}\n  input: {pa!r}")
        fz.verdict("probe", OK, "", pa)
        mem["ours"], mem["theirs"] = mem["ours"][-9:] + [ours], mem["theirs"][-9:] + [theirs]
        mem["requests"] = mem["requests"][-9:] + [request]
    finally:
        await session.close()
        sock.close()
        forger.close()
        await asyncio.sleep(0)        # the sockets close on the loop's next turn: a0's port is free again


async def _stats_if(fz: fs.Fuzzer, cond: Callable[[dict], bool]) -> dict | None:
    s = await _probe_stats(fz)
    return s if cond(s) else None


def _forge(f: tuple, pending: list[Probe], answers: list[bytes], reflect: bytes, ours: bytes, theirs: bytes,
           old: tuple[bytes, bytes], old_requests: list[bytes]) -> bytes:
    """The datagram of forgery `f` (see the comment above TAGS); none of them is a valid answer or request.
    `ours`: the key a0 gave n3 (answers to n3's probes carry its tag); `theirs`: the key n3 gave a0 (for a0's
    requests); `old`: both of an earlier session."""
    kind = f[0]
    if kind in ("answer", "stamp", "seq", "names", "version2"):
        p = pending[f[1] % len(pending)]
        if kind == "answer":
            return _tagged(_body(RESPONSE, p.seq, p.stamp, "n3", fs.FAKE), f[2], theirs, old[0])
        if kind == "stamp":
            stamp = p.stamp + f[2] if p.stamp + f[2] != p.stamp else p.stamp + 1.0
            return _retag(_body(RESPONSE, p.seq, stamp, "n3", fs.FAKE), ours)
        if kind == "seq":
            seq = p.seq + f[2]
            if any(q.seq == seq for q in pending):     # another outstanding one: still not its stamp
                return _retag(_body(RESPONSE, seq, p.stamp + 1.0, "n3", fs.FAKE), ours)
            return _retag(_body(RESPONSE, seq, p.stamp, "n3", fs.FAKE), ours)
        if kind == "version2":
            body = struct.pack("!2sBBQdBB", MAGIC, 2, RESPONSE, p.seq, p.stamp, 2, len(fs.FAKE.encode()))
            return _retag(body + b"n3" + fs.FAKE.encode(), ours)
        return _retag(_body(RESPONSE, p.seq, p.stamp, f[2], f[3]), ours)
    if kind == "replay":
        data = bytearray(answers[f[1] % len(answers)])
        if f[3] >= 0:
            data[f[2] % len(data)] = f[3]
        return bytes(data)
    if kind == "truncated":
        data = answers[f[1] % len(answers)]
        return data[:max(1, f[2] % len(data))]       # asyncio sends no empty datagram
    if kind == "reflect":
        return reflect
    if kind == "request":
        body = _body(REQUEST, secrets.randbelow(1 << 63), time.monotonic(), fs.FAKE, "n3")
        return _tagged(body, "theirs" if f[1] == "ours" else f[1], ours, old[1])
    if kind == "request_names":
        return _retag(_body(REQUEST, secrets.randbelow(1 << 63), time.monotonic(), f[1], f[2]), theirs)
    if kind == "old_request":
        return old_requests[-1] if old_requests else _retag(
            _body(REQUEST, secrets.randbelow(1 << 63), time.monotonic(), fs.FAKE, "n3"), old[1])
    return f[1]


# -- calls without a valid token ----------------------------------------------------------------------------------
@dataclass
class TokenCall:
    """`method` at `node` carrying token `tok` (kind, detail) with body `body`: "seed" (a valid request), "bytes"
    (any), "large" (a valid request of `size` bytes) or "stall" (the request never comes)."""
    node: str
    method: str
    tok: tuple
    body: str
    data: bytes = b""
    size: int = 0

    _repr_pretty_ = fs._pretty

    def __repr__(self) -> str:
        return (f"TokenCall({self.node}, {self.method}, token={self.tok!r}, body={self.body}"
                + (f" {fs.shown(self.data)}" if self.body == "bytes" else f" {self.size}" if self.size else "") + ")")


VALID_TOKENS = ("admin", "user", "control")
NEAR_MISSES = ["upper", "chop", "extra", "bearer_nospace", "bearer_lower", "basic", "twice"]


@st.composite
def token_calls(draw) -> TokenCall:
    node = draw(st.sampled_from(fs.LINK_TARGETS))
    method = draw(st.sampled_from([*sorted(fs.UNARY), "PubSub/Subscribe", "Submit/Send", "Submit/Send"]))
    if method.startswith("Gateway/"):
        node = "n3"           # the one with a gateway (elsewhere the method does not exist: UNIMPLEMENTED first)
    printable = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=1, max_size=60)
    tok = draw(st.one_of(
        st.just(("none",)), st.just(("empty",)), st.tuples(st.just("text"), printable),
        st.tuples(st.just("other_admin"), st.sampled_from(["n1", "n2", "n3"]).filter(lambda n: n != node)),
        st.tuples(st.just("other_user"), st.sampled_from(["alice", "bob"])), st.just(("digest",)),
        st.tuples(st.just("near"), st.sampled_from(NEAR_MISSES)),
        st.tuples(st.just("key"), st.sampled_from(["authorisation", "x-authorization", "token", "authorization-bin"])),
        st.tuples(st.sampled_from(VALID_TOKENS), st.sampled_from(fs.USERS[node]))))
    body = draw(st.sampled_from(["seed", "seed", "bytes", "large", "stall", "stall"]))
    if tok[0] in VALID_TOKENS:
        body = "stall"                 # the control: a valid token's call waits for its request
    data = draw(fs.undecodable_bytes() | st.binary(max_size=200)) if body == "bytes" else b""
    size = draw(st.sampled_from([1 << 18, 4 << 20, 16 << 20])) if body == "large" else 0
    return TokenCall(node, method, tok, body, data, size)


def _token_metadata(fz: fs.Fuzzer, tc: TokenCall) -> tuple:
    kind, *arg = tc.tok
    right = token(fz, tc.node)
    if kind == "none":
        return ()
    if kind == "empty":
        return md("")
    if kind == "text":
        return md(arg[0])
    if kind == "other_admin":
        return md(token(fz, arg[0]))
    if kind == "other_user":
        return md(token(fz, others(tc.node)[0], arg[0]))
    if kind == "digest":
        return md(digest(right))
    if kind == "near":
        return md({"upper": right.upper(), "chop": right[:-1], "extra": right + "x", "bearer_nospace": "Bearer" + right,
                   "bearer_lower": "bearer " + right, "basic": "Basic " + right, "twice": right + right}[arg[0]])
    if kind == "key":
        return ((arg[0], right.encode() if arg[0].endswith("-bin") else right),)
    if kind == "admin":
        return md(right)
    if kind == "user":
        return md(token(fz, tc.node, arg[0]))
    return md(fs.TOKEN)


def _seed(tc: TokenCall, user: str, dest: str) -> bytes:
    """A valid request of the method whose effect would show if the node ran it (a message for `user`, a route
    to `dest`); a large one carries `size` bytes more in a field the method does not have (skipped, still valid)."""
    if tc.method == "Submit/Send":
        req = submit_pb2.SendRequest(recipients=[common_pb2.Recipient(node=tc.node, user=user)], payload=b"t")
    elif tc.method == "PubSub/Subscribe":
        req = pubsub_pb2.SubscribeRequest(start=pubsub_pb2.SubscribeStart(pattern="nt.>"))
    elif tc.method == "Control/SetRoutes":
        req = control_pb2.SetRoutesRequest(routes=[control_pb2.Route(destination=dest, next_hop=fs.FAKE)])
    elif tc.method == "Control/SetRules":
        req = control_pb2.SetRulesRequest(rules_json=json.dumps([{"name": dest, "to": fs.FAKE}]))
    else:
        req = fs.SEEDS[tc.method]
    pad = fs._varint(15 << 3 | 2) + fs._varint(tc.size) + bytes(tc.size) if tc.size else b""
    return req.SerializeToString() + pad


async def drive_token(fz: fs.Fuzzer, tc: TokenCall) -> None:
    metadata = _token_metadata(fz, tc)
    valid = tc.tok[0] in VALID_TOKENS
    user, dest = marker("nt"), marker("q")
    request = tc.data if tc.body == "bytes" else _seed(tc, user, dest)
    service, name = tc.method.split("/")
    path = f"/wanbed.{service}/{name}"
    ch = fz.mgmt(tc.node)
    held = asyncio.Event()

    async def never():              # a request stream whose message never comes
        await held.wait()
        return
        yield b""

    deadline = STALL_DEADLINE if tc.body == "stall" else fs.CALL_TIMEOUT
    t0 = time.monotonic()
    try:
        if tc.method == "PubSub/Subscribe":
            call = ch.stream_stream(path, request_serializer=None, response_deserializer=None)(
                timeout=deadline, metadata=metadata)
            try:
                if tc.body != "stall":
                    await fs.send(call, request)
                got = await call.read()
                code, details = (OK, "") if got is not grpc.aio.EOF else await fs._status(call)
            finally:
                call.cancel()
        elif tc.body == "stall":
            await ch.stream_unary(path, request_serializer=None, response_deserializer=None)(
                never(), timeout=deadline, metadata=metadata)
            code, details = OK, ""
        else:
            await ch.unary_unary(path, request_serializer=None, response_deserializer=None)(
                request, timeout=deadline, metadata=metadata)
            code, details = OK, ""
    except grpc.aio.AioRpcError as exc:
        code, details = exc.code(), exc.details() or ""
    finally:
        held.set()
    took = time.monotonic() - t0
    if (code, details) == fs.WRITE_RACE and tc.method == "PubSub/Subscribe" and tc.body == "large" and not valid:
        # the node ended the stream while the client was still writing its 16 MiB start, so grpc-core lost the
        # node's status (fuzz_strategies.WRITE_RACE): refused before the request was in, which is the point
        code, details = grpc.StatusCode.UNAUTHENTICATED, "the node ended the stream before the request was in"
        fz.stats["tokenless statuses lost to a write race"] += 1
    try:
        if valid:
            # the control: with a known token the node reads the request, so a stalled one waits for it
            fz.verdict(tc.method, code, details, tc, expect=grpc.StatusCode.DEADLINE_EXCEEDED)
            return
        fz.forbid(tc.node, user)
        fz.verdict(tc.method, code, details, tc, expect=grpc.StatusCode.UNAUTHENTICATED)
        fz.stats["tokenless calls refused"] += 1
        fz.stats["tokenless slowest ms"] = max(fz.stats["tokenless slowest ms"], round(took * 1000))
        if tc.method in ("Control/SetRoutes", "Control/SetRules"):
            code, details, reply = await fs._unary(fz, tc.node, "Control/GetRoutes", control_pb2.GetRoutesRequest())
            if code == OK and (dest in {r.destination for r in reply.routes} or dest in reply.rules_json):
                fz.fail(f"a call refused UNAUTHENTICATED changed {tc.node}'s routing\n  input: {tc!r}")
    finally:
        if tc.method in ("Control/SetRoutes", "Control/SetRules"):
            await fs.restore_routing(fz, tc.node)


# -- pieces whose lifetime ended before they arrived ---------------------------------------------------------------
LATE_SEQ = fs.CANARY_SEQ + 1000        # sequence numbers of the late pieces; a valid message beside them and a
VALID_SEQ = fs.CANARY_SEQ + 2000       # late copy of an earlier one use the next blocks
DUP_SEQ = fs.CANARY_SEQ + 3000


@dataclass
class LateScript:
    """Messages sent as FAKE to `node` whose lifetime ended before they arrived: (dst, users, payload, pieces,
    as_run, expiry) with expiry ("ago", seconds) or ("at", a time.time() in the past); with `valid` a good
    message in the same batch; with `dup` a late copy of a message taken in an earlier example."""
    node: str
    messages: list
    valid: bool
    dup: bool

    _repr_pretty_ = fs._pretty

    def __repr__(self) -> str:
        return f"LateScript({self.node}, {fs.shown(self.messages, 600)}, valid={self.valid}, dup={self.dup})"


@st.composite
def late_scripts(draw) -> LateScript:
    node = draw(st.sampled_from(fs.LINK_TARGETS))
    expiry = st.one_of(st.tuples(st.just("ago"), st.sampled_from([1e-3, 0.5, 60.0, 86400.0, 3.2e8])),
                       st.tuples(st.just("ago"), st.floats(1e-3, 1e9)),
                       st.tuples(st.just("at"), st.sampled_from([5e-324, 1e-9, 1.0, 1e9])))
    message = st.tuples(st.sampled_from([node, "n2"] if node == "n1" else [node]),
                        st.lists(st.sampled_from(["", "lk", "bob"]), min_size=1, max_size=2, unique=True),
                        st.binary(max_size=3000), st.integers(1, 3), st.booleans(), expiry)
    return LateScript(node, draw(st.lists(message, min_size=1, max_size=3)), draw(st.booleans()), draw(st.booleans()))



async def drive_late(fz: fs.Fuzzer, ls: LateScript) -> None:
    late_seqs: dict[int, tuple[str, str]] = {}          # seq -> (msg_id, node whose mailbox it must never reach)
    frames: list[link_pb2.Frame] = []
    seq = LATE_SEQ
    for dst, users, payload, pieces, as_run, (how, value) in ls.messages:
        msg_id = f"late-{uuid.uuid4().hex[:12]}"
        expires = time.time() - value if how == "ago" else value
        fr = fs.message_frames(msg_id, dst, tuple(users), payload, pieces, as_run, expires, seq)
        for s in fs.answer_seqs(link_pb2.FrameBatch(frames=fr)):
            late_seqs[s] = (msg_id, dst)
        seq += 10
        frames += fr
        fz.forbid(dst, msg_id)
    valid = None
    if ls.valid:
        # named like the Link canaries, which the Submit target's DeleteMail never picks
        valid = (f"{fs.CANARY_PREFIX}{uuid.uuid4().hex[:12]}", ls.node, ("lk",), b"valid" * 300, 2, False)
        frames += fs.message_frames(*valid, time.time() + 3600, VALID_SEQ)
    earlier = [c for c in fz.memory.get("late", []) if c[1] == ls.node]
    dup_seqs: set[int] = set()
    if ls.dup and earlier:
        fr = fs.message_frames(*earlier[-1], time.time() - 1.0, DUP_SEQ)
        dup_seqs = fs.answer_seqs(link_pb2.FrameBatch(frames=fr))
        frames += fr
    frames.append(link_pb2.Frame(fragment=link_pb2.Fragment(seq=fs.PROBE_SEQ, total_size=1, data=b"?", hops=1)))
    batch = link_pb2.FrameBatch(frames=frames)
    want = fs.answer_seqs(batch)
    session = link_pb2_grpc.LinkStub(fz.data(ls.node)).Session(timeout=fs.EXAMPLE_TIMEOUT)
    acked: set[int] = set()
    refused: dict[int, str] = {}
    loop = asyncio.get_running_loop()
    try:
        await fs.send(session, fs.open_batch(fs.FAKE, ls.node))
        reply = await asyncio.wait_for(session.read(), fs.CALL_TIMEOUT)
        if reply is grpc.aio.EOF or reply.frames[0].WhichOneof("kind") != "open":
            fz.fail(f"{ls.node} did not answer a good OPEN: {reply}")
        if not await fs.send(session, batch):
            code, details = await fs._status(session)
            fz.fail(f"{ls.node} ended the session ({code.name} {details!r})\n  input: {ls!r}")
        deadline = loop.time() + fs.ANSWER_TIMEOUT
        while not want <= acked | set(refused):
            try:
                got = await asyncio.wait_for(session.read(), 0.25)
            except asyncio.TimeoutError:
                if loop.time() > deadline:
                    fz.fail(f"{ls.node} answered none of {sorted(want - acked - set(refused))[:10]} within "
                            f"{fs.ANSWER_TIMEOUT:g} s\n  input: {ls!r}")
                await fs.send(session, fs.KEEPALIVE)
                continue
            if got is grpc.aio.EOF:
                code, details = await fs._status(session)
                fz.fail(f"{ls.node} ended the session ({code.name} {details!r})\n  input: {ls!r}")
            for f in got.frames:
                if f.WhichOneof("kind") == "ack":
                    acked.update(f.ack.seqs)
                elif f.WhichOneof("kind") == "refuse":
                    refused[f.refuse.seq] = f.refuse.reason
    except grpc.aio.AioRpcError as exc:
        fz.verdict("Link/Session", exc.code(), exc.details() or "", ls, expect=OK)
    finally:
        session.cancel()
    taken = sorted(s for s in late_seqs if s in acked or refused.get(s) != EXPIRED_ON_ARRIVAL)
    if taken:
        fz.fail(f"{ls.node} did not refuse late pieces as expired: "
                + ", ".join(f"{late_seqs[s][0]} for {late_seqs[s][1]} ({'acked' if s in acked else refused[s]!r})"
                            for s in taken[:5]) + f"\n  input: {ls!r}")
    fz.stats["late pieces refused"] += len(late_seqs)
    fz.verdict("Link/Session", OK, "", ls)
    if valid is not None:
        vs = fs.answer_seqs(link_pb2.FrameBatch(frames=fs.message_frames(*valid, 1.0, VALID_SEQ)))
        if not vs <= acked:
            fz.fail(f"{ls.node} did not take a valid message sent beside late ones: "
                    f"{ {s: refused.get(s) for s in vs - acked} }\n  input: {ls!r}")
        fz.expect(ls.node, valid[0], {"lk"})
        fz.memory["late"] = (fz.memory.get("late", []) + [valid])[-20:]
    # a late copy of a message taken before is a duplicate (acked, dropped) or refused: never delivered again,
    # which Fuzzer.verify checks (exactly once)
    fz.stats["late duplicates acked"] += len(dup_seqs & acked)


# name -> (strategy, driver), like fuzz_strategies.TARGETS
TARGETS: dict[str, tuple[Callable[[], st.SearchStrategy], Callable]] = {
    "takeover": (takeovers, drive_takeover),
    "plaintext": (plaintexts, drive_plaintext),
    "certs": (cert_checks, drive_cert),
    "probes": (probe_attacks, drive_probes),
    "tokens": (token_calls, drive_token),
    "late": (late_scripts, drive_late),
}

# examples per target in the test suite (about 20 s in all); the bench multiplies them
BASE_EXAMPLES = {"takeover": 12, "plaintext": 15, "certs": 12, "probes": 4, "tokens": 25, "late": 12}
