"""`testbed export --to mininet`: a runnable Mininet script for the scenario's network.

The script holds a `Topo` subclass (hosts, switches for wanbed's hosts without a
node daemon, `addLink` with TCLink parameters in Mininet's units) and a `topos`
entry, which is all the `mininet` generator reads back; below it, the address
plan and a `run()` that starts the network with wanbed's addresses and routes,
every node an IP router as in wanbed (its hubs too, so they are run as routers,
not as OpenFlow switches).

Per direction: options equal in both directions are passed to `addLink`
directly, those that differ in `params1` (node1 -> node2) and `params2`. Values
are written so that reading them back gives exactly the same numbers. What
TCLink cannot say (Gilbert-Elliott loss, duplication, reordering, half duplex, LAN segments)
refuses the export with one line naming the link.
"""
from __future__ import annotations

import pprint
import re
from typing import Any, Callable

from testbed import units
from testbed.topology.exporters import ExportRefused, Network
from testbed.topology.importers.mininet import loss_from_percent, rate_from_bw
from testbed.topology.model import Direction, Link

_DEFAULT = Direction()


def _exact(value: float, parse: Callable[[str], float], forms: list[tuple[str, float]]) -> str:
    """The shortest "<number><unit>" that parses back to exactly `value` (e.g. "25ms", not "0.025s")."""
    best = ""
    for unit, scale in forms:
        for digits in range(0, 18):
            number = round(value / scale, digits)
            text = f"{number:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{number:.0f}"
            if parse(text + unit) == value:
                if not best or len(text + unit) < len(best):
                    best = text + unit
                break
    if not best:      # no short decimal: Python's own round-tripping form of the seconds
        best = f"{value!r}s"
    return best


def duration(seconds: float) -> str:
    return _exact(seconds, units.parse_duration, [("ms", 1e-3), ("us", 1e-6), ("s", 1.0)])


def _number(value: float, scale: float, back: Callable[[float], float]) -> float | int:
    """value / scale as the shortest decimal that the importer's `back` turns into exactly `value`."""
    for digits in range(0, 18):
        number = round(value / scale, digits)
        if back(number) == value:
            return int(number) if number == int(number) else number
    return value / scale


def percent(fraction: float) -> float | int:
    """A probability as the percentage that reads back (percent / 100) to exactly `fraction`."""
    return _number(fraction, 0.01, loss_from_percent)


def options(d: Direction, link: Link) -> dict[str, Any]:
    """One direction as TCLink options in Mininet's units (default values left out)."""
    if d.gilbert is not None:
        raise ExportRefused(f"link {link.name}: Mininet's TCLink has no Gilbert-Elliott loss (loss_model); "
                            f"use plain loss to export it, or --to kathara (netem gemodel).")
    if d.duplicate:
        raise ExportRefused(f"link {link.name}: Mininet's TCLink cannot duplicate packets (duplicate); "
                            f"set duplicate to 0 to export it, or use --to kathara.")
    if d.reorder:
        raise ExportRefused(f"link {link.name}: Mininet's TCLink has no reorder option; set reorder to false "
                            f"to export it.")
    if d.duplex == "half":
        raise ExportRefused(f"link {link.name}: Mininet's TCLink is full-duplex (no duplex: half); set duplex "
                            f"to full to export it.")
    out: dict[str, Any] = {}
    if d.rate is not None:
        out["bw"] = _number(d.rate, 1e6, rate_from_bw)
    if d.delay or d.jitter:           # netem takes jitter only after a delay
        out["delay"] = duration(d.delay)
    if d.jitter:
        out["jitter"] = duration(d.jitter)
    if d.loss:
        out["loss"] = percent(d.loss)
    if d.queue != _DEFAULT.queue:
        out["max_queue_size"] = d.queue
    return out


def _unset(key: str) -> Any:
    """The option value that means wanbed's default, for a field set in one direction only."""
    return {"bw": None, "delay": "0ms", "jitter": "0ms", "loss": 0, "max_queue_size": _DEFAULT.queue}[key]


def link_call(link: Link) -> str:
    there, back = options(link.a_to_b, link), options(link.b_to_a, link)
    shared = {k: v for k, v in there.items() if back.get(k, _unset(k)) == v and k in back}
    p1 = {k: there.get(k, _unset(k)) for k in sorted(set(there) | set(back)) if k not in shared}
    p2 = {k: back.get(k, _unset(k)) for k in sorted(set(there) | set(back)) if k not in shared}
    args = [repr(link.a), repr(link.b)] + [f"{k}={v!r}" for k, v in shared.items()]
    if p1:
        args += [f"params1={p1!r}", f"params2={p2!r}"]
    return f"self.addLink({', '.join(args)})"


def class_name(name: str) -> str:
    words = [w for w in re.split(r"[^A-Za-z0-9]+", name) if w]
    text = "".join(w[:1].upper() + w[1:] for w in words) or "Wanbed"
    return ("T" + text if text[0].isdigit() else text) + "Topo"


