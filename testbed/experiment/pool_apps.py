"""An application instance of a repetition (the scenario's `pools:`): the client process of one instance.

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

The process: `python -P -m testbed.experiment.pool_apps --app A --instance a1 --rep-dir DIR --peer a1=h1 ...
--address h1=HOST:PORT ...` (testbed/pycmd.py), in a session of its own (a Ctrl-C at the terminal reaches the
testbed, which ends it). Its stdin is its control channel: the first line is the access it carries per node
(JSON {node: {token, ca, name}}: tokens stay off the command line, which every user can read), then one
command a line, `leave` (announce a leave, drain to backlog 0, unsubscribe, then exit) or `stop`; the end of
stdin (the testbed is gone) and SIGTERM also stop it. Stopping writes its files and exits 0. It answers on
stdout with one word a line: `subscribed` once its subscription stands. Its log is client.log.

Faults (testbed/experiment/faults.py, applied by testbed/experiment/pool_manager.py, the testbed's side of
these processes): `pool_join` starts an instance's process, `pool_leave` sends it `leave` (the process ends
by itself once drained; the teardown ends it if not), `pool_kill` writes killed.json (pid, time) into its folder and sends SIGKILL to its pid: no ack, no drain, no
heartbeat, no files written after that; the node stays up. A crashed instance's successor is the first
instance that gets a fence from it and finds killed.json: it claims the backlog by creating the dead one's
`takeover` file (only one creation succeeds), attaches to the dead one's subscription by name, processes its
backlog once (InstanceFence.on_backlog), unsubscribes it at backlog 0 and tells the application's other
instances (`_drained`). A killed process may leave a torn last receipt line (no newline): its event was not
acknowledged (the line comes first), so it comes again from the backlog; the successor skips the fragment
(noting it), ends it with a newline before appending, and the account counts it apart (`torn_tail`, the
killed writer's torn tail: expected, not a bad line; testbed/accounting/records.py).

Files: subscribers/<node>/pool.<app>.<instance>/receipts.jsonl, instance.json (its counters, rewritten every
heartbeat and at the end: a killed instance's is its last, with `state: killed`), client.log, and killed.json
and takeover after a kill; a successor writes the receipts of a dead instance's backlog into the dead one's
receipts.jsonl (they are that subscription's).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable

from node import jsonlines
from node.client import Access, NodeClient, Subscription
from node.errors import UserError
from node.pools.fence import Acked, Drained, Fence, FenceDone, InstanceFence, Step
from node.pools.messages import BadMessage, parse_acked, parse_drained, parse_event_key, parse_fence
from node.pools.sender import DONE_TOPIC
from testbed.accounting.records import KILLED_MARK
from testbed.experiment.subscribers import keep_streaming

log = logging.getLogger("testbed.experiment.pool_apps")     # also when run as __main__

FENCE, ACKED, DRAINED = "_fence", "_acked", "_drained"
RECEIPTS, INFO, LOG = "receipts.jsonl", "instance.json", "client.log"
KILLED = KILLED_MARK          # written by the testbed before its SIGKILL: the successor's sign of a crash
CLAIM = "takeover"            # created once, by the successor that drains a killed instance's backlog
SUBSCRIBED = "subscribed"     # the process's word on stdout once its subscription stands
MODULE = "testbed.experiment.pool_apps"    # what an instance process runs (`main` below)


def subscription_name(app: str, instance: str) -> str:
    return f"pool.{app}.{instance}"


def instance_dir(rep_dir: Path, node: str, app: str, instance: str) -> Path:
    """Beside the subscribers' (testbed/experiment/subscribers.py): the pub/sub account reads its receipts too."""
    return Path(rep_dir) / "subscribers" / node / subscription_name(app, instance)


def read_event_ids(path: Path, problems: list[str] | None = None) -> set[str]:
    """The event ids an instance's receipts.jsonl records. A line that is not a JSON object (the torn last line
    of a killed process) is skipped, with one sentence in `problems`."""
    out: set[str] = set()
    for lineno, rec in jsonlines.numbered(path):
        if rec is None:
            if problems is not None:
                problems.append(f"{path.parent.name}/{path.name}:{lineno}: not a JSON line, skipped")
        elif rec.get("event_id"):
            out.add(str(rec["event_id"]))
    return out


def _ends_torn(path: Path) -> bool:
    """True when the file's last line has no newline (a process died while writing it)."""
    try:
        with open(path, "rb") as f:
            if f.seek(0, os.SEEK_END) == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except OSError:
        return False


