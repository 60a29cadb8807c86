"""The Submit and Control gRPC services (the management address of a node)."""
from __future__ import annotations

import asyncio
import json
import logging
import math
import time

import grpc

from node.errors import clip
from node.mailbox import Mailbox
from node.mta import Engine
from node.names import is_node_name, is_user_name
from node.routing.rules import RuleError
from node.rpc import control_pb2, control_pb2_grpc, submit_pb2, submit_pb2_grpc

log = logging.getLogger("node.services")



class SubmitService(submit_pb2_grpc.SubmitServicer):
    def __init__(self, engine: Engine, mailbox: Mailbox) -> None:
        self.engine = engine
        self.mailbox = mailbox

    async def Send(self, request: submit_pb2.SendRequest, context) -> submit_pb2.SendReply:  # noqa: N802
        body = request.WhichOneof("body")
        if body is None:
            return submit_pb2.SendReply(accepted=False, reason="a message needs a payload or a size")
        if request.originator and not is_user_name(request.originator):
            return submit_pb2.SendReply(accepted=False, reason=f"invalid originator {request.originator!r}")
        recipients = [(r.node, r.user) for r in request.recipients]
        ok, msg_id, reason = await self.engine.submit(
            request.originator, recipients, request.payload if body == "payload" else None,
            request.size if body == "size" else None, request.priority, request.lifetime)
        return submit_pb2.SendReply(accepted=ok, msg_id=msg_id, reason=reason)

    async def Status(self, request: submit_pb2.StatusRequest, context) -> submit_pb2.StatusReply:  # noqa: N802
        state, info = await self.mailbox.status(request.msg_id)
        if state is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, clip(f"no message {request.msg_id!r} at {self.engine.me}"))
        return submit_pb2.StatusReply(msg_id=request.msg_id, state=state, detail=json.dumps(info, default=str))

    async def ListMailbox(self, request: submit_pb2.MailboxRequest, context) -> submit_pb2.MailboxReply:  # noqa: N802
        try:
            rows, next_token = await self.mailbox.page(request.user, request.include_payload, request.limit,
                                                       request.page_token)
        except (ValueError, TypeError):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_token is not one this node made")
        items = [submit_pb2.MailItem(msg_id=r["msg_id"], src=r["src"], size=r["size"], submit_ts=r["submit_ts"],
                                     deliver_ts=r["deliver_ts"], hops=r["hops"], payload=r.get("payload") or b"",
                                     kind=r["kind"], user=r["user"], fragments=r["fragments"]) for r in rows]
        return submit_pb2.MailboxReply(items=items, next_page_token=next_token)

    async def DeleteMail(self, request: submit_pb2.DeleteMailRequest, context) -> submit_pb2.DeleteMailReply:  # noqa: N802
        n = await self.mailbox.delete(request.user, list(request.msg_ids))
        return submit_pb2.DeleteMailReply(deleted=n)


MAX_RULES_JSON = 1 << 20     # bytes of a SetRules request's rule list


class ControlService(control_pb2_grpc.ControlServicer):
    """Management calls; with a configured token they need metadata authorization=<token>."""

    def __init__(self, engine: Engine, token: str) -> None:
        self.engine = engine
        self.token = token

    async def _check(self, context) -> None:
        if not self.token:
            return
        got = dict(context.invocation_metadata() or ()).get("authorization", "")
        if got not in (self.token, f"Bearer {self.token}"):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong control token")

    async def Stats(self, request, context) -> control_pb2.StatsReply:  # noqa: N802
        await self._check(context)
        rec = {"ts": time.time(), "node": self.engine.me, **self.engine.snapshot()}
        return control_pb2.StatsReply(json=json.dumps(rec))

    async def Drain(self, request: control_pb2.DrainRequest, context) -> control_pb2.DrainReply:  # noqa: N802
        """Wait (up to timeout seconds) until this node has handed on everything it holds for others."""
        await self._check(context)
        deadline = time.monotonic() + max(0.0, min(request.timeout or 10.0, 3600.0))
        while self.engine.outstanding() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        left = self.engine.outstanding()
        return control_pb2.DrainReply(empty=left == 0, remaining=left)

    async def SetRoutes(self, request: control_pb2.SetRoutesRequest, context) -> control_pb2.SetRoutesReply:  # noqa: N802
        await self._check(context)
        routes = {r.destination: r.next_hop for r in request.routes}
        bad_dst = [d for d in routes if not is_node_name(d)]
        if bad_dst:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                clip(f"destination {bad_dst[0]!r} is not a node name"))
        bad = [h for h in routes.values() if h not in self.engine.cfg.neighbours]
        if bad:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, clip(f"next hop {bad[0]!r} is not a neighbour"))
        return control_pb2.SetRoutesReply(installed=self.engine.set_routes(routes))

    async def GetRoutes(self, request, context) -> control_pb2.GetRoutesReply:  # noqa: N802
        """The routing table (destination, next hop, path cost, how learned), the links and the rules."""
        await self._check(context)
        router = self.engine.router
        reply = control_pb2.GetRoutesReply(node=self.engine.me, mode=getattr(router, "mode", "static"),
                                           rules_json=getattr(router, "rules_json", lambda: "[]")())
        table = router.table() if hasattr(router, "table") else []
        for dst, hop, cost, learned in table:
            reply.routes.add(destination=dst, next_hop=hop, cost=cost, learned=learned)
        links = router.links() if hasattr(router, "links") else {}
        for peer, link in links.items():
            cost = link.get("cost")
            reply.links.add(neighbour=peer, up=bool(link.get("up")), latency_ms=link.get("latency_ms") or 0.0,
                            sd_ms=link.get("sd_ms") or 0.0, jitter_ms=link.get("jitter_ms") or 0.0,
                            loss=link.get("loss") or 0.0, probes_sent=link.get("probes_sent") or 0,
                            probes_answered=link.get("probes_answered") or 0,
                            cost=math.inf if cost is None else cost, suppressed=bool(link.get("suppressed")))
        return reply

    async def SetRules(self, request: control_pb2.SetRulesRequest, context) -> control_pb2.SetRulesReply:  # noqa: N802
        """Replace the routing rules; an invalid list is refused whole and the old rules stay."""
        await self._check(context)
        if len(request.rules_json) > MAX_RULES_JSON:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"rules_json is over {MAX_RULES_JSON} bytes")
        try:
            raw = json.loads(request.rules_json or "[]")
        except RecursionError:      # nested deeper than the parser goes: not a ValueError, it escaped as UNKNOWN
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "rules_json is nested too deeply")
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"rules_json is not JSON: {exc}")
        try:
            installed = self.engine.router.set_rules(raw)
        except RuleError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, clip(str(exc)))
        except AttributeError:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this node's router takes no rules")
        return control_pb2.SetRulesReply(installed=installed)

    async def Health(self, request, context) -> control_pb2.HealthReply:  # noqa: N802
        await self._check(context)
        return control_pb2.HealthReply(node=self.engine.me, ready=True)
