"""The one seam a node subsystem plugs into: routing, the broker, rate control, security, and whatever comes next.

A subsystem is a `Subsystem` subclass with a `name` and defaults for every hook, so it overrides only what it
uses (like a section of testbed/scenario/sections/base.py, or the optional hooks of an aiosmtpd handler). The
daemon (node/daemon.py) makes one instance per entry of `node/registry.py` ENTRIES that the node's config
switches on (importing only those), in that order, and calls the hooks at fixed points of its life:

  construction    `config` (its section of the node config, read and validated with the core's)
                  `router` (exactly one enabled subsystem gives the engine its Router)
                  `wrap_policy`, `wrap_queue` (layers over the admission policy and each link's queue)
  with the engine `attach(engine)`, then the engine's hooks object takes `frame_handlers`, `message_kinds`,
                  `on_delivery`, `on_session` and `snapshot` (node/hooks.py EngineHooks)
  servers         `credentials` (the Link service's and the dialler's), `management_credentials` (the
                  management port's TLS), `server_interceptors` and `authorizer` (the management services),
                  `services` (gRPC services it adds to the management server)
  running         `start` after the engine recovered and before any session, `stop` before the sessions close

A subsystem that is not switched on by its config answers False from `enabled` and is then never asked again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol

from node.config import NodeConfig
from node.hooks import MessageKind
from node.piece import Piece

# The engine, router, spool, records, peers and queues are typed Any here: this module is imported by the
# link layer and by every subsystem, and must not import the engine back.
FrameHandler = Callable[[Any, Any], None]          # (node.peer.Peer, link_pb2.Frame)


class Authorizer(Protocol):
    """Who a management call's caller is (node/security/tokens.py Tokens is the one the node uses)."""
    enabled: bool

    def caller(self, context: Any) -> Any: ...


class LinkCredentials(Protocol):
    """The Link service's transport security (node/security/tls.py)."""

    def server(self) -> Any: ...                             # grpc.ServerCredentials for the data port
    def dial(self, addr: str, peer: str, options: list) -> Any: ...   # a grpc.aio channel to neighbour `peer`
    def names(self, context: Any) -> set[str]: ...           # the node names a caller's certificate proves


class Subsystem:
    """Defaults for every hook: a subsystem overrides what it uses."""

    name: ClassVar[str] = ""
    config: ClassVar[type | None] = None        # the dataclass of its config section `name:`; None: no section

    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg

    @property
    def section(self) -> Any:
        """This subsystem's config section (an instance of `config`)."""
        return self.cfg.sections[self.name]

    def enabled(self) -> bool:
        return True

    # -- building the engine --------------------------------------------------------------------------
    def router(self, spool: Any, records: Any) -> Any:
        return None

    def wrap_policy(self, policy: Any) -> Any:
        """The admission policy with this subsystem's layer over it (or unchanged)."""
        return policy

    def wrap_queue(self, peer: str, queue: Any, wake: Callable[[], None]) -> Any:
        """The link scheduler towards `peer` with this subsystem's layer over it (or unchanged)."""
        return queue

    # -- with the engine -----------------------------------------------------------------------------
    def attach(self, engine: Any) -> None:
        """The engine exists (recovery has not run yet): build what runs."""

    def frame_handlers(self) -> dict[str, FrameHandler]:
        """Link frame kinds it handles: a field of Frame's oneof, or the kind of an `extension` frame (any other
        name). Each is announced in OPEN as a capability; a session uses the kinds both ends announced."""
        return {}

    def message_kinds(self) -> list[MessageKind]:
        return []

    def on_delivery(self, piece: Piece, size: int) -> None:
        """A mail copy was delivered here (durably, once per copy)."""

    def on_session(self, peer: str, up: bool) -> None:
        """A Link session to `peer` came up or went down (after the router was told)."""

    def snapshot(self) -> dict | None:
        """Its section of each metrics record (under `name`), or None for none."""
        return None

    # -- servers ---------------------------------------------------------------------------------------
    def credentials(self) -> LinkCredentials | None:
        return None

    def management_credentials(self) -> Any:
        """grpc.ServerCredentials for the management port (Submit, Control, PubSub), or None: plaintext."""
        return None

    def server_interceptors(self) -> list:
        return []

    def authorizer(self) -> Authorizer | None:
        return None

    def services(self, server: Any, authorizer: Authorizer) -> None:
        """Add its gRPC services to the management server."""

    # -- running ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def overrides(self, hook: str) -> bool:
        """Whether this subsystem has its own `hook` (so a default no-op is never called per message)."""
        return getattr(type(self), hook) is not getattr(Subsystem, hook)


@dataclass(frozen=True)
class Admin:
    user: str = ""
    admin: bool = True


class OpenAuthorizer:
    """Every caller is the admin: the authorizer of a node no subsystem gives one (no client tokens)."""
    enabled = False

    def caller(self, context: Any) -> Admin:
        return Admin()
