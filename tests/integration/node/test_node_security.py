"""Authenticated nodes and clients on real daemons over loopback with `tls` and `auth` on.

Link: a caller without a certificate, with a certificate of another CA, or with another node's certificate of the
run's CA is refused, and the live session of the node it claims to be stays up (no reconnect). Clients: a missing
or wrong token (another node's admin token too) is UNAUTHENTICATED (never a traceback), a user sends only as itself,
reads, deletes and asks the status of only its own mail, the admin sees everything, Control is the admin's; a
durable subscription is its owner's (and the admin's), also after a restart.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from node.client import SubscriptionEnded
from node.link import _open_batch
from node.rpc import control_pb2, control_pb2_grpc, link_pb2_grpc, pubsub_pb2, pubsub_pb2_grpc, submit_pb2, \
    submit_pb2_grpc
from node.rpc.common_pb2 import Recipient
from node.security import tls
from testbed import secrets

from nodenet_support import wait_until

ROOT = Path(__file__).resolve().parents[3]
NAMES = ["n1", "n2", "n3"]
EDGES = [("n1", "n2"), ("n2", "n3")]
USERS = {n: ["alice", "bob"] for n in NAMES}


async def _pose(addr: str, creds: grpc.ChannelCredentials | None, claim: str) -> tuple[grpc.StatusCode, str]:
    """Dial n2's data port with `creds` (None: plaintext), send an OPEN claiming to be `claim`: how it ended."""
    channel = (grpc.aio.secure_channel(addr, creds, options=[(tls.TARGET_NAME_OPTION, "n2")]) if creds is not None
               else grpc.aio.insecure_channel(addr))
    try:
        call = link_pb2_grpc.LinkStub(channel).Session(timeout=10)
        await call.write(_open_batch(claim, "n2", 1, 5.0, ["runs"]))
        reply = await call.read()
        return grpc.StatusCode.OK, f"answered {reply}"
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    finally:
        await channel.close()


def _creds(directory: Path, ca: Path) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=ca.read_bytes(),
                                        private_key=(directory / "node.key").read_bytes(),
                                        certificate_chain=(directory / "node.crt").read_bytes())


def _n1_session(net) -> dict:
    with net.client("n2") as c:
        return c.stats()["neighbours"]["n1"]


def test_only_the_named_neighbour_gets_a_session_and_the_live_one_stays(localnet, tmp_path: Path) -> None:
    net = localnet(names=NAMES, edges=EDGES, tls=True, auth=True, users=USERS)
    with net.client("n1") as c:
        assert c.send(["alice@n3"], size=5000).accepted
    wait_until(lambda: len(net.records("n3", "delivery")) == 1, 15, what="a delivery over mTLS")
    before = _n1_session(net)
    assert before["up"]

    run_ca = net.workdir / "n2" / "ca.crt"
    stranger = secrets.make_stranger(tmp_path / "stranger", "n1")      # named n1, but not by the run's CA
    addr = net.nodes["n2"].cfg.data_listen
    plain = asyncio.run(_pose(addr, None, "n1"))
    other_ca = asyncio.run(_pose(addr, _creds(stranger, run_ca), "n1"))
    other_node = asyncio.run(_pose(addr, _creds(net.workdir / "n3", run_ca), "n1"))    # n3's own certificate
    assert plain[0] == grpc.StatusCode.UNAVAILABLE, plain
    assert other_ca[0] == grpc.StatusCode.UNAVAILABLE, other_ca
    assert other_node == (grpc.StatusCode.UNAUTHENTICATED, "the certificate does not name 'n1'"), other_node

    after = _n1_session(net)
    assert after["up"] and after["reconnects"] == before["reconnects"], (before, after)
    with net.client("n1") as c:
        assert c.send(["bob@n3"], size=5000).accepted
    wait_until(lambda: len(net.records("n3", "delivery")) == 2, 15, what="the live session to carry on")
    log = (net.workdir / "n2" / "node.log").read_text()
    assert "claiming to be 'n1'" in log and "Traceback" not in log