class ReceiptFiles:
    """The receipts.jsonl files an instance appends to (its own, a killed predecessor's), each opened once and
    line-buffered: a line is on record before the ack that follows it. A file that ends in a torn line gets a
    newline first, so the fragment stays one bad line of its own instead of swallowing the next receipt."""

    def __init__(self, rep_dir: Path) -> None:
        self.rep_dir = Path(rep_dir)
        self._files: dict[Path, IO[str]] = {}

    def write(self, receipts: list[dict[str, Any]]) -> None:
        for rec in receipts:
            path = self.rep_dir / "subscribers" / rec["node"] / rec["subscription"] / RECEIPTS
            f = self._files.get(path)
            if f is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                torn = _ends_torn(path)
                f = self._files[path] = open(path, "a", buffering=1)
                if torn:
                    f.write("\n")
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


def mark_killed(directory: Path, pid: int, ts: float) -> None:
    """What the testbed writes into a killed instance's folder before the signal (its successor looks for it)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / KILLED).write_text(json.dumps({"pid": pid, "ts": ts}) + "\n")


def claim_takeover(directory: Path, successor: str) -> bool:
    """True for the first successor of a killed instance (folder `directory`): it drains the backlog. Creating
    the claim file is atomic, so two successors in two processes cannot both win."""
    if not (directory / KILLED).exists():
        return False
    try:
        fd = os.open(directory / CLAIM, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(successor + "\n")
    return True


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


class PoolInstance:
    """One application instance's client: the body of an instance process (main), threads inside it."""

    def __init__(self, app: str, name: str, peers: dict[str, str], address: Callable[[str], str], rep_dir: Path,
                 tokens: dict[str, Access], heartbeat: float, crash_timeout: float) -> None:
        """`peers`: every instance of the application -> its node (this one included); `address`: node -> its
        management target; `tokens`: node -> what the client carries there (its application's token, or the
        node's admin token in a run without user tokens)."""
        self.app, self.name, self.node, self.peers = app, name, peers[name], peers
        self.where = address
        self.address = address(self.node)
        self.rep_dir = Path(rep_dir)
        self.dir = instance_dir(rep_dir, self.node, app, name)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.errors: list[str] = []
        torn: list[str] = []
        self.logic = InstanceLogic(app, name, self.node, read_event_ids(self.dir / RECEIPTS, torn))
        for problem in torn:
            self._note(problem)
        self.tokens = tokens
        self.token = tokens.get(self.node, Access())
        self.heartbeat = heartbeat
        self.crash_timeout = crash_timeout
        self.state = "active"
        self.backlog = -1
        self.takeovers: list[str] = []
        self.started = self.left = 0.0
        self.subscribed = threading.Event()
        self.ended = threading.Event()         # a leave is complete: the process may exit
        self._stop = threading.Event()
        self._lock = threading.Lock()          # the receipts files, the logic and the subscription
        self._sub: Subscription | None = None
        self._receipts = ReceiptFiles(self.rep_dir)
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

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        with self._lock:
            if self._sub is not None:
                self._sub.close(wait=timeout)
        for t in self._threads:
            if t.is_alive():
                t.join(timeout)
        with self._lock:
            self._receipts.close()
        self.write_info()

    def write_info(self) -> None:
        """instance.json, replaced whole (a kill -9 leaves the last complete one)."""
        with self._lock:
            lg = self.logic
            info = {"app": self.app, "instance": self.name, "node": self.node, "state": self.state,
                    "pid": os.getpid(), "received": lg.received, "duplicates": lg.duplicates, "refused": lg.refused,
                    "fence_pauses_s": [round(p, 6) for p in lg.pauses], "held": sum(lg.fence.held().values()),
                    "takeovers": list(self.takeovers), "started": self.started, "left": self.left or None,
                    "killed": None, "errors": list(self.errors)}
        write_info(self.dir, info)

    # -- the subscription --------------------------------------------------------------------------------
    def _run(self) -> None:
        # a node that is down refuses the connection at once: the backoff paces the tries
        keep_streaming(self._stop, lambda: True, self._stream, self._note)

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
            out = how(d)
            self._receipts.write(out.receipts)     # on record (line-buffered) before the ack goes back
            sub.ack(out.ack)
        if out.refused:
            self._note(out.refused)
        for topic, body in out.publish:
            self._publish(client, topic, body)
        if d.topic.endswith(f".{FENCE}"):
            self._maybe_take_over(client, d)

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
        if f.new != self.name or f.old is None or f.old not in self.peers:
            return
        if not claim_takeover(instance_dir(self.rep_dir, self.peers[f.old], self.app, f.old), self.name):
            return
        threading.Thread(target=self._take_over, args=(f.old,), name=f"pool-takeover-{self.name}",
                         daemon=True).start()

    def _take_over(self, dead: str) -> None:
        """Attach to the dead instance's subscription by name, process its backlog once, then tell the others."""
        self.takeovers.append(dead)
        node = self.peers[dead]
        torn: list[str] = []
        with self._lock:
            self.logic.seen |= read_event_ids(instance_dir(self.rep_dir, node, self.app, dead) / RECEIPTS, torn)
        for problem in torn:
            self._note(f"takeover of {dead}: {problem}")
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
                    self._receipts.write(out.receipts)
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
            self.write_info()
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
                        self.ended.set()
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


