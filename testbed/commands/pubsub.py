"""Publish/subscribe commands on a live network: `pub`, `sub`, `unsub`, `subs` (the node's PubSub service,
node/broker/).

The node is reached as `testbed send` reaches it (commands/messaging.py resolve_address: --address,
WANBED_NODE_ADDRESS, WANBED_NODES, else the running `testbed up` network) and asked through
node/client.py. Every failure is one line with status 2: no network, an unknown or daemon-less host, a node
that does not answer, a refusal (with the node's reason).

`sub` runs until Ctrl-C (status 0, a summary line) or until --count deliveries. A non-durable subscription
lives as long as its stream: when the node goes away `sub` says so in one sentence and exits 2. A durable one
(--durable NAME) lives in the node's spool, so `sub --durable` reconnects instead: it says so, retries with
backoff (node/backoff.py: RECONNECT_MIN doubling to RECONNECT_MAX, with jitter) until the node answers again or Ctrl-C, and the node
hands over what waited meanwhile (plus anything delivered but not acknowledged, flagged redelivered).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime
from typing import Any, Callable, Iterator

from node.backoff import Backoff
from node.errors import UserError
from node.natural import natural_key
from testbed.commands import examples
from testbed.commands.messaging import node_client, read_body, read_lifetime, resolve_address
from testbed.commands.routing import one_line, yes_no

ANSWER_TIMEOUT = 5.0       # seconds a node has to answer Unsubscribe / ListSubscriptions
PUBLISH_TIMEOUT = 30.0     # a publication goes through the node's spool (fsync), and may be large
RECONNECT_MIN = 0.5        # `sub --durable`: first wait before subscribing again after the node went away
RECONNECT_MAX = 5.0        # ... doubling up to this
MAX_UINT32 = 2 ** 32 - 1


def _node_said(exc: UserError, address: str) -> str | None:
    """What the node answered (a refusal, a reason for ending a stream), or None when it did not answer."""
    text = " ".join(str(exc).split())
    prefix = f"node at {address}: "
    return text[len(prefix):].rstrip(".") if text.startswith(prefix) else None


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# ---- pub -----------------------------------------------------------------------------------------

def _pub(args: argparse.Namespace) -> int:
    payload, size = read_body(args)
    lifetime = read_lifetime(args)
    if args.priority < 0:
        raise UserError("--priority must not be negative.")
    if args.priority > MAX_UINT32:
        raise UserError(f"--priority {args.priority} is out of range.")
    if args.count < 1:
        raise UserError("--count must be at least 1.")
    address = resolve_address(args.node, args.address)
    t0 = time.monotonic()
    with node_client(args.node, address, timeout=PUBLISH_TIMEOUT) as c:
        for i in range(args.count):
            r = c.publish(args.topic, size=size, payload=payload, priority=args.priority,
                          lifetime=lifetime, key=args.key)
            if not r.accepted:
                which = f" publication {i + 1} of {args.count}" if args.count > 1 else " the publication"
                raise UserError(f"{args.node} refused{which}: {one_line(Exception(r.reason))}")
            if args.json:      # one object per publication, as it is accepted (a later refusal keeps these)
                print(json.dumps({"pub_id": r.pub_id, "node": args.node, "topic": args.topic,
                                  "expected": r.expected, "expected_durable": r.expected_durable}), flush=True)
            else:
                print(f"{r.pub_id}  expected by {_plural(r.expected, 'subscription')} ({r.expected_durable} "
                      f"durable, {r.expected - r.expected_durable} non-durable)", flush=True)
    if args.count > 1:
        took = time.monotonic() - t0
        print(f"published {args.count} on {args.topic} at {args.node} in {took:.2f} s "
              f"({args.count / took if took > 0 else 0:.0f} per s)", file=sys.stderr if args.json else sys.stdout)
    return 0


# ---- sub -----------------------------------------------------------------------------------------

class _Output:
    """Deliveries on stdout (text lines or JSON objects); notices on stdout as text, on stderr with --json so
    stdout stays one JSON object per line. A closed stdout (`| head`) ends the command quietly."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json

    def _write(self, stream, line: str) -> None:
        stream.write(line + "\n")
        stream.flush()

    def notice(self, line: str) -> None:
        self._write(sys.stderr if self.as_json else sys.stdout, line)

    def delivery(self, node: str, name: str, d: Any) -> None:
        now = time.time()
        latency_ms = 1000.0 * (now - d.publish_ts)
        if self.as_json:
            self._write(sys.stdout, json.dumps({
                "ts": round(now, 6), "node": node, "subscription": name, "pub_id": d.pub_id, "topic": d.topic,
                "origin": d.origin, "publisher": d.publisher, "key": d.key, "priority": d.priority,
                "size": d.size, "hops": d.hops, "publish_ts": d.publish_ts, "latency_ms": round(latency_ms, 3),
                "redelivered": d.redelivered}))
            return
        line = (f"{_clock(now)}  {d.topic}  {d.pub_id}  {d.size} B  {latency_ms:.1f} ms  "
                f"{_plural(d.hops, 'hop')}")
        self._write(sys.stdout, line + ("  (redelivered)" if d.redelivered else ""))


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not complain about the closed pipe."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S.%f")[:-3]


