"""The Submit and Control gRPC services (the management address of a node)."""
from __future__ import annotations

import asyncio
import base64
import hmac
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
from node.security.tokens import Tokens, deny, token_from

log = logging.getLogger("node.services")



async def own_user(tokens: Tokens, context, asked: str, what: str) -> str:
    """The user whose mail a call may touch: a user token only its own (an empty user means it), the admin any
    (an empty user: every user's, for reading; DeleteMail refuses it)."""
    caller = tokens.caller(context)
    if caller.admin:
        return asked
    if asked and asked != caller.user:
        await deny(context, clip(f"a user token may {what} only its own user's mail, not {asked!r}'s"))
    return caller.user


class SubmitService(submit_pb2_grpc.SubmitServicer):
    """Send, Status, ListMailbox, DeleteMail. With client tokens (security.auth) a user token sends only as its
    user and reads and deletes only its user's mail; the admin token may do all of it for anyone."""

    def __init__(self, engine: Engine, mailbox: Mailbox, tokens: Tokens | None = None) -> None:
        self.engine = engine
        self.mailbox = mailbox
        self.tokens = tokens or Tokens(engine.cfg)

    async def Send(self, request: submit_pb2.SendRequest, context) -> submit_pb2.SendReply:  # noqa: N802
        body = request.WhichOneof("body")
        if body is None:
            return submit_pb2.SendReply(accepted=False, reason="a message needs a payload or a size")
        caller = self.tokens.caller(context)
        if not caller.admin:
            if request.originator and request.originator != caller.user:
                await deny(context, clip(f"a user token sends only as its user, not as {request.originator!r}"))
            request.originator = caller.user       # reports go back to the user who really sent it
        if request.originator and not is_user_name(request.originator):
            return submit_pb2.SendReply(accepted=False, reason=f"invalid originator {request.originator!r}")
        recipients = [(r.node, r.user) for r in request.recipients]
        ok, msg_id, reason = await self.engine.submit(
            request.originator, recipients, request.payload if body == "payload" else None,
            request.size if body == "size" else None, request.priority, request.lifetime)
        return submit_pb2.SendReply(accepted=ok, msg_id=msg_id, reason=reason)

    async def Status(self, request: submit_pb2.StatusRequest, context) -> submit_pb2.StatusReply:  # noqa: N802
        caller = self.tokens.caller(context)
        # a user token: only messages its user sent here or received here (another's is NOT_FOUND too)
        state, info = await self.mailbox.status(request.msg_id, None if caller.admin else caller.user)
        if state is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, clip(f"no message {request.msg_id!r} at {self.engine.me}"))
        return submit_pb2.StatusReply(msg_id=request.msg_id, state=state, detail=json.dumps(info, default=str))

    async def ListMailbox(self, request: submit_pb2.MailboxRequest, context) -> submit_pb2.MailboxReply:  # noqa: N802
        user = await own_user(self.tokens, context, request.user, "read")
        try:
            rows, next_token = await self.mailbox.page(user, request.include_payload, request.limit,
                                                       request.page_token)
        except (ValueError, TypeError):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_token is not one this node made")
        items = [submit_pb2.MailItem(msg_id=r["msg_id"], src=r["src"], size=r["size"], submit_ts=r["submit_ts"],
                                     deliver_ts=r["deliver_ts"], hops=r["hops"], payload=r.get("payload") or b"",
                                     kind=r["kind"], user=r["user"], fragments=r["fragments"]) for r in rows]
        return submit_pb2.MailboxReply(items=items, next_page_token=next_token)

    async def DeleteMail(self, request: submit_pb2.DeleteMailRequest, context) -> submit_pb2.DeleteMailReply:  # noqa: N802
        if request.no_user:
            if request.user:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no_user deletes the node's own mail: it "
                                                                      "takes no user")
            if not self.tokens.caller(context).admin:
                await deny(context, "the mail addressed to the node without a user is the admin's to delete")
            user = ""
        else:
            user = await own_user(self.tokens, context, request.user, "delete")
            why = self._mail_user_problem(user)
            if why:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, clip(why))
        n = await self.mailbox.delete(user, list(request.msg_ids))
        return submit_pb2.DeleteMailReply(deleted=n)

    def _mail_user_problem(self, user: str) -> str | None:
        """Why DeleteMail may not delete `user`'s copies: it names one user, never a wildcard."""
        if not user:
            return ("DeleteMail needs a user (an empty user is not every user's mail; no_user deletes the mail "
                    "addressed to the node without a user)")
        if not is_user_name(user):
            return f"invalid user {user!r}"
        if self.engine.local_users and user not in self.engine.local_users:
            return f"no such user at {self.engine.me}: {user!r}"
        return None


