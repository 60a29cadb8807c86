"""The Gateway gRPC service (proto/gateway.proto) on the management address: the admin's only, like Control
(with client tokens the admin token; without them the legacy control_token when one is set)."""
from __future__ import annotations

import hmac
import json
import logging
import math
from typing import Any

import grpc

from node.errors import clip
from node.gateway.policy import accept_request
from node.names import is_user_name
from node.rpc import gateway_pb2, gateway_pb2_grpc
from node.security.tokens import deny, token_from
from node.subsystem import Authorizer

log = logging.getLogger("node.gateway")


class GatewayService(gateway_pb2_grpc.GatewayServicer):
    def __init__(self, sub: Any, authorizer: Authorizer) -> None:
        self.sub = sub                 # node.gateway.subsystem.GatewaySubsystem
        self.authorizer = authorizer
        self.token = sub.cfg.control_token

    async def _check(self, context: Any) -> None:
        if self.authorizer.enabled:
            if not self.authorizer.caller(context).admin:
                await deny(context, "the Gateway service needs the admin token")
            return
        if self.token and not hmac.compare_digest(token_from(context.invocation_metadata()).encode(),
                                                  self.token.encode()):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong control token")

    def _reply(self) -> gateway_pb2.GatewayReply:
        return gateway_pb2.GatewayReply(json=json.dumps(self.sub.snapshot()))

    async def GetGateway(self, request: gateway_pb2.GetGatewayRequest,  # noqa: N802
                         context: Any) -> gateway_pb2.GatewayReply:
        await self._check(context)
        return self._reply()

    async def SetGateway(self, request: gateway_pb2.SetGatewayRequest,  # noqa: N802
                         context: Any) -> gateway_pb2.GatewayReply:
        await self._check(context)
        policy = self.sub.manager.policy
        gamma = request.gamma if request.HasField("gamma") else None
        threshold = request.threshold if request.HasField("threshold") else None
        lower = request.lower if request.HasField("lower") else None
        why = None
        if gamma is not None and not (math.isfinite(gamma) and -1.0 <= gamma <= 1.0):
            why = f"gamma must be a number from -1 to 1, got {gamma!r}"
        elif threshold is not None and threshold < 1:
            why = "threshold must be at least 1 message"
        elif (lower if lower is not None else policy.lower) >= (threshold if threshold is not None
                                                               else policy.threshold):
            why = (f"lower ({lower if lower is not None else policy.lower:g}) must be below the threshold "
                   f"({threshold if threshold is not None else policy.threshold:g})")
        if why:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, clip(why))
        policy.set(gamma, threshold, lower)
        changed = {k: v for k, v in (("gamma", gamma), ("threshold", threshold), ("lower", lower)) if v is not None}
        self.sub.manager.records.decision("set", "none", "", policy.gamma, 0, policy.threshold, policy.maxrate,
                                          changed)
        log.info("%s: gateway set %s", self.sub.cfg.name, changed)
        return self._reply()

    async def RequestUser(self, request: gateway_pb2.UserRequest, context: Any) -> gateway_pb2.UserReply:  # noqa: N802
        await self._check(context)
        r, d, pct = request.throughput, request.guarantee, request.percent
        why = None
        if not is_user_name(request.user):
            why = f"invalid user {request.user!r}"
        elif not (math.isfinite(r) and r >= 0):
            why = f"throughput must be a number of messages per second of at least 0, got {r!r}"
        elif not (math.isfinite(d) and 0 <= d <= 1):
            why = f"guarantee must be a number from 0 to 1, got {d!r}"
        elif not (math.isfinite(pct) and 0 <= pct <= 100):
            why = f"percent must be a number from 0 to 100, got {pct!r}"
        if why:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, clip(why))
        m = self.sub.manager
        users = self.sub.section.users
        # what is sold already: every other user's THROUGHPUT (Formula 4: not more than MAXRATE)
        admitted = sum(u.throughput or 0.0 for name, u in users.items() if name != request.user)
        ok, reason = accept_request(m.policy.gamma, r, d, pct / 100.0, admitted, m.original(), m.phi_out)
        m.records.decision("request", "accept" if ok else "refuse", "", m.policy.gamma, 0, m.policy.threshold,
                           m.policy.maxrate, {"user": request.user, "throughput": r, "guarantee": d,
                                              "percent": pct, "why": reason})
        return gateway_pb2.UserReply(accept=ok, why=reason)


def add_service(server: Any, sub: Any, authorizer: Authorizer) -> None:
    gateway_pb2_grpc.add_GatewayServicer_to_server(GatewayService(sub, authorizer), server)