async def _open(addr: str, claim: str, peer: str, version: int) -> grpc.StatusCode:
    """A plaintext OPEN with the given names and version: how n2 answered."""
    async with grpc.aio.insecure_channel(addr) as channel:
        call = link_pb2_grpc.LinkStub(channel).Session(timeout=10)
        batch = _open_batch(claim, peer, 1, 5.0, ["runs"])
        batch.frames[0].open.version = version
        try:
            await call.write(batch)
            await call.read()
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK


def test_without_tls_an_open_that_fails_a_check_leaves_the_live_session(localnet) -> None:
    net = localnet(names=NAMES[:2], edges=EDGES[:1])
    before = _n1_session(net)
    addr = net.nodes["n2"].cfg.data_listen
    assert asyncio.run(_open(addr, "n1", "n9", 1)) == grpc.StatusCode.PERMISSION_DENIED     # calls someone else
    assert asyncio.run(_open(addr, "n1", "n2", 99)) == grpc.StatusCode.FAILED_PRECONDITION  # another version
    assert asyncio.run(_open(addr, "n7", "n2", 1)) == grpc.StatusCode.PERMISSION_DENIED     # not a neighbour
    after = _n1_session(net)
    assert after["up"] and after["reconnects"] == before["reconnects"], (before, after)


def _stubs(net, node: str, token: str | None):
    channel = grpc.insecure_channel(net.nodes[node].mgmt)
    md = (("authorization", token),) if token is not None else ()
    return channel, md, submit_pb2_grpc.SubmitStub(channel), control_pb2_grpc.ControlStub(channel), \
        pubsub_pb2_grpc.PubSubStub(channel)


def _code(fn, *args, **kw) -> grpc.StatusCode:
    try:
        fn(*args, timeout=10, **kw)
    except grpc.RpcError as exc:
        assert exc.details() and "Traceback" not in exc.details()
        return exc.code()
    return grpc.StatusCode.OK


