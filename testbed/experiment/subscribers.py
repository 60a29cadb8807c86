"""The subscriber clients of a repetition (the scenario's `subscriptions:`), one thread each.

Each client subscribes at its node's PubSub service and, for every delivery, writes a line to
subscribers/<node>/<name>/receipts.jsonl (the first arrival of each publication id only) and then
acknowledges it: the client edge where "exactly once" is defined. A stream that breaks (its node was
killed, paused past its deadline, restarted) is opened again with backoff until the repetition ends; a
durable subscription then gets again what it had not acknowledged, which the client recognises by
publication id (counted as `redelivered` when the node flagged it so, as `duplicates` when it did not).
At the end each client writes subscriber.json beside its receipts (docs/run-directory.md).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from node.backoff import Backoff
from node.client import Access, NodeClient, Subscription
from node.errors import UserError
from testbed.scenario.spec import SubscriptionSpec

log = logging.getLogger(__name__)

BACKOFF_MIN = 0.2
BACKOFF_MAX = 2.0


def keep_streaming(stop: threading.Event, reachable: Callable[[], bool], stream: Callable[[], None],
                   note: Callable[[str], None]) -> None:
    """A subscriber client's life: run `stream` while the node is reachable, note why a stream ended, and start
    again after a backoff (with jitter) until `stop` is set. Shared by the subscribers and the pools' instances."""
    backoff = Backoff(BACKOFF_MIN, BACKOFF_MAX)
    while not stop.is_set():
        if reachable():
            try:
                stream()
                backoff.reset()
            except UserError as exc:
                if not stop.is_set():
                    note(str(exc))
        if stop.wait(backoff.wait()):
            return


class SubscriberClient:
    def __init__(self, spec: SubscriptionSpec, address: str, directory: Path,
                 reachable: Callable[[str], bool], token: Access = Access()) -> None:
        self.spec = spec
        self.address = address
        self.token = token
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._reachable = reachable
        self.seen: set[str] = set()
        self.deliveries = 0
        self.redelivered = 0
        self.duplicates = 0
        self.by_topic: dict[str, dict[str, int]] = {"duplicates": {}, "redelivered": {}}
        self.dropped = 0           # the node's running total for the current stream (non-durable)
        self.dropped_before = 0    # totals of streams that ended
        self.streams = 0
        self.errors: list[str] = []
        self.subscribed = threading.Event()
        self._stop = threading.Event()
        self._sub: Subscription | None = None
        self._lock = threading.Lock()
        self._file = open(self.dir / "receipts.jsonl", "a", buffering=1)
        self._thread = threading.Thread(target=self._run, name=f"sub-{spec.node}-{spec.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        keep_streaming(self._stop, lambda: self._reachable(self.spec.node), self._stream, self._note)

    def _stream(self) -> None:
        s = self.spec
        with NodeClient.to(self.address, self.token) as client:
            sub = client.subscribe(s.pattern, name=s.name, durable=s.durable)
            with self._lock:
                self._sub = sub
            if self._stop.is_set():
                sub.close()
            try:
                for ev in sub:
                    kind = ev.WhichOneof("kind")
                    if kind == "delivery":
                        self._received(ev.delivery)
                        sub.ack([ev.delivery.pub_id])
                    elif kind == "subscribed":
                        self.streams += 1
                        self.dropped_before += self.dropped
                        self.dropped = 0
                        self.subscribed.set()
                    elif kind == "dropped":
                        self.dropped = int(ev.dropped.total)
            finally:
                with self._lock:
                    self._sub = None

    def _received(self, d: Any) -> None:
        self.deliveries += 1
        if d.pub_id in self.seen:
            what = "redelivered" if d.redelivered else "duplicates"
            setattr(self, what, getattr(self, what) + 1)
            self.by_topic[what][d.topic] = self.by_topic[what].get(d.topic, 0) + 1
            return
        self.seen.add(d.pub_id)
        now = time.time()
        rec = {"ts": now, "node": self.spec.node, "subscription": self.spec.name, "durable": self.spec.durable,
               "pub_id": d.pub_id, "topic": d.topic, "origin": d.origin, "publish_ts": d.publish_ts,
               "latency": now - d.publish_ts, "size": int(d.size), "hops": int(d.hops), "key": d.key}
        # written (line-buffered) before the ack goes back: what was acknowledged is on record
        self._file.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def _note(self, error: str) -> None:
        if not self.errors or self.errors[-1] != error:
            self.errors.append(error)
            del self.errors[:-20]
        log.info("subscriber %s/%s: %s", self.spec.node, self.spec.name, error)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            if self._sub is not None:
                self._sub.close()
        self._thread.join(timeout)
        self._file.close()
        s = self.spec
        (self.dir / "subscriber.json").write_text(json.dumps({
            "node": s.node, "name": s.name, "pattern": s.pattern, "durable": s.durable,
            "deliveries": self.deliveries, "received": len(self.seen), "redelivered": self.redelivered,
            "duplicates": self.duplicates, "dropped": self.dropped_before + self.dropped, "streams": self.streams,
            "duplicates_by_topic": self.by_topic["duplicates"], "redelivered_by_topic": self.by_topic["redelivered"],
            "errors": self.errors}, indent=1) + "\n")


class Subscribers:
    """All subscriber clients of a repetition."""

    def __init__(self, specs: list[SubscriptionSpec], rep_dir: Path, address: Callable[[str], str],
                 reachable: Callable[[str], bool], tokens: dict[str, Access] | None = None) -> None:
        self.clients = [SubscriberClient(s, address(s.node), Path(rep_dir) / "subscribers" / s.node / s.name,
                                         reachable, (tokens or {}).get(s.node, Access())) for s in specs]

    def start(self, timeout: float, stop: threading.Event) -> list[str]:
        """Start every client and wait until each is subscribed; returns those that were not in time."""
        for c in self.clients:
            c.start()
        deadline = time.monotonic() + timeout
        for c in self.clients:
            while not c.subscribed.wait(0.1):
                if stop.is_set() or time.monotonic() > deadline:
                    break
        return [f"{c.spec.node}/{c.spec.name}" for c in self.clients if not c.subscribed.is_set()]

    def backlog(self, client: Callable[[str], NodeClient]) -> dict[str, int | str]:
        """Durable subscriptions whose node still holds publications for them (node/name -> count)."""
        out: dict[str, int | str] = {}
        for node in sorted({c.spec.node for c in self.clients if c.spec.durable}):
            try:
                with client(node) as nc:
                    infos = nc.subscriptions()
                    inbox = int(nc.stats().get("broker", {}).get("inbox", 0))
            except UserError:
                out[f"{node}/*"] = "unreachable"
                continue
            for i in infos:
                if i.durable and i.backlog:
                    out[f"{node}/{i.name}"] = int(i.backlog)
            if inbox:
                out[f"{node}/inbox"] = inbox
        return out

    def stop(self) -> None:
        for c in self.clients:
            try:
                c.stop()
            except Exception as exc:  # noqa: BLE001 - one client's end must not cost the others their files
                log.warning("stopping subscriber %s/%s failed: %s", c.spec.node, c.spec.name, exc)
