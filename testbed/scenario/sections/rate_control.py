"""The `rate_control` section: MQ rate control between client queues and a root queue (node/rate/).

    rate_control:
      root: root                    # its queue is the consumer's mailbox
      clients: [mq1, mq2, mq3]      # each an MTA neighbour of the root (link-adjacent or not)
      rate: 1Mbit                   # R: the root's drain rate; the clients' rates sum to it
      interval: 2s                  # T: seconds between the root's allocation rounds
      control: true                 # false: every client at R/N (the paper's comparison)
      policy: decile                # decile (the paper's) | decile_plus_one | backlog | fixed
      client_queue: 1MB             # a full client queue refuses submissions ("overflow")
      root_queue: 4MB               # above it the root answers "not now"
      burst: 10kB                   # a client's token bucket depth
      consumer: {user: app, messages: 25, every: 1s}    # removes 25 messages from the root queue every second

The testbed writes each node's `rate:` config (node/config.py RateConfig) and runs the consumer for the whole
repetition (testbed/experiment/consumer.py). Times and the rate are model values (time_scale applies).
"""
from __future__ import annotations

from typing import Any

from node.rate.config import RATE_POLICIES
from node.names import is_user_name
from testbed import units
from testbed.scenario.checks import MISSING, Check, names_text, show
from testbed.scenario.parts import ConsumerSpec, RateControlSpec
from testbed.scenario.sections.base import Scenario, Section
from testbed.topology import overlay
from testbed.topology.model import Topology

KEYS = ("root", "clients", "rate", "interval", "control", "policy", "client_queue", "root_queue", "burst",
        "consumer")


def _read(c: Check, raw: Any, s: Scenario) -> None:
    if raw is MISSING or raw is None:
        s.rate_control = RateControlSpec()
        return
    p = ("rate_control",)
    m = c.mapping(p, raw, KEYS)
    out = RateControlSpec()
    if "root" not in m or "clients" not in m:
        c.fail(p, "missing: rate control needs 'root' and 'clients'")
    out.root = c.text(p + ("root",), m["root"])
    out.clients = [c.text(p + ("clients", i), x) for i, x in enumerate(c.sequence(p + ("clients",), m["clients"]))]
    if not out.clients:
        c.fail(p + ("clients",), "expected at least one client")
    if len(set(out.clients)) != len(out.clients) or out.root in out.clients:
        c.fail(p + ("clients",), "expected each client once, and not the root")
    out.rate = c.unit(p + ("rate",), m.get("rate", out.rate), units.parse_rate, positive=True)
    out.interval = c.unit(p + ("interval",), m.get("interval", out.interval), units.parse_duration, positive=True)
    out.control = c.boolean(p + ("control",), m.get("control", True))
    out.policy = c.choice(p + ("policy",), m.get("policy", out.policy), RATE_POLICIES)
    for key in ("client_queue", "root_queue", "burst"):
        setattr(out, key, c.unit(p + (key,), m.get(key, getattr(out, key)), units.parse_size, positive=True))
    cp = p + ("consumer",)
    cm = c.mapping(cp, m.get("consumer", {}), ("user", "messages", "every"))
    con = ConsumerSpec()
    con.user = c.text(cp + ("user",), cm.get("user", con.user))
    if not is_user_name(con.user):
        c.fail(cp + ("user",), f"{show(con.user)} is not a valid user name (letters, digits, '_.-')")
    con.messages = c.integer(cp + ("messages",), cm.get("messages", con.messages), low=1)
    con.every = c.unit(cp + ("every",), cm.get("every", con.every), units.parse_duration, positive=True)
    out.consumer = con
    s.rate_control = out


def _check(c: Check, raw: Any, s: Scenario, topo: Topology) -> None:
    rc = s.rate_control
    if not rc.enabled:
        return
    p = ("rate_control",)
    daemons = overlay.daemon_hosts(s.nodes, topo.node_names())
    for i, name in enumerate([rc.root, *rc.clients]):
        where = p + (("root",) if i == 0 else ("clients", i - 1))
        if name not in daemons:
            c.fail(where, f"{show(name)} is not a host with a node daemon (hosts: {names_text(daemons)})")
    mta = overlay.mta_topology(topo, s.nodes)
    near = set(mta.neighbours(rc.root))
    for i, name in enumerate(rc.clients):
        if name not in near:
            c.fail(p + ("clients", i), f"{show(name)} is not an MTA neighbour of the root {rc.root} (its MTA "
                   f"neighbours: {names_text(sorted(near))}); the rate frames need a session between them")


def _plain(s: Scenario) -> Any:
    rc = s.rate_control
    if not rc.enabled:
        return None
    return {"root": rc.root, "clients": list(rc.clients), "rate": rc.rate, "interval": rc.interval,
            "control": rc.control, "policy": rc.policy, "client_queue": rc.client_queue,
            "root_queue": rc.root_queue, "burst": rc.burst,
            "consumer": {"user": rc.consumer.user, "messages": rc.consumer.messages, "every": rc.consumer.every}}


RATE_CONTROL = Section("rate_control", read=_read, check=_check, plain=_plain, needs=("nodes",),
                       default=RateControlSpec)
