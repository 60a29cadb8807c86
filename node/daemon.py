"""One node daemon: spool + engine + neighbour sessions + gRPC servers + periodic jobs, and its subsystems
(node/registry.py ENTRIES, each plugged in through node/subsystem.py)."""
from __future__ import annotations

import asyncio
import logging
import signal
from typing import Sequence

import grpc

from node.config import ConfigError, NodeConfig
from node.link import GRPC_OPTIONS, LinkManager, LinkService
from node.mailbox import Mailbox
from node.mta import Engine, make_engine
from node.records import Records
from node import registry
from node.rpc import control_pb2_grpc, link_pb2, link_pb2_grpc, submit_pb2_grpc
from node.rpc_guard import DecodeGuard
from node.services import ControlService, SubmitService
from node.spool import Spool
from node.subsystem import OpenAuthorizer, Subsystem

log = logging.getLogger("node.daemon")

MGMT_RPCS = 512         # concurrent Submit/Control calls
PRUNE_EVERY = 30.0      # seconds between prunes of what only matters while a message can still arrive


def _first(found: list, what: str):
    """The one subsystem answer of a kind that only one may give (None when none does)."""
    if len(found) > 1:
        raise ConfigError(f"more than one subsystem gives the node its {what}.")
    return found[0] if found else None


class NodeDaemon:
    def __init__(self, cfg: NodeConfig, subsystems: Sequence[type[Subsystem]] | None = None) -> None:
        """`subsystems`: the subsystem classes to run (default: those of node/registry.py its config switches
        on); `cfg` must have been read with their config sections (node/registry.py config_from_dict)."""
        self.cfg = cfg
        self.spool = Spool(cfg.spool_path, cfg.batch.commit_window, cfg.batch.max_commit)
        self.records = Records(cfg.records_dir, cfg.name)
        every = [cls(cfg) for cls in (registry.subsystems_for(cfg) if subsystems is None else subsystems)]
        self.subsystems: list[Subsystem] = [s for s in every if s.enabled()]
        self.engine: Engine | None = None
        self.links: LinkManager | None = None
        self._servers: list[grpc.aio.Server] = []
        self._tasks: list[asyncio.Task] = []

    def subsystem(self, name: str) -> Subsystem | None:
        """The running subsystem of that name, if it is enabled."""
        return next((s for s in self.subsystems if s.name == name), None)

    async def start(self) -> None:
        subs = self.subsystems
        # before anything starts: a missing certificate file is one clear error
        creds = _first([c for c in (s.credentials() for s in subs) if c is not None], "Link credentials")
        # without them the management port is plaintext: anyone on the host can listen to it (docs/live-network.md)
        mgmt_creds = _first([c for c in (s.management_credentials() for s in subs) if c is not None],
                            "management credentials")
        authorizer = _first([a for a in (s.authorizer() for s in subs) if a is not None], "authorizer")
        authorizer = authorizer or OpenAuthorizer()
        self.spool.open()
        self.engine = make_engine(self.cfg, self.spool, self.records, subsystems=subs)
        await self.engine.recover()
        for s in subs:
            await s.start()          # after recovery (the broker reads its inbox), before any session
        self.links = LinkManager(self.cfg, self.engine, creds)
        for s in subs:
            for kind, handler in s.frame_handlers().items():
                if kind in link_pb2.Frame.DESCRIPTOR.fields_by_name:
                    self.links.register(kind, handler)
                else:
                    self.links.register_extension(kind, handler)
        # no SO_REUSEPORT: a second daemon on the same port must fail, not silently share it
        server_opts = GRPC_OPTIONS + [("grpc.so_reuseport", 0)]
        # bounded RPCs: a session per neighbour plus room for redials and strangers being refused; clients
        # beyond the management bound get RESOURCE_EXHAUSTED instead of growing the node without limit
        data = grpc.aio.server(options=server_opts, maximum_concurrent_rpcs=4 * len(self.cfg.neighbours) + 16,
                               interceptors=[DecodeGuard()])
        link_pb2_grpc.add_LinkServicer_to_server(LinkService(self.links), data)
        # clients' keepalive pings (node/client.py KEEPALIVE_OPTIONS) are welcome, also on idle streams
        interceptors = [DecodeGuard(), *(i for s in subs for i in s.server_interceptors())]
        mgmt = grpc.aio.server(options=server_opts + [("grpc.keepalive_permit_without_calls", 1),
                                                      ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
                                                      ("grpc.http2.max_ping_strikes", 0)],
                               maximum_concurrent_rpcs=MGMT_RPCS, interceptors=interceptors)
        mailbox = Mailbox(self.spool, self.engine.policy)
        submit_pb2_grpc.add_SubmitServicer_to_server(SubmitService(self.engine, mailbox, authorizer), mgmt)
        control = ControlService(self.engine, self.cfg.control_token, authorizer)
        control_pb2_grpc.add_ControlServicer_to_server(control, mgmt)
        for s in subs:
            s.services(mgmt, authorizer)
        data_creds = creds.server() if creds is not None else None
        listens = [(data, addr, data_creds) for addr in self.cfg.data_addresses] + \
            [(mgmt, self.cfg.mgmt_listen, mgmt_creds)]
        for server, addr, server_creds in listens:
            try:
                port = (server.add_secure_port(addr, server_creds) if server_creds is not None
                        else server.add_insecure_port(addr))
            except RuntimeError:
                port = 0
            if port == 0:
                raise ConfigError(f"cannot listen on {addr} (address in use or not local).")
        for server in (data, mgmt):
            await server.start()
            self._servers.append(server)
        self.links.start()
        self._tasks = [asyncio.ensure_future(self._every(self.cfg.metrics_interval, self._metrics)),
                       asyncio.ensure_future(self._every(0.5, self.engine.sweep)),
                       asyncio.ensure_future(self._every(PRUNE_EVERY, self.engine.prune)),
                       asyncio.ensure_future(self.engine.policy.run_background())]
        log.info("node %s up: data %s%s, management %s%s%s, mode %s, subsystems %s", self.cfg.name,
                 ", ".join(self.cfg.data_addresses), " (mTLS)" if creds is not None else "", self.cfg.mgmt_listen,
                 " (TLS)" if mgmt_creds is not None else "", " (tokens)" if authorizer.enabled else "", self.cfg.mode,
                 ", ".join(s.name for s in subs) or "none")

    async def _metrics(self) -> None:
        self.records.write("metrics", **self.engine.snapshot())

    async def _every(self, interval: float, job) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await job()
            except Exception:
                log.exception("periodic job %s failed", getattr(job, "__name__", job))

    async def stop(self) -> None:
        """Clean shutdown: stop sessions and servers, finish spool work, flush records."""
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.engine is not None:
            for s in self.subsystems:             # in registry order: routing first, closing sessions is no event
                await s.stop()
        if self.links is not None:
            await self.links.stop()
        for s in self._servers:
            await s.stop(grace=0.5)
        if self.engine is not None:
            await self.engine.settle()
            self.records.write("metrics", **self.engine.snapshot())
        self.spool.close()
        self.records.close()
        log.info("node %s stopped", self.cfg.name)

    async def serve(self) -> None:
        """Run until SIGTERM or SIGINT."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()
