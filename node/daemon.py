"""One node daemon: spool + engine + neighbour sessions + gRPC servers + periodic jobs."""
from __future__ import annotations

import asyncio
import logging
import signal

import grpc

from node.broker.broker import Broker
from node.broker.service import PubSubService
from node.config import ConfigError, NodeConfig
from node.link import GRPC_OPTIONS, LinkManager, LinkService
from node.mailbox import Mailbox
from node.mta import Engine, make_engine
from node.rate.control import RateControl
from node.records import Records
from node.rpc_guard import DecodeGuard
from node.rpc import control_pb2_grpc, link_pb2_grpc, pubsub_pb2_grpc, submit_pb2_grpc
from node.security import tls
from node.security.tokens import TokenGuard, Tokens
from node.services import ControlService, SubmitService
from node.spool import Spool

log = logging.getLogger("node.daemon")

MGMT_RPCS = 512         # concurrent Submit/Control calls


class NodeDaemon:
    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        self.spool = Spool(cfg.spool_path, cfg.batch.commit_window, cfg.batch.max_commit)
        self.records = Records(cfg.records_dir, cfg.name)
        self.engine: Engine | None = None
        self.links: LinkManager | None = None
        self.broker: Broker | None = None
        self.rate: RateControl | None = None
        self._servers: list[grpc.aio.Server] = []
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        self.spool.open()
        self.engine = make_engine(self.cfg, self.spool, self.records)
        if self.cfg.broker.enabled:
            self.broker = Broker(self.cfg, self.engine, self.records)
        if self.cfg.rate.role:
            self.rate = RateControl(self.cfg, self.engine, self.records)
        tls_files = tls.load(self.cfg)       # before anything starts: a missing file is one clear error
        tokens = Tokens(self.cfg)
        await self.engine.recover()
        if self.broker is not None:
            await self.broker.start()    # after recovery: it reads what the inbox holds
        if self.rate is not None:
            await self.rate.start()      # after recovery: the root counts the mailbox, the client its queue
        self.links = LinkManager(self.cfg, self.engine, tls_files)
        router = self.engine.router
        for part in (router, self.broker, self.rate):
            for kind, handler in getattr(part, "frame_handlers", dict)().items():
                self.links.register(kind, handler)
        # no SO_REUSEPORT: a second daemon on the same port must fail, not silently share it
        server_opts = GRPC_OPTIONS + [("grpc.so_reuseport", 0)]
        # bounded RPCs: a session per neighbour plus room for redials and strangers being refused; clients
        # beyond the management bound get RESOURCE_EXHAUSTED instead of growing the node without limit
        data = grpc.aio.server(options=server_opts, maximum_concurrent_rpcs=4 * len(self.cfg.neighbours) + 16,
                               interceptors=[DecodeGuard()])
        link_pb2_grpc.add_LinkServicer_to_server(LinkService(self.links), data)
        # clients' keepalive pings (node/client.py KEEPALIVE_OPTIONS) are welcome, also on idle streams
        mgmt = grpc.aio.server(options=server_opts + [("grpc.keepalive_permit_without_calls", 1),
                                                      ("grpc.http2.min_recv_ping_interval_without_data_ms", 5_000),
                                                      ("grpc.http2.max_ping_strikes", 0)],
                               maximum_concurrent_rpcs=MGMT_RPCS, interceptors=[DecodeGuard(), TokenGuard(tokens)])
        mailbox = Mailbox(self.spool, self.engine.policy)
        submit_pb2_grpc.add_SubmitServicer_to_server(SubmitService(self.engine, mailbox, tokens), mgmt)
        control = ControlService(self.engine, self.cfg.control_token, tokens)
        control_pb2_grpc.add_ControlServicer_to_server(control, mgmt)
        if self.broker is not None:
            pubsub_pb2_grpc.add_PubSubServicer_to_server(PubSubService(self.broker, tokens), mgmt)
        data_creds = tls.server_credentials(tls_files) if tls_files is not None else None
        listens = [(data, addr, data_creds) for addr in self.cfg.data_addresses] + [(mgmt, self.cfg.mgmt_listen, None)]
        for server, addr, creds in listens:
            try:
                port = server.add_secure_port(addr, creds) if creds is not None else server.add_insecure_port(addr)
            except RuntimeError:
                port = 0
            if port == 0:
                raise ConfigError(f"cannot listen on {addr} (address in use or not local).")
        for server in (data, mgmt):
            await server.start()
            self._servers.append(server)
        if hasattr(router, "start"):
            await router.start()       # binds the link monitor's UDP socket: before any session comes up
        self.links.start()
        self._tasks = [asyncio.ensure_future(self._every(self.cfg.metrics_interval, self._metrics)),
                       asyncio.ensure_future(self._every(0.5, self.engine.sweep)),
                       asyncio.ensure_future(self._every(30.0, self.engine.prune)),
                       asyncio.ensure_future(self.engine.policy.run_background())]
        log.info("node %s up: data %s%s, management %s%s, mode %s", self.cfg.name,
                 ", ".join(self.cfg.data_addresses), " (mTLS)" if tls_files is not None else "",
                 self.cfg.mgmt_listen, " (tokens)" if tokens.enabled else "", self.cfg.mode)

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
        if self.engine is not None and hasattr(self.engine.router, "stop"):
            await self.engine.router.stop()       # first: closing the sessions is not a routing event
        if self.broker is not None:
            await self.broker.stop()              # ends the subscribers' streams
        if self.rate is not None:
            await self.rate.stop()
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
