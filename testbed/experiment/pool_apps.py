"""The application instances of a repetition (the scenario's `pools:`): one client (a thread) per instance.

Each instance holds the durable subscription `pool.<app>.<instance>.>` (named `pool.<app>.<instance>`) at its
node and beats on `_pools.hb.<instance>` as its application's user (node/pools/messages.py InstanceBeat). What
arrives on it:
  pool.<app>.<me>.<consumer>.<type>      an event, key `<event id>:<seq>:<map version>`
  pool.<app>.<me>.<consumer>._fence      a fence from the consumer node (publisher "" only)
  pool.<app>.<me>.<consumer>._acked      the predecessor's Acked: it processed the pair's events up to the fence
  pool.<app>.<me>.<dead>._drained        a successor drained the dead instance's backlog
Once it releases the events a fence held (fence.py FenceDone) it says so on `_pools.done.<consumer>`, where the
consumer's node records the handover's pause (`fence_done`).
The fence state machine (node/pools/fence.py InstanceFence) says which events to process and when; an event is
processed by writing its receipt line (the subscribers' record, docs/run-directory.md, with `app`,
`instance`, `consumer`, `seq` and `event_id`) BEFORE it is acknowledged, and an event whose id is already on
record (its own receipts, or a dead predecessor's, read before it takes over) is acknowledged without a second
line. Control messages get a receipt line too (`control`: their kind), so the pub/sub account sees every
publication on the instance's subscription arrive.

Faults (testbed/experiment/faults.py): `pool_join` starts an instance the scenario held back, `pool_leave`
makes it announce a leave, drain to backlog 0 and unsubscribe, `pool_kill` ends its client abruptly: no ack,
no drain, no heartbeat any more, the stream cut (the instances are threads of the testbed, so this is the
client's death as its node sees it, not a signal to a process). A crashed instance's successor is the first
instance that gets a fence from it: it attaches to the dead one's subscription by name, processes its backlog
once (InstanceFence.on_backlog), unsubscribes it at backlog 0 and tells the application's other instances
(`_drained`).

Files: subscribers/<node>/pool.<app>.<instance>/receipts.jsonl and instance.json (its counters and fence
pauses); a successor writes the receipts of a dead instance's backlog into the dead one's receipts.jsonl (they
are that subscription's).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from node.client import Access, NodeClient, Subscription
from node.errors import UserError
from node.pools.fence import Acked, Drained, Fence, FenceDone, InstanceFence, Step
from node.pools.messages import BadMessage, parse_acked, parse_drained, parse_event_key, parse_fence
from node.pools.sender import DONE_TOPIC
from testbed.experiment.subscribers import keep_streaming

log = logging.getLogger(__name__)

FENCE, ACKED, DRAINED = "_fence", "_acked", "_drained"


def subscription_name(app: str, instance: str) -> str:
    return f"pool.{app}.{instance}"


def instance_dir(rep_dir: Path, node: str, app: str, instance: str) -> Path:
    """Beside the subscribers' (testbed/experiment/subscribers.py): the pub/sub account reads its receipts too."""
    return Path(rep_dir) / "subscribers" / node / subscription_name(app, instance)


def read_event_ids(path: Path) -> set[str]:
    """The event ids an instance's receipts.jsonl records (a torn last line is skipped)."""
    out: set[str] = set()
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.add(str(json.loads(line)["event_id"]))
        except (ValueError, KeyError, TypeError):
            continue
    return out


@dataclass
class Outcome:
    """What one delivery leads to: receipt lines to write, then pub_ids to acknowledge, then publications."""
    receipts: list[dict[str, Any]] = field(default_factory=list)
    ack: list[str] = field(default_factory=list)
    publish: list[tuple[str, bytes]] = field(default_factory=list)
    refused: str | None = None


