"""Control service and lifecycle: token, routes and orphans, SIGTERM shutdown and restart."""
from __future__ import annotations

import grpc
import pytest

from node.client import NodeClient
from node.rpc import control_pb2, control_pb2_grpc
from nodenet_support import wait_until
from node.errors import UserError

pytestmark = pytest.mark.timeout(120)


def test_control_token_is_required_when_configured(localnet) -> None:
    net = localnet(hops=1, control_token="s3cret")
    addr = net.nodes["n1"].mgmt
    with grpc.insecure_channel(addr) as ch:
        stub = control_pb2_grpc.ControlStub(ch)
        with pytest.raises(grpc.RpcError) as exc:
            stub.Stats(control_pb2.StatsRequest(), timeout=5)
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError):
            stub.Drain(control_pb2.DrainRequest(timeout=1), timeout=5, metadata=(("authorization", "wrong"),))
    with NodeClient(addr, token="s3cret") as c:
        assert c.stats()["node"] == "n1"
        assert c.drain(1.0).empty
    with NodeClient(addr) as c:      # the Submit service needs no token
        assert c.send(["n2"], size=10).accepted


def test_set_routes_rejects_non_neighbours_and_reroutes_orphans(localnet) -> None:
    # triangle n1-n2, n2-n3, n1-n3; n1's direct route to n3 is replaced by a detour through n2
    net = localnet(names=["n1", "n2", "n3"], edges=[("n1", "n2"), ("n2", "n3"), ("n1", "n3")])
    with net.client("n1") as c:
        with pytest.raises(UserError, match="not a neighbour"):
            c.set_routes({"n3": "n9"})
        with pytest.raises(UserError, match="not a node name"):
            c.set_routes({"n3\n": "n2"})          # a destination that no node can have
        assert c.set_routes({"n3": "n2"}) == 1
        r = c.send(["n3"], size=1500)
        assert r.accepted
    with net.client("n3") as c:
        wait_until(lambda: c.mailbox(), 20, what="the message in the mailbox of n3")
        assert [i.hops for i in c.mailbox()] == [2]       # went the long way round


def test_sigterm_shuts_down_cleanly_and_restart_keeps_the_mailbox(localnet) -> None:
    net = localnet(hops=1)
    with net.client("n1") as c:
        ids = {c.send(["n2"], size=100).msg_id for _ in range(5)}
    with net.client("n2") as c:
        wait_until(lambda: len(c.mailbox()) == 5, 20, what="5 messages in the mailbox of n2")
    assert net.stop("n2") == 0 and net.stop("n1") == 0
    metrics = net.records("n2", "metrics")
    assert metrics and metrics[-1]["delivered"] == 5           # final metrics line written at shutdown
    net.start("n1", "n2")
    with net.client("n2") as c:
        assert {i.msg_id for i in c.mailbox()} == ids
    with net.client("n1") as c:
        assert c.status(next(iter(ids))).state == "forwarded"
        with pytest.raises(UserError, match="no message"):
            c.status("nonexistent")
