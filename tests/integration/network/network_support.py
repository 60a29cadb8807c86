"""Helpers for the network layer tests (importable by test files and helper scripts).

`hand_plan` builds an AddressPlan by hand (shortest-path routes by BFS) and
`VethShaper` links hosts with plain veth pairs (no impairments), so the
network layer is tested below the scenario loader, the address planner and
the shapers.
"""
from __future__ import annotations

import ipaddress
import random
import subprocess
from collections import deque
from pathlib import Path

from testbed.shaping.base import DirectionCounters, LinkEnd, Shaper
from testbed.topology.model import AddressPlan, Direction, Interface, Lan, Link, Node, Route, Topology

TESTS_DIR = Path(__file__).resolve().parent


def free_mgmt_subnet() -> str:
    """A /24 no route on this machine overlaps (other runs may hold a management bridge right now)."""
    out = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    taken = []
    for line in out.splitlines():
        dst = line.split()[0]
        if dst != "default":
            try:
                taken.append(ipaddress.ip_network(dst, strict=False))
            except ValueError:
                pass
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{random.randint(230, 250)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(t) for t in taken):
            return str(net)
    raise RuntimeError("no free management subnet")


def linear(n: int, delay: float = 0.0) -> Topology:
    nodes = [Node(f"n{i}") for i in range(1, n + 1)]
    links = [Link(f"n{i}", f"n{i + 1}", Direction(delay=delay), Direction(delay=delay)) for i in range(1, n)]
    return Topology("linear", nodes, links)


def ring(n: int) -> Topology:
    nodes = [Node(f"n{i}") for i in range(1, n + 1)]
    links = [Link(f"n{i}", f"n{i % n + 1}") for i in range(1, n + 1)]
    return Topology("ring", nodes, links)


def star_lan(n: int) -> Topology:
    """A hub plus n-1 leaves by links, and all n hosts also on one shared LAN segment."""
    nodes = [Node(f"s{i}") for i in range(1, n + 1)]
    links = [Link("s1", f"s{i}") for i in range(2, n + 1)]
    return Topology("starlan", nodes, links, [Lan("lan0", [x.name for x in nodes])])


def grid(rows: int, cols: int) -> Topology:
    name = lambda r, c: f"g{r}x{c}"   # noqa: E731
    nodes = [Node(name(r, c)) for r in range(rows) for c in range(cols)]
    links = [Link(name(r, c), name(r, c + 1)) for r in range(rows) for c in range(cols - 1)]
    links += [Link(name(r, c), name(r + 1, c)) for r in range(rows - 1) for c in range(cols)]
    return Topology("grid", nodes, links)


def hand_plan(topo: Topology, mgmt_subnet: str, data_pool: str = "10.200.0.0/16",
              loopback_pool: str = "10.202.0.0/16") -> AddressPlan:
    """A /30 per link, a /24 per LAN (from the top of the pool), a /32 loopback per node, BFS routes."""
    pool = ipaddress.ip_network(data_pool)
    subnets = pool.subnets(new_prefix=30)
    lan_subnets = list(pool.subnets(new_prefix=24))[::-1]
    loops = ipaddress.ip_network(loopback_pool).hosts()
    mnet = ipaddress.ip_network(mgmt_subnet)
    mhosts = mnet.hosts()
    next(mhosts)                                     # the first address is the root namespace's bridge
    plan = AddressPlan(mgmt_subnet=str(mnet))
    count: dict[str, int] = {n: 0 for n in topo.node_names()}
    addr_on: dict[tuple[str, str], tuple[str, str]] = {}   # (node, segment) -> (ifname, ip)
    seg_net: dict[str, str] = {}
    seg_members: dict[str, list[str]] = {}
    for n in topo.node_names():
        plan.mgmt_address[n] = str(next(mhosts))
        plan.interfaces[n] = [Interface(n, "eth0", f"{plan.mgmt_address[n]}/{mnet.prefixlen}", "mgmt")]
        plan.loopback[n] = str(next(loops))

    def attach(seg: str, members: list[str], sn: ipaddress.IPv4Network) -> None:
        seg_net[seg] = str(sn)
        seg_members[seg] = members
        for node, ip in zip(members, sn.hosts()):
            count[node] += 1
            ifname = f"eth{count[node]}"
            plan.interfaces[node].append(Interface(node, ifname, f"{ip}/{sn.prefixlen}", seg))
            addr_on[(node, seg)] = (ifname, str(ip))

    for link in topo.links:
        attach(link.name, [link.a, link.b], next(subnets))
    for i, lan in enumerate(topo.lans):
        attach(lan.name, list(lan.members), lan_subnets[i])
    adj: dict[str, list[tuple[str, str]]] = {n: [] for n in topo.node_names()}
    for seg, members in seg_members.items():
        for u in members:
            adj[u] += [(v, seg) for v in members if v != u]
    for src in topo.node_names():
        # first hop (neighbour, segment) towards every node, by BFS
        first: dict[str, tuple[str, str]] = {}
        q = deque([src])
        seen = {src}
        while q:
            u = q.popleft()
            for v, seg in adj[u]:
                if v not in seen:
                    seen.add(v)
                    first[v] = first[u] if u != src else (v, seg)
                    q.append(v)
        routes = []
        for dst, (nbr, seg) in first.items():
            dev, _ = addr_on[(src, seg)]
            _, via = addr_on[(nbr, seg)]
            routes.append(Route(f"{plan.loopback[dst]}/32", via, dev))
        # every segment subnet not attached to src: towards its nearest member
        for seg, members in seg_members.items():
            if src in members:
                continue
            end = next(m for m in members if m in first)
            nbr, fseg = first[end]
            dev, _ = addr_on[(src, fseg)]
            _, via = addr_on[(nbr, fseg)]
            routes.append(Route(seg_net[seg], via, dev))
        plan.routes[src] = routes
    return plan