def test_tokens_decide_who_sends_reads_deletes_and_manages(localnet) -> None:
    net = localnet(names=NAMES[:2], edges=EDGES[:1], auth=True, users=USERS, local_users=["alice", "bob"])
    send = submit_pb2.SendRequest(recipients=[Recipient(node="n2", user="bob")], size=100)
    for token in (None, "", "not-a-token"):
        channel, md, submit, control, pubsub = _stubs(net, "n1", token)
        with channel:
            assert _code(submit.Send, send, metadata=md) == grpc.StatusCode.UNAUTHENTICATED
            assert _code(submit.ListMailbox, submit_pb2.MailboxRequest(), metadata=md) == \
                grpc.StatusCode.UNAUTHENTICATED
            assert _code(control.Stats, control_pb2.StatsRequest(), metadata=md) == grpc.StatusCode.UNAUTHENTICATED
            assert _code(pubsub.Publish, pubsub_pb2.PublishRequest(topic="t", size=1), metadata=md) == \
                grpc.StatusCode.UNAUTHENTICATED
            stream = pubsub.Subscribe(iter([pubsub_pb2.SubscribeRequest(start=pubsub_pb2.SubscribeStart(pattern="t"))]),
                                      metadata=md, timeout=10)
            with pytest.raises(grpc.RpcError) as info:
                list(stream)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED

    alice1 = net.secrets.token("n1", "alice")
    channel, md, submit, control, _ = _stubs(net, "n1", alice1)
    with channel:
        spoof = submit_pb2.SendRequest(originator="bob", recipients=[Recipient(node="n2", user="bob")], size=100)
        assert _code(submit.Send, spoof, metadata=md) == grpc.StatusCode.PERMISSION_DENIED
        sent = {}
        for user in ("alice", "bob"):
            r = submit.Send(submit_pb2.SendRequest(recipients=[Recipient(node="n2", user=user)], size=100),
                            metadata=md, timeout=10)
            assert r.accepted, r.reason
            sent[user] = r.msg_id
        assert submit.Status(submit_pb2.StatusRequest(msg_id=sent["bob"]), metadata=md, timeout=10).state
        assert _code(control.Stats, control_pb2.StatsRequest(), metadata=md) == grpc.StatusCode.PERMISSION_DENIED
        assert _code(control.ListQueue, control_pb2.QueueRequest(), metadata=md) == grpc.StatusCode.PERMISSION_DENIED
        assert control.Health(control_pb2.HealthRequest(), metadata=md, timeout=10).ready
    assert net.records("n1", "submission")[-1]["originator"] == "alice"   # the token's user, not a claim
    channel, md, submit, _, _ = _stubs(net, "n1", net.secrets.token("n1", "bob"))
    with channel:           # alice's messages are not bob's business
        assert _code(submit.Status, submit_pb2.StatusRequest(msg_id=sent["bob"]), metadata=md) == \
            grpc.StatusCode.NOT_FOUND
    wait_until(lambda: len(net.records("n2", "delivery")) == 2, 15, what="both deliveries")

    with net.client("n2", user="alice") as alice, net.client("n2", user="bob") as bob, net.client("n2") as admin:
        everyone = admin.mailbox()
        assert sorted(i.user for i in everyone) == ["alice", "bob"]
        mine = alice.mailbox()                          # an empty user means the token's user
        assert [i.user for i in mine] == ["alice"]
        with pytest.raises(Exception, match="only its own user's mail"):
            alice.mailbox(user="bob")
        bobs = [i.msg_id for i in everyone if i.user == "bob"]
        # Status: a user token learns only of its own messages (received here, or sent here: above at n1)
        assert bob.status(sent["bob"]).state == "delivered"
        with pytest.raises(Exception, match="no message"):
            bob.status(sent["alice"])
        # DeleteMail names one known user, even for the admin: an empty user is not everyone's copies
        channel, md, submit, _, _ = _stubs(net, "n2", net.secrets.token("n2"))
        with channel:
            for user in ("", "carol", "not a name"):
                req = submit_pb2.DeleteMailRequest(user=user, msg_ids=list(sent.values()))
                assert _code(submit.DeleteMail, req, metadata=md) == grpc.StatusCode.INVALID_ARGUMENT, user
            req = submit_pb2.DeleteMailRequest(user="bob", msg_ids=list(sent.values()), no_user=True)
            assert _code(submit.DeleteMail, req, metadata=md) == grpc.StatusCode.INVALID_ARGUMENT
        channel, md, submit, _, _ = _stubs(net, "n2", net.secrets.token("n2", "bob"))
        with channel:       # the node's own mail (no user) is the admin's
            req = submit_pb2.DeleteMailRequest(msg_ids=list(sent.values()), no_user=True)
            assert _code(submit.DeleteMail, req, metadata=md) == grpc.StatusCode.PERMISSION_DENIED
        assert len(admin.mailbox()) == 2
        assert alice.delete_mail(bobs) == 0             # not hers: nothing deleted
        with pytest.raises(Exception, match="only its own user's mail"):
            alice.delete_mail(bobs, user="bob")
        assert [i.msg_id for i in bob.mailbox()] == bobs
        assert bob.delete_mail(bobs) == 1
        assert [i.user for i in admin.mailbox()] == ["alice"]
    for n in net.nodes:
        assert "Traceback" not in (net.workdir / n / "node.log").read_text()

    # the CLI: another node's admin token is one sentence (exit 2), with n2's own the admin's view
    def tb(*args: str, token: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "testbed", *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=60, env={**os.environ, "WANBED_TOKEN": token})
    a2 = net.nodes["n2"].mgmt
    out = tb("mailbox", "n2", "--json", "--address", a2, token=net.secrets.token("n1"))
    assert out.returncode == 2 and "refused the call: unknown token" in out.stderr and "Traceback" not in out.stderr
    out = tb("mailbox", "n2", "--json", "--address", a2, token=net.secrets.token("n2"))
    assert out.returncode == 0 and [i["user"] for i in json.loads(out.stdout)] == ["alice"], out.stderr