class _Subscriber:
    """One `testbed sub`: a Subscribe stream (again after the node went away, when durable) and what it printed."""

    def __init__(self, args: argparse.Namespace, address: str) -> None:
        self.node, self.pattern, self.address = args.node, args.pattern, address
        self.durable = args.durable is not None
        self.name = args.durable or args.name or ""
        self.count = args.count
        self.out = _Output(args.json)
        self.received = 0
        self.redelivered = 0
        self.dropped = 0
        self.client = None
        self.sub = None

    # -- the stream --------------------------------------------------------------------------------
    def _attach(self, again: bool) -> Iterator[Any]:
        """Open a stream and read its first event (the node's confirmation); the stream's remaining events."""
        # a new channel: no reconnect backoff left from a dead one
        self.client = node_client(self.node, self.address)
        self.sub = self.client.subscribe(self.pattern, name=self.name, durable=self.durable)
        events = iter(self.sub)
        first = next(events, None)
        if first is None or first.WhichOneof("kind") != "subscribed":
            raise UserError(f"node at {self.address}: the stream did not start with a confirmation")
        s = first.subscribed
        self.name = s.name
        kind = f"durable, {_plural(s.backlog, 'publication')} waiting" if s.durable else "non-durable"
        self.out.notice(f"subscribed{' again' if again else ''} to {self.pattern} at {s.node or self.node} as "
                        f"{s.name} ({kind})")
        return events

    def _detach(self) -> None:
        """Close the stream (Subscription.close lets the node take the acknowledgements sent before)."""
        if self.sub is not None:
            self.sub.close()
            self.sub = None
        if self.client is not None:
            self.client.close()
            self.client = None

    def _gone(self, exc: UserError) -> bool:
        """Whether the error means the node went away (rather than refused or ended the subscription)."""
        code = getattr(exc, "code", None)          # node.client.SubscriptionEnded
        if code is not None:
            return code in ("UNAVAILABLE", "DEADLINE_EXCEEDED") or (code == "CANCELLED" and "shutting down" in str(exc))
        said = _node_said(exc, self.address)
        return said is None or "shutting down" in said

    # -- running -----------------------------------------------------------------------------------
    def run(self) -> int:
        """Until --count deliveries or Ctrl-C (status 0, then the summary); an error is one UserError."""
        try:
            self._stream()
        except KeyboardInterrupt:
            pass
        except BrokenPipeError:                      # stdout closed (`testbed sub ... | head`): end quietly
            _quiet_stdout()
            return 0
        finally:
            self._detach()
        try:
            self.out.notice(self.summary())
        except BrokenPipeError:
            _quiet_stdout()
        return 0

    def _stream(self) -> None:
        try:
            events = self._attach(again=False)
        except UserError as exc:
            said = _node_said(exc, self.address)
            if said is None:
                raise
            raise UserError(f"{self.node} refused the subscription: {said}.") from None
        while True:
            try:
                if self._consume(events):
                    return
                raise UserError(f"node at {self.address}: the stream ended")
            except UserError as exc:
                self._detach()
                if not (self.durable and self._gone(exc)):
                    raise self._ended(exc) from None
                events = self._reconnect(exc)

    def _consume(self, events: Iterator[Any]) -> bool:
        """Print and acknowledge deliveries; True once --count of them arrived, False if the stream ends."""
        for ev in events:
            kind = ev.WhichOneof("kind")
            if kind == "delivery":
                d = ev.delivery
                self.out.delivery(self.node, self.name, d)
                self.sub.ack([d.pub_id])
                self.received += 1
                self.redelivered += d.redelivered
                if self.count is not None and self.received >= self.count:
                    return True
            elif kind == "dropped":
                self.dropped = ev.dropped.total
                self.out.notice(f"{_clock(time.time())}  {self.node} dropped {_plural(self.dropped, 'publication')} "
                                f"for this subscription so far (the subscriber was too slow)")
        return False

    def _ended(self, exc: UserError) -> UserError:
        after = f"after {_plural(self.received, 'publication')}"
        said = _node_said(exc, self.address)
        if self._gone(exc):
            return UserError(f"{self.node} went away {after}: {one_line(exc)}")
        return UserError(f"{self.node} ended the subscription {after}: {said}.")

    def _reconnect(self, exc: UserError) -> Iterator[Any]:
        self.out.notice(f"{self.node} went away: {one_line(exc).rstrip('.')}; reconnecting to the durable "
                        f"subscription {self.name}, with backoff (Ctrl-C to stop)")
        backoff = Backoff(RECONNECT_MIN, RECONNECT_MAX)
        while True:
            time.sleep(backoff.wait())
            try:
                return self._attach(again=True)
            except UserError as again:
                self._detach()
                if not self._gone(again):
                    said = _node_said(again, self.address)
                    if said is None:          # no answer of the node's: a failed TLS check
                        raise again from None
                    raise UserError(f"{self.node} refused the subscription: {said}.") from None

    def summary(self) -> str:
        parts = [f"received {_plural(self.received, 'publication')}"]
        if self.redelivered:
            parts.append(f"{self.redelivered} of them redelivered")
        if self.dropped:
            parts.append(f"{self.dropped} dropped by {self.node}")
        return ", ".join(parts)