class VethShaper(Shaper):
    """Test-only stand-in for the real shaper: a veth pair per link, no impairments, carrier via link state."""

    name = "veth-test"

    def __init__(self) -> None:
        self.links: dict[str, tuple[LinkEnd, LinkEnd]] = {}
        self.params: dict[str, tuple[Direction, Direction]] = {}

    def add_link(self, link_id: str, a: LinkEnd, b: LinkEnd, a_to_b: Direction, b_to_a: Direction,
                 pcap: Path | None = None) -> None:
        subprocess.run(["ip", "link", "add", a.ifname, "netns", a.netns, "type", "veth", "peer", "name", b.ifname,
                        "netns", b.netns], check=True, capture_output=True)
        self.links[link_id] = (a, b)
        self.params[link_id] = (a_to_b, b_to_a)

    def set_params(self, link_id: str, a_to_b: Direction | None, b_to_a: Direction | None) -> None:
        old = self.params[link_id]
        self.params[link_id] = (a_to_b or old[0], b_to_a or old[1])

    def set_carrier(self, link_id: str, up: bool) -> None:
        for end in self.links[link_id]:
            subprocess.run(["ip", "-n", end.netns, "link", "set", end.ifname, "up" if up else "down"],
                           check=True, capture_output=True)

    def state(self) -> dict:
        return {"attach": "network_support:attach_veth",
                "links": {k: [[a.netns, a.ifname], [b.netns, b.ifname]] for k, (a, b) in self.links.items()}}

    def counters(self, link_id: str) -> tuple[DirectionCounters, DirectionCounters]:
        return DirectionCounters(), DirectionCounters()

    def close(self) -> None:
        self.links.clear()      # the pairs vanish with their namespaces


def ping(host, addr: str, count: int = 1, timeout: float = 2.0, interval: float = 0.2,
         src: str | None = None) -> subprocess.CompletedProcess:
    return host.run(["ping", "-n", "-q", "-c", str(count), "-i", str(interval), "-W", str(timeout),
                     *(["-I", src] if src else []), addr], timeout=timeout * count + 10)


def rtt_avg_ms(out: str) -> float:
    # "rtt min/avg/max/mdev = 0.040/0.050/0.061/0.010 ms"
    line = [l for l in out.splitlines() if "min/avg/max" in l][0]
    return float(line.split("=")[1].split("/")[1])


def ours_left(run_id: str, net_only: bool = False) -> list[str]:
    """Namespaces, root interfaces, iptables chains and registry files of this run that still exist."""
    from testbed import registry
    from testbed.cleanup import IPTABLES, TABLES, _iptables_chains, root_links
    from testbed.runtime.netns import list_netns
    p = registry.prefix(run_id)
    names = list_netns() + root_links()
    if net_only:
        return [n for n in names if n.startswith(p)]
    for tool in IPTABLES:
        for table in TABLES:
            names += _iptables_chains(tool, table)
    if registry.REGISTRY_DIR.is_dir():
        names += [f.name for f in registry.REGISTRY_DIR.glob(f"{p}*")]
    return [n for n in names if n.startswith(p)]





def attach_veth(state: dict) -> VethShaper:
    """Reattach (in a CLI process) to the VethShaper of a running network."""
    sh = VethShaper()
    for k, (a, b) in state["links"].items():
        sh.links[k] = (LinkEnd(*a), LinkEnd(*b))
        sh.params[k] = (Direction(), Direction())
    return sh


def cli_network(run_id: str, run_dir: Path, kind: str, handle_signals: bool):
    """Factory for `testbed up --factory network_support:cli_network`: linear(3) on veth links."""
    from testbed.network import Network
    topo = linear(3)
    mgmt = free_mgmt_subnet()
    return Network(topo, hand_plan(topo, mgmt), shaper=VethShaper(), run_dir=run_dir, run_id=run_id, kind=kind,
                   handle_signals=handle_signals, pools=("10.200.0.0/16", "10.202.0.0/16", mgmt))