def write_info(directory: Path, info: dict[str, Any]) -> None:
    tmp = directory / f"{INFO}.tmp"
    tmp.write_text(json.dumps(info, indent=1) + "\n")
    tmp.replace(directory / INFO)


def read_info(directory: Path) -> dict[str, Any]:
    try:
        info = json.loads((directory / INFO).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


# -- the process's entry point -------------------------------------------------------------------------------
def _pairs(values: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        k, sep, x = v.partition("=")
        if not sep or not k or not x:
            raise ValueError(f"{what} {v!r} is not NAME=VALUE")
        out[k] = x
    return out


def _say(word: str) -> None:
    try:
        print(word, flush=True)
    except OSError:          # the testbed is gone: nobody listens
        pass


def _commands(inst: PoolInstance, quit_: threading.Event) -> None:
    """The control channel: one command a line on stdin; its end (the testbed is gone) stops the process."""
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "leave":
            inst.leave()
        elif cmd == "stop":
            break
        elif cmd:
            log.warning("unknown command %r ignored", cmd)
    quit_.set()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.experiment.pool_apps",
                                 description="One application instance client of a pools run (started by the "
                                             "testbed; its access comes as the first line on stdin).")
    ap.add_argument("--app", required=True)
    ap.add_argument("--instance", required=True)
    ap.add_argument("--rep-dir", required=True, type=Path)
    ap.add_argument("--peer", action="append", default=[], help="INSTANCE=NODE, every instance of the application")
    ap.add_argument("--address", action="append", default=[], help="NODE=HOST:PORT, its management target")
    ap.add_argument("--heartbeat", type=float, required=True)
    ap.add_argument("--crash-timeout", type=float, required=True)
    args = ap.parse_args(argv)
    try:
        peers, addresses = _pairs(args.peer, "--peer"), _pairs(args.address, "--address")
    except ValueError as exc:
        ap.error(str(exc))
    if args.instance not in peers:
        ap.error(f"--peer names no node for instance {args.instance!r}")
    if missing := sorted(set(peers.values()) - set(addresses)):
        ap.error(f"--address missing for {', '.join(missing)}")
    if args.heartbeat <= 0 or args.crash_timeout <= 0:
        ap.error("--heartbeat and --crash-timeout must be positive")
    try:
        raw = json.loads(sys.stdin.readline() or "null")
        tokens = {str(n): Access(str(a.get("token", "")), str(a.get("ca", "")).encode(), str(a.get("name", "")))
                  for n, a in raw.items()}
    except (ValueError, AttributeError, TypeError):
        print(f"{ap.prog}: the first line on stdin must be the access JSON {{node: {{token, ca, name}}}}",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {args.app}.{args.instance}@{peers[args.instance]} %(levelname)s "
                               f"%(name)s: %(message)s")
    quit_ = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: quit_.set())
    inst = PoolInstance(args.app, args.instance, peers, addresses.__getitem__, args.rep_dir, tokens,
                        args.heartbeat, args.crash_timeout)
    threading.Thread(target=_commands, args=(inst, quit_), name="pool-commands", daemon=True).start()
    inst.start()
    announced = False
    while not quit_.wait(0.1) and not inst.ended.is_set():
        if not announced and inst.subscribed.is_set():
            _say(SUBSCRIBED)
            announced = True
    inst.stop()
    log.info("stopped (%s)", inst.state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