def _sub(args: argparse.Namespace) -> int:
    if args.count is not None and args.count < 1:
        raise UserError("--count must be at least 1.")
    return _Subscriber(args, resolve_address(args.node, args.address)).run()


# ---- unsub, subs ---------------------------------------------------------------------------------

def _unsub(args: argparse.Namespace) -> int:
    address = resolve_address(args.node, args.address)
    with node_client(args.node, address, timeout=ANSWER_TIMEOUT) as c:
        try:
            r = c.unsubscribe(args.name)
        except UserError as exc:
            said = _node_said(exc, address)
            raise (UserError(f"{said}.") if said else exc) from None
    if args.json:
        print(json.dumps({"node": args.node, "name": args.name, "removed": True, "discarded": r.discarded}))
        return 0
    gone = f", {_plural(r.discarded, 'waiting publication')} discarded" if r.discarded else ""
    print(f"{args.node}: subscription {args.name} removed{gone}")
    return 0


# The owner of a subscription made with the admin's token, or with no token where auth is off.
ADMIN = "(admin)"


def subscriptions_plain(local: list[Any], remote: list[Any]) -> list[dict[str, Any]]:
    """This node's subscriptions (with their owners and counters) and, from `remote`, the others it knows
    (owner and counters None: only the subscriber's own node has them), in natural order of node, then name."""
    own = {(i.node, i.name) for i in local}
    rows = [{"node": i.node, "name": i.name, "owner": i.owner or ADMIN, "pattern": i.pattern, "durable": i.durable,
             "local": True, "connected": i.connected, "backlog": i.backlog, "delivered": i.delivered, "dropped": i.dropped}
            for i in local]
    rows += [{"node": i.node, "name": i.name, "owner": None, "pattern": i.pattern, "durable": i.durable,
              "local": False, "connected": None, "backlog": None, "delivered": None, "dropped": None}
             for i in remote if (i.node, i.name) not in own]
    return sorted(rows, key=lambda r: (natural_key(r["node"]), natural_key(r["name"])))


def render_subscriptions(node: str, rows: list[dict[str, Any]], remote: bool) -> str:
    from spark_analysis.render import plain_lines     # rich comes with it: loaded only to print
    where = f"known at {node}" if remote else f"at {node}"
    if not rows:
        return f"no subscriptions {where}"

    def cell(v: Any) -> str:
        return "-" if v is None else yes_no(v) if isinstance(v, bool) else str(v)
    table = [[r["node"], r["name"], cell(r["owner"]), r["pattern"], yes_no(r["durable"]), *(cell(r[k]) for k in (
        "connected", "backlog", "delivered", "dropped"))] for r in rows]
    return "\n".join([f"subscriptions {where}",
                      *plain_lines(["Node", "Name", "Owner", "Pattern", "Durable", "Connected", "Backlog", "Delivered",
                                   "Dropped"], table)])


