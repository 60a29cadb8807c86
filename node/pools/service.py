"""The Pools gRPC service (GetPools): the controller's view at a replica, for `testbed pools` and people.

Any replica answers (a follower's replicated state may lag its leader's by the commands in flight) and names
the leader; a node that is no replica answers FAILED_PRECONDITION in one sentence. With client tokens only the
admin may ask (PERMISSION_DENIED for a user token): the maps show every consumer and instance of the network.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

import grpc

from node.rpc import pools_pb2, pools_pb2_grpc
from node.subsystem import Authorizer


class ControllerView(Protocol):
    """What the service reads of a controller (node/pools/controller.py PoolController)."""

    def state(self) -> dict: ...
    def is_leader(self) -> bool: ...


def reply_from_state(node: str, state: dict, leader: str, is_leader: bool) -> pools_pb2.GetPoolsReply:
    """The reply for a replicated pool state (the controller's state dict: apps, consumers, connections, load)."""
    out = pools_pb2.GetPoolsReply(node=node, leader=leader, is_leader=is_leader, term=int(state.get("term", 0)),
                                  version=int(state.get("version", 0)))
    load: dict[str, dict[str, float]] = state.get("load", {})
    connections: dict[str, dict[str, str]] = state.get("connections", {})
    per_instance: dict[tuple[str, str], float] = {}
    for consumer, apps in sorted(connections.items()):
        for app, instance in sorted(apps.items()):
            rate = float(load.get(consumer, {}).get(app, 0.0))
            per_instance[(app, instance)] = per_instance.get((app, instance), 0.0) + rate
            out.connections.add(consumer=consumer, app=app, instance=instance, load=rate)
    for name, a in sorted(state.get("apps", {}).items()):
        out.apps.add(name=name, algorithm=a.get("algorithm", ""), move_share=float(a.get("move_share", 0.0)),
                     types=list(a.get("types", [])))
        for instance, i in sorted(a.get("instances", {}).items()):
            out.instances.add(app=name, instance=instance, node=i.get("node", ""), state=i.get("state", ""),
                              load=per_instance.get((name, instance), 0.0))
    for name, c in sorted(state.get("consumers", {}).items()):
        out.consumers.add(name=name, node=c.get("node", ""), types=list(c.get("types", [])))
    return out


class PoolsService(pools_pb2_grpc.PoolsServicer):
    def __init__(self, node: str, controller: Callable[[], ControllerView | None], leader: Callable[[], str],
                 authorizer: Authorizer) -> None:
        """`controller`: this replica's controller (None: not a replica, or not started); `leader`: the leader's
        node name, "" while there is none."""
        self.node = node
        self.controller = controller
        self.leader = leader
        self.authorizer = authorizer

    async def GetPools(self, request: pools_pb2.GetPoolsRequest, context: Any) -> pools_pb2.GetPoolsReply:  # noqa: N802
        if not self.authorizer.caller(context).admin:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "GetPools is for the admin token only")
        ctl = self.controller()
        if ctl is None:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"{self.node} is not a pool controller replica (pools.replicas)")
        return reply_from_state(self.node, ctl.state(), self.leader(), ctl.is_leader())