MAX_RULES_JSON = 1 << 20     # bytes of a SetRules request's rule list
QUEUE_PAGE = 100             # copies in a ListQueue page when the request asks for no limit
QUEUE_PAGE_MAX = 1000        # ... and at most, whatever it asks

CopyKey = tuple[str, str, str, str]     # msg_id, destination, next hop, state: a ListQueue row's place


def queued_copies(engine: Engine) -> dict[CopyKey, dict]:
    """The copies the engine holds for others, by row key: pieces queued per neighbour, held, orphans. One
    synchronous pass over headers in memory (no spool reads), so nothing changes under it."""
    rows: dict[CopyKey, dict] = {}

    def add(p, hop: str, state: str) -> None:
        row = rows.get((p.msg_id, p.dst, hop, state))
        if row is None:
            row = rows[(p.msg_id, p.dst, hop, state)] = {
                "submit_ts": p.submit_ts, "expires_ts": p.expires_ts, "total": p.total, "priority": p.prio,
                "bytes": 0, "pieces": 0}
        row["bytes"] += p.size
        row["pieces"] += 1

    for name, peer in engine.peers.items():
        for p in peer.queue.pieces():
            add(p, name, "queued")
    for pend in engine.held.values():
        for p in pend.pieces:
            add(p, "", "held")
    for p in engine.orphans.values():
        add(p, "", "orphan")
    return rows


def _queue_token(key: CopyKey) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode()


def _queue_after(token: str) -> CopyKey | None:
    """The row a ListQueue page token names; a token this node did not make raises ValueError."""
    if not token:
        return None
    key = json.loads(base64.urlsafe_b64decode(token.encode()))
    if not (isinstance(key, list) and len(key) == 4 and all(isinstance(k, str) for k in key)):
        raise ValueError("not a queue page token")
    return tuple(key)      # type: ignore[return-value]


class ControlService(control_pb2_grpc.ControlServicer):
    """Management calls: the admin token's (a user token may only ask Health). Without client tokens a
    configured legacy control_token is needed as metadata authorization=<token>."""

    def __init__(self, engine: Engine, token: str, tokens: Tokens | None = None) -> None:
        self.engine = engine
        self.token = token
        self.tokens = tokens or Tokens(engine.cfg)

    async def _check(self, context, users_too: bool = False) -> None:
        if self.tokens.enabled:        # TokenGuard let only known tokens through
            if not (users_too or self.tokens.caller(context).admin):
                await deny(context, "the Control service needs the admin token")
            return
        if not self.token:
            return
        got = token_from(context.invocation_metadata())
        if not hmac.compare_digest(got.encode(), self.token.encode()):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong control token")

    async def Stats(self, request, context) -> control_pb2.StatsReply:  # noqa: N802
        await self._check(context)
        # records_failed: record lines this daemon could not write (node/records.py). Only here, not in the
        # snapshot: metrics.jsonl goes through the same writer, so it cannot be where such failures are told.
        rec = {"ts": time.time(), "node": self.engine.me, **self.engine.snapshot(),
               "records_failed": self.engine.records.failed}
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

    async def ListQueue(self, request: control_pb2.QueueRequest, context) -> control_pb2.QueueReply:  # noqa: N802
        """One page of the copies held for others, in (msg_id, destination, next hop, state) order."""
        await self._check(context)
        try:
            after = _queue_after(request.page_token)
        except (ValueError, TypeError, UnicodeDecodeError):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "page_token is not one this node made")
        limit = min(request.limit or QUEUE_PAGE, QUEUE_PAGE_MAX)
        rows = queued_copies(self.engine)
        keys = sorted(k for k in rows if after is None or k > after)
        page, more = keys[:limit], len(keys) > limit
        reply = control_pb2.QueueReply(next_page_token=_queue_token(page[-1]) if more else "")
        for key in page:
            r = rows[key]
            reply.items.add(msg_id=key[0], destination=key[1], next_hop=key[2], state=key[3],
                            submit_ts=r["submit_ts"], bytes=r["bytes"], pieces=r["pieces"], total=r["total"],
                            priority=r["priority"], expires_ts=r["expires_ts"])
        return reply

    async def Health(self, request, context) -> control_pb2.HealthReply:  # noqa: N802
        await self._check(context, users_too=True)
        return control_pb2.HealthReply(node=self.engine.me, ready=True)