def _subs(args: argparse.Namespace) -> int:
    address = resolve_address(args.node, args.address)
    with node_client(args.node, address, timeout=ANSWER_TIMEOUT) as c:
        try:
            local = c.subscriptions(remote=False)
            remote = c.subscriptions(remote=True) if args.remote else []
        except UserError as exc:
            raise UserError(f"cannot list the subscriptions of {args.node}: {one_line(exc)}") from None
    rows = subscriptions_plain(local, remote)
    print(json.dumps(rows, indent=1) if args.json else render_subscriptions(args.node, rows, args.remote))
    return 0


# ---- registration ----------------------------------------------------------------------------------

def _add(sub: argparse._SubParsersAction, name: str, handler: Callable[[argparse.Namespace], int],
         **kw: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(name, **kw)
    p.add_argument("node", metavar="NODE", help="the node to ask (through its management address)")
    p.set_defaults(handler=handler)
    return p


def _address(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", help="the node's management address HOST:PORT (else WANBED_NODES or the "
                                     "running network)")


def register(sub: argparse._SubParsersAction) -> None:
    p = _add(sub, "pub", _pub,
             description="Publish on TOPIC (tokens separated by '.', no wildcards) at NODE. Prints each "
                         "publication id and how many subscriptions NODE knows that match it. The payload "
                         "is BODY as given, --file (- reads standard input) or --size generated bytes.",
             **examples("testbed pub n1 weather.eu 'rain at noon'", "date | testbed pub n1 clock.tick --file -",
                        "testbed pub n1 load.test --size 4KiB --count 10 --lifetime 30s --json"))
    p.add_argument("topic", metavar="TOPIC", help="the topic to publish on")
    p.add_argument("body", metavar="BODY", nargs="?", help="the payload, literally (UTF-8); else --size or --file")
    body = p.add_mutually_exclusive_group()
    body.add_argument("--size", help="generated payload of this size: 100kB, 4KiB, 1MB or bare bytes")
    body.add_argument("--file", help="payload from a file ('-': standard input)")
    p.add_argument("--priority", type=int, default=1)
    p.add_argument("--lifetime", default="0", help="how long the publication may live: 10s, 5m, 1h or bare "
                                                   "seconds (default 0: the node's default lifetime)")
    p.add_argument("--key", default="", help="an opaque key carried to every subscriber")
    p.add_argument("--count", type=int, default=1, help="publish this many times (default 1)")
    p.add_argument("--json", action="store_true", help="one JSON object per publication (pub_id, node, topic, "
                                                       "expected, expected_durable)")
    _address(p)
    p = _add(sub, "sub", _sub,
             description="Subscribe to PATTERN at NODE ('*' matches one token, '>' the rest) and print each "
                         "delivery until Ctrl-C or --count deliveries. A durable subscription keeps collecting "
                         "while no client is attached, and `sub --durable` reconnects when the node goes away.",
             **examples("testbed sub n4 'weather.>'", "testbed sub n4 'orders.*' --durable audit --json",
                        "testbed sub n4 clock.tick --count 1"))
    p.add_argument("pattern", metavar="PATTERN", help="the topic pattern: tokens separated by '.', '*' for one "
                                                      "token, '>' for the rest")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--durable", metavar="NAME", help="a durable subscription of this name (created if new)")
    who.add_argument("--name", help="a name for the non-durable subscription (default: one the node picks)")
    p.add_argument("--json", action="store_true", help="one JSON object per delivery on stdout (notices on stderr)")
    p.add_argument("--count", type=int, help="end after this many deliveries")
    _address(p)
    p = _add(sub, "unsub", _unsub,
             description="Remove subscription NAME at NODE; a durable one loses what waits for it.",
             **examples("testbed unsub n4 audit", "testbed unsub n4 audit --json"))
    p.add_argument("name", metavar="NAME", help="the subscription's name (`testbed subs NODE` lists them)")
    p.add_argument("--json", action="store_true", help="print node, name, removed and discarded as a JSON object")
    _address(p)
    p = _add(sub, "subs", _subs,
             description="List NODE's subscriptions (node, name, owner, pattern, durable, connected, backlog, "
                         "delivered, dropped); --remote adds those other nodes advertised to it.",
             **examples("testbed subs n4", "testbed subs n1 --remote --json"))
    p.add_argument("--remote", action="store_true", help="also the subscriptions other nodes advertised")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _address(p)
