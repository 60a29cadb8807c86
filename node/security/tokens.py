"""Client tokens on the management services (Submit, Control, PubSub).

A call carries its token as metadata `authorization: <token>` (or `Bearer <token>`). The node config holds only
SHA-256 digests (security.auth): the admin's and one per local user. `TokenGuard`, a server interceptor, answers
every call without a known token UNAUTHENTICATED before any servicer runs and before its request is read; the
services then ask `caller()` who is calling and answer PERMISSION_DENIED when a user token asks for what only
the admin or another user may do. The testbed gives every node an admin token of its own, so one node's admin
token is unknown at every other.
Without digests (auth off) every caller is the admin, as before, and the legacy `control_token` alone still
guards the Control service (node/services.py).
"""
from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

import grpc

from node.config import NodeConfig
from node.rpc import control_pb2

METADATA_KEY = "authorization"
CONTROL_METHODS = f"/{control_pb2.DESCRIPTOR.services_by_name['Control'].full_name}/"    # a method path's start
ADMIN = ""          # Caller.user of the admin
NOBODY = "\0"       # not a valid user name: owns nothing, may do nothing


@dataclass(frozen=True)
class Caller:
    user: str           # ADMIN ("") for the admin token (or any caller with auth off)

    @property
    def admin(self) -> bool:
        return self.user == ADMIN


def digest(token: str) -> str:
    """What a config stores for a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_from(metadata: Iterable[tuple[str, Any]] | None) -> str:
    for key, value in metadata or ():
        if key == METADATA_KEY:
            text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
            return text[len("Bearer "):] if text.startswith("Bearer ") else text
    return ""


class Tokens:
    """Who a token is: the admin, a local user, or nobody. Every digest is compared, in constant time each."""

    def __init__(self, cfg: NodeConfig) -> None:
        auth = cfg.security.auth
        self.enabled = auth.enabled
        self._known: list[tuple[str, str]] = []         # (digest, user) with ADMIN for the admin
        if auth.admin:
            self._known.append((auth.admin, ADMIN))
        self._known.extend((d, u) for u, d in sorted(auth.users.items()))
        if self.enabled and cfg.control_token:
            # the legacy Control token keeps working as an admin token when auth is on
            self._known.append((digest(cfg.control_token), ADMIN))
        self._control = "" if self.enabled else cfg.control_token    # without auth it guards Control alone

    def identify(self, token: str) -> Caller | None:
        if not self.enabled:
            return Caller(ADMIN)
        if not token:
            return None
        got = digest(token)
        found: Caller | None = None
        for d, user in self._known:          # no early exit: the time does not tell which digest matched
            if hmac.compare_digest(got, d) and found is None:
                found = Caller(user)
        return found

    def refusal(self, token: str, method: str) -> str | None:
        """Why a call of `method` (its path) carrying `token` is refused, or None when it may go on: with client
        tokens any call without a known one; without them a Control call without the legacy control_token."""
        if self.enabled:
            if self.identify(token) is not None:
                return None
            return "missing token (metadata authorization)" if not token else "unknown token"
        if self._control and method.startswith(CONTROL_METHODS) and \
                not hmac.compare_digest(token.encode(), self._control.encode()):
            return "missing or wrong control token"
        return None

    def caller(self, context: Any) -> Caller:
        """The caller of a call that passed TokenGuard (so it is known); a stranger gets a user no mailbox has."""
        return self.identify(token_from(context.invocation_metadata())) or Caller(NOBODY)


async def deny(context: Any, message: str) -> None:
    await context.abort(grpc.StatusCode.PERMISSION_DENIED, message)


class TokenGuard(grpc.aio.ServerInterceptor):
    """UNAUTHENTICATED for a management call without a known token, whatever the method (new ones included), or
    without client tokens for a Control call without the legacy control_token; before the request is read: the
    metadata arrives first, so a stranger's request body (up to the 64 MiB a message may have, on each of the
    management server's concurrent calls) is never read or decoded."""

    def __init__(self, tokens: Tokens) -> None:
        self.tokens = tokens

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None:
            return handler
        message = self.tokens.refusal(token_from(details.invocation_metadata), details.method)
        if message is None:
            return handler

        async def refuse(_requests: Any, context: Any) -> Any:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

        # A handler for a request STREAM, whatever the method's kind: grpc reads a unary request in full (and
        # decodes it) before calling the handler, a stream only when the handler asks for a message, which
        # this one never does. The wire is the same either way; the reply is the status alone.
        if handler.unary_unary is not None or handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(refuse)
        return grpc.stream_stream_rpc_method_handler(refuse)