def export(net: Network) -> str:
    """The Mininet script for the network, as text."""
    topo = net.topology
    for lan in topo.lans:
        raise ExportRefused(f"LAN segment {lan.name}: Mininet export writes point-to-point links only "
                            f"(a LAN is a switch there, not shaped); use --to kathara.")
    cls = class_name(net.name)
    key = re.sub(r"[^A-Za-z0-9_]", "_", net.name) or "wanbed"
    lines = [
        "#!/usr/bin/env python3",
        f'"""Mininet topology of the wanbed scenario {net.name!r} (written by `testbed export --to mininet`).',
        "",
        "Run it where Mininet works (a kernel with netem, Open vSwitch installed): sudo python3 THIS_FILE",
        "Every node is an IP router with wanbed's addresses and routes; wanbed's hosts without a node",
        "daemon are the switches here, run as IP routers too (not OpenFlow switches).",
        "wanbed reads the topology back with",
        f"    topology: {{generator: mininet, params: {{file: THIS_FILE, class: {key}}}}}",
        '"""',
        "from mininet.topo import Topo",
        "",
        "",
        f"class {cls}(Topo):",
        f'    """{len(topo.nodes)} nodes, {len(topo.links)} links; link options in Mininet\'s units '
        f'(bw Mbit/s, loss %)."""',
        "",
        "    def build(self):",
    ]
    for node in topo.nodes:
        kind = "addSwitch" if node.name in net.daemonless else "addHost"
        lines.append(f"        self.{kind}({node.name!r})")
    lines += [f"        {link_call(link)}" for link in topo.links]
    if not topo.nodes:
        lines.append("        pass")
    lines += ["", "", f"topos = {{{key!r}: {cls}}}", ""]
    lines += _plan_part(net, cls)
    return "\n".join(lines) + "\n"


def _plan_part(net: Network, cls: str) -> list[str]:
    plan, topo = net.plan, net.topology
    ends = {l.name: (l.a, l.b) for l in topo.links}
    addresses = []
    for node in topo.node_names():
        for iface in plan.interfaces.get(node, []):
            if iface.link in ends:
                addresses.append((ends[iface.link], node, iface.address))
    ifname_link = {(i.node, i.ifname): i.link for n in topo.node_names() for i in plan.interfaces.get(n, [])}
    routes = {n: [(r.destination, r.via, ends[ifname_link[(n, r.dev)]]) for r in plan.routes.get(n, [])]
              for n in topo.node_names()}
    out = [
        "# wanbed's address plan: (link ends, node, address on that link), loopbacks, and per node",
        "# (destination, next hop, link ends) -- kernel routes along the fewest hops, as wanbed sets them",
        f"ADDRESSES = {pprint.pformat(addresses, width=110)}",
        f"LOOPBACKS = {pprint.pformat(dict(plan.loopback), width=110)}",
        f"ROUTES = {pprint.pformat(routes, width=110)}",
        "",
        "",
        "def _interface(net, node, ends):",
        "    link = net.linksBetween(net[ends[0]], net[ends[1]])[0]",
        "    return link.intf1 if link.intf1.node.name == node else link.intf2",
        "",
        "",
        "def run():",
        "    from mininet.cli import CLI",
        "    from mininet.link import TCLink",
        "    from mininet.net import Mininet",
        "    from mininet.node import Node, Switch",
        "",
        "    class Router(Node):",
        "        def config(self, **params):",
        "            result = super().config(**params)",
        "            self.cmd('sysctl -qw net.ipv4.ip_forward=1')",
        "            return result",
        "",
        "    class RouterSwitch(Switch):",
        '        """A wanbed hub: an IP router in its own namespace, not an OpenFlow switch."""',
        "        count = 0",
        "",
        "        def __init__(self, name, **params):",
        "            RouterSwitch.count += 1",
        "            params.update(inNamespace=True, dpid=params.get('dpid') or '%x' % RouterSwitch.count)",
        "            super().__init__(name, **params)",
        "",
        "        def start(self, controllers):",
        "            self.cmd('sysctl -qw net.ipv4.ip_forward=1')",
        "",
        f"    net = Mininet(topo={cls}(), link=TCLink, host=Router, switch=RouterSwitch, controller=None)",
        "    net.start()",
        "    for node in net.hosts + net.switches:",
        "        for intf in node.intfList():",
        "            if intf.name != 'lo':",
        "                node.cmd('ip -4 addr flush dev %s' % intf)",
        "        node.cmd('ip addr add %s/32 dev lo' % LOOPBACKS[node.name])",
        "    for ends, node, address in ADDRESSES:",
        "        net[node].cmd('ip addr add %s dev %s' % (address, _interface(net, node, ends)))",
        "    for node, routes in ROUTES.items():",
        "        for destination, via, ends in routes:",
        "            net[node].cmd('ip route replace %s via %s dev %s' % (destination, via, _interface(net, node, ends)))",
        "    CLI(net)",
        "    net.stop()",
        "",
        "",
        "if __name__ == '__main__':",
        "    run()",
    ]
    return out