class InstanceLogic:
    """An instance's decisions, without I/O: deliveries in, outcomes out (unit-tested on its own)."""

    def __init__(self, app: str, me: str, node: str, seen: set[str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.app = app
        self.me = me
        self.node = node
        self.fence = InstanceFence(me)
        self.seen: set[str] = set(seen or ())      # event ids processed by this instance or a drained predecessor
        self.control_seen: set[str] = set()        # pub_ids of control messages on record
        self.clock = clock
        self.fences: dict[tuple[str, int, int], Fence] = {}    # (consumer, term, version) -> the fence
        self.waiting: dict[tuple[str, int, int], float] = {}   # incoming fence -> when it arrived
        self.pauses: list[float] = []                           # seconds from an incoming fence to its FenceDone
        self.received = self.duplicates = self.refused = 0

    def on_delivery(self, d: Any) -> Outcome:
        parts = d.topic.split(".")
        if len(parts) != 5 or parts[0] != "pool" or parts[1] != self.app or parts[2] != self.me:
            return self._refuse(d, f"topic {d.topic!r} is not pool.{self.app}.{self.me}.<consumer>.<type>")
        consumer, kind = parts[3], parts[4]
        try:
            if kind == FENCE:
                if d.publisher:
                    raise BadMessage(f"a fence from user {d.publisher!r}: only the consumer's node sends them")
                f = parse_fence(d.payload)
                self.fences[(f.consumer, f.term, f.version)] = f
                if f.new == self.me:
                    self.waiting.setdefault((f.consumer, f.term, f.version), self.clock())
                step = self.fence.on_fence(f)
            elif kind == ACKED:
                step = self.fence.on_predecessor_acked(parse_acked(d.payload))
            elif kind == DRAINED:
                step = self.fence.on_drained(parse_drained(d.payload))
            else:
                key = parse_event_key(d.key)
                step = self.fence.on_event(consumer, self.app, key.seq, d)
                out = self._step(step)
                if step.ignored:        # a delivery again of one held or processed: nothing new to record
                    self.duplicates += 1
                    out.ack.insert(0, d.pub_id)
                return out
        except BadMessage as exc:
            return self._refuse(d, str(exc))
        out = self._control(d, kind, self.node, self.me)
        more = self._step(step)
        out.receipts += more.receipts
        out.ack += more.ack
        out.publish += more.publish
        if step.refused:
            self.refused += 1
            out.refused = step.refused
        return out

    def on_backlog(self, d: Any, node: str, dead: str) -> Outcome:
        """A delivery from dead instance `dead`'s subscription at `node` (crash takeover): events processed once,
        control messages only put on record (a successor's Drained stands for the dead one's Acked)."""
        parts = d.topic.split(".")
        if len(parts) != 5 or parts[4].startswith("_"):
            return self._control(d, parts[-1], node, dead)
        try:
            key = parse_event_key(d.key)
        except BadMessage as exc:
            return self._refuse(d, str(exc))
        return self._step(self.fence.on_backlog(parts[3], self.app, key.seq, d), (node, dead))

    def drained(self, dead: str) -> Outcome:
        """This instance drained `dead`'s backlog: open what waited for it."""
        return self._step(self.fence.on_drained(Drained(self.app, dead)))

    def _record(self, d: Any, node: str, instance: str, **extra: Any) -> dict[str, Any]:
        now = self.clock()
        return {"ts": now, "node": node, "subscription": subscription_name(self.app, instance), "durable": True,
                "pub_id": d.pub_id, "topic": d.topic, "origin": d.origin, "publish_ts": d.publish_ts,
                "latency": now - d.publish_ts, "size": int(d.size), "hops": int(d.hops), "key": d.key,
                "app": self.app, "instance": self.me, **extra}

    def _control(self, d: Any, kind: str, node: str, instance: str) -> Outcome:
        out = Outcome(ack=[d.pub_id])
        if d.pub_id not in self.control_seen:
            self.control_seen.add(d.pub_id)
            out.receipts.append(self._record(d, node, instance, control=kind))
        return out

    def _step(self, step: Step, where: tuple[str, str] | None = None) -> Outcome:
        """`where`: the (node, instance) whose subscription the released events came from (default: this one)."""
        node, instance = where or (self.node, self.me)
        out = Outcome()
        for r in step.released:
            d = r.event
            key = parse_event_key(d.key)
            if key.event_id in self.seen:
                self.duplicates += 1
            else:
                self.seen.add(key.event_id)
                self.received += 1
                out.receipts.append(self._record(d, node, instance, consumer=r.consumer, seq=r.seq,
                                                 event_id=key.event_id))
            out.ack.append(d.pub_id)
        for msg in step.send:
            if isinstance(msg, Acked):
                fence = self.fences.get((msg.consumer, msg.term, msg.version))
                if fence is not None and fence.new != self.me:
                    body = {"consumer": msg.consumer, "app": msg.app, "seq": msg.seq, "instance": msg.instance,
                            "version": msg.version, "term": msg.term}
                    out.publish.append((f"pool.{self.app}.{fence.new}.{msg.consumer}.{ACKED}",
                                        json.dumps(body, sort_keys=True).encode()))
            elif isinstance(msg, FenceDone):
                began = self.waiting.pop((msg.consumer, msg.term, msg.version), None)
                if began is not None:
                    self.pauses.append(self.clock() - began)
                # the consumer's node times the handover from its fence_sent (its fence_done line)
                body = {"consumer": msg.consumer, "app": msg.app, "seq": msg.seq, "instance": msg.instance,
                        "version": msg.version, "term": msg.term}
                out.publish.append((f"{DONE_TOPIC}.{msg.consumer}", json.dumps(body, sort_keys=True).encode()))
        return out

    def _refuse(self, d: Any, why: str) -> Outcome:
        self.refused += 1
        return Outcome(ack=[d.pub_id], refused=why)


class Dead:
    """The instances the run killed, and which successor claimed each one's backlog (shared by the clients)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dead: set[tuple[str, str]] = set()
        self._claimed: dict[tuple[str, str], str] = {}

    def add(self, app: str, instance: str) -> None:
        with self._lock:
            self._dead.add((app, instance))

    def claim(self, app: str, instance: str, successor: str) -> bool:
        """True for the first successor of a dead instance: it drains the backlog."""
        with self._lock:
            if (app, instance) not in self._dead or (app, instance) in self._claimed:
                return False
            self._claimed[(app, instance)] = successor
            return True


class PoolInstance:
    """One application instance's client (a thread)."""

    def __init__(self, app: str, name: str, peers: dict[str, str], address: Callable[[str], str], rep_dir: Path,
                 reachable: Callable[[str], bool], tokens: dict[str, Access], heartbeat: float,
                 crash_timeout: float, dead: Dead) -> None:
        """`peers`: every instance of the application -> its node (this one included); `address`: node -> its
        management target; `tokens`: node -> what the client carries there (its application's token, or the
        node's admin token in a run without user tokens)."""
        self.app, self.name, self.node, self.peers = app, name, peers[name], peers
        self.where = address
        self.address = address(self.node)
        self.rep_dir = Path(rep_dir)
        self.dir = instance_dir(rep_dir, self.node, app, name)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logic = InstanceLogic(app, name, self.node, read_event_ids(self.dir / "receipts.jsonl"))
        self.tokens = tokens
        self.token = tokens.get(self.node, Access())
        self.heartbeat = heartbeat
        self.crash_timeout = crash_timeout
        self.dead = dead
        self._reachable = reachable
        self.state = "active"
        self.backlog = -1
        self.errors: list[str] = []
        self.takeovers: list[str] = []
        self.started = self.left = self.killed = 0.0
        self.subscribed = threading.Event()
        self._stop = threading.Event()
        self._crashed = threading.Event()
        self._lock = threading.Lock()          # the receipts file, the logic and the subscription
        self._sub: Subscription | None = None
        self._files: dict[Path, Any] = {}      # receipts.jsonl files written (its own, a dead predecessor's)
        self._threads = [threading.Thread(target=self._run, name=f"pool-{app}-{name}", daemon=True),
                         threading.Thread(target=self._beat, name=f"pool-hb-{app}-{name}", daemon=True)]

    # -- life --------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.started = time.time()
        for t in self._threads:
            t.start()

    def leave(self) -> None:
        """Announce a leave; the client unsubscribes and ends once its backlog stays at 0 (see _beat)."""
        self.state = "leaving"
        self.left = time.time()

    def kill(self) -> None:
        """The client's death as the node sees it: the stream is cut, nothing more is acknowledged or beaten."""
        self.killed = time.time()
        self.state = "killed"
        self._crashed.set()
        self._stop.set()
        with self._lock:
            if self._sub is not None:
                self._sub.close(wait=0.0)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            if self._sub is not None:
                self._sub.close()
        for t in self._threads:
            if t.is_alive():
                t.join(timeout)
        with self._lock:
            for f in self._files.values():
                f.close()
        lg = self.logic
        (self.dir / "instance.json").write_text(json.dumps({
            "app": self.app, "instance": self.name, "node": self.node, "state": self.state,
            "received": lg.received, "duplicates": lg.duplicates, "refused": lg.refused,
            "fence_pauses_s": [round(p, 6) for p in lg.pauses], "held": sum(lg.fence.held().values()),
            "takeovers": self.takeovers, "started": self.started, "left": self.left or None,
            "killed": self.killed or None, "errors": self.errors}, indent=1) + "\n")

    # -- the subscription --------------------------------------------------------------------------------
    def _run(self) -> None:
        keep_streaming(self._stop, lambda: self._reachable(self.node), self._stream, self._note)

    def _stream(self) -> None:
        with NodeClient.to(self.address, self.token) as client:
            sub = client.subscribe(f"pool.{self.app}.{self.name}.>", name=subscription_name(self.app, self.name),
                                   durable=True)
            with self._lock:
                self._sub = sub
            if self._stop.is_set():
                sub.close()
            try:
                for ev in sub:
                    kind = ev.WhichOneof("kind")
                    if kind == "subscribed":
                        self.subscribed.set()
                    elif kind == "delivery":
                        self._handle(client, sub, self.logic.on_delivery, ev.delivery)
            finally:
                with self._lock:
                    self._sub = None

    def _handle(self, client: NodeClient, sub: Subscription, how: Callable[[Any], Outcome], d: Any) -> None:
        with self._lock:
            if self._crashed.is_set():
                return
            out = how(d)
            self._write(out.receipts)     # on record (line-buffered) before the ack goes back
            sub.ack(out.ack)
        if out.refused:
            self._note(out.refused)
        for topic, body in out.publish:
            self._publish(client, topic, body)
        if d.topic.endswith(f".{FENCE}"):
            self._maybe_take_over(client, d)

    def _write(self, receipts: list[dict[str, Any]]) -> None:
        """Receipt lines, each into its subscription's receipts.jsonl (the caller holds the lock)."""
        for rec in receipts:
            path = self.rep_dir / "subscribers" / rec["node"] / rec["subscription"] / "receipts.jsonl"
            f = self._files.get(path)
            if f is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                f = self._files[path] = open(path, "a", buffering=1)
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def _publish(self, client: NodeClient, topic: str, body: bytes) -> None:
        # the peer's durable subscription keeps it; a refusal ("not now") is tried again shortly
        for _ in range(20):
            try:
                if client.publish(topic, payload=body, priority=1, publisher=self.app).accepted:
                    return
            except UserError as exc:
                self._note(str(exc))
            if self._stop.wait(0.25):
                return
        self._note(f"could not publish {topic}")

    # -- crash takeover ----------------------------------------------------------------------------------
    def _maybe_take_over(self, client: NodeClient, d: Any) -> None:
        try:
            f = parse_fence(d.payload)
        except BadMessage:
            return
        if f.new != self.name or f.old is None or not self.dead.claim(self.app, f.old, self.name):
            return
        threading.Thread(target=self._take_over, args=(f.old,), name=f"pool-takeover-{self.name}",
                         daemon=True).start()

    def _take_over(self, dead: str) -> None:
        """Attach to the dead instance's subscription by name, process its backlog once, then tell the others."""
        self.takeovers.append(dead)
        node = self.peers[dead]
        with self._lock:
            self.logic.seen |= read_event_ids(instance_dir(self.rep_dir, node, self.app, dead) / "receipts.jsonl")
        name = subscription_name(self.app, dead)
        try:
            # the dead instance's subscription lives at its node: attach there, by its name
            with NodeClient.to(self.where(node), self.tokens.get(node, Access())) as client:
                sub = client.subscribe(f"pool.{self.app}.{dead}.>", name=name, durable=True)
                with sub:
                    for ev in _until_idle(sub, lambda: self._backlog_of(client, name), self._stop):
                        self._handle(client, sub, lambda d: self.logic.on_backlog(d, node, dead), ev.delivery)
                self._unsubscribe(client, name)
                with self._lock:
                    out = self.logic.drained(dead)
                    self._write(out.receipts)
                    if self._sub is not None:      # what waited for the drain came on this instance's own stream
                        self._sub.ack(out.ack)
                for topic, body in out.publish:    # the FenceDone of the pairs the drain released
                    self._publish(client, topic, body)
                for peer in self.peers:
                    if peer not in (self.name, dead):
                        body = json.dumps({"app": self.app, "instance": dead}).encode()
                        self._publish(client, f"pool.{self.app}.{peer}.{dead}.{DRAINED}", body)
        except UserError as exc:
            self._note(f"takeover of {dead}: {exc}")

    def _unsubscribe(self, client: NodeClient, name: str) -> None:
        """At backlog 0: nothing waits that Unsubscribe would discard. A refusal (a node where only the admin
        may unsubscribe) leaves an empty subscription behind, which holds nothing: noted, not fatal."""
        try:
            reply = client.unsubscribe(name)
        except UserError as exc:
            self._note(f"unsubscribe {name}: {exc}")
            return
        if not reply.removed:
            self._note(f"unsubscribe {name}: not removed")
        elif reply.discarded:
            self._note(f"unsubscribe {name}: {reply.discarded} publications discarded")

    def _backlog_of(self, client: NodeClient, name: str) -> int:
        for info in client.subscriptions():
            if info.name == name:
                return int(info.backlog)
        return 0

    # -- heartbeats, and the end of a leave ----------------------------------------------------------------
    def _beat(self) -> None:
        quiet_since: float | None = None
        while not self._stop.wait(self.heartbeat):
            if not self._reachable(self.node):
                continue
            try:
                with NodeClient.to(self.address, self.token, timeout=max(1.0, self.heartbeat)) as client:
                    self.backlog = self._backlog_of(client, subscription_name(self.app, self.name))
                    body = {"role": "instance", "name": self.name, "app": self.app, "node": self.node,
                            "state": self.state, "backlog": self.backlog}
                    client.publish(f"_pools.hb.{self.name}", payload=json.dumps(body).encode(), priority=1,
                                   publisher=self.app)
                    if self.state != "leaving":
                        continue
                    held = sum(self.logic.fence.held().values())
                    if self.backlog or held:
                        quiet_since = None
                        continue
                    quiet_since = quiet_since or time.monotonic()
                    # at backlog 0 for a crash timeout after the leave: every consumer has moved away
                    if time.monotonic() - quiet_since >= self.crash_timeout:
                        self._stop.set()
                        with self._lock:
                            if self._sub is not None:
                                self._sub.close()
                        self._unsubscribe(client, subscription_name(self.app, self.name))
                        self.state = "left"
                        return
            except UserError as exc:
                self._note(str(exc))

    def _note(self, error: str) -> None:
        if not self.errors or self.errors[-1] != error:
            self.errors.append(error)
            del self.errors[:-20]
        log.info("pool instance %s/%s: %s", self.app, self.name, error)


def _until_idle(sub: Subscription, backlog: Callable[[], int], stop: threading.Event):
    """The deliveries of `sub` until its backlog is 0 (asked after each delivery and when none came)."""
    events = iter(sub)
    box: list[Any] = []
    done = threading.Event()

    def pump() -> None:
        try:
            for ev in events:
                box.append(ev)
        except UserError:
            pass
        done.set()

    threading.Thread(target=pump, daemon=True).start()
    while not stop.is_set():
        while box:
            ev = box.pop(0)
            if ev.WhichOneof("kind") == "delivery":
                yield ev
        if done.is_set() or (not box and backlog() == 0):
            return
        stop.wait(0.2)


class PoolApps:
    """All application instance clients of a repetition; `later`: the instances a `pool_join` fault starts."""

    def __init__(self, apps: dict[str, dict[str, str]], later: set[tuple[str, str]], rep_dir: Path,
                 address: Callable[[str], str], reachable: Callable[[str], bool], tokens: dict[str, Access],
                 heartbeat: float, crash_timeout: float,
                 user_access: Callable[[str, str], Access] | None = None) -> None:
        """`tokens`: node -> the admin's access there; `user_access`: (node, user) -> a user's, when the run has
        user tokens: an instance then runs as its application's user (the owner of its subscription)."""
        self.dead = Dead()
        self.later = set(later)

        def access(app: str) -> dict[str, Access]:
            if user_access is None:
                return tokens
            return {node: user_access(node, app) for node in set(tokens) & set(apps[app].values())}

        self.clients = {(app, inst): PoolInstance(app, inst, dict(insts), address, rep_dir, reachable, access(app),
                                                  heartbeat, crash_timeout, self.dead)
                        for app, insts in apps.items() for inst in insts}
        self._started: set[tuple[str, str]] = set()

    def start(self, timeout: float, stop: threading.Event) -> list[str]:
        """Start every instance not held back for a join; returns those not subscribed within `timeout`."""
        first = [k for k in self.clients if k not in self.later]
        for k in first:
            self._start(k)
        deadline = time.monotonic() + timeout
        for k in first:
            while not self.clients[k].subscribed.wait(0.1):
                if stop.is_set() or time.monotonic() > deadline:
                    break
        return [f"{a}/{i}" for a, i in first if not self.clients[(a, i)].subscribed.is_set()]

    def _start(self, key: tuple[str, str]) -> None:
        if key not in self._started:
            self._started.add(key)
            self.clients[key].start()

    def fault(self, action: str, target: str) -> dict[str, Any]:
        """Apply `pool_join`, `pool_leave` or `pool_kill` to `target` ("<app>.<instance>"); the details for
        events.jsonl."""
        app, _, inst = target.partition(".")
        client = self.clients.get((app, inst))
        if client is None:
            raise ValueError(f"no application instance {target!r}")
        if action == "pool_join":
            if (app, inst) in self._started:
                raise ValueError(f"instance {target} is running already")
            self._start((app, inst))
        elif (app, inst) not in self._started:
            raise ValueError(f"instance {target} has not started")
        elif action == "pool_leave":
            client.leave()
        elif action == "pool_kill":
            self.dead.add(app, inst)
            client.kill()
        else:
            raise ValueError(f"unknown pool action {action!r}")
        return {"host": client.node, "app": app, "instance": inst}

    def backlog(self, client: Callable[[str], NodeClient]) -> dict[str, int | str]:
        """The durable subscriptions of running (or killed, not yet taken over) instances that hold publications."""
        out: dict[str, int | str] = {}
        names = {subscription_name(a, i) for a, i in self._started}
        for node in sorted({self.clients[k].node for k in self._started}):
            try:
                with client(node) as nc:
                    infos = nc.subscriptions()
            except UserError:
                out[f"{node}/*"] = "unreachable"
                continue
            for info in infos:
                if info.durable and info.name in names and info.backlog:
                    out[f"{node}/{info.name}"] = int(info.backlog)
        return out

    def stop(self) -> None:
        for key in sorted(self._started):
            try:
                self.clients[key].stop()
            except Exception as exc:  # noqa: BLE001 - one client's end must not cost the others their files
                log.warning("stopping pool instance %s/%s failed: %s", *key, exc)
