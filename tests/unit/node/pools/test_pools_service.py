"""GetPools (node/pools/service.py): the reply built from the replicated state, and who may ask."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from node.pools.service import PoolsService, reply_from_state
from node.rpc import pools_pb2
from node.security.tokens import Caller

STATE = {"term": 3, "version": 7,
         "apps": {"A": {"algorithm": "load_aware", "move_share": 0.5, "types": ["t1"],
                        "instances": {"i1": {"node": "n3", "state": "active"},
                                      "i2": {"node": "n4", "state": "leaving"}}}},
         "consumers": {"c1": {"node": "n1", "types": ["t1"]}, "c2": {"node": "n2", "types": ["t1"]}},
         "connections": {"c1": {"A": "i1"}, "c2": {"A": "i1"}},
         "load": {"c1": {"A": 2.5}, "c2": {"A": 1.0}}}


def test_the_reply_carries_the_maps_and_the_load_per_instance() -> None:
    r = reply_from_state("r2", STATE, "r1", False)
    assert (r.node, r.leader, r.is_leader, r.term, r.version) == ("r2", "r1", False, 3, 7)
    assert [(a.name, a.algorithm, list(a.types)) for a in r.apps] == [("A", "load_aware", ["t1"])]
    assert [(i.instance, i.node, i.state, i.load) for i in r.instances] == [("i1", "n3", "active", 3.5),
                                                                             ("i2", "n4", "leaving", 0.0)]
    assert [(c.consumer, c.instance, c.load) for c in r.connections] == [("c1", "i1", 2.5), ("c2", "i1", 1.0)]
    assert [c.name for c in r.consumers] == ["c1", "c2"]


class Aborted(Exception):
    pass


class Context:
    """The two things the service asks of a gRPC context."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise Aborted(details)


class Auth:
    enabled = True

    def __init__(self, user: str) -> None:
        self.user = user

    def caller(self, context: object) -> Caller:
        return Caller(self.user)


class Controller:
    def state(self) -> dict:
        return STATE

    def is_leader(self) -> bool:
        return True


def ask(user: str, controller: Controller | None) -> tuple[pools_pb2.GetPoolsReply | None, Context]:
    ctx = Context()
    svc = PoolsService("r1", lambda: controller, lambda: "r1", Auth(user))
    try:
        return asyncio.run(svc.GetPools(pools_pb2.GetPoolsRequest(), ctx)), ctx
    except Aborted:
        return None, ctx


@pytest.mark.parametrize("user, controller, code, words", [
    ("alice", Controller(), grpc.StatusCode.PERMISSION_DENIED, "admin token only"),
    ("", None, grpc.StatusCode.FAILED_PRECONDITION, "r1 is not a pool controller replica"),
])
def test_a_user_token_or_a_node_that_is_no_replica_gets_one_clear_error(user, controller, code, words) -> None:
    reply, ctx = ask(user, controller)
    assert reply is None and ctx.code == code and words in ctx.details


def test_the_admin_gets_the_view_of_a_replica() -> None:
    reply, ctx = ask("", Controller())
    assert ctx.code is None and reply.is_leader and reply.leader == "r1" and reply.version == 7