def _next(events, pool: concurrent.futures.ThreadPoolExecutor):
    """The next event of a subscription stream, or an exception after 10 s (a stream never blocks the test)."""
    return pool.submit(next, events).result(timeout=10)


def _subscribe(client, name: str, pool: concurrent.futures.ThreadPoolExecutor) -> str:
    """"OK" once a durable subscribe to `name` is confirmed (then closed), else the code that ended it."""
    sub = client.subscribe("t.>", name=name, durable=True)
    try:
        return "OK" if _next(iter(sub), pool).subscribed.name == name else "?"
    except SubscriptionEnded as exc:
        return exc.code
    finally:
        sub.close()


def test_a_durable_subscription_is_its_owners(localnet) -> None:
    """Only the owner or the admin attaches, lists or removes; a user owns at most max_durable_per_user; the
    owner survives a restart."""
    net = localnet(names=["n1"], edges=[], auth=True, users={"n1": ["alice", "bob"]},
                   broker={"max_durable_per_user": 2})
    tokens = {u: net.secrets.token("n1", u) for u in ("alice", "bob")} | {"admin": net.secrets.token("n1")}
    pool = concurrent.futures.ThreadPoolExecutor(4)
    with net.client("n1", user="alice") as alice, net.client("n1", user="bob") as bob, net.client("n1") as admin:
        mine = alice.subscribe("t.>", name="a1", durable=True)
        events = iter(mine)
        assert _next(events, pool).subscribed.name == "a1"
        first = admin.publish("t.x", size=10).pub_id
        assert _next(events, pool).delivery.pub_id == first          # not acknowledged: it stays queued
        # bob can neither attach (so neither receive nor acknowledge) nor remove it, and alice's stream goes on
        assert _subscribe(bob, "a1", pool) == "PERMISSION_DENIED"
        channel, md, _, _, pubsub = _stubs(net, "n1", tokens["bob"])
        with channel:
            assert _code(pubsub.Unsubscribe, pubsub_pb2.UnsubscribeRequest(name="a1"), metadata=md) == \
                grpc.StatusCode.PERMISSION_DENIED
        second = admin.publish("t.x", size=10).pub_id
        assert _next(events, pool).delivery.pub_id == second
        # a user sees only its own (and no advertised ones); the admin all, with owners
        assert [(i.name, i.owner, i.backlog) for i in alice.subscriptions()] == [("a1", "alice", 2)]
        assert bob.subscriptions(remote=True) == []
        # at most 2 durable subscriptions per user; the admin's are not counted
        assert _subscribe(alice, "a2", pool) == "OK"
        assert _subscribe(alice, "a3", pool) == "RESOURCE_EXHAUSTED"
        assert _subscribe(admin, "ops", pool) == "OK"
        mine.close()
    net.stop("n1")
    net.start("n1")
    with net.client("n1", user="alice") as alice, net.client("n1", user="bob") as bob, net.client("n1") as admin:
        assert [(i.name, i.owner) for i in admin.subscriptions()] == [("a1", "alice"), ("a2", "alice"), ("ops", "")]
        assert _subscribe(bob, "a1", pool) == "PERMISSION_DENIED"        # the owner came back from the spool
        assert _subscribe(alice, "a3", pool) == "RESOURCE_EXHAUSTED"
        assert alice.unsubscribe("a1").discarded == 2                 # what bob could not take is still there
        assert admin.unsubscribe("a2").removed
    pool.shutdown(wait=False)
